"""Consumer-group requests: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup
(broker/kafka/coordinator.py), OffsetCommit and OffsetFetch (our group cursors: a Kafka
group and a Queen group of one name are one group), DescribeGroups, ListGroups and
DeleteGroups.

Kafka's committed metadata string is not kept (OffsetFetch answers it empty). Static
membership (a group instance id, KIP-345) is served: broker/kafka/coordinator.py.
"""

from __future__ import annotations

from typing import Any

from broker.auth.access import Access
from broker.kafka import errors
from broker.kafka.cluster import CLUSTER
from broker.kafka.coordinator import DEAD, EMPTY, Coordinator
from broker.kafka.protocol import Request, field_of
from broker.kafka.session import NO_OPERATIONS, Session
from broker.kafka.topics import known_topics, legal_topic
from core.errors import QueenError
from core.kafka.service import partition_index
from core.names import check_name
from core.tenancy.scoped import belongs, unscoped

COORDINATOR = Coordinator()  # the process's groups (the event loop is its only user)
_GROUP_KEY = 0
MAX_REBALANCE_SECONDS = 300.0
_MAX_INSTANCE_ID = 249


def legal_group(name: str | None) -> bool:
    """A group id is one of our consumer-group names (core/names.py's rule)."""
    try:
        check_name(name)
    except (ValueError, TypeError):
        return False
    return True


def legal_instance(instance_id: str) -> bool:
    """A group instance id as Kafka takes one: 1 to 249 characters of [a-zA-Z0-9._-]."""
    return 0 < len(instance_id) <= _MAX_INSTANCE_ID and all(
        c.isascii() and (c.isalnum() or c in "._-") for c in instance_id)


def _seconds(value: Any) -> float:
    return float(value.total_seconds()) if hasattr(value, "total_seconds") else value / 1000


async def find_coordinator(session: Session, request: Request) -> dict[str, Any]:
    key_type = field_of(request.body, "key_type", _GROUP_KEY)
    if key_type == _GROUP_KEY and not legal_group(request.body.key):
        return {"throttle_time": 0, "error_code": errors.INVALID_GROUP_ID,
                "error_message": "not a legal group name", "node_id": -1, "host": "",
                "port": -1}
    if key_type != _GROUP_KEY:  # transactions: refused with the error clients take as fatal
        return {"throttle_time": 0, "error_code": errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "error_message": "transactions are not supported", "node_id": -1,
                "host": "", "port": -1}
    found = CLUSTER.coordinator(session)
    if found is None:
        return {"throttle_time": 0, "error_code": errors.COORDINATOR_NOT_AVAILABLE,
                "error_message": "no coordinator is elected yet", "node_id": -1,
                "host": "", "port": -1}
    node_id, host, port = found
    return {"throttle_time": 0, "error_code": errors.NONE, "error_message": None,
            "node_id": node_id, "host": host, "port": port}


async def join_group(session: Session, request: Request) -> dict[str, Any]:
    body = request.body
    if not legal_group(body.group_id) or not CLUSTER.coordinates():
        code = errors.NOT_COORDINATOR if legal_group(body.group_id) else errors.INVALID_GROUP_ID
        return {"throttle_time": 0, "error_code": code, "generation_id": -1,
                "member_id": body.member_id, "leader": "", "members": []}
    instance_id = field_of(body, "group_instance_id")
    if instance_id is not None and not legal_instance(instance_id):
        return {"throttle_time": 0, "error_code": errors.INVALID_REQUEST, "generation_id": -1,
                "member_id": body.member_id, "leader": "", "members": []}
    if not session.may(Access.READ_ONLY):
        return {"throttle_time": 0, "error_code": errors.GROUP_AUTHORIZATION_FAILED,
                "generation_id": -1, "member_id": body.member_id, "leader": "", "members": []}
    session_timeout = _seconds(body.session_timeout)
    # A rebalance waits at most this for members to rejoin, whatever one member asks.
    rebalance = min(_seconds(field_of(body, "rebalance_timeout", body.session_timeout)),
                    MAX_REBALANCE_SECONDS)
    if not 1 <= session_timeout <= 3600:
        return {"throttle_time": 0, "error_code": errors.INVALID_SESSION_TIMEOUT,
                "generation_id": -1, "member_id": body.member_id, "leader": "", "members": []}
    result = await COORDINATOR.join(
        session.group_key(body.group_id), member_id=body.member_id, client_id=request.client_id or "",
        client_host=session.peer, session_timeout=session_timeout,
        rebalance_timeout=rebalance, protocol_type=body.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in body.protocols],
        require_known_id=request.api_version >= 4, instance_id=instance_id)
    return {"throttle_time": 0, "error_code": result.error, "generation_id": result.generation,
            "protocol_name": result.protocol or "", "protocol_type": body.protocol_type,
            "leader": result.leader, "member_id": result.member_id,
            "members": [{"member_id": m, "group_instance_id": instance, "metadata": meta}
                        for m, instance, meta in result.members]}


