"""The `kv` transaction rider (§17): a call's KV ops applied in the transaction's connection,
before its pushes and acks (PostgreSQL lock order: KV rows, then queues, partitions and
consumer rows), at the transaction's one instant."""

from __future__ import annotations

from core.counters import COUNTERS
from core.engine.transactions import RiderOutcome, RiderRefusal
from core.kv.engine import Applied, apply_ops
from core.kv.ops import KvOp
from core.storage.statements import Conn


class KvRider:
    kind = "kv"

    def __init__(self, ops: list[KvOp], tenant: str = "") -> None:
        self.ops = ops
        self.tenant = tenant  # the transaction's: its key space
        self._applied = Applied()

    def __len__(self) -> int:
        return len(self.ops)

    @property
    def grows(self) -> bool:
        return any(op.writes and op.op != "delete" for op in self.ops)

    @property
    def creates(self) -> set[tuple[str, str]]:
        return set()

    async def apply(self, conn: Conn) -> RiderOutcome:
        applied = await apply_ops(conn, self.ops, tenant=self.tenant)
        assert applied is not None  # a locked apply always answers
        self._applied = applied
        lost = applied.lost
        if lost is not None:
            return RiderOutcome([], RiderRefusal(lost.index, {
                "reason": "kv_precondition", "error": "kv_precondition_failed",
                "kvReason": lost.reason, "version": lost.version, "value": lost.value}))
        return RiderOutcome([{**e, "type": "kv"} for e in applied.elements])

    def committed(self) -> None:
        COUNTERS.add("kv_ops", len(self.ops))
        COUNTERS.add("kv_writes", self._applied.writes)
        COUNTERS.add("kv_reads", self._applied.reads)
