"""A Kafka record as a stored message, and back: the value becomes the message's JSON
payload and the record's key, headers and timestamp ride beside it (core/engine/record_meta.py
says how); a message read back gives the record's exact value."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import msgspec

from core.engine import record_meta
from core.engine.push import PushItem
from core.engine.writes import NewMessage
from core.ids import uuid7s

# A record whose value is its stored payload, byte for byte.
FORM_JSON = record_meta.FORM_JSON


class ProducedRecord(Protocol):
    """What the edge decoded of one record (broker/kafka/records.py's InRecord)."""

    @property
    def timestamp(self) -> int: ...  # ms
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> tuple[tuple[bytes, bytes | None], ...]: ...


_JSON = msgspec.json.Decoder()


def produced(topic: str, partition: str, records: Sequence[ProducedRecord], *,
             transaction_ids: Sequence[str] | None, producer_sub: str | None,
             tenant: str) -> list[PushItem]:
    """The pushes of records produced to one partition of the `tenant`'s topic, their ids
    minted together; `transaction_ids` None: each new message id's text (a record of a
    producer that is not idempotent dedups against nothing). One loop for all: every
    produced record passes here."""
    out: list[PushItem] = []
    add = out.append
    decode = _JSON.decode
    ids = uuid7s(len(records))
    for i, record in enumerate(records):
        value = record.value
        if value is None:
            payload, form = record_meta.stored_payload(value)
        else:
            try:
                # The usual value is one JSON document, stored as it is: `stored_payload`'s
                # first rule, without a call per record.
                decode(value)
                payload, form = value, FORM_JSON
            except (msgspec.DecodeError, RecursionError):
                payload, form = record_meta.stored_payload(value)
        message_id = ids[i]
        add(PushItem(topic, partition, NewMessage(
            message_id,
            str(message_id) if transaction_ids is None else transaction_ids[i], payload,
            None, producer_sub, None,
            record_meta.RecordMeta(form, record.timestamp, record.key, record.headers)),
            tenant))
    return out
