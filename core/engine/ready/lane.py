"""One (queue, consumer group) as this process knows it: a hint, never the authority.

A partition is in one of three places, or in none (nothing known to claim there):
- `ready`: it may be claimable now, oldest mark first (a pop takes candidates from the front);
- deferred: claimable at a known time (a live lease ends, a retryDelay or delayedProcessing
  runs out); it moves to `ready` then, with no statement. A deferral that another process
  announced (its pop claimed the partition: `hearsay`) is not known from the tables: a pop
  checks such partitions with its claim before it answers nothing;
- out: a pop of this process has it as a candidate right now; a mark that arrives meanwhile
  is remembered, so the pop's verdict cannot drop news that came after the statement read.
The claim statement is the authority: it says per candidate what it found (core/engine/pop.py
`Verdict`), and `check_in` files the candidate accordingly.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections import OrderedDict
from collections.abc import Iterable

from core.engine.wakeup import group_token

# A candidate the claim could not lock (a concurrent claim held it) is looked at again this
# much later: the other claim has committed or rolled back by then.
BUSY_RETRY_S = 0.05
# A candidate held until an unknown time (the clock, with no due time given) is looked at
# again this much later.
UNKNOWN_DUE_S = 1.0


class Lane:
    """The ready, deferred and out partitions of one (queue, group) in this process."""

    def __init__(self, queue_id: int, group: str, cap: int = 1 << 62) -> None:
        """`cap`: the most ready partitions it holds (memory per lane is bounded: a client
        naming ever new groups must not fill the process); past it the lane is `partial`."""
        self.queue_id = queue_id
        self.cap = cap
        self.group = group
        self.token = group_token(group)  # its name in notifications
        # partition id -> when it became ready (monotonic), oldest first. An OrderedDict, not a
        # dict: taking from the front of a plain dict leaves deleted slots that every later
        # iteration walks again (a take got slower the more partitions the lane had served).
        self.ready: OrderedDict[int, float] = OrderedDict()
        self._due: dict[int, float] = {}  # deferred partition id -> due (monotonic)
        self.hearsay: set[int] = set()  # deferred on another process's word (a subset)
        self._heap: list[tuple[float, int]] = []  # (due, partition id); stale entries skipped
        self.out: dict[int, bool] = {}  # taken by a pop in flight -> marked meanwhile
        self.names: dict[str, int] = {}  # partition names seen -> ids (the partition route)
        # The last full reseed: when it started, under which LISTEN session; stale: a
        # notification may have been missed since (it could not name every partition).
        self.seeded_at: float | None = None
        self.session: int | None = None
        self.stale = False
        # Partial: it left out ready partitions (its cap); its reseeds go on from
        # `resume_from`, and it is not trusted once nothing is ready in it.
        self.partial = False
        self.resume_from = 0
        self.seeding = asyncio.Lock()
        self.used_at = time.monotonic()
        self._returned = asyncio.Event()
        # Partitions taken lately -> since when they had been ready (the autopilot's "ready
        # age of what the last claim took"); bounded.
        self.taken_since: dict[int, float] = {}

    # -- marks: something may be claimable ------------------------------------------------

    def mark(self, partition_id: int, now: float) -> None:
        """It may be claimable now (a commit, a release, a reseed found it)."""
        if partition_id in self.out:
            self.out[partition_id] = True
            return
        self._undefer(partition_id)
        if partition_id not in self.ready and len(self.ready) >= self.cap:
            self.partial = True  # left out: a reseed finds it once the others are served
            return
        self.ready[partition_id] = now

    def taken_elsewhere(self, partition_id: int, due: float) -> None:
        """Another process's pop of this group claimed it, leased until `due` (monotonic):
        it is not ready here until then or until its release is announced (a mark). Only
        hearsay: the announcement may arrive after a release (see `take_hearsay`)."""
        if partition_id in self.out:
            return  # a pop of this process has it: its verdict files it
        self.ready.pop(partition_id, None)
        self._set_due(partition_id, due)
        self.hearsay.add(partition_id)

    def defer(self, partition_id: int, due: float) -> None:
        """It is claimable at `due` (monotonic), not before."""
        if partition_id in self.out or partition_id in self.ready:
            return
        self._set_due(partition_id, due)
        self.hearsay.discard(partition_id)

    def _set_due(self, partition_id: int, due: float) -> None:
        self._due[partition_id] = due
        heapq.heappush(self._heap, (due, partition_id))

    def _undefer(self, partition_id: int) -> None:
        if self._due.pop(partition_id, None) is not None:
            self.hearsay.discard(partition_id)

    def promote(self, now: float) -> None:
        """Deferred partitions whose time has come become ready."""
        while self._heap and self._heap[0][0] <= now:
            due, pid = heapq.heappop(self._heap)
            if self._due.get(pid) == due:
                self._undefer(pid)
                self.ready.setdefault(pid, due)

    def next_due(self) -> float | None:
        """When the next deferred partition becomes ready (monotonic), if any."""
        while self._heap and self._due.get(self._heap[0][1]) != self._heap[0][0]:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    # -- pops: take candidates, check them back in ------------------------------------------

    def take(self, count: int, now: float) -> list[int]:
        """Up to `count` ready partitions, oldest first; they are out until checked in."""
        self.promote(now)
        self.used_at = now
        taken: list[int] = []
        for pid in self.ready:
            if len(taken) >= count:
                break
            taken.append(pid)
        if len(self.taken_since) > 4096:
            self.taken_since.clear()
        for pid in taken:
            self.taken_since[pid] = self.ready.pop(pid)
            self.out[pid] = False
        return taken

    def take_hearsay(self, count: int, now: float) -> list[int]:
        """Up to `count` partitions held back only because another process said its pop
        claimed them: a pop about to answer nothing checks them with its claim, since that
        word may have come after their release (announcements of different processes are
        not ordered) and a lease's end is only as exact as the announcement's timing."""
        self.used_at = now
        taken: list[int] = []
        for pid in self.hearsay:
            if len(taken) >= count:
                break
            taken.append(pid)
        for pid in taken:
            self._undefer(pid)
            self.out[pid] = False
        return taken

    def take_one(self, partition_id: int, now: float) -> bool:
        """Take this partition if it is ready, or held back on hearsay (the partition
        route: a pop naming it checks it rather than answer nothing on another's word)."""
        self.promote(now)
        self.used_at = now
        if partition_id in self.hearsay:
            self._undefer(partition_id)
        elif partition_id not in self.ready:
            return False
        self.ready.pop(partition_id, None)
        self.out[partition_id] = False
        return True

    def check_in(self, partition_id: int, verdict: str, due: float | None, now: float,
                 *, satisfied: bool) -> None:
        """File a candidate by what the claim found (`took`, `empty`, `leased`, `later`,
        `busy`; `due` monotonic). `satisfied`: the pop got what it wanted, so a `busy`
        candidate was merely not reached and is ready as before."""
        marked = self.out.pop(partition_id, False)
        if marked or verdict == "untried" or (verdict == "busy" and satisfied):
            self.ready.setdefault(partition_id, now)
        elif verdict in ("leased", "later"):
            self.defer(partition_id, due if due is not None else now + UNKNOWN_DUE_S)
        elif verdict == "busy":
            self.defer(partition_id, now + BUSY_RETRY_S)
        elif verdict == "took" and due is not None:
            # Its lease: should nobody announce its release (no reaper, an ack elsewhere
            # that left nothing behind), it is looked at again when the lease ends.
            self.defer(partition_id, due)
        elif verdict == "took":
            self.ready.setdefault(partition_id, now)  # autoAck: more may be left behind
        # empty: nothing there for the group; the next commit marks it again

    def returned(self) -> asyncio.Event:
        """Set when candidates come back in (see `wake_returned`)."""
        return self._returned

    def wake_returned(self) -> None:
        self._returned.set()
        self._returned = asyncio.Event()

    # -- figures --------------------------------------------------------------------------

    def known_ready(self, now: float) -> tuple[int, float | None]:
        """How many partitions are ready, and for how long the oldest has been (seconds)."""
        self.promote(now)
        if not self.ready:
            return 0, None
        return len(self.ready), now - next(iter(self.ready.values()))

    def learn_names(self, names: Iterable[tuple[str, int]]) -> None:
        for name, pid in names:
            if len(self.names) < 100_000:
                self.names[name] = pid
