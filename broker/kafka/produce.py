"""Produce: each partition's record batches become messages of the queue's partition "n",
appended through the core's write path and answered after their commit (acks=1 and
acks=all alike; acks=0 is not answered at all, as Kafka does).

A record's value becomes the message's JSON payload and its key, headers and timestamp
are kept beside it (core/kafka/messages.py). Each record's transactionId (our dedup
key) is the message id's text, or, for an idempotent producer, "kafka:<producer id>:
<epoch>:<sequence>": a resend of a batch is then a duplicate of what is stored, answered
with the offsets it got the first time and written nothing, after a restart too, for as
long as the queue's dedup window (docs/kafka.md).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from broker.auth.access import Access
from broker.kafka import errors
from broker.kafka.producers import SEQUENCES
from broker.kafka.protocol import Request
from broker.kafka.records import BadBatch, Batch, decode_batches
from broker.kafka.session import Session
from broker.kafka.topics import known_topics
from core.errors import QueenError
from core.kafka.messages import produced
from core.types import PushItem

log = logging.getLogger("queen.kafka")

# What one request's records may decompress to, in all, and how many records it may hold.
MAX_DECOMPRESSED_BYTES = 64 * 2**20
MAX_RECORDS = 1_000_000


@dataclass(slots=True)
class _Part:
    topic: str
    index: int
    code: int = errors.NONE
    message: str | None = None
    items: list[PushItem] = field(default_factory=list)
    base_offset: int = -1
    log_start: int = -1
    # An idempotent producer's batches: (producer id, epoch, sequence after the last record)
    sequenced: tuple[int, int, int] | None = None


async def produce(session: Session, request: Request) -> dict[str, Any] | None:
    body = request.body
    if body.transactional_id is not None:
        return _answer([_Part(t.name, p.index, errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                              "transactions are not supported")
                        for t in body.topic_data for p in t.partition_data])
    if not session.may(Access.WRITE_ONLY):  # as a push
        return _answer([_Part(t.name, p.index, errors.TOPIC_AUTHORIZATION_FAILED,
                              "this token may not write")
                        for t in body.topic_data for p in t.partition_data])
    topics = await known_topics(session, [t.name for t in body.topic_data])
    parts: list[_Part] = []
    budget = [MAX_DECOMPRESSED_BYTES, MAX_RECORDS]
    for topic_data in body.topic_data:
        topic = topics.get(topic_data.name)
        for data in topic_data.partition_data:
            part = _Part(topic_data.name, data.index)
            parts.append(part)
            if topic is None or not 0 <= data.index < topic.partitions:
                part.code = errors.UNKNOWN_TOPIC_OR_PARTITION
                continue
            try:
                batches = decode_batches(bytes(data.records or b""), max_bytes=budget[0],
                                         max_records=budget[1])
            except BadBatch as exc:
                part.code, part.message = exc.code, str(exc)
                continue
            refusal = _refusal(batches) or _out_of_order(topic_data.name, data.index, batches)
            if refusal is not None:
                part.code, part.message = refusal
                continue
            part.sequenced = _sequenced(batches)
            part.items = _items(topic_data.name, str(data.index), batches,
                                session.producer, session.tenant)
            budget[0] -= sum(len(i.message.payload) for i in part.items)
            budget[1] -= len(part.items)
    await _append(session, [p for p in parts if p.items])
    if body.acks == 0:
        return None
    return _answer(parts)


def _refusal(batches: list[Batch]) -> tuple[int, str] | None:
    for batch in batches:
        if batch.transactional or batch.control:
            return (errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    "transactional and control batches are not taken")
    return None


def _out_of_order(topic: str, partition: int, batches: list[Batch]) -> tuple[int, str] | None:
    for batch in batches:
        if batch.producer_id >= 0 and batch.base_sequence >= 0:
            code = SEQUENCES.check(batch.producer_id, batch.producer_epoch, topic, partition,
                                   batch.base_sequence)
            if code != errors.NONE:
                return code, "sequence out of order, or an older producer epoch"
    return None


def _sequenced(batches: list[Batch]) -> tuple[int, int, int] | None:
    last = batches[-1] if batches else None
    if last is None or last.producer_id < 0 or last.base_sequence < 0:
        return None
    return last.producer_id, last.producer_epoch, last.base_sequence + len(last.records)


def _items(topic: str, partition: str, batches: list[Batch],
           producer_sub: str | None, tenant: str) -> list[PushItem]:
    items: list[PushItem] = []
    for batch in batches:
        txids = None
        if batch.producer_id >= 0 and batch.base_sequence >= 0:  # an idempotent producer
            prefix = f"kafka:{batch.producer_id}:{batch.producer_epoch}:"
            txids = [f"{prefix}{batch.base_sequence + r.offset_delta}" for r in batch.records]
        items.extend(produced(topic, partition, batch.records, transaction_ids=txids,
                              producer_sub=producer_sub, tenant=tenant))
    return items


async def _append(session: Session, parts: list[_Part]) -> None:
    if not parts:
        return
    try:
        outcomes = await session.broker.produce([i for p in parts for i in p.items])
    except QueenError as exc:
        for part in parts:
            part.code, part.message = errors.code_of(exc), exc.message
        return
    at = 0
    for part in parts:
        mine = outcomes[at:at + len(part.items)]
        at += len(part.items)
        failed = next((o.error for o in mine if o.error is not None), None)
        if failed is not None:
            part.code, part.message = errors.code_of(failed), failed.message
            continue
        offsets = [o.verdict.offset for o in mine if o.verdict is not None]
        if len(offsets) != len(mine) or None in offsets:
            part.code, part.message = errors.KAFKA_STORAGE_ERROR, "offsets unknown"
            continue
        first = offsets[0]
        assert first is not None
        if offsets != list(range(first, first + len(offsets))):
            # A batch partly a resend of another (not something a Kafka client does): what
            # was new is written, and the client is told its sequences collided.
            log.warning("produce to %s/%d got offsets %s", part.topic, part.index, offsets)
            part.code = errors.DUPLICATE_SEQUENCE_NUMBER
            continue
        part.base_offset = first
        if part.sequenced is not None:
            producer_id, epoch, next_sequence = part.sequenced
            SEQUENCES.written(producer_id, epoch, part.topic, part.index, next_sequence)


def _answer(parts: list[_Part]) -> dict[str, Any]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for part in parts:
        by_topic.setdefault(part.topic, []).append({
            "index": part.index, "error_code": part.code, "base_offset": part.base_offset,
            "log_start_offset": part.log_start, "error_message": part.message})
    return {"responses": [{"name": name, "partition_responses": answers}
                          for name, answers in by_topic.items()], "throttle_time": 0}
