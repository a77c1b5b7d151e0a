"""The wire's scalar vocabulary: names, ids, texts and timestamps, each checked as it is
decoded, so routes and the core only ever see values that are safe to store and address.

Each type is a `str` subclass that msgspec hands to `dec_hook`; a value that breaks the rule
is refused there with a reason, and the decoder reports it at its JSON path (see
`broker.wire.decoding`). `schema_hook` gives the JSON Schema the OpenAPI document shows.

The name rule (queue, partition, consumer group, namespace, task) follows from addressing:
the official client puts queue and partition names into pop paths unencoded, admin routes
percent-encode them, and the broker decodes every path segment once and routes on the
decoded path. So a name may not contain `/` (it would split the path), `?` or `#` (they end
it), `%` (an unencoded name would be decoded a second time), `\\` (URL normalisers turn it
into `/`), and may not be `.` or `..` (normalised away). No control characters (C0, DEL,
C1): they do not survive logs and URLs. 1 to 255 bytes of UTF-8.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Any

from core.errors import BadRequest
from core.names import MAX_NAME_BYTES, check_name, check_text
from core.names import text_of as _text
from core.names import utf8_bytes as _utf8_bytes
from core.timefmt import parse_iso
from core.tracing import parse as parse_traceparent
from core.types import requested_seed

MAX_TRANSACTION_ID_BYTES = 65535
MAX_EPHEMERAL_NAME_BYTES = 512

_LOW_CONTROL_RE = re.compile("[\x00-\x1f]")  # ephemeral names (§19.1)

# The same rule as a JSON Schema (ECMA-262) pattern, for the OpenAPI document.
NAME_PATTERN = r"^(?!\.\.?$)[^\u0000-\u001f\u007f-\u009f/\\?#%]+$"
TEXT_PATTERN = r"^[^\u0000]*$"
TRANSACTION_ID_PATTERN = r"^[^\u0000-\u001f\u007f-\u009f]*$"
UUID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
_UUID_RE = re.compile(UUID_PATTERN)
PARTITION_KEY_DIGITS = 18  # every bigint id we mint fits; 19 digits could overflow bigint


class Name(str):
    """A queue, partition, consumer group, namespace or task name (the name rule above)."""


class NameOrEmpty(str):
    """A name, or `""` where the protocol gives empty a meaning (partition `Default`, the
    implicit consumer group, no namespace/task)."""


class NameOrNumber(str):
    """A partition name that may also be given as a JSON integer (fetch, §6.6)."""


class TransactionId(str):
    """A transactionId: at most 65535 bytes, no control characters; `""` = broker mints."""


class Text(str):
    """Free text stored in PostgreSQL (ack error texts): anything but NUL."""


class Token(str):
    """An opaque id the broker minted and the client echoes (lease ids): at most 255 bytes,
    no control characters; one we never minted simply matches nothing."""


class Uuid(str):
    """A UUID (lease ids, trace ids) in canonical lower-case form; `""` = none."""

    @property
    def value(self) -> uuid.UUID | None:
        return uuid.UUID(self) if self else None


class PartitionKey(str):
    """A partition id as the wire carries it: decimal digits naming one of our partitions."""

    @property
    def id(self) -> int:
        return int(self)


class EphemeralName(str):
    """An ephemeral queue, partition or group name (§19.1): 1-512 bytes of UTF-8, no
    character below U+0020 (the durable name rule does not apply: these names travel
    percent-encoded or in bodies)."""


def _ephemeral_name(value: object) -> str:
    return check_text(value, MAX_EPHEMERAL_NAME_BYTES, control=_LOW_CONTROL_RE,
                      control_text="contains a character below U+0020")


class Timestamp(str):
    """An ISO-8601 timestamp within the range both Python and PostgreSQL can represent."""

    instant: datetime


class SubscriptionFrom(str):
    """`subscriptionFrom`: `now`, an ISO-8601 timestamp, or empty."""


class TraceParentText(str):
    """A W3C `traceparent` (core/tracing.py): 00-<32 hex>-<16 hex>-<2 hex>."""


def _traceparent(value: object) -> str:
    text = _text(value)
    parse_traceparent(text)  # raises ValueError with the reason
    return text.strip()


def _id_text(value: object, max_bytes: int) -> str:
    """An id the client chose or echoes: bounded, no control characters, may be empty."""
    return check_text(value, max_bytes, empty=True)


def check_transaction_id(value: object) -> str:
    """The transactionId rule; raises ValueError/TypeError with the reason."""
    return _id_text(value, MAX_TRANSACTION_ID_BYTES)


def check_name_or_empty(value: object) -> str:
    """A name, or `""` where the protocol gives empty a meaning."""
    return "" if value == "" else check_name(value)


def _plain_text(value: object) -> str:
    text = _text(value)
    if "\x00" in text:
        raise ValueError("contains a NUL character")
    _utf8_bytes(text)
    return text


def check_uuid(value: object) -> str:
    """A UUID in canonical lower-case form, or `""`; raises ValueError otherwise."""
    text = _text(value)
    if text == "":
        return text
    if not _UUID_RE.fullmatch(text):
        raise ValueError("must be a UUID")
    return str(uuid.UUID(text))


def _partition_key(value: object) -> str:
    text = _text(value)
    if not (text.isascii() and text.isdigit()) or len(text) > PARTITION_KEY_DIGITS:
        raise ValueError("must be a partition id (decimal digits)")
    return text


def _timestamp(value: object) -> Timestamp:
    text = _text(value)
    try:
        instant = parse_iso(text, "timestamp")
    except BadRequest:
        raise ValueError("must be an ISO-8601 timestamp") from None
    stamp = Timestamp(text)
    stamp.instant = instant
    return stamp


def _subscription_from(value: object) -> str:
    text = _text(value)
    try:
        requested_seed("all", text)
    except BadRequest:
        raise ValueError("must be an ISO-8601 timestamp or now") from None
    return text


_CHECKS: dict[type, Any] = {
    Name: check_name,
    NameOrEmpty: check_name_or_empty,
    NameOrNumber: lambda v: str(v) if isinstance(v, int) and not isinstance(v, bool)
    else check_name(v),
    TransactionId: check_transaction_id,
    Text: _plain_text,
    Token: lambda v: _id_text(v, MAX_NAME_BYTES),
    Uuid: check_uuid,
    PartitionKey: _partition_key,
    SubscriptionFrom: _subscription_from,
    EphemeralName: _ephemeral_name,
    TraceParentText: _traceparent,
}


def check_of(kind: type) -> Any:
    """The check `dec_hook` applies to values of `kind` (one of the types above but
    Timestamp): it answers the value as the type keeps it, or raises ValueError/TypeError."""
    return _CHECKS[kind]


def dec_hook(kind: type, value: Any) -> Any:
    """msgspec's hook for the types above; anything else is not ours to decode."""
    if kind is Timestamp:
        return _timestamp(value)
    check = _CHECKS.get(kind)
    if check is None:
        raise NotImplementedError(f"no decoder for {kind!r}")
    return kind(check(value))


