"""The lanes of this process, the marks that feed them, and when they must be reseeded.

Marks come from every commit that can make data claimable, local or from another process or
broker (core/engine/listener.py hands them over: pushes, acks and nacks that release a span,
lease expiries, DLQ replays, seeks), and from the verdicts of this process's own claims. They
say "look at this partition", never "there is nothing": a lane is only as good as the marks it
heard. So a lane is trusted only while it cannot have missed one:
- it was seeded (a paged scan of its queue: `reseed`) under the current LISTEN session: a
  lane first used, or last seeded before a reconnect, is seeded before it is trusted;
- no notification since could not name all its partitions (`stale`);
- its seed is younger than the reseed interval (with jitter), a floor against anything
  unforeseen (a lost notification, an option changed elsewhere).
A pop about to answer nothing first hears every notification committed before it arrived
(core/engine/listener.py `heard_through`); while the LISTEN connection is down, it cannot,
and a lane is then trusted only with a seed taken since the pop arrived, so a pop during a
database outage meets the outage (503) rather than an answer from memory.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable, Sequence

from core.counters import COUNTERS
from core.engine.ready.lane import Lane
from core.errors import StorageUnavailable
from core.storage import reads as sql
from core.storage.database import Database

RESEED_PAGE = 2000  # partitions per reseed statement
# Memory bounds: ready partitions a lane holds (a reseed takes at most this many and the next
# one goes on from there), and lanes in use (the least recently used one is dropped).
LANE_CAP = 4096
MAX_LANES = 1024
# Another process's claim is held back until this long before the lease end it announced:
# the announcement's own delay must not make a lease seem longer here than it is.
_HEARSAY_EARLY_S = 0.05
_HEARSAY_UNKNOWN_S = 1.0  # held back this long when the announcement gave no lease end
_IDLE_LANE_S = 600.0  # a lane unused this long is forgotten (its next use seeds it)
_SWEEP_EVERY = 1000  # lane lookups between sweeps of idle lanes


class ReadySet:
    def __init__(self, db: Database, session: Callable[[], int | None], *,
                 reseed_interval_s: float = 30.0, lane_cap: int = LANE_CAP,
                 max_lanes: int = MAX_LANES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`session`: the LISTEN connection's session number, None while it is down."""
        self._db = db
        self._session = session
        self._interval = reseed_interval_s
        self._lane_cap = lane_cap
        self._max_lanes = max_lanes
        self._clock = clock
        self._lanes: dict[tuple[int, str], Lane] = {}
        self._by_queue: dict[int, dict[str, Lane]] = {}
        self._lookups = 0
        self.reseeds = 0  # full reseeds run (for tests and figures)
        self.reseed_statements = 0

    def lane(self, queue_id: int, group: str) -> Lane:
        lane = self._lanes.get((queue_id, group))
        if lane is None:
            if len(self._lanes) >= self._max_lanes:
                self._drop_least_used()
            lane = self._lanes[(queue_id, group)] = Lane(queue_id, group, self._lane_cap)
            self._by_queue.setdefault(queue_id, {})[group] = lane
        self._lookups += 1
        if self._lookups % _SWEEP_EVERY == 0:
            self._sweep()
        return lane

    def knows(self, queue_id: int) -> bool:
        """Whether a lane of this queue is in use here."""
        return queue_id in self._by_queue

    def _drop_least_used(self) -> None:
        idle = [lane for lane in self._lanes.values() if not lane.in_flight]
        if idle:
            self._drop(min(idle, key=lambda lane: lane.used_at))

    def _drop(self, lane: Lane) -> None:
        del self._lanes[(lane.queue_id, lane.group)]
        del self._by_queue[lane.queue_id][lane.group]
        if not self._by_queue[lane.queue_id]:
            del self._by_queue[lane.queue_id]

    def _sweep(self) -> None:
        idle = self._clock() - _IDLE_LANE_S
        for lane in list(self._lanes.values()):
            if lane.idle_since(idle):
                self._drop(lane)

    # -- marks ---------------------------------------------------------------------------

    def marked(self, queue_id: int, partitions: Sequence[int], complete: bool) -> None:
        """A commit may have made data claimable in these partitions of the queue (for any
        group); `complete` false: in others too, unnamed (the lanes reseed before trust)."""
        lanes = self._by_queue.get(queue_id)
        if not lanes:
            return
        now = self._clock()
        for lane in lanes.values():
            for pid in partitions:
                lane.mark(pid, now)
            if not complete:
                lane.went_stale()

    def claimed_elsewhere(self, queue_id: int, token: str, partitions: Sequence[int],
                          lease_s: float | None) -> None:
        """Another process's pops of the group named by `token` claimed these partitions,
        leased for `lease_s` seconds from the announcement (None: not said)."""
        lanes = [lane for lane in self._by_queue.get(queue_id, {}).values()
                 if lane.token == token]
        if not lanes:
            return
        held = _HEARSAY_UNKNOWN_S if lease_s is None else lease_s - _HEARSAY_EARLY_S
        due = self._clock() + max(held, 0.0)
        for lane in lanes:
            for pid in partitions:
                lane.taken_elsewhere(pid, due)

    def all_stale(self) -> None:
        """Anything may have changed (options, a pause lifted): every lane reseeds."""
        for lane in self._lanes.values():
            lane.went_stale()

    # -- trust ---------------------------------------------------------------------------

    def trusted(self, lane: Lane, since: float | None = None) -> bool:
        """`since` (monotonic): only a seed taken at or after it will do."""
        return lane.trusted(since=since, session=self._session(),
                            max_age=self._interval * _jitter(lane), now=self._clock())

    async def ensure_seeded(self, lane: Lane, since: float | None = None) -> None:
        """Reseed the lane unless it is trusted (one reseed at a time per lane)."""
        if self.trusted(lane, since):
            return
        async with lane.seeding:
            if not self.trusted(lane, since):
                await self.reseed(lane)

    async def reseed(self, lane: Lane) -> None:
        """Scan the lane's queue, page by page, for partitions with data for its group.
        Marks arriving meanwhile are kept (a reseed only adds); what it finds leased or
        held by a retryDelay is deferred to that time."""
        session = self._session()
        started = self._clock()
        start = after = lane.reseed_start()
        found: list[sql.ScannedPartition] = []
        at_end = False
        while len(found) < lane.cap:
            want = min(RESEED_PAGE, lane.cap - len(found))
            if self._db.shards.distributed:
                page, scanned, last = await self._page_by_shard(lane, after, want)
            else:
                self._count_statement()
                async with self._db.session() as conn:
                    page = await sql.ready_scan(conn, queue_id=lane.queue_id,
                                                group=lane.group, after=after, limit=want)
                scanned, last = len(page), page[-1].partition_id if page else after
            found.extend(page)
            if scanned < want:
                at_end = True
                break
            after = last
        found = await self._delayed_dues(lane, found)
        # In a random order, per process: processes (and brokers) that hand the same ready
        # partitions out in the same order would have their claims meet on the same cursors
        # (a group's first claims even wait on each other's cursor inserts).
        random.shuffle(found)
        lane.reseeded([(row.partition_id, row.partition, row.due_in) for row in found],
                      started=started, session=session, began_after=start,
                      stopped_after=None if at_end else after, now=self._clock())
        self.reseeds += 1

    async def _page_by_shard(self, lane: Lane, after: int, want: int
                             ) -> tuple[list[sql.ScannedPartition], int, int]:
        """On Citus a page of the reseed is a statement per shard: the queue's next `want`
        partitions from the directory (a copy on every node), then, per shard, which of its
        own ones may hold data (on the shard's node). Answers what was found, how many
        partitions the page covered, and the last one's id."""
        self._count_statement()
        async with self._db.session() as conn:
            listed = await sql.ready_directory(conn, queue_id=lane.queue_id, after=after,
                                               limit=want)
        found: list[sql.ScannedPartition] = []
        groups = self._db.shards.by_shard(listed, lambda e: e.partition_id)
        missed: StorageUnavailable | None = None
        answered = 0
        for shard, entries in groups.items():
            self._count_statement()
            try:
                # on the node of the shard, where Citus runs it without a remote call
                async with self._db.session(self._db.shards.route(shard)) as on_node:
                    found.extend(await sql.ready_check(
                        on_node, partition_ids=[e.partition_id for e in entries],
                        group=lane.group))
                answered += 1
            except StorageUnavailable as exc:
                # That shard's node is down: the lane takes what the others have, and is
                # seeded again before it is trusted (its partitions answer 503 till then).
                missed = exc
                lane.missed_a_shard()
        if missed is not None and not answered:
            raise missed
        return found, len(listed), listed[-1].partition_id if listed else after

    async def _delayed_dues(self, lane: Lane, found: list[sql.ScannedPartition]
                            ) -> list[sql.ScannedPartition]:
        """The found partitions of a delayedProcessing queue, with the due of the group's
        next message. Without it each would count ready until a claim answered it `later`,
        and a lane past its cap reseeds before each pop that finds nothing: every empty pop
        of a delayed queue of 5,000 partitions claimed them all (2 s a pop). A shard that
        cannot answer leaves its partitions as they were: their claim decides."""
        asked = [row for row in found
                 if row.delayed and (row.due_in is None or row.due_in <= 0)]
        if not asked:
            return found
        dues: dict[int, float] = {}
        for shard, rows in self._db.shards.by_shard(asked, lambda r: r.partition_id).items():
            self._count_statement()
            try:
                async with self._db.session(self._db.shards.route(shard)) as conn:
                    heads = await sql.ready_heads(
                        conn, partition_ids=[r.partition_id for r in rows], group=lane.group,
                        on_shard=self._db.shards.distributed)
            except StorageUnavailable:
                continue
            dues.update((head.partition_id, head.due_in) for head in heads)
        return [dataclasses.replace(row, due_in=dues[row.partition_id])
                if dues.get(row.partition_id, 0.0) > 0 else row for row in found]

    def _count_statement(self) -> None:
        self.reseed_statements += 1
        COUNTERS.add("ready_reseed_statements")

    # -- figures -------------------------------------------------------------------------

    def known_ready(self, queue_id: int, group: str) -> tuple[int, float | None]:
        """Partitions this process knows ready for (queue, group), and the oldest one's age
        in seconds (None: none); (0, None) for a lane it has never used."""
        lane = self._lanes.get((queue_id, group))
        return (0, None) if lane is None else lane.known_ready(self._clock())


def _jitter(lane: Lane) -> float:
    """0.9..1.1, fixed per lane: lanes seeded together do not all reseed together."""
    return 0.9 + 0.2 * random.Random(hash((lane.queue_id, lane.group))).random()
