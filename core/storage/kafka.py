"""Typed calls of the Kafka edge's statements (schema/queries/kafka.sql)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from core.storage.statements import Conn, Statement


@dataclass(frozen=True, slots=True)
class TopicRow:
    name: str
    declared: int | None  # partitions declared for Kafka
    seen: int | None  # one past the highest partition named "0", "1", ...


@dataclass(frozen=True, slots=True)
class CommittedRow:
    name: str
    committed: int


@dataclass(frozen=True, slots=True)
class OffsetAtRow:
    offset: int
    created_at: datetime


_TOPICS = Statement("kafka_topics", TopicRow)


async def topics(conn: Conn, *, tenant: str, names: Sequence[str] | None) -> list[TopicRow]:
    return await _TOPICS.rows(conn, names=None if names is None else list(names), tenant=tenant)


_DECLARE = Statement[None]("kafka_declare")


async def declare(conn: Conn, *, tenant: str, queue: str, partitions: int) -> bool:
    """Record the count unless one is recorded; answers whether this call did."""
    return await _DECLARE.value(conn, queue=queue, partitions=partitions, tenant=tenant) is not None


_OFFSET_FOR_TIME = Statement("kafka_offset_for_time", OffsetAtRow)


async def offset_for_time(conn: Conn, *, tenant: str, queue: str, partition: str,
                          at: datetime) -> OffsetAtRow | None:
    return await _OFFSET_FOR_TIME.one(conn, queue=queue, partition=partition, at=at, tenant=tenant)


_COMMIT = Statement[None]("kafka_commit")


async def commit(conn: Conn, *, tenant: str, group: str, queue: str,
                 partitions: Sequence[str], committed: Sequence[int]) -> set[str]:
    return {str(v) for v in await _COMMIT.values(conn, group=group, queue=queue,
                                                 partitions=list(partitions),
                                                 committed=list(committed), tenant=tenant)}


_COMMITTED = Statement("kafka_committed", CommittedRow)


async def committed(conn: Conn, *, tenant: str, group: str, queue: str) -> list[CommittedRow]:
    return await _COMMITTED.rows(conn, group=group, queue=queue, tenant=tenant)


_GROUP_NAMES = Statement[None]("kafka_group_names")


async def group_names(conn: Conn, *, tenant: str) -> list[str]:
    return [str(v) for v in await _GROUP_NAMES.values(conn, tenant=tenant)]


_NEW_PRODUCER_ID = Statement[None]("kafka_new_producer_id")


async def new_producer_id(conn: Conn) -> int:
    return int(await _NEW_PRODUCER_ID.value(conn))


@dataclass(frozen=True, slots=True)
class PositionRow:
    queue: str
    name: str
    committed: int


_GROUP_POSITIONS = Statement("kafka_group_positions", PositionRow)


async def group_positions(conn: Conn, *, tenant: str, group: str) -> list[PositionRow]:
    return await _GROUP_POSITIONS.rows(conn, group=group, tenant=tenant)


@dataclass(frozen=True, slots=True, order=True)
class Node:
    """A Kafka listener of a cluster: its node id and the address clients are told
    (core/kafka/election.py), as the coordinator table holds them."""

    node_id: int
    host: str
    port: int


_CLAIM_COORDINATOR = Statement[None]("kafka_claim_coordinator")


async def claim_coordinator(conn: Conn, *, cluster: str) -> bool:
    return bool(await _CLAIM_COORDINATOR.value(conn, cluster=cluster))


_RECORD_COORDINATOR = Statement[None]("kafka_record_coordinator")


async def record_coordinator(conn: Conn, *, cluster: str, node: Node) -> None:
    await _RECORD_COORDINATOR.run(conn, cluster=cluster, node_id=node.node_id, host=node.host,
                                  port=node.port)


_COORDINATOR = Statement("kafka_coordinator", Node)


async def coordinator(conn: Conn, *, cluster: str) -> Node | None:
    return await _COORDINATOR.one(conn, cluster=cluster)


_NODE_ALIVE = Statement("kafka_node_alive", Node)


async def node_alive(conn: Conn, *, cluster: str, node: Node,
                     within_seconds: float) -> list[Node]:
    return await _NODE_ALIVE.rows(conn, cluster=cluster, node_id=node.node_id, host=node.host,
                                  port=node.port, within_seconds=within_seconds)
