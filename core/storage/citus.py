"""Typed calls of a Citus deployment's statements (schema/queries/citus.sql): whether the
database is a Citus cluster, the placement of the schema (schema/functions/90_distribution.sql),
the shards' hash ranges and nodes (core/storage/shards.py reads them) and the node a
connection is on (core/storage/placement.py)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from core.storage.statements import Conn, Statement

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ShardRange:
    low: int
    high: int
    node_group: int | None  # the group (node) holding the shard; None: no active placement


_VERSION = Statement[None]("citus_version")


async def version(conn: Conn) -> str | None:
    """The citus extension's version on this database, or None (one PostgreSQL)."""
    value = await _VERSION.value(conn)
    return None if value is None else str(value)


_DISTRIBUTE = Statement[None]("citus_distribute")


async def distribute(conn: Conn) -> list[str]:
    """Place every table and function of the schema (idempotent); answer what was placed
    now."""
    placed = [str(v) for v in await _DISTRIBUTE.values(conn)]
    for item in placed:
        log.info("citus: %s", item)
    return placed


_LOG_DISTRIBUTED = Statement[None]("citus_log_distributed")
_SHARD_RANGES = Statement("citus_shard_ranges", ShardRange)


async def shard_ranges(conn: Conn) -> list[ShardRange]:
    """The log's shards' hash ranges, by range; none while it is not distributed."""
    if not await _LOG_DISTRIBUTED.value(conn):
        return []
    return await _SHARD_RANGES.rows(conn)


@dataclass(frozen=True, slots=True)
class WorkerNode:
    node_group: int
    host: str  # as the coordinator names it
    port: int


_WORKER_NODES = Statement("citus_worker_nodes", WorkerNode)


async def worker_nodes(conn: Conn) -> list[WorkerNode]:
    """The cluster's active worker nodes, one per group, by group."""
    return await _WORKER_NODES.rows(conn)


_LOCAL_GROUP = Statement[None]("citus_local_group")


async def local_group(conn: Conn) -> int | None:
    """The group of the node `conn` is on (0: the coordinator), as the shards' placements
    name it; None on a node that holds no metadata (not a member of the cluster yet)."""
    value = await _LOCAL_GROUP.value(conn)
    return None if value is None else int(value)
