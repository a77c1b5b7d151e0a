"""Bodies of the KV and lock routes (wire-protocol-extensions §14, §15).

The Structs document the routes (OpenAPI; a batch body is an `Operations` of `KvOpIn` or
`LockOpIn`); the bodies themselves are decoded by `decode_kv` and `decode_locks` into plain
JSON values, because values are free-form, a bare array is as
valid as `{"operations": [...]}`, and every refusal has its own §14.4 / §15.2 code, which
`core.kv` checks in input order.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, ClassVar, Literal

import msgspec
from msgspec import UNSET, UnsetType

from broker.wire.common import Operations
from broker.wire.decoding import decode_values
from core.settings import Settings

_DECODER = msgspec.json.Decoder(float_hook=Decimal)


def decode_kv(raw: bytes, settings: Settings) -> Any:
    """A KV body as JSON values (floats as Decimal, so numbers keep their digits)."""
    return decode_values(raw, "kv_bad_request", "kv_bad_body", _DECODER)


def decode_locks(raw: bytes, settings: Settings) -> Any:
    return decode_values(raw, "locks_bad_request", "locks_bad_body", _DECODER)


def decode_optional_kv(raw: bytes, settings: Settings) -> Any:
    """A path route's body: may be absent (None). Whitespace alone is a body, and not a JSON
    document: refused like any other (the fuzz suite found it accepted)."""
    return None if not raw else decode_kv(raw, settings)


KvOpName = Literal["get", "getMany", "getPrefix", "put", "putIfAbsent", "delete", "incr",
                   "check"]


class KvOpIn(msgspec.Struct):
    """One KV op (§14.3); which fields apply depends on `op`."""

    op: KvOpName
    ns: str
    key: str | UnsetType = UNSET
    keys: list[str] | UnsetType = UNSET
    prefix: str | UnsetType = UNSET
    after: str | UnsetType = UNSET
    limit: int | UnsetType = UNSET
    keysOnly: bool | UnsetType = UNSET
    value: Any = UNSET
    ttlSeconds: int | UnsetType = UNSET
    forever: bool | UnsetType = UNSET
    expect: int | UnsetType = UNSET
    required: bool | UnsetType = UNSET
    delta: float | UnsetType = UNSET
    min: float | UnsetType = UNSET
    max: float | UnsetType = UNSET


class KvBody(Operations[KvOpIn]):
    """KV ops run in one transaction (§14.3): `{"operations": [...]}` or the bare array."""



class LostRequirement(msgspec.Struct, kw_only=True):
    """The fields of a lost `required` precondition (§14.6: `ok: false`, `reason`,
    `failedIndex`, `kvReason`, `version`, `value`), which a KV batch and a transaction with a
    `kv` rider (§17) answer alike; after the answer's own fields."""

    ok: bool | UnsetType = UNSET
    reason: str | UnsetType = UNSET
    failedIndex: int | UnsetType = UNSET
    kvReason: str | UnsetType = UNSET
    version: int | UnsetType = UNSET
    value: Any = UNSET


class KvResults(LostRequirement):
    """One element per op, in request order (§14.3), or the lost-`required` answer
    (§14.6: `ok: false`, `reason`, `failedIndex`, `kvReason`, `version`, `value`)."""

    results: list[dict[str, Any]] | UnsetType = UNSET


# A path route's answer: the bare §14.3 element, or the §14.6 body.
FreeFormElement = dict[str, Any]


class KvPath(msgspec.Struct):
    """`/api/v1/kv/{ns}/{key…}`: the key is the rest of the path, slashes included."""

    ns: str = ""
    key: str = ""


class KvPutBody(msgspec.Struct):
    """A path PUT: `value` (required), `ttlSeconds` or `forever`, `expect?`, `required?`."""

    value: Any = UNSET
    ttlSeconds: int | UnsetType = UNSET
    forever: bool | UnsetType = UNSET
    expect: int | UnsetType = UNSET
    required: bool | UnsetType = UNSET


class KvDeleteBody(msgspec.Struct):
    """A path DELETE's optional body (empty or `null` too): `expect?`, `required?`."""

    NULLABLE: ClassVar[bool] = True

    expect: int | UnsetType = UNSET
    required: bool | UnsetType = UNSET


LockOpName = Literal["acquire", "renew", "release", "get"]


class LockOpIn(msgspec.Struct):
    """One lock op (§15.2)."""

    op: LockOpName
    name: str
    ttlSeconds: int | UnsetType = UNSET
    owner: str | None | UnsetType = UNSET
    limit: int | UnsetType = UNSET
    token: int | UnsetType = UNSET
    slot: int | UnsetType = UNSET


class LocksBody(Operations[LockOpIn]):
    """Lock and semaphore ops (§15.2): `{"operations": [...]}` or the bare array."""



class LockResults(msgspec.Struct):
    results: list[dict[str, Any]]


class NamespaceOut(msgspec.Struct):
    ns: str
    keys: int
    bytes: int
    expiringSoon: int


class NamespacePage(msgspec.Struct):
    """Namespaces in byte order with their live keys, value bytes and keys expiring within
    5 minutes; `after` exclusive, `limit` 1..1000, `nextAfter` when `truncated`."""

    rows: list[NamespaceOut]
    truncated: bool
    nextAfter: str | None
