"""Metadata, CreateTopics and DeleteTopics: queues as topics.

A topic is a queue of the same name; its Kafka partitions are the queue's partitions named
"0" .. "n-1" (core/kafka/service.py says how n is found). Queue names that Kafka cannot
name (its rule: 1 to 249 of [a-zA-Z0-9._-], not "." or "..") are not listed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from broker.auth.access import Access
from broker.kafka import errors
from broker.kafka.cluster import CLUSTER
from broker.kafka.protocol import Request, field_of
from broker.kafka.session import CLUSTER_ID, NO_OPERATIONS, Session
from core.errors import QuotaExceeded
from core.kafka.service import MAX_PARTITIONS, Topic

_LEGAL = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def legal_topic(name: str) -> bool:
    return bool(_LEGAL.fullmatch(name)) and name not in (".", "..")


async def known_topics(session: Session, names: Sequence[str]) -> dict[str, Topic]:
    """The named topics that exist (a name Kafka cannot have names none)."""
    legal = sorted({n for n in names if n is not None and legal_topic(n)})
    if not legal:
        return {}
    found = await session.broker.kafka.topics(legal, tenant=session.tenant)
    return {t.name: t for t in found}


async def metadata(session: Session, request: Request) -> dict[str, Any]:
    body = request.body
    wanted = None if body.topics is None else [t.name for t in body.topics]
    if request.api_version == 0 and wanted == []:
        wanted = None  # v0: an empty list means every topic
    # Metadata v0-v3 have no flag: topics are created on request, as Kafka's default does.
    create = request.api_version < 4 or bool(field_of(body, "allow_auto_topic_creation", True))
    kafka = session.broker.kafka
    if wanted is None:
        topics = [t for t in await kafka.topics(tenant=session.tenant) if legal_topic(t.name)]
        answers = [_topic(t, session.node_id) for t in topics]
    else:
        found = await known_topics(session, wanted)
        answers = []
        for name in dict.fromkeys(wanted):
            topic = found.get(name)
            refused = False
            if topic is None and legal_topic(name) and create and session.may(Access.READ_WRITE):
                try:
                    await kafka.create_topic(name, kafka.default_partitions,
                                             tenant=session.tenant)
                except QuotaExceeded:  # the tenant's queue cap: not created
                    refused = True
                topic = (await known_topics(session, [name])).get(name)
            if topic is None:
                code = (errors.TOPIC_AUTHORIZATION_FAILED if refused
                        else errors.UNKNOWN_TOPIC_OR_PARTITION if legal_topic(name)
                        else errors.INVALID_TOPIC_EXCEPTION)
                answers.append({"error_code": code, "name": name, "partitions": []})
            else:
                answers.append(_topic(topic, session.node_id))
    return {"throttle_time": 0,
            "brokers": CLUSTER.brokers(session),
            "cluster_id": CLUSTER_ID, "controller_id": session.node_id, "topics": answers,
            "cluster_authorized_operations": NO_OPERATIONS}


def _topic(topic: Topic, node: int) -> dict[str, Any]:
    """Every partition led by this node: any listener serves any partition."""
    return {"error_code": errors.NONE, "name": topic.name, "is_internal": False,
            "topic_authorized_operations": NO_OPERATIONS,
            "partitions": [{"error_code": errors.NONE, "partition_index": i,
                            "leader_id": node, "leader_epoch": 0,
                            "replica_nodes": [node], "isr_nodes": [node],
                            "offline_replicas": []} for i in range(topic.partitions)]}


async def create_topics(session: Session, request: Request) -> dict[str, Any]:
    body = request.body
    validate_only = bool(field_of(body, "validate_only", False))
    results = []
    for wanted in body.topics:
        name, count = wanted.name, wanted.num_partitions
        code, message = errors.NONE, None
        if not session.may(Access.READ_WRITE):  # as POST /configure
            code, message = errors.TOPIC_AUTHORIZATION_FAILED, "this token may not create"
        elif not legal_topic(name):
            code, message = errors.INVALID_TOPIC_EXCEPTION, "not a legal Kafka topic name"
        elif wanted.assignments:
            code, message = errors.INVALID_REQUEST, "manual replica assignment is not taken"
        elif count == -1:
            count = session.broker.kafka.default_partitions
        if code == errors.NONE and not 1 <= count <= MAX_PARTITIONS:
            code, message = errors.INVALID_PARTITIONS, f"partitions must be 1..{MAX_PARTITIONS}"
        elif code == errors.NONE and wanted.replication_factor not in (-1, 1):
            code, message = (errors.INVALID_REPLICATION_FACTOR,
                             "one copy, kept by PostgreSQL: replication factor is 1")
        elif code == errors.NONE:
            exists = bool(await known_topics(session, [name]))
            try:
                if exists or not validate_only and not await session.broker.kafka.create_topic(
                        name, count, tenant=session.tenant):
                    code, message = (errors.TOPIC_ALREADY_EXISTS,
                                     f"topic {name!r} already exists")
            except QuotaExceeded as refused:  # the tenant's queue cap
                code, message = errors.POLICY_VIOLATION, refused.message
        results.append({"name": name, "error_code": code, "error_message": message,
                        "num_partitions": count if code == errors.NONE else -1,
                        "replication_factor": 1 if code == errors.NONE else -1})
    return {"throttle_time": 0, "topics": results}


async def delete_topics(session: Session, request: Request) -> dict[str, Any]:
    body = request.body
    names = list(field_of(body, "topic_names", None) or
                 [t.name for t in field_of(body, "topics", ())])
    responses = []
    for name in names:
        if not session.may(Access.ADMIN):  # as DELETE /resources/queues/{queue}
            responses.append({"name": name, "error_code": errors.TOPIC_AUTHORIZATION_FAILED})
            continue
        deleted = name is not None and legal_topic(name) and \
            await session.broker.delete_queue(name, tenant=session.tenant)
        responses.append({"name": name, "error_code": errors.NONE if deleted
                          else errors.UNKNOWN_TOPIC_OR_PARTITION})
    return {"throttle_time": 0, "responses": responses}
