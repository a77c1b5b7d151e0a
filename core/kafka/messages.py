"""A Kafka record as a stored message, and back: the value becomes the message's JSON
payload and the record's key, headers and timestamp ride beside it (core/engine/record_meta.py
says how); a message read back gives the record's exact value."""

from __future__ import annotations

from core.engine import record_meta
from core.engine.fetch import Record
from core.engine.push import PushItem
from core.engine.writes import NewMessage
from core.ids import uuid7

# A record whose value is its stored payload, byte for byte (the edge then skips
# `kafka_value`).
FORM_JSON = record_meta.FORM_JSON


def produced(topic: str, partition: str, *, value: bytes | None, timestamp_ms: int,
             key: bytes | None, headers: tuple[tuple[bytes, bytes | None], ...],
             transaction_id: str | None, producer_sub: str | None,
             tenant: str) -> PushItem:
    """The push of one produced record to the `tenant`'s topic; `transaction_id` None: the
    new message id's text (a record of a producer that is not idempotent dedups against
    nothing)."""
    payload, form = record_meta.stored_payload(value)
    message_id = uuid7()
    meta = record_meta.RecordMeta(form, timestamp_ms, key, headers)
    return PushItem(topic, partition, NewMessage(
        message_id, transaction_id if transaction_id is not None else str(message_id), payload,
        producer_sub=producer_sub, kafka=meta), tenant)


def kafka_value(record: Record) -> bytes | None:
    """The value a record read back had when it was produced (a Queen client's message: its
    JSON payload text)."""
    return record_meta.kafka_value(record.payload, record.meta)
