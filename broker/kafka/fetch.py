"""Fetch and ListOffsets: reads by offset, with no lease and no cursor.

Fetch answers each partition's records as one uncompressed v2 batch (offset gaps are
offset deltas), records of Kafka producers with their key, headers, timestamp and exact
value bytes, messages of Queen clients with no key, no headers, the JSON text as value and
their append time as timestamp. It long-polls up to `max_wait_ms` for `min_bytes`, woken by
pushes. Fetch sessions (v7+) are declined the way Kafka allows: every answer carries
session id 0, so clients keep sending full requests.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from broker.auth.access import Access
from broker.kafka import errors
from broker.kafka.protocol import Request, field_of
from broker.kafka.records import encode_batch
from broker.kafka.session import Session
from broker.kafka.topics import known_topics
from core.kafka import reads

_CODES = {reads.UNKNOWN_TOPIC_OR_PARTITION: errors.UNKNOWN_TOPIC_OR_PARTITION,
          reads.OFFSET_OUT_OF_RANGE: errors.OFFSET_OUT_OF_RANGE}
# A long poll is bounded here whatever the client asks: a Fetch holds its connection.
MAX_WAIT_MS = 30_000
EARLIEST, LATEST = -2, -1
_LAST_DATETIME_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z


async def fetch(session: Session, request: Request) -> dict[str, Any]:
    body = request.body
    if field_of(body, "session_id", 0) != 0:
        return {"throttle_time": 0, "error_code": errors.FETCH_SESSION_ID_NOT_FOUND,
                "session_id": 0, "responses": []}
    if not session.may(Access.READ_ONLY):
        return {"throttle_time": 0, "error_code": errors.NONE, "session_id": 0,
                "responses": [{"topic": t.topic, "partitions": [
                    {"partition_index": p.partition,
                     "error_code": errors.TOPIC_AUTHORIZATION_FAILED} for p in t.partitions]}
                    for t in body.topics]}
    topics = await known_topics(session, [t.topic for t in body.topics])
    entries: list[reads.FetchEntry] = []
    slots: list[tuple[str, int, int | None]] = []  # topic, partition, index into entries
    for t in body.topics:
        topic = topics.get(t.topic)
        for p in t.partitions:
            if topic is None or not 0 <= p.partition < topic.partitions:
                slots.append((t.topic, p.partition, None))
                continue
            slots.append((t.topic, p.partition, len(entries)))
            entries.append(reads.FetchEntry(t.topic, str(p.partition), p.fetch_offset,
                                           max(0, p.partition_max_bytes), session.tenant))
    # Whatever the client asks (0 or less: no limit of its own), one answer is capped as
    # Kafka's fetch.max.bytes caps it: the answer is built whole in memory. The first record
    # found comes back even when larger (core/kafka/stored.py), so a consumer always makes
    # progress.
    cap = session.broker.settings.kafka_fetch_max_bytes
    results = await session.broker.kafka.read(
        entries, max_bytes=min(cap, body.max_bytes) if body.max_bytes > 0 else cap,
        min_bytes=max(0, body.min_bytes),
        max_wait_ms=min(MAX_WAIT_MS, max(0, int(body.max_wait.total_seconds() * 1000))))
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for name, index, at in slots:
        answer: dict[str, Any] = {"partition_index": index, "high_watermark": -1,
                                  "last_stable_offset": -1, "log_start_offset": -1,
                                  "aborted_transactions": None, "records": None}
        if at is None:
            answer["error_code"] = errors.UNKNOWN_TOPIC_OR_PARTITION
        else:
            result = results[at]
            answer["error_code"] = _CODES.get(result.error or "", errors.NONE)
            if result.error != reads.UNKNOWN_TOPIC_OR_PARTITION:
                answer.update(high_watermark=result.high_watermark,
                              last_stable_offset=result.high_watermark,
                              log_start_offset=result.log_start,
                              records=encode_batch(result.records) if result.records else b"")
        by_topic.setdefault(name, []).append(answer)
    return {"throttle_time": 0, "error_code": errors.NONE, "session_id": 0,
            "responses": [{"topic": name, "partitions": parts}
                          for name, parts in by_topic.items()]}


def _millis(at: datetime) -> int:
    return int(at.timestamp() * 1000)


async def list_offsets(session: Session, request: Request) -> dict[str, Any]:
    body = request.body
    kafka = session.broker.kafka
    topics = await known_topics(session, [t.name for t in body.topics])
    answers = []
    for t in body.topics:
        topic = topics.get(t.name)
        parts = []
        for p in t.partitions:
            answer: dict[str, Any] = {"partition_index": p.partition_index,
                                      "error_code": errors.NONE, "timestamp": -1,
                                      "offset": -1, "leader_epoch": 0}
            parts.append(answer)
            if not session.may(Access.READ_ONLY):
                answer["error_code"] = errors.TOPIC_AUTHORIZATION_FAILED
                continue
            if topic is None or not 0 <= p.partition_index < topic.partitions:
                answer["error_code"] = errors.UNKNOWN_TOPIC_OR_PARTITION
                continue
            name = str(p.partition_index)
            bounds = await kafka.bounds(t.name, name, tenant=session.tenant)
            if p.timestamp == LATEST:
                answer["offset"] = bounds.high_watermark
            elif p.timestamp == EARLIEST:
                answer["offset"] = bounds.log_start
            elif 0 <= p.timestamp <= _LAST_DATETIME_MS:
                at = datetime.fromtimestamp(p.timestamp / 1000, UTC)
                found = await kafka.offset_for_time(t.name, name, at, tenant=session.tenant)
                if found is not None:  # the offset, and when it was appended
                    answer.update(offset=found[0], timestamp=_millis(found[1]))
            elif p.timestamp > _LAST_DATETIME_MS:
                pass  # nothing was appended that late: offset -1, as for any later time
            else:
                answer["error_code"] = errors.INVALID_REQUEST
        answers.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": answers}