async def sync_group(session: Session, request: Request) -> dict[str, Any]:
    body = request.body
    if not CLUSTER.coordinates():
        return {"throttle_time": 0, "error_code": errors.NOT_COORDINATOR, "assignment": b""}
    code, assignment = await COORDINATOR.sync(
        session.group_key(body.group_id), member_id=body.member_id, generation=body.generation_id,
        assignments={a.member_id: bytes(a.assignment) for a in body.assignments},
        instance_id=field_of(body, "group_instance_id"))
    return {"throttle_time": 0, "error_code": code, "assignment": assignment,
            "protocol_type": field_of(body, "protocol_type"),
            "protocol_name": field_of(body, "protocol_name")}


async def heartbeat(session: Session, request: Request) -> dict[str, Any]:
    body = request.body
    code = (COORDINATOR.heartbeat(session.group_key(body.group_id), member_id=body.member_id,
                                  generation=body.generation_id,
                                  instance_id=field_of(body, "group_instance_id"))
            if CLUSTER.coordinates() else errors.NOT_COORDINATOR)
    return {"throttle_time": 0, "error_code": code}


async def leave_group(session: Session, request: Request) -> dict[str, Any]:
    body = request.body
    if not CLUSTER.coordinates():
        return {"throttle_time": 0, "error_code": errors.NOT_COORDINATOR, "members": []}
    single = field_of(body, "member_id")
    if single is not None:
        return {"throttle_time": 0,
                "error_code": COORDINATOR.leave(session.group_key(body.group_id), single)}
    members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                "error_code": COORDINATOR.leave(session.group_key(body.group_id),
                                                m.member_id, m.group_instance_id)}
               for m in body.members]
    return {"throttle_time": 0, "error_code": errors.NONE, "members": members}


async def offset_commit(session: Session, request: Request) -> dict[str, Any]:
    body = request.body
    generation = field_of(body, "generation_id_or_member_epoch",
                          field_of(body, "generation_id", -1))
    code = (COORDINATOR.validate_commit(session.group_key(body.group_id), body.member_id,
                                        generation, field_of(body, "group_instance_id"))
            if legal_group(body.group_id) else errors.INVALID_GROUP_ID)
    if code == errors.NONE and not CLUSTER.coordinates():
        code = errors.NOT_COORDINATOR
    if code == errors.NONE and not session.may(Access.READ_WRITE):  # as an ack or a seek
        code = errors.GROUP_AUTHORIZATION_FAILED
    topics = await known_topics(session, [t.name for t in body.topics]) if code == 0 else {}
    answers = []
    for t in body.topics:
        topic = topics.get(t.name)
        results: dict[int, int] = {}
        offsets: dict[str, int] = {}
        for p in t.partitions:
            if code != errors.NONE:
                results[p.partition_index] = code
            elif topic is None or not 0 <= p.partition_index < topic.partitions:
                results[p.partition_index] = errors.UNKNOWN_TOPIC_OR_PARTITION
            elif p.committed_offset < 0:
                results[p.partition_index] = errors.OFFSET_OUT_OF_RANGE
            else:
                offsets[str(p.partition_index)] = p.committed_offset
        if offsets:
            try:
                done = await session.broker.kafka.commit(body.group_id, t.name, offsets,
                                                         tenant=session.tenant)
            except QueenError:
                done = set()
            for name in offsets:
                results[int(name)] = (errors.NONE if name in done
                                      else errors.COORDINATOR_NOT_AVAILABLE)
        answers.append({"name": t.name, "partitions": [
            {"partition_index": i, "error_code": c} for i, c in results.items()]})
    return {"throttle_time": 0, "topics": answers}


