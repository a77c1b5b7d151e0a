"""Lock and semaphore operations as a call sends them, checked first (§15.1, §15.2)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from core.errors import Refused
from core.kv.ops import MAX_TTL_SECONDS, is_int
from core.kv.ops import operations_of as kv_operations_of

LockOpName = Literal["acquire", "renew", "release", "get"]
_NAMES = ("acquire", "renew", "release", "get")
MAX_OPS = 64
MAX_SLOT_ROWS = 4096
MAX_LIMIT = 1024
GET_ROWS = 1000  # what a `get` counts against MAX_SLOT_ROWS (§15.2)
_MAX_TEXT_BYTES = 256


@dataclass(frozen=True, slots=True)
class LockOp:
    index: int
    op: LockOpName
    name: str
    ttl_seconds: int = 0
    owner: str | None = None
    limit: int = 1
    token: int = 0
    slot: int = 0


def bad(reason: str, detail: str) -> Refused:
    return Refused("locks_bad_request", reason, detail)


def operations_of(body: Any) -> list[Any]:
    return kv_operations_of(body, "locks_bad_request", "locks_bad_body")


def parse_lock_ops(raw_ops: Sequence[Any]) -> list[LockOp]:
    if len(raw_ops) > MAX_OPS:
        raise bad("locks_too_many_ops", f"{len(raw_ops)} operations in one call; at most "
                                        f"{MAX_OPS}")
    ops = [_parse(i, raw) for i, raw in enumerate(raw_ops)]
    seen: set[str] = set()
    rows = 0
    for op in ops:
        if op.name in seen:
            raise bad("locks_duplicate_in_call",
                      f"operations[{op.index}] names lock {op.name!r} a second time")
        seen.add(op.name)
        rows += op.limit if op.op == "acquire" else GET_ROWS if op.op == "get" else 1
    if rows > MAX_SLOT_ROWS:
        raise bad("locks_too_many_keys", f"the call touches {rows} permit rows; at most "
                                         f"{MAX_SLOT_ROWS}")
    return ops


def _has_control(text: str) -> bool:
    return any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in text)


def _text_ok(value: Any) -> bool:
    return (isinstance(value, str) and 0 < len(value.encode()) <= _MAX_TEXT_BYTES
            and not _has_control(value))


def _parse(index: int, raw: Any) -> LockOp:
    where = f"operations[{index}]"
    if not isinstance(raw, dict):
        raise bad("locks_bad_request", f"{where} must be an object")
    for field in ("tenant", "tenantId", "_tenant"):
        if field in raw:
            raise bad("locks_tenant_not_an_input", f"{where}.{field}: the tenant is not an input")
    op = raw.get("op")
    if op not in _NAMES:
        raise bad("locks_unknown_op", f"{where}.op must be one of {', '.join(_NAMES)}")
    name: Any = raw.get("name")
    if not _text_ok(name) or "#" in name:
        raise bad("locks_bad_name", f"{where}.name must be 1 to 256 bytes without control "
                                    "characters or '#'")
    fields: dict[str, Any] = {}
    if op in ("acquire", "renew"):
        if "forever" in raw or raw.get("ttlSeconds") is None:
            raise bad("locks_ttl_required", f"{where} needs ttlSeconds (locks have no forever)")
        ttl = raw["ttlSeconds"]
        if not is_int(ttl) or not 0 < ttl <= MAX_TTL_SECONDS:
            raise bad("locks_bad_ttl", f"{where}.ttlSeconds must be an integer > 0")
        fields["ttl_seconds"] = ttl
        owner = raw.get("owner")
        if owner is not None and not _text_ok(owner):
            raise bad("locks_bad_owner", f"{where}.owner must be 1 to 256 bytes without "
                                         "control characters")
        fields["owner"] = owner
    if op in ("renew", "release"):
        if raw.get("token") is None:
            raise bad("locks_token_required", f"{where} needs the permit's token")
        token = raw["token"]
        if not is_int(token) or token <= 0:
            raise bad("locks_bad_token", f"{where}.token must be an integer > 0")
        fields["token"] = token
        slot = raw.get("slot")
        if slot is not None:
            if not is_int(slot) or not 0 <= slot < MAX_LIMIT:
                raise bad("locks_bad_slot", f"{where}.slot must be an integer from 0 to 1023")
            fields["slot"] = slot
    if op == "acquire":
        limit = raw.get("limit")
        if limit is not None:
            if not is_int(limit) or not 1 <= limit <= MAX_LIMIT:
                raise bad("locks_bad_limit", f"{where}.limit must be an integer from 1 to 1024")
            fields["limit"] = limit
    return LockOp(index, op, name, **fields)
