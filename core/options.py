"""Queue options: each declared once, validation, and configure's merge/replace
rules (wire-protocol §4.9).

Every option configure accepts is applied (docs/reference/queue-options.md) or refused: an
unknown key answers 400 naming it. `maxSize` is enforced at push (schema/functions/20_append.sql).
`ttl` and `priority` are labels, stored and echoed.

`EffectiveOptions` is the only place an option's name, type, default and meaning are written
down. A queue row always holds the complete set (written by `encode` when a queue is created
or configured; migration 021 filled in older rows), so SQL reads options without restating
defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from core.errors import BadRequest

# A pop's lease length when neither the request (leaseSeconds) nor the queue (leaseTime)
# gives one above 0 (§4.2).
POP_LEASE_FALLBACK_SECONDS = 60
# A pop answer's byte budget unless QUEEN_POP_MAX_BYTES says otherwise (core/settings.py
# says why this much).
POP_MAX_BYTES = 64 * 1024 * 1024


class EffectiveOptions(msgspec.Struct, frozen=True, rename="camel"):
    """A queue's effective options, each declared once: its wire name (camel case), type,
    default and meaning (the queue options reference is generated from these). Field order is
    the order configure echoes them."""

    lease_time: Annotated[int, Meta(description=
        "Seconds a pop's lease lasts when the pop sends no `leaseSeconds`; 0 means 60.")] = 300
    retry_limit: Annotated[int, Meta(description=
        "Failures (`failed` acks) a message is delivered again after; the next one dead-letters "
        "it (or drops it with the DLQ off).")] = 3
    dlq_after_max_retries: Annotated[bool, Meta(description=
        "Dead-letter a message whose retries are spent; the DLQ is off only when this and "
        "`deadLetterQueue` are both false.")] = True
    dead_letter_queue: Annotated[bool, Meta(description=
        "The DLQ is on; see `dlqAfterMaxRetries`.")] = True
    dedup_window_seconds: Annotated[int, Meta(description=
        "A push repeating a `transactionId` of the same partition within this many seconds "
        "writes nothing and answers `duplicate`; 0 turns deduplication off.")] = 3600
    retention_seconds: Annotated[int, Meta(description=
        "With `retentionEnabled`, segments older than this many seconds are deleted; 0 keeps "
        "them.")] = 0
    completed_retention_seconds: Annotated[int, Meta(description=
        "With `retentionEnabled`, segments every consumer group has committed past and older "
        "than this many seconds are deleted; 0 keeps them.")] = 0
    retention_enabled: Annotated[bool, Meta(description=
        "The switch of the two retention options: nothing is deleted while it is false.")] = False
    delayed_processing: Annotated[int, Meta(description=
        "Seconds a message waits after its push before a pop may deliver it.")] = 0
    window_buffer: Annotated[int, Meta(description=
        "Seconds a partition must have been quiet (no push) before a pop delivers from it.")] = 0
    max_size: Annotated[int, Meta(description=
        "Most unconsumed messages the queue may hold; a push past it fails. 0 = no limit.")] = 0
    retry_delay: Annotated[int, Meta(description=
        "Milliseconds before a span released by a `failed` or `retry` ack is delivered again; 0 "
        "= at once.")] = 1000
    ttl: Annotated[int, Meta(description=
        "Stored and echoed; not enforced.")] = 3600
    priority: Annotated[int, Meta(description=
        "A label, stored and echoed; it orders nothing.")] = 0
    encryption_enabled: Annotated[bool, Meta(description=
        "Store this queue's messages sealed with `QUEEN_ENCRYPTION_KEY` (AES-256-GCM); refused "
        "without a key.")] = False
    max_wait_time_seconds: Annotated[int, Meta(description=
        "When a pop claims, messages pushed longer ago than this are skipped for that group "
        "(counted as evicted); 0 = off.")] = 0
    min_pop_wait_time: Annotated[int, Meta(description=
        "Milliseconds an under-full partition is held back so that a pop can take a fuller "
        "batch (0 to 60000).")] = 0

    @property
    def dlq_enabled(self) -> bool:
        """The DLQ is off only when both flags are explicitly false (§13.3)."""
        return self.dead_letter_queue or self.dlq_after_max_retries

    def lease_seconds(self, requested: int = 0) -> int:
        """A pop's lease: the request's if above 0, else leaseTime if above 0, else 60."""
        if requested > 0:
            return requested
        return self.lease_time if self.lease_time > 0 else POP_LEASE_FALLBACK_SECONDS

    def as_dict(self) -> dict[str, Any]:
        """Wire names to values, in echo order."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out


