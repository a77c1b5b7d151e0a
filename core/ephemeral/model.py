"""Pure rules of §19: options (validation, clamping, defaults), ids, ack statuses."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.ephemeral.errors import EphemeralBadRequest

QUEUE_MODE = "__QUEUE_MODE__"  # the cursor of groupless pops
DEFAULT_PARTITION = "Default"
MAX_ITEMS = 10_000  # messages per push, acks per call
MAX_BATCH = 10_000
MAX_TIMEOUT_MS = 300_000
MAX_NAME_BYTES = 512

MIB = 1 << 20
MAX_QUEUE_BYTES = 16 * MIB
MAX_LENGTH = 10_000
MAX_LEASE_SECONDS = 24 * 3600
MAX_RETRY_LIMIT = 1000
MAX_WINDOW_MS = 60_000
MAX_WINDOW_COUNT = 10_000
# §19 sets no ceiling on ttl; ten years keeps it an int4 and is "forever" for these queues.
MAX_TTL_SECONDS = 10 * 365 * 86_400
OPTION_KEYS = ("maxBytes", "maxLength", "policy", "ttlSeconds", "leaseSeconds", "retryLimit",
               "windowBuffer")
POLICIES = ("reject", "dropOldest")
_ALLOWED = ", ".join(OPTION_KEYS)


@dataclass(frozen=True, slots=True)
class Options:
    """The options in force (clamped, defaults filled in)."""

    max_bytes: int = MAX_QUEUE_BYTES
    max_length: int = MAX_LENGTH
    policy: str = "reject"
    ttl_seconds: int = 0
    lease_seconds: int = 30
    retry_limit: int = 5
    window_ms: int = 0
    window_count: int = 0


DEFAULTS = Options()


def _count(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise EphemeralBadRequest(f"option {key} must be a non-negative integer "
                                  f"(allowed keys: {_ALLOWED})")
    return value


def _clamp(value: int, high: int, default: int) -> int:
    return default if value == 0 else min(value, high)


def options_in_force(sent: Any) -> Options:
    """Check `options` as configure received it (§19.6) and answer the values in force;
    raises EphemeralBadRequest naming the allowed keys."""
    if sent is None:
        return DEFAULTS
    if not isinstance(sent, Mapping):
        raise EphemeralBadRequest(f"options must be an object (allowed keys: {_ALLOWED})")
    unknown = sorted(str(k) for k in sent if k not in OPTION_KEYS)
    if unknown:
        raise EphemeralBadRequest(f"unknown option(s) {', '.join(unknown)} "
                                  f"(allowed keys: {_ALLOWED})")
    policy = sent.get("policy", "reject")
    if policy not in POLICIES:
        raise EphemeralBadRequest(f'option policy must be "reject" or "dropOldest" '
                                  f"(allowed keys: {_ALLOWED})")
    window = sent.get("windowBuffer", {})
    if not isinstance(window, Mapping) or any(k not in ("ms", "count") for k in window):
        raise EphemeralBadRequest("option windowBuffer must be an object with ms and/or count "
                                  f"(allowed keys: {_ALLOWED})")
    n = {k: _count(k, sent[k]) for k in ("maxBytes", "maxLength", "ttlSeconds",
                                          "leaseSeconds", "retryLimit") if k in sent}
    w = {k: _count(f"windowBuffer.{k}", window[k]) for k in ("ms", "count") if k in window}
    return Options(
        max_bytes=_clamp(n.get("maxBytes", 0), MAX_QUEUE_BYTES, DEFAULTS.max_bytes),
        max_length=_clamp(n.get("maxLength", 0), MAX_LENGTH, DEFAULTS.max_length),
        policy=policy,
        ttl_seconds=min(n.get("ttlSeconds", 0), MAX_TTL_SECONDS),
        lease_seconds=_clamp(n.get("leaseSeconds", 0), MAX_LEASE_SECONDS,
                             DEFAULTS.lease_seconds),
        retry_limit=min(n.get("retryLimit", DEFAULTS.retry_limit), MAX_RETRY_LIMIT),
        window_ms=min(w.get("ms", 0), MAX_WINDOW_MS),
        window_count=min(w.get("count", 0), MAX_WINDOW_COUNT))


def check_name(what: str, value: str) -> str:
    """§19.1: 1-512 bytes of UTF-8, no byte below 0x20."""
    if not value:
        raise EphemeralBadRequest(f"{what} must not be empty")
    if len(value.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise EphemeralBadRequest(f"{what} is longer than {MAX_NAME_BYTES} bytes")
    if any(ord(c) < 0x20 for c in value):
        raise EphemeralBadRequest(f"{what} contains a control character")
    return value


def message_id(epoch: int, partition: str, seq: int) -> str:
    return f"e:{epoch:x}:{partition}:{seq}"


@dataclass(frozen=True, slots=True)
class ParsedId:
    epoch: int | None  # None: unparsable
    partition: str
    seq: int


_UNPARSABLE = ParsedId(None, "", 0)
_MAX_BIGINT = (1 << 63) - 1


def parse_id(text: str) -> ParsedId:
    """`e:<epoch hex>:<partition>:<seq>`; the partition may itself contain `:`."""
    if not text.startswith("e:"):
        return _UNPARSABLE
    epoch_text, sep, rest = text[2:].partition(":")
    partition, sep2, seq_text = rest.rpartition(":")
    if not (sep and sep2 and partition and epoch_text and seq_text.isascii()
            and seq_text.isdigit() and all(c in "0123456789abcdef" for c in epoch_text)):
        return _UNPARSABLE
    try:
        check_name("partition", partition)  # no id we minted names another partition
    except EphemeralBadRequest:
        return _UNPARSABLE
    epoch, seq = int(epoch_text, 16), int(seq_text)
    if epoch > _MAX_BIGINT or seq > _MAX_BIGINT:
        return _UNPARSABLE
    return ParsedId(epoch, partition, seq)


_COMPLETED = {None, "completed", "success", "acked", "ok"}


def ack_status(status: str | None) -> str:
    """§19.5: completed | retry | failed."""
    if status in _COMPLETED:
        return "completed"
    return "retry" if status == "retry" else "failed"
