"""Applying one call's KV ops inside a database transaction (§14.5, §14.6).

Order of work on the connection (the caller owns the transaction):
1. lock, in byte order of (ns, key), the rows of every key the call writes or checks (a key
   without a row gets a never-live placeholder so that it has a lock: two `putIfAbsent` of
   one key queue behind each other and exactly one wins), each answered with a version drawn
   while its lock is held;
2. read the live rows of keys the call only `get`s;
3. decide every single-key op in apply order (byte order of (ns, key), ties in input order)
   against the rows as the call has changed them so far; a lost `required` stops here;
4. write the changes in one statement (and drop the placeholders the call did not use);
5. run `getMany` / `getPrefix` last, so they see the call's writes.

The instant is the transaction's `now()`, so every expiry and liveness decision of a call,
and of every rider of a transaction, is taken at one instant.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import msgspec

from core.kv import numbers
from core.kv.ops import KvOp
from core.storage import kv as store
from core.storage.statements import Conn
from core.timefmt import iso

READ_BUDGET_BYTES = 4 * 1024 * 1024
# The instant of an unlocked decision: only applied writes need the real one, and an
# unlocked decision stops before applying any.
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
Element = dict[str, Any]  # one §14.3 result element, ready to encode
_NULL = msgspec.Raw(b"null")


@dataclass(slots=True)
class Row:
    """A key's live row as the call sees it; timestamps are wire text. A row this call
    wrote also carries its expiry as an instant (`expires`), or `keep` (an incr of a live
    counter keeps the row's expiry)."""

    value: str
    version: int
    expires_at: str | None
    updated_at: str
    expires: datetime | None = None
    keep: bool = False


@dataclass(frozen=True, slots=True)
class Lost:
    """The first `required` op that lost its precondition (§14.6)."""

    index: int
    reason: str
    version: int
    value: msgspec.Raw


@dataclass(slots=True)
class Applied:
    """What a call did: one element per op in input order, or the lost precondition (then
    nothing may commit: the caller rolls the transaction back)."""

    elements: list[Element] = field(default_factory=list)
    lost: Lost | None = None
    writes: int = 0
    reads: int = 0


def _raw(text: str | None) -> msgspec.Raw:
    return _NULL if text is None else msgspec.Raw(text.encode())


def _row_fields(key: str, row: Row | store.KvRow | store.PrefixRow) -> Element:
    return {"key": key, "value": _raw(row.value), "version": row.version,
            "expiresAt": row.expires_at, "updatedAt": row.updated_at}


class _Budget:
    def __init__(self, limit: int) -> None:
        self.left = limit

    def spend(self, value: str | None) -> bool:
        """Spend a returned value; False once the budget is gone (the row that crosses it
        is still returned)."""
        if self.left < 0:
            return False
        self.left -= 0 if value is None else len(value.encode())
        return True


async def apply_ops(conn: Conn, ops: list[KvOp], *, lock: bool = True,
                    read_budget: int = READ_BUDGET_BYTES, tenant: str = "") -> Applied | None:
    """Apply `ops` on `conn` to the tenant's key space, inside the caller's transaction.

    With `lock=False` nothing is locked and nothing is written: the ops are decided on the
    rows as one unlocked read sees them, and the answer is None as soon as one write would
    apply (the caller then applies the call with locks). A call that only loses its
    preconditions is thus answered from a snapshot, linearized at that read, without
    taking a row lock (whose commit waits for a WAL flush while other callers queue on it)."""
    result = Applied()
    elements: dict[int, Element] = {}
    state: dict[tuple[str, str], Row | None] = {}
    locked: dict[tuple[str, str], store.LockedRow] = {}
    now: datetime | None = None
    guarded = sorted({(op.ns, op.key) for op in ops if op.single_key and op.op != "get"})
    if guarded and lock:
        for row in await store.lock_rows(conn, tenant=tenant, keys=guarded):
            locked[(row.ns, row.key)] = row
            now = row.instant
            state[(row.ns, row.key)] = Row(row.value, row.version, row.expires_at,
                                           row.updated_at) if row.live else None
    looked = sorted({(op.ns, op.key) for op in ops if op.single_key} - set(locked))
    if looked:
        found = {(r.ns, r.key): r for r in await store.live_rows(conn, tenant=tenant,
                                                                 keys=looked)}
        for k in looked:
            r = found.get(k)
            state[k] = None if r is None else Row(r.value, r.version, r.expires_at, r.updated_at)
    budget = _Budget(read_budget)
    written: dict[tuple[str, str], Row | None] = {}
    for op in sorted((op for op in ops if op.single_key), key=lambda o: (o.ns, o.key, o.index)):
        k = (op.ns, op.key)
        current = state.get(k)
        if op.op == "get":
            budget.spend(None if current is None else current.value)
            elements[op.index] = ({"found": True, **_row_fields(op.key, current)}
                                  if current is not None else {"found": False, "key": op.key})
            result.reads += 1
            continue
        held = locked.get(k)
        verdict, after = _decide(op, current, now or _EPOCH, held.next_version if held else 0)
        if not verdict.get("applied") and op.required:
            result.lost = Lost(op.index, verdict["reason"], verdict["version"],
                               verdict["value"])
            return result
        elements[op.index] = verdict
        if op.writes and verdict.get("applied"):
            if not lock:
                return None
            state[k] = written[k] = after
            result.writes += 1
    await _write(conn, tenant, written, locked)
    for op in ops:
        if op.op == "getMany":
            elements[op.index] = await _get_many(conn, tenant, op, budget)
            result.reads += 1
        elif op.op == "getPrefix":
            elements[op.index] = await _get_prefix(conn, tenant, op, budget)
            result.reads += 1
    result.elements = [{"index": op.index, "op": op.op, **elements[op.index]} for op in ops]
    return result


def _decide(op: KvOp, current: Row | None, now: datetime,
            version: int) -> tuple[Element, Row | None]:
    """One write or check against the key's live row: its result element, and the row after
    it (None: absent)."""
    held = _precondition(op, current)
    if op.op == "check":
        if held is None:
            return {"applied": True, "key": op.key,
                    "version": 0 if current is None else current.version}, current
        return _refusal(op, held, current), current
    if held is not None:
        return _refusal(op, held, current), current
    if op.op == "delete":
        if current is None:  # an unconditional delete of an absent key
            return _refusal(op, "absent", None), None
        return {"applied": True, "key": op.key, "value": _raw(current.value),
                "version": current.version}, None
    if op.op == "incr":
        return _incr(op, current, now, version)
    expires = None if op.forever else now + timedelta(seconds=op.ttl_seconds or 0)
    assert op.value is not None
    row = Row(op.value, version, None if expires is None else iso(expires), iso(now), expires)
    return {"applied": True, "key": op.key, "value": _raw(op.value), "version": version}, row


def _precondition(op: KvOp, current: Row | None) -> str | None:
    """The reason `expect` does not hold, or None when it holds (or is absent)."""
    if op.expect is None:
        return None
    if op.expect == 0:
        return "exists" if current is not None else None
    if current is None:
        return "absent"
    return "version" if current.version != op.expect else None


def _refusal(op: KvOp, reason: str, current: Row | None, *,
             value: str | None = None) -> Element:
    text = value if value is not None else (None if current is None else current.value)
    return {"applied": False, "reason": reason, "key": op.key, "value": _raw(text),
            "version": 0 if current is None else current.version}


def _incr(op: KvOp, current: Row | None, now: datetime,
          version: int) -> tuple[Element, Row | None]:
    base = Decimal(0)
    if current is not None:
        number = numbers.stored_number(current.value)
        if number is None:
            return _refusal(op, "type", current, value="0"), current
        base = number
    total = numbers.add(base, op.delta)
    if (total is None or (op.low is not None and total < op.low)
            or (op.high is not None and total > op.high)):
        return _refusal(op, "limit", current, value=numbers.render(base)), current
    text = numbers.render(total)
    if current is not None:  # a live counter keeps its expiry (create-only TTL)
        row = Row(text, version, current.expires_at, iso(now), keep=True)
    else:
        expires = None if op.forever else now + timedelta(seconds=op.ttl_seconds or 0)
        row = Row(text, version, None if expires is None else iso(expires), iso(now), expires)
    return {"applied": True, "key": op.key, "value": _raw(text), "version": version}, row


async def _write(conn: Conn, tenant: str, written: dict[tuple[str, str], Row | None],
                 locked: dict[tuple[str, str], store.LockedRow]) -> None:
    writes = [store.RowWrite(ns, key, row.value, row.version, row.expires, row.keep)
              for (ns, key), row in written.items() if row is not None]
    deletes = [k for k, row in written.items() if row is None]
    # Placeholders this call inserted and did not write: gone again at commit.
    deletes += [k for k, row in locked.items() if row.created and k not in written]
    if writes or deletes:
        await store.write_rows(conn, tenant=tenant, writes=writes, deletes=deletes)


async def _get_many(conn: Conn, tenant: str, op: KvOp, budget: _Budget) -> Element:
    wanted = sorted(set(op.keys))
    found = {r.key: r for r in await store.live_rows(conn, tenant=tenant,
                                                     keys=[(op.ns, k) for k in wanted])}
    rows: list[Element] = []
    cut: set[str] = set()
    for key in wanted:
        r = found.get(key)
        if r is None:
            continue
        if not budget.spend(r.value):
            cut.add(key)
            continue
        rows.append(_row_fields(key, r))
    # Cut keys (past the budget) are in neither list; so is any key after the first cut.
    first_cut = min(cut) if cut else None
    missing = [k for k in op.keys if k not in found and (first_cut is None or k < first_cut)]
    return {"rows": rows, "missing": missing, "truncated": bool(cut)}


def prefix_end(prefix: str) -> str | None:
    """The smallest string above every string starting with `prefix`, in code point order
    (None when the last characters are all the highest code point)."""
    chars = list(prefix)
    while chars:
        last = ord(chars.pop())
        nxt = last + 1
        if nxt in range(0xD800, 0xE000):
            nxt = 0xE000
        if nxt <= 0x10FFFF:
            return "".join(chars) + chr(nxt)
    return None


async def _get_prefix(conn: Conn, tenant: str, op: KvOp, budget: _Budget) -> Element:
    found = await store.prefix_rows(conn, tenant=tenant, ns=op.ns, prefix=op.prefix,
                                    upper=prefix_end(op.prefix), after=op.after,
                                    limit=op.limit + 1, keys_only=op.keys_only)
    rows: list[Element] = []
    truncated = len(found) > op.limit
    for r in found[:op.limit]:
        if not budget.spend(r.value):
            truncated = True
            break
        fields = _row_fields(r.key, r)
        if op.keys_only:
            del fields["value"]
        rows.append(fields)
    return {"rows": rows, "truncated": truncated,
            "nextAfter": rows[-1]["key"] if truncated and rows else None}
