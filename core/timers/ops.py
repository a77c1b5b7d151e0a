"""A timer call's ops, validated (§16.2): every refusal has its code and reason, and a call
with one refused op applies nothing.

`parse_ops` takes the decoded JSON ops; `TimerLimits` carries what the route enforces and the
transaction rider (§17) does not: the op cap, the payload ceiling and the horizon."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any, Literal

from core.errors import ClientError, Coded, Refused, RefusedTooLarge
from core.names import CONTROL_RE, check_name

BAD = "timers_bad_request"
SERVER_OWNED = frozenset((
    "producerSub", "producer_sub", "messageId", "message_id", "tenant", "tenantId",
    "tenant_id", "deliverAt", "deliver_at", "delaySeconds", "delay_seconds", "attempts",
    "claimToken", "claim_token", "claimedUntil"))
MAX_KEY_BYTES = 1024  # keys travel in paths and in a btree index entry
MAX_TXN_BYTES = 65535  # as a push's transactionId
# A delay PostgreSQL can add to now() whatever the limits (about 3000 years).
MAX_ANY_DELAY_MS = 10**14
DEFAULT_PARTITION = "Default"


class HorizonExceeded(Coded, ClientError):
    """The timer is due further ahead than the broker keeps timers."""


@dataclass(frozen=True, slots=True)
class TimerLimits:
    """What a call may carry; None = no limit (the rider's, §17: only the body limit)."""

    max_ops: int | None = 256
    max_payload_bytes: int | None = 1024 * 1024
    horizon_ms: int | None = 90 * 86400 * 1000


ROUTE_LIMITS = TimerLimits()
RIDER_LIMITS = TimerLimits(None, None, None)


@dataclass(frozen=True, slots=True)
class TimerOp:
    kind: Literal["schedule", "cancel"]  # a reschedule is the same upsert
    queue: str
    key: str
    txn: str | None  # always set for a schedule
    partition: str = DEFAULT_PARTITION
    delay_ms: int = 0
    payload: bytes = b""  # the decoded base64
    zstd: bool = False
    encrypted: bool = False  # the client's flag


def _refuse(reason: str, detail: str) -> Refused:
    return Refused(BAD, reason, detail)


def operations_of(body: Any) -> list[Any]:
    """`{"operations": [...]}` or a bare array."""
    if isinstance(body, list):
        return body
    if isinstance(body, dict) and isinstance(body.get("operations"), list):
        return list(body["operations"])
    raise _refuse("timers_bad_body",
                  'the body must be {"operations": [...]} or an array of timer ops')


def parse_ops(raw: list[Any], limits: TimerLimits = ROUTE_LIMITS,
              field: str = "operations") -> list[TimerOp]:
    """The ops, validated in input order; raises the first refusal (naming `field`, the
    body's array they came from: "timers" for the transaction rider)."""
    if limits.max_ops is not None and len(raw) > limits.max_ops:
        raise _refuse("timers_too_many_ops",
                      f"{len(raw)} ops is over the limit of {limits.max_ops} per call")
    seen: set[tuple[str, str]] = set()
    ops = []
    for i, item in enumerate(raw):
        op = _op(f"{field}[{i}]", item, limits)
        if (op.queue, op.key) in seen:
            raise _refuse("timers_duplicate_key", f"{field}[{i}]: queue {op.queue!r} key "
                                                  f"{op.key!r} appears twice in one call")
        seen.add((op.queue, op.key))
        ops.append(op)
    return ops


def _op(at: str, item: Any, limits: TimerLimits) -> TimerOp:
    if not isinstance(item, dict):
        raise _refuse("timers_bad_op", f"{at} must be an object")
    for field in item:
        if field in SERVER_OWNED or field.startswith("_"):
            raise _refuse("timers_server_owned_field",
                          f"{at}.{field} is set by the broker, not by the client")
    name = item.get("op")
    if not isinstance(name, str):
        raise _refuse("timers_bad_op", f"{at}.op must be a string")
    if name not in ("schedule", "reschedule", "cancel"):
        raise _refuse("timers_unknown_op", f"{at}.op {name[:64]!r} is not schedule, "
                                           "reschedule or cancel")
    queue = _required_text(item, "queue", at, "timers_queue_required")
    try:
        check_name(queue)
    except (ValueError, TypeError) as exc:
        raise _refuse("timers_bad_op", f"{at}.queue {exc}") from None
    key = _required_text(item, "timerKey", at, "timers_key_required")
    if len(key.encode()) > MAX_KEY_BYTES or "\x00" in key:
        raise _refuse("timers_bad_op", f"{at}.timerKey must be at most {MAX_KEY_BYTES} bytes "
                                       "without NUL")
    _check_types(item, at)
    txn = item.get("txn")
    if name == "cancel":
        if "payload" in item and not isinstance(item["payload"], str):
            raise _refuse("timers_bad_op", f"{at}.payload has the wrong type")
        if txn is not None:
            txn = _txn(txn, at)
        return TimerOp("cancel", queue, key, txn)
    partition = item.get("partition", DEFAULT_PARTITION)
    try:
        check_name(partition)
    except (ValueError, TypeError) as exc:
        raise _refuse("timers_bad_partition", f"{at}.partition {exc}") from None
    delay = item.get("delayMs")
    if delay is None:
        raise _refuse("timers_delay_required", f"{at}.delayMs is required for a schedule")
    if isinstance(delay, bool) or not isinstance(delay, int) or abs(delay) > MAX_ANY_DELAY_MS:
        raise _refuse("timers_bad_op", f"{at}.delayMs must be an integer number of "
                                       "milliseconds")
    if limits.horizon_ms is not None and delay > limits.horizon_ms:
        raise HorizonExceeded("timer_horizon_exceeded", "timers_horizon",
                              f"{at}.delayMs {delay} is beyond the horizon of "
                              f"{limits.horizon_ms} ms")
    if txn is None:
        raise _refuse("timers_txn_required", f"{at}.txn is required for a schedule")
    txn = _txn(txn, at)
    if "payload" not in item or item["payload"] is None:
        raise _refuse("timers_payload_required", f"{at}.payload is required for a schedule")
    payload = _base64(item["payload"], at)
    if limits.max_payload_bytes is not None and len(payload) > limits.max_payload_bytes:
        raise RefusedTooLarge("payload_too_large", "timers_payload_too_large",
                              f"{at}.payload is {len(payload)} bytes, over the limit of "
                              f"{limits.max_payload_bytes}")
    return TimerOp("schedule", queue, key, txn, partition, delay, payload,
                   _flag(item, "payloadZstd", at), _flag(item, "encrypted", at))


# The type of each optional field, checked whatever the op (a cancel ignores most of them,
# but a body with a wrongly typed field is refused, not half read).
_TYPES: dict[str, tuple[type, ...]] = {"partition": (str,), "delayMs": (int,), "txn": (str,),
                                       "payloadZstd": (bool,), "encrypted": (bool,)}


def _check_types(item: dict[str, Any], at: str) -> None:
    for field, kinds in _TYPES.items():
        if field not in item:
            continue
        value = item[field]
        if value is None and field in ("partition", "delayMs", "txn"):
            continue  # absent, as the specific checks read it
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise _refuse("timers_bad_op", f"{at}.{field} has the wrong type")


def _required_text(item: dict[str, Any], field: str, at: str, reason: str) -> str:
    value = item.get(field)
    if value is None or value == "":
        raise _refuse(reason, f"{at}.{field} is required (a non-empty string)")
    if not isinstance(value, str):
        raise _refuse("timers_bad_op", f"{at}.{field} must be a string")
    return value


def _txn(value: Any, at: str) -> str:
    if value == "":
        raise _refuse("timers_txn_required", f"{at}.txn must not be empty")
    if not isinstance(value, str):
        raise _refuse("timers_bad_op", f"{at}.txn must be a string")
    if len(value.encode()) > MAX_TXN_BYTES or CONTROL_RE.search(value):
        raise _refuse("timers_bad_op", f"{at}.txn must be at most {MAX_TXN_BYTES} bytes "
                                       "without control characters")
    return value


def _base64(value: Any, at: str) -> bytes:
    if not isinstance(value, str):
        raise _refuse("timers_payload_not_base64", f"{at}.payload must be a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise _refuse("timers_payload_not_base64",
                      f"{at}.payload is not standard base64") from None


def _flag(item: dict[str, Any], field: str, at: str) -> bool:
    value = item.get(field, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _refuse("timers_bad_op", f"{at}.{field} must be true or false")
    return value
