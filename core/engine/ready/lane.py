"""One (queue, consumer group) as this process knows it: a hint, never the authority.

A partition is in one of three places, or in none (nothing known to claim there):
- `ready`: it may be claimable now, oldest mark first (a pop takes candidates from the front);
- deferred: claimable at a known time (a live lease ends, a retryDelay or delayedProcessing
  runs out); it moves to `ready` then, with no statement. A deferral that another process
  announced (its pop claimed the partition: `hearsay`) is not known from the tables: a pop
  checks such partitions with its claim before it answers nothing. A partition minPopWaitTime
  holds (`hold`) is deferred for pops of a batch larger than the messages it has waiting,
  and a candidate of the others;
- out: a pop of this process has it as a candidate right now; a mark that arrives meanwhile
  is remembered, so the pop's verdict cannot drop news that came after the statement read.
The claim statement is the authority: it says per candidate what it found (core/engine/pop.py
`CandidateVerdict`), and `check_in` files the candidate accordingly.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from itertools import islice

from core.engine.wakeup import group_token

# A candidate the claim could not lock (a concurrent claim held it) is looked at again this
# much later: the other claim has committed or rolled back by then.
BUSY_RETRY_S = 0.05
# A candidate held until an unknown time (the clock, with no due time given) is looked at
# again this much later.
UNKNOWN_DUE_S = 1.0


class Lane:
    """The ready, deferred and out partitions of one (queue, group) in this process. Its
    state changes only through its methods: the reader and the ready set ask it."""

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
        self._ready: OrderedDict[int, float] = OrderedDict()
        self._due: dict[int, float] = {}  # deferred partition id -> due (monotonic)
        self._hearsay: set[int] = set()  # deferred on another process's word (a subset)
        self._heap: list[tuple[float, int]] = []  # (due, partition id); stale entries skipped
        # Partitions minPopWaitTime holds -> (messages waiting, due): deferred until the due,
        # or out with a pop that took it for a batch it fills (see `hold`). `_holds_most`: no
        # held partition has more waiting (a pop of a larger batch looks at none of them).
        self._holds: dict[int, tuple[int, float]] = {}
        self._holds_most = 0
        self._out: dict[int, bool] = {}  # taken by a pop in flight -> marked meanwhile
        self._names: dict[str, int] = {}  # partition names seen -> ids (the partition route)
        # The last full reseed: when it started, under which LISTEN session; stale: a
        # notification may have been missed since (it could not name every partition).
        self._seeded_at: float | None = None
        self._session: int | None = None
        self._stale = False
        # Its last seed could not ask every shard (on Citus, a node down): what it holds is
        # not all there is, and an answer of nothing would not be true (core/engine/ready/
        # reader.py answers the outage instead).
        self._unreachable = False
        # Partial: it left out ready partitions (its cap); its reseeds go on from
        # `_resume_from`, and it is not trusted once nothing is ready in it.
        self._partial = False
        self._resume_from = 0
        self.seeding = asyncio.Lock()  # one reseed at a time (core/engine/ready/ready_set.py)
        self.used_at = time.monotonic()
        self._returned = asyncio.Event()
        # Partitions taken lately -> since when they had been ready (the autopilot's "ready
        # age of what the last claim took"); bounded.
        self._taken_since: dict[int, float] = {}

    # -- what it knows ----------------------------------------------------------------------

    @property
    def ready_ids(self) -> list[int]:
        """The ready partitions, oldest first."""
        return list(self._ready)

    @property
    def out_ids(self) -> dict[int, bool]:
        """The partitions out with pops in flight -> whether a mark came meanwhile."""
        return dict(self._out)

    @property
    def in_flight(self) -> bool:
        """Pops of this process have candidates of this lane out."""
        return bool(self._out)

    def holds(self, partition_id: int) -> bool:
        """A pop of this process has this partition out now."""
        return partition_id in self._out

    def id_of(self, partition: str) -> int | None:
        """The id of the partition of that name, if this lane has seen it."""
        return self._names.get(partition)

    @property
    def partial(self) -> bool:
        """It left ready partitions out (its cap): a reseed goes on from where it stopped."""
        return self._partial

    @property
    def unreachable(self) -> bool:
        """Its last reseed could not ask every shard: nothing found is no answer of nothing."""
        return self._unreachable

    @property
    def seeded_at(self) -> float | None:
        """When its last reseed started (monotonic), None before the first."""
        return self._seeded_at

    def trusted(self, *, since: float | None, session: int | None, max_age: float,
                now: float) -> bool:
        """Whether what it holds can answer nothing without a reseed: seeded, not stale,
        not left partial with nothing ready, seeded at or after `since` when given, and,
        while the LISTEN connection is up (`session`), seeded under that session within
        `max_age` seconds. Deaf (`session` None), memory may still be claimed from; the
        caller asks for a seed since the pop arrived before it answers nothing."""
        if self._seeded_at is None or self._stale:
            return False
        if since is not None and self._seeded_at < since:
            return False
        if self._partial and not self._ready:
            return False
        if session is None:
            return True
        return self._session == session and now - self._seeded_at < max_age

    def idle_since(self, instant: float) -> bool:
        """Unused since `instant` and nothing out: it may be forgotten."""
        return self.used_at < instant and not self._out

    # -- marks: something may be claimable ------------------------------------------------

    def mark(self, partition_id: int, now: float) -> None:
        """It may be claimable now (a commit, a release, a reseed found it)."""
        if partition_id in self._out:
            self._out[partition_id] = True
            return
        self._undefer(partition_id)
        if partition_id not in self._ready and len(self._ready) >= self.cap:
            self._partial = True  # left out: a reseed finds it once the others are served
            return
        self._ready[partition_id] = now

    def went_stale(self) -> None:
        """A notification could not name every partition concerned (or anything may have
        changed): it reseeds before it is trusted again, and forgets its holds."""
        self._stale = True
        self._forget_holds()

    def missed_a_shard(self) -> None:
        """Its reseed could not ask a shard (its node down): it reseeds before it is trusted,
        and meanwhile a pop that finds nothing in it answers the outage."""
        self._stale = True
        self._unreachable = True

    def taken_elsewhere(self, partition_id: int, due: float) -> None:
        """Another process's pop of this group claimed it, leased until `due` (monotonic):
        it is not ready here until then or until its release is announced (a mark). Only
        hearsay: the announcement may arrive after a release (see `take_hearsay`)."""
        if partition_id in self._out:
            return  # a pop of this process has it: its verdict files it
        self._ready.pop(partition_id, None)
        self._set_due(partition_id, due)
        self._hearsay.add(partition_id)

    def defer(self, partition_id: int, due: float) -> None:
        """It is claimable at `due` (monotonic), not before."""
        if partition_id in self._out or partition_id in self._ready:
            return
        self._set_due(partition_id, due)
        self._hearsay.discard(partition_id)

    def hold(self, partition_id: int, waiting: int, due: float) -> None:
        """minPopWaitTime holds it: the `waiting` messages there do not fill a larger batch
        until `due` (monotonic), when the oldest has waited long enough. Until then it is
        deferred for pops of a larger batch and a candidate of the others (`take`). Unlike
        a deferral, a reseed keeps it: the scan cannot tell a hold (it is the batch's), and
        without it a lane past its cap marked every held partition ready again before each
        pop that found nothing (all claimed, at every such pop). A mark lifts it (a push may
        have filled it), and so does anything that may have hidden a mark from this lane
        (`_forget_holds`). What the tables do unannounced only makes the hold err on the
        side of looking: messages taken by another process's autoAck pop leave it counting
        more than wait (it keeps fewer pops away than the claim would), and time passing
        only brings the due nearer."""
        if partition_id in self._out or partition_id in self._ready:
            return
        self._set_due(partition_id, due)
        self._hearsay.discard(partition_id)
        self._holds[partition_id] = (waiting, due)
        self._holds_most = max(self._holds_most, waiting)

    def _forget_holds(self) -> None:
        """A mark may have gone unheard (a notification that could not name every partition,
        a LISTEN session lost): a held partition may have been filled since. Held ones are
        left for the reseed to find, and a verdict of a claim out now (it read the partition
        before, perhaps) is not taken, as if a mark had come meanwhile."""
        for pid in self._holds:
            if pid not in self._out:
                self._due.pop(pid, None)
        self._holds.clear()
        self._holds_most = 0
        for pid in self._out:
            self._out[pid] = True

    def _set_due(self, partition_id: int, due: float) -> None:
        self._holds.pop(partition_id, None)
        self._due[partition_id] = due
        heapq.heappush(self._heap, (due, partition_id))

    def _undefer(self, partition_id: int) -> None:
        self._holds.pop(partition_id, None)
        if self._due.pop(partition_id, None) is not None:
            self._hearsay.discard(partition_id)

    def promote(self, now: float) -> None:
        """Deferred partitions whose time has come become ready."""
        while self._heap and self._heap[0][0] <= now:
            due, pid = heapq.heappop(self._heap)
            if self._due.get(pid) == due:
                self._undefer(pid)
                self._ready.setdefault(pid, due)

    def next_due(self) -> float | None:
        """When the next deferred partition becomes ready (monotonic), if any."""
        while self._heap and self._due.get(self._heap[0][1]) != self._heap[0][0]:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    # -- reseeds: a scan of the queue -------------------------------------------------------

    def reseed_start(self) -> int:
        """A reseed begins: the partition id it scans after (where the last one stopped at
        the cap, else 0); a notification from now on is not missed by it."""
        self._stale = False
        return self._resume_from

    def reseeded(self, found: Sequence[tuple[int, str, float | None]], *, started: float,
                 session: int | None, began_after: int, stopped_after: int | None,
                 now: float) -> None:
        """A reseed that started at `started` (monotonic) under `session` found these
        (partition id, name, seconds until claimable or None: now), scanning after
        `began_after` up to `stopped_after` (None: the end of the queue). Marks that came
        meanwhile are kept: a reseed only adds."""
        # Partial when it stopped at its cap (the next reseed goes on from there), or began
        # past the start (what lies before it is the next reseed's).
        self._partial = stopped_after is not None or began_after > 0
        self._resume_from = 0 if stopped_after is None else stopped_after
        if session is None or session != self._session:
            self._forget_holds()  # its marks may have been lost meanwhile
        self.promote(now)  # (holds that ran out are no holds)
        for pid, name, due_in in found:
            if due_in is not None and due_in > 0:
                self.defer(pid, now + due_in)
            elif pid not in self._holds:
                self.mark(pid, now)
        self.learn_names((name, pid) for pid, name, _ in found)
        self._seeded_at = started
        self._session = session

    # -- pops: take candidates, check them back in ------------------------------------------

    def take(self, count: int, now: float, batch: int | None = None) -> list[int]:
        """Up to `count` ready partitions, oldest first, then, for a claim of `batch`
        messages, held partitions whose waiting messages fill it; they are out until checked
        in."""
        self.promote(now)
        self.used_at = now
        taken = list(islice(self._ready, count))
        if len(self._taken_since) > 4096:
            self._taken_since.clear()
        for pid in taken:
            self._taken_since[pid] = self._ready.pop(pid)
            self._out[pid] = False
        if not self._holds:
            self._holds_most = 0
        if len(taken) < count and batch is not None and batch <= self._holds_most:
            fills = [pid for pid, (waiting, _) in self._holds.items()
                     if waiting >= batch and pid not in self._out]
            for pid in fills[:count - len(taken)]:
                self._due.pop(pid, None)  # its hold stays: given back unasked, held again
                self._out[pid] = False
                taken.append(pid)
        return taken

    def take_hearsay(self, count: int, now: float) -> list[int]:
        """Up to `count` partitions held back only because another process said its pop
        claimed them: a pop about to answer nothing checks them with its claim, since that
        word may have come after their release (announcements of different processes are
        not ordered) and a lease's end is only as exact as the announcement's timing."""
        self.used_at = now
        taken = list(islice(self._hearsay, count))
        for pid in taken:
            self._undefer(pid)
            self._out[pid] = False
        return taken

    def take_one(self, partition_id: int, now: float, batch: int | None = None) -> bool:
        """Take this partition if it is ready, or held back on hearsay (the partition
        route: a pop naming it checks it rather than answer nothing on another's word), or
        held with enough messages waiting for a claim of `batch`."""
        self.promote(now)
        self.used_at = now
        held = self._holds.get(partition_id)
        if partition_id in self._hearsay:
            self._undefer(partition_id)
        elif held is not None and batch is not None and held[0] >= batch \
                and partition_id not in self._out:
            self._due.pop(partition_id, None)  # (as `take`)
        elif partition_id not in self._ready:
            return False
        self._ready.pop(partition_id, None)
        self._out[partition_id] = False
        return True

    def check_in(self, partition_id: int, verdict: str, due: float | None, now: float,
                 *, satisfied: bool, batch: int | None = None,
                 waiting: int | None = None) -> None:
        """File a candidate by what the claim found (`took`, `empty`, `leased`, `later`,
        `busy`, or `untried`: given back unasked; `due` monotonic). `satisfied`: the pop got
        what it wanted, so a `busy` candidate was merely not reached and is ready as before.
        `waiting`: of a `later`, the messages minPopWaitTime holds back from a claim of
        `batch` (the claim's) messages."""
        marked = self._out.pop(partition_id, False)
        held = self._holds.pop(partition_id, None)
        if verdict == "later" and waiting is not None \
                and (batch is None or waiting >= batch):
            # Enough to fill the claim: minPopWaitTime did not hold it from this claim (a
            # concurrent pop's claim had its cursor), it is looked at again as a busy one.
            verdict = "busy"
        if held is not None and not marked and held[1] > now \
                and (verdict == "untried" or (verdict == "busy" and satisfied)):
            self.hold(partition_id, *held)  # not asked: held as before
        elif marked or verdict == "untried" or (verdict == "busy" and satisfied):
            self._ready.setdefault(partition_id, now)
        elif verdict == "later" and waiting is not None:
            self.hold(partition_id, waiting, due if due is not None else now + UNKNOWN_DUE_S)
        elif verdict in ("leased", "later"):
            self.defer(partition_id, due if due is not None else now + UNKNOWN_DUE_S)
        elif verdict == "busy":
            self.defer(partition_id, now + BUSY_RETRY_S)
        elif verdict == "took" and due is not None:
            # Its lease: should nobody announce its release (no reaper, an ack elsewhere
            # that left nothing behind), it is looked at again when the lease ends.
            self.defer(partition_id, due)
        elif verdict == "took":
            self._ready.setdefault(partition_id, now)  # autoAck: more may be left behind
        # empty: nothing there for the group; the next commit marks it again

    def give_back(self, partition_ids: Iterable[int], now: float) -> None:
        """Candidates a pop took but did not ask about (their fate unknown, or the client
        left): ready again, and pops waiting for them look."""
        for pid in partition_ids:
            if pid in self._out:
                self.check_in(pid, "untried", None, now, satisfied=True)
        self.wake_returned()

    def let_go(self, partition_id: int) -> None:
        """A candidate the claim gave no answer for (its queue went away): forget it."""
        self._out.pop(partition_id, None)

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
        if not self._ready:
            return 0, None
        return len(self._ready), now - next(iter(self._ready.values()))

    def ready_age_when_taken(self, partition_id: int, now: float) -> float | None:
        """How long the partition had been ready when a pop lately took it (seconds)."""
        since = self._taken_since.get(partition_id)
        return None if since is None else now - since

    def learn_names(self, names: Iterable[tuple[str, int]]) -> None:
        for name, pid in names:
            if len(self._names) < 100_000:
                self._names[name] = pid
