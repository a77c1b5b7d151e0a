"""KV operations as a call sends them, checked before anything is applied (§14.3, §14.4).

A call's body is decoded (JSON, floats as `Decimal` so numbers keep their digits) and each op
is turned into a `KvOp` here; the first problem, in input order, refuses the whole call with
its §14.4 code. Nothing in this module touches the database.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

import msgspec

from core.errors import Refused, RefusedTooLarge

OpName = Literal["get", "getMany", "getPrefix", "put", "putIfAbsent", "delete", "incr",
                 "check"]
OP_NAMES: frozenset[str] = frozenset(OpName.__args__)  # type: ignore[attr-defined]
WRITES = frozenset({"put", "putIfAbsent", "delete", "incr"})
_EXPIRING = frozenset({"put", "putIfAbsent", "incr"})
_NAMESPACE = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_TENANT_FIELDS = ("tenant", "tenantId", "_tenant")

MAX_KEY_BYTES = 512
MAX_VALUE_BYTES = 64 * 1024
MAX_OPS = 256
MAX_OPS_IN_TRANSACTION = 64
MAX_KEYS_IN_TRANSACTION = 256
PREFIX_LIMIT_DEFAULT = 100
PREFIX_LIMIT_MAX = 1000
# Longest lifetime accepted: the expiry must be an instant both Python and PostgreSQL can
# hold (Python's ends in year 9999). Not in §14.4, which only asks for an integer > 0.
MAX_TTL_SECONDS = 100 * 366 * 86400

ENCODER = msgspec.json.Encoder(decimal_format="number")


@dataclass(slots=True)  # not frozen: a frozen __init__ costs a setattr call per field
class KvOp:
    """One checked op. `expect` 0 for putIfAbsent; `ttl_seconds` None with `forever`."""

    index: int
    op: OpName
    ns: str
    key: str = ""  # "" for getMany / getPrefix
    value: str | None = None  # compact JSON text (put, putIfAbsent)
    ttl_seconds: int | None = None
    forever: bool = False
    expect: int | None = None
    required: bool = False
    delta: Decimal | int = 0
    low: Decimal | int | None = None
    high: Decimal | int | None = None
    keys: tuple[str, ...] = ()
    prefix: str = ""
    after: str = ""
    limit: int = PREFIX_LIMIT_DEFAULT
    keys_only: bool = False

    @property
    def writes(self) -> bool:
        return self.op in WRITES

    @property
    def single_key(self) -> bool:
        return self.op not in ("getMany", "getPrefix")


@dataclass(frozen=True, slots=True)
class KvLimits:
    max_ops: int = MAX_OPS
    max_keys: int = 1024
    in_transaction: bool = False

    @classmethod
    def rider(cls) -> KvLimits:
        return cls(MAX_OPS_IN_TRANSACTION, MAX_KEYS_IN_TRANSACTION, in_transaction=True)


def bad(reason: str, detail: str) -> Refused:
    return Refused("kv_bad_request", reason, detail)


def operations_of(body: Any, code: str = "kv_bad_request",
                  reason: str = "kv_bad_body") -> list[Any]:
    """The op list of a body: `{"operations": [...]}` or a bare array (§14.2, §15.1)."""
    if isinstance(body, list):
        return body
    if isinstance(body, dict) and isinstance(body.get("operations"), list):
        return body["operations"]  # type: ignore[no-any-return]
    raise Refused(code, reason, 'the body must be an array of operations or '
                                '{"operations": [...]}')


def parse_ops(raw_ops: Sequence[Any], limits: KvLimits) -> list[KvOp]:
    """Check every op of a call; raise the first refusal (§14.4)."""
    if len(raw_ops) > limits.max_ops:
        raise bad("kv_too_many_ops", f"{len(raw_ops)} operations in one call; at most "
                                     f"{limits.max_ops}")
    ops = [_parse(i, raw, limits) for i, raw in enumerate(raw_ops)]
    named = sum(len(op.keys) if op.op == "getMany" else op.limit if op.op == "getPrefix"
                else 1 for op in ops)
    if named > limits.max_keys:
        raise bad("kv_too_many_keys", f"the call names {named} keys; at most {limits.max_keys}")
    written: set[tuple[str, str]] = set()
    for op in ops:
        if op.writes:
            if (op.ns, op.key) in written:
                raise bad("kv_duplicate_key_in_call",
                          f"operations[{op.index}] writes {op.ns}/{op.key} a second time")
            written.add((op.ns, op.key))
    return ops


def _parse(index: int, raw: Any, limits: KvLimits) -> KvOp:
    where = f"operations[{index}]"
    if not isinstance(raw, dict):
        raise bad("kv_bad_request", f"{where} must be an object")
    for field in _TENANT_FIELDS:
        if field in raw:
            raise bad("kv_tenant_not_an_input", f"{where}.{field}: the tenant is not an input")
    op = raw.get("op")
    if not isinstance(op, str) or op not in OP_NAMES:
        raise bad("kv_unknown_op", f"{where}.op must be one of {', '.join(sorted(OP_NAMES))}")
    if op == "getPrefix" and limits.in_transaction:
        raise bad("kv_get_prefix_not_allowed_in_transaction",
                  f"{where}: getPrefix cannot ride in a transaction")
    ns = raw.get("ns")
    if not isinstance(ns, str) or not _NAMESPACE.fullmatch(ns):
        raise bad("kv_bad_namespace", f"{where}.ns must match ^[a-z0-9][a-z0-9._-]{{0,63}}$")
    required = raw.get("required", False)
    if not isinstance(required, bool):
        raise bad("kv_bad_request", f"{where}.required must be true or false")
    if op == "get":
        return KvOp(index, "get", ns, check_key(raw.get("key"), f"{where}.key"))
    if op == "getMany":
        return _get_many(index, where, raw, ns)
    if op == "getPrefix":
        return _get_prefix(index, where, raw, ns)
    key = check_key(raw.get("key"), f"{where}.key")
    fields: dict[str, Any] = {"required": required}
    if op in _EXPIRING:
        fields.update(_expiry(where, raw))
    if op in ("put", "putIfAbsent"):
        if "value" not in raw:
            raise bad("kv_bad_request", f"{where}.value is required (null is a value)")
        fields["value"] = encode_value(raw["value"], f"{where}.value")
    if op == "incr":
        fields.update(_incr(where, raw))
    elif op in ("put", "putIfAbsent", "delete", "check"):
        fields["expect"] = _expect(where, raw, op)
    return KvOp(index, op, ns, key, **fields)  # type: ignore[arg-type]


def check_key(key: Any, where: str) -> str:
    """A key (or a prefix): non-empty, no NUL, at most 512 bytes of UTF-8."""
    if not isinstance(key, str) or not key or "\x00" in key:
        raise bad("kv_bad_key", where + " must be a non-empty string without NUL")
    if len(key) * 4 > MAX_KEY_BYTES and len(key.encode()) > MAX_KEY_BYTES:
        raise RefusedTooLarge("payload_too_large", "kv_key_too_large",
                              f"{where} is longer than {MAX_KEY_BYTES} bytes")
    return key


def encode_value(value: Any, where: str) -> str:
    text = ENCODER.encode(value)
    if len(text) > MAX_VALUE_BYTES:
        raise RefusedTooLarge("payload_too_large", "kv_value_too_large",
                              f"{where} is {len(text)} bytes of JSON; at most {MAX_VALUE_BYTES}")
    return text.decode()


def is_int(value: Any) -> bool:
    """A JSON integer (true and false are not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> Decimal | int | None:
    """A JSON number as an exact value (a float, from a body decoded without Decimal, by
    its shortest repr: 0.1 is 0.1); None when it is not a number."""
    if is_int(value):
        return int(value)
    if isinstance(value, float) and math.isfinite(value):
        return Decimal(repr(value))
    if isinstance(value, Decimal) and value.is_finite():
        return value
    return None


def _expiry(where: str, raw: dict[str, Any]) -> dict[str, Any]:
    ttl: Any = raw.get("ttlSeconds")
    forever = raw.get("forever")
    if forever is not None and not isinstance(forever, bool):
        raise bad("kv_bad_request", f"{where}.forever must be true when given")
    declared = (ttl is not None) + (forever is True)
    if declared != 1:
        raise bad("kv_expiry_not_specified",
                  f"{where} needs exactly one of ttlSeconds or forever: true")
    if forever:
        return {"forever": True}
    if not is_int(ttl) or ttl <= 0:
        raise bad("kv_bad_ttl", f"{where}.ttlSeconds must be an integer > 0")
    if ttl > MAX_TTL_SECONDS:
        raise bad("kv_bad_ttl", f"{where}.ttlSeconds must be at most {MAX_TTL_SECONDS}")
    return {"ttl_seconds": ttl}


def _expect(where: str, raw: dict[str, Any], op: str) -> int | None:
    if "expect" not in raw:
        if op == "check":
            raise bad("kv_bad_expect", f"{where}: check needs expect")
        return 0 if op == "putIfAbsent" else None
    expect = raw["expect"]
    if not is_int(expect) or expect < 0:
        raise bad("kv_bad_expect", f"{where}.expect must be a non-negative integer")
    if op == "putIfAbsent" and expect != 0:
        raise bad("kv_bad_expect", f"{where}: putIfAbsent takes no expect other than 0")
    return int(expect)


def _incr(where: str, raw: dict[str, Any]) -> dict[str, Any]:
    if "expect" in raw:
        raise bad("kv_bad_request", f"{where}: incr takes no expect")
    delta = _number(raw.get("delta"))
    if delta is None:
        raise bad("kv_bad_request", f"{where}.delta must be a number")
    fields: dict[str, Any] = {"delta": delta}
    for name, field in (("min", "low"), ("max", "high")):
        bound = raw.get(name)
        if bound is not None:
            bound = _number(bound)
            if bound is None:
                raise bad("kv_bad_request", f"{where}.{name} must be a number")
        fields[field] = bound
    return fields


def _get_many(index: int, where: str, raw: dict[str, Any], ns: str) -> KvOp:
    keys = raw.get("keys")
    if not isinstance(keys, list):
        raise bad("kv_bad_request", f"{where}.keys must be an array")
    checked = tuple(check_key(k, f"{where}.keys[{i}]") for i, k in enumerate(keys))
    return KvOp(index, "getMany", ns, keys=checked)


def _get_prefix(index: int, where: str, raw: dict[str, Any], ns: str) -> KvOp:
    prefix = raw.get("prefix")
    if prefix is None or prefix == "":
        raise bad("kv_prefix_required", f"{where}.prefix must be a non-empty string")
    prefix = check_key(prefix, f"{where}.prefix")
    after = raw.get("after")
    if after is None:
        after = ""
    elif not isinstance(after, str) or "\x00" in after:
        raise bad("kv_bad_request", f"{where}.after must be a string")
    limit: Any = raw.get("limit")
    if limit is None:
        limit = PREFIX_LIMIT_DEFAULT
    elif not is_int(limit):
        raise bad("kv_bad_request", f"{where}.limit must be an integer")
    keys_only = raw.get("keysOnly", False)
    if not isinstance(keys_only, bool):
        raise bad("kv_bad_request", f"{where}.keysOnly must be true or false")
    return KvOp(index, "getPrefix", ns, prefix=prefix, after=after,
                limit=min(max(int(limit), 1), PREFIX_LIMIT_MAX), keys_only=keys_only)
