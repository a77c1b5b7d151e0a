"""The `timers` transaction rider (§17): a bundle's timer ops applied in the transaction's
connection after the KV rider and before the pushes and acks (PostgreSQL lock order: KV
rows, timer rows, queues, partitions, consumer rows), at the transaction's instant (`now()`,
the one the KV ops see too).

Its verdicts (`absent`, `too_late`) are entries, never a veto: only a refusal of the whole
call (`timers_encrypted_conflict`, raised while applying) rolls the bundle back."""

from __future__ import annotations

from core.counters import COUNTERS
from core.engine.transactions import RiderOutcome
from core.storage.statements import Conn
from core.timers.apply import AppliedTimers, apply_timer_ops
from core.timers.ops import TimerOp


class TimerRider:
    kind = "timers"

    def __init__(self, ops: list[TimerOp], producer_sub: str | None,
                 tenant: str = "") -> None:
        self.ops = ops
        self._producer_sub = producer_sub
        self.tenant = tenant  # the transaction's: whose timers
        self.applied = AppliedTimers([], 0, 0, None)

    def __len__(self) -> int:
        return len(self.ops)

    @property
    def grows(self) -> bool:
        return any(op.kind == "schedule" for op in self.ops)

    @property
    def creates(self) -> set[tuple[str, str]]:
        """A schedule's destination, which its fire creates when missing."""
        return {(op.queue, op.partition) for op in self.ops if op.kind == "schedule"}

    async def apply(self, conn: Conn) -> RiderOutcome:
        self.applied = await apply_timer_ops(conn, self.ops, now=None,
                                             producer_sub=self._producer_sub,
                                             tenant=self.tenant)
        return RiderOutcome([{**e, "type": "timer"} for e in self.applied.results])

    def committed(self) -> None:
        COUNTERS.add("timers_scheduled", self.applied.scheduled)
        COUNTERS.add("timers_cancelled", self.applied.cancelled)
