"""Locks and semaphores on the KV store (§15.3).

A permit is the KV row `queen-locks/<name>#<slot>` holding `{"owner": ...}` with the lifetime
as its expiry; its version is the fencing token. Every step is an ordinary KV call (its own
transaction), so what a lock op decides and what a KV read or a transaction's `check` guard
sees are the same rows.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from core.kv.engine import Applied, Element
from core.kv.lock_ops import MAX_LIMIT, LockOp
from core.kv.ops import ENCODER, KvOp

NAMESPACE = "queen-locks"
_ACQUIRE_TRIES = 4
ApplyOps = Callable[[list[KvOp]], Awaitable[Applied]]


def slot_key(name: str, slot: int) -> str:
    return f"{name}#{slot}"


def guard(name: str, slot: int, token: int) -> Element:
    return {"op": "check", "ns": NAMESPACE, "key": slot_key(name, slot), "expect": token,
            "required": True}


def _value(raw: Any) -> dict[str, Any]:
    """A permit row's value as an object ({} when a hand-written row holds something else)."""
    try:
        value = msgspec.json.decode(bytes(raw)) if isinstance(raw, msgspec.Raw) else raw
    except msgspec.DecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _owner_of(raw: Any) -> str | None:
    owner = _value(raw).get("owner")
    return owner if isinstance(owner, str) else None


class LockService:
    """The four lock ops; `apply` runs KV ops as one call (one transaction)."""

    def __init__(self, apply: ApplyOps) -> None:
        self._apply = apply

    async def run(self, op: LockOp) -> tuple[Element, bool | None]:
        """One op's answer, and whether it granted a permit (None: not an acquire)."""
        head: Element = {"index": op.index, "op": op.op, "name": op.name}
        if op.op == "acquire":
            answer = await (self._acquire_one(op) if op.limit == 1 else self._acquire_many(op))
            return {**head, **answer}, bool(answer["acquired"])
        if op.op == "renew":
            return {**head, **await self._renew(op)}, None
        if op.op == "release":
            return {**head, **await self._release(op)}, None
        return {**head, **await self._get(op)}, None

    async def _one(self, op: KvOp) -> Element:
        [element] = (await self._apply([op])).elements
        return element

    def _put_if_absent(self, op: LockOp, slot: int) -> KvOp:
        return KvOp(0, "putIfAbsent", NAMESPACE, slot_key(op.name, slot),
                    value=ENCODER.encode({"owner": op.owner}).decode(),
                    ttl_seconds=op.ttl_seconds, expect=0)

    def _granted(self, op: LockOp, slot: int, token: int, *, already: bool = False) -> Element:
        answer: Element = {"acquired": True, "slot": slot, "token": token, "owner": op.owner,
                           "guard": guard(op.name, slot, token)}
        if already:
            answer["already"] = True
        return answer

    async def _acquire_one(self, op: LockOp) -> Element:
        won = await self._one(self._put_if_absent(op, 0))
        if won["applied"]:
            return self._granted(op, 0, won["version"])
        holder = _owner_of(won["value"])
        if op.owner is not None and holder == op.owner:
            return self._granted(op, 0, won["version"], already=True)
        return {"acquired": False, "reason": "held",
                "holders": [{"slot": 0, "owner": holder}] if won["version"] else []}

    async def _slots(self, op: LockOp) -> dict[int, Element]:
        keys = tuple(slot_key(op.name, s) for s in range(op.limit))
        [listing] = (await self._apply([KvOp(0, "getMany", NAMESPACE, keys=keys)])).elements
        return {int(row["key"].rsplit("#", 1)[1]): row for row in listing["rows"]}

    async def _acquire_many(self, op: LockOp) -> Element:
        holders: list[Element] = []
        for _ in range(_ACQUIRE_TRIES):
            live = await self._slots(op)
            for slot, row in sorted(live.items()):
                if op.owner is not None and _owner_of(row["value"]) == op.owner:
                    return self._granted(op, slot, row["version"], already=True)
            holders = [{"slot": s, "owner": _owner_of(r["value"])} for s, r in sorted(live.items())]
            free = [s for s in range(op.limit) if s not in live]
            if not free:
                return {"acquired": False, "reason": "held", "holders": holders}
            slot = random.choice(free)
            won = await self._one(self._put_if_absent(op, slot))
            if won["applied"]:
                return self._granted(op, slot, won["version"])
        return {"acquired": False, "reason": "contended", "holders": holders}

    async def _renew(self, op: LockOp) -> Element:
        key = slot_key(op.name, op.slot)
        for _ in range(2):  # a put that loses is re-read and decided once more
            row = await self._one(KvOp(0, "get", NAMESPACE, key))
            if not row["found"]:
                return self._lost(op, [])
            value = _value(row["value"])
            holder = value.get("owner") if isinstance(value.get("owner"), str) else None
            if row["version"] != op.token and (op.owner is None or holder != op.owner):
                return self._lost(op, [{"slot": op.slot, "owner": holder}])
            since = value.get("since")
            renewed = {**value, "since": since if isinstance(since, str) else row["updatedAt"]}
            put = await self._one(KvOp(0, "put", NAMESPACE, key,
                                       value=ENCODER.encode(renewed).decode(),
                                       ttl_seconds=op.ttl_seconds, expect=row["version"]))
            if put["applied"]:
                return {"renewed": True, "slot": op.slot, "token": put["version"],
                        "guard": guard(op.name, op.slot, put["version"])}
        return self._lost(op, [{"slot": op.slot, "owner": _owner_of(put["value"])}]
                          if put["version"] else [])

    def _lost(self, op: LockOp, holders: list[Element]) -> Element:
        verdict = "renewed" if op.op == "renew" else "released"
        return {verdict: False, "reason": "lost", "slot": op.slot, "holders": holders}

    async def _release(self, op: LockOp) -> Element:
        done = await self._one(KvOp(0, "delete", NAMESPACE, slot_key(op.name, op.slot),
                                    expect=op.token))
        if done["applied"]:
            return {"released": True, "slot": op.slot}
        return self._lost(op, [{"slot": op.slot, "owner": _owner_of(done["value"])}]
                          if done["version"] else [])

    async def _get(self, op: LockOp) -> Element:
        listing = await self._one(KvOp(0, "getPrefix", NAMESPACE, prefix=op.name + "#",
                                       limit=MAX_LIMIT + 1))
        holders: list[tuple[int, Element]] = []
        for row in listing["rows"]:
            suffix = row["key"][len(op.name) + 1:]
            if not (suffix.isascii() and suffix.isdigit()) or (
                    suffix != "0" and suffix.startswith("0")) or int(suffix) >= MAX_LIMIT:
                continue
            value = _value(row["value"])
            since = value.get("since")
            holders.append((int(suffix), {
                "slot": int(suffix), "owner": _owner_of(row["value"]), "token": row["version"],
                "since": since if isinstance(since, str) else row["updatedAt"],
                "expiresAt": row["expiresAt"], "renewedAt": row["updatedAt"]}))
        holders.sort(key=lambda pair: pair[0])
        return {"held": bool(holders), "holders": [h for _, h in holders]}