async def offset_fetch(session: Session, request: Request) -> dict[str, Any]:
    body = request.body
    kafka = session.broker.kafka
    if not session.may(Access.READ_ONLY):
        return {"throttle_time": 0, "topics": [],
                "error_code": errors.GROUP_AUTHORIZATION_FAILED}
    if not legal_group(body.group_id):
        return {"throttle_time": 0, "topics": [], "error_code": errors.INVALID_GROUP_ID}
    answers = []
    if body.topics is None:  # every topic the group has positions in
        for queue, positions in sorted((await kafka.all_positions(
                body.group_id, tenant=session.tenant)).items()):
            parts = [(index, offset) for name, offset in positions.items()
                     if (index := partition_index(name)) is not None]
            if parts:
                answers.append({"name": queue, "partitions": [
                    _fetched(i, o) for i, o in sorted(parts)]})
    else:
        for t in body.topics:
            if not legal_topic(t.name):
                answers.append({"name": t.name, "partitions": [
                    {**_fetched(i, -1), "error_code": errors.UNKNOWN_TOPIC_OR_PARTITION}
                    for i in t.partition_indexes]})
                continue
            positions = await kafka.positions(body.group_id, t.name, tenant=session.tenant)
            answers.append({"name": t.name, "partitions": [
                _fetched(i, positions.get(str(i), -1)) for i in t.partition_indexes]})
    return {"throttle_time": 0, "topics": answers, "error_code": errors.NONE}


def _fetched(index: int, offset: int) -> dict[str, Any]:
    return {"partition_index": index, "committed_offset": offset,
            "committed_leader_epoch": -1, "metadata": "", "error_code": errors.NONE}


async def describe_groups(session: Session, request: Request) -> dict[str, Any]:
    known = set(await session.broker.kafka.group_names(tenant=session.tenant))
    described = []
    for name in request.body.groups:
        if not CLUSTER.coordinates():
            described.append({"error_code": errors.NOT_COORDINATOR, "group_id": name,
                              "group_state": "", "protocol_type": "", "protocol_data": "",
                              "members": []})
            continue
        if not legal_group(name):
            described.append({"error_code": errors.INVALID_GROUP_ID, "group_id": name,
                              "group_state": DEAD, "protocol_type": "", "protocol_data": "",
                              "members": []})
            continue
        group = COORDINATOR.groups.get(session.group_key(name))
        if group is None or not group.members:
            described.append({"error_code": errors.NONE, "group_id": name,
                              "group_state": EMPTY if name in known else DEAD,
                              "protocol_type": group.described_protocol_type() if group
                              else "", "protocol_data": "", "members": [],
                              "authorized_operations": NO_OPERATIONS})
            continue
        described.append({
            "error_code": errors.NONE, "group_id": name, "group_state": group.state,
            "protocol_type": group.described_protocol_type(),
            "protocol_data": group.protocol or "", "authorized_operations": NO_OPERATIONS,
            "members": [{"member_id": m.member_id, "group_instance_id": m.instance_id,
                         "client_id": m.client_id, "client_host": m.client_host,
                         "member_metadata": dict(m.protocols).get(group.protocol or "", b""),
                         "member_assignment": m.assignment}
                        for m in group.members.values()]})
    return {"throttle_time": 0, "groups": described}


async def list_groups(session: Session, request: Request) -> dict[str, Any]:
    wanted = {s.lower() for s in field_of(request.body, "states_filter", ()) or ()}
    names = set(await session.broker.kafka.group_names(tenant=session.tenant)) | {
        unscoped(key)[1] for key, g in COORDINATOR.groups.items()
        if g.members and belongs(key, session.tenant)}
    listed = []
    for name in sorted(names):
        group = COORDINATOR.groups.get(session.group_key(name))
        state = group.state if group is not None and group.members else EMPTY
        if wanted and state.lower() not in wanted:
            continue
        listed.append({"group_id": name, "group_state": state,
                       "protocol_type": group.described_protocol_type() if group else
                       "consumer"})
    return {"throttle_time": 0, "error_code": errors.NONE, "groups": listed}


async def delete_groups(session: Session, request: Request) -> dict[str, Any]:
    results = []
    for name in request.body.groups_names:
        if not session.may(Access.ADMIN):  # as DELETE /consumer-groups/{group}
            code = errors.GROUP_AUTHORIZATION_FAILED
        elif not legal_group(name):
            code = errors.INVALID_GROUP_ID
        elif not CLUSTER.coordinates():
            code = errors.NOT_COORDINATOR
        elif COORDINATOR.has_members(session.group_key(name)):
            code = errors.NON_EMPTY_GROUP
        else:
            deleted, _ = await session.broker.groups.delete(name, queue=None,
                                                            delete_metadata=True,
                                                            tenant=session.tenant)
            known = session.group_key(name) in COORDINATOR.groups
            COORDINATOR.forget(session.group_key(name))
            code = errors.NONE if deleted or known else errors.GROUP_ID_NOT_FOUND
        results.append({"group_id": name, "error_code": code})
    return {"throttle_time": 0, "results": results}