# Wire name -> default, in echo order.
DEFAULTS: dict[str, Any] = EffectiveOptions().as_dict()


def _meanings() -> dict[str, str]:
    """Wire name -> what the option does, as its field declares it."""
    struct = msgspec.inspect.type_info(EffectiveOptions)
    assert isinstance(struct, msgspec.inspect.StructType)
    out = {}
    for field in struct.fields:
        declared = field.type
        if not isinstance(declared, msgspec.inspect.Metadata) or not declared.extra_json_schema:
            raise TypeError(f"option {field.encode_name} is declared without a meaning")
        out[field.encode_name] = str(declared.extra_json_schema["description"])
    return out


# What each option does (the queue options reference shows it).
MEANINGS = _meanings()
# Every queue row created from now on gets this (or its configured options) in full.
DEFAULTS_JSON = msgspec.json.encode(DEFAULTS).decode()

_BOOLEAN = {k for k, v in DEFAULTS.items() if isinstance(v, bool)}
# Integers that may not be negative; `priority` is a free label and may be.
_NON_NEGATIVE = {k for k, v in DEFAULTS.items() if not isinstance(v, bool)} - {"priority"}
_CLAMPS = {"minPopWaitTime": (0, 60000)}
_MAX_INT = 2**31 - 1
def unknown_option(key: str) -> str:
    """The 400 text of an option configure does not know."""
    return f"unknown option {key}; the options are: {', '.join(DEFAULTS)}"
_DECODER = msgspec.json.Decoder(EffectiveOptions)


def validate(given: Mapping[str, Any]) -> dict[str, Any]:
    """Known options with checked types; `None` values are kept (they mean "reset").

    An unknown key is refused (BadRequest naming it): an option that silently vanishes
    leaves the user believing a setting is in force. The official client sends only known
    keys by default (its QUEUE_DEFAULTS), plus whatever the user passes to `config()`.
    """
    clean: dict[str, Any] = {}
    for key, value in given.items():
        if key not in DEFAULTS:
            raise BadRequest(unknown_option(key))
        if value is None:
            clean[key] = None
        elif key in _BOOLEAN:
            if not isinstance(value, bool):
                raise BadRequest(f"option {key} must be a boolean")
            clean[key] = value
        else:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise BadRequest(f"option {key} must be a number")
            if isinstance(value, float):
                if not value.is_integer():
                    raise BadRequest(f"option {key} must be a whole number")
                value = int(value)
            if key in _NON_NEGATIVE and value < 0:
                raise BadRequest(f"option {key} must not be negative")
            if abs(value) > _MAX_INT:
                raise BadRequest(f"option {key} is too large")
            if key in _CLAMPS:
                low, high = _CLAMPS[key]
                value = min(max(value, low), high)
            clean[key] = value
    return clean


def apply(current: Mapping[str, Any] | None, given: Mapping[str, Any], *,
          replace: bool) -> dict[str, Any]:
    """Effective options after a configure: merge keeps omitted values, replace resets them."""
    base = dict(DEFAULTS) if replace or current is None else {**DEFAULTS, **current}
    for key, value in validate(given).items():
        base[key] = DEFAULTS[key] if value is None else value
    return {key: base[key] for key in DEFAULTS}


def decode(stored: str | bytes) -> EffectiveOptions:
    """A queue row's options (keys it lacks take their defaults; unknown keys are ignored)."""
    return _DECODER.decode(stored)


def encode(options: Mapping[str, Any]) -> str:
    """The complete options as a queue row stores them."""
    return msgspec.json.encode(msgspec.convert(options, EffectiveOptions)).decode()


def dlq_enabled(options: Mapping[str, Any]) -> bool:
    """The DLQ is off only when both flags are explicitly false (§13.3)."""
    return msgspec.convert({**DEFAULTS, **options}, EffectiveOptions).dlq_enabled


def derive_namespace_task(queue: str) -> tuple[str, str]:
    """namespace = text before the first '.', task = text between the first and second '.'."""
    parts = queue.split(".", 2)
    if len(parts) == 1:
        return queue, ""
    return parts[0], parts[1]