_NAME_SCHEMA = {"type": "string", "minLength": 1, "maxLength": MAX_NAME_BYTES,
                "pattern": NAME_PATTERN}
_SCHEMAS: dict[type, dict[str, Any]] = {
    Name: {**_NAME_SCHEMA, "description":
           "1-255 bytes of UTF-8; no control characters, no / \\ ? # %; not . or .."},
    NameOrEmpty: {"anyOf": [_NAME_SCHEMA, {"type": "string", "maxLength": 0}],
                  "description": "a name, or empty for the protocol's default"},
    NameOrNumber: {"anyOf": [_NAME_SCHEMA, {"type": "integer"}]},
    TransactionId: {"type": "string", "maxLength": MAX_TRANSACTION_ID_BYTES,
                    "pattern": TRANSACTION_ID_PATTERN,
                    "description": "at most 65535 bytes, no control characters"},
    Text: {"type": "string", "pattern": TEXT_PATTERN},
    Token: {"type": "string", "maxLength": MAX_NAME_BYTES, "pattern": TRANSACTION_ID_PATTERN},
    Uuid: {"anyOf": [{"type": "string", "format": "uuid", "pattern": UUID_PATTERN},
                     {"type": "string", "maxLength": 0}]},
    PartitionKey: {"type": "string", "pattern": f"^[0-9]{{1,{PARTITION_KEY_DIGITS}}}$",
                   "description": "a partition id: decimal digits"},
    Timestamp: {"type": "string", "format": "date-time"},
    EphemeralName: {"type": "string", "minLength": 1, "maxLength": MAX_EPHEMERAL_NAME_BYTES,
                    "pattern": "^[^\\u0000-\\u001f]+$",
                    "description": "1-512 bytes of UTF-8, no character below U+0020"},
    SubscriptionFrom: {"anyOf": [{"type": "string", "enum": ["now", ""]},
                                 {"type": "string", "format": "date-time"}]},
    TraceParentText: {"type": "string",
                      "pattern": "^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.*)?$",
                      "description": "a W3C traceparent (not all-zero ids, not version ff)"},
}


def schema_hook(kind: type) -> dict[str, Any]:
    schema = _SCHEMAS.get(kind)
    if schema is None:
        raise NotImplementedError(f"no schema for {kind!r}")
    return schema
