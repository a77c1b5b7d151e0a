"""A pop over the ready set: candidates from memory, one claim statement that answers each.

A pop finds its route's queues (`Route`: learnt from the claim statements themselves, which
register the group on the queues they address), makes sure their lanes are trusted
(core/engine/ready/ready_set.py), takes a few ready candidates, at most `MAX_CANDIDATES`,
and claims them in one statement (core/engine/pop.py `claim`) that answers per candidate:
took, empty, leased until, held by the clock until, busy. Each candidate is checked back in
by that answer. A pop that found nothing goes on with the next candidates until none is
left; one that delivered something sends at most one more statement (under the same lease)
to fill its width or batch, with what its byte budget has left, and none once the budget
stopped a statement (`PopResult.full`: the partitions it left out are ready again). A lane with nothing ready answers at once, with no statement:
a quiet re-poll of a caught-up group costs nothing.

On Citus a statement's candidates are partitions of one shard: a pop's candidates are claimed
by one statement per shard they live on, each run on that shard's node, all under one lease.
The lease id names the first shard (core/storage/shards.py), and a lease that spans shards
has that shard's row name the others, so an extension finds every part. A shard whose node
is down fails its own statement only: the pop delivers what the others hold, and when they
hold nothing it answers the outage (503), not nothing, since a partition it could not look at
may hold something.

Candidates another pop of this process holds are not ready for this one; when nothing else is
left, a pop waits (bounded) for them to come back rather than answer "nothing" while one of
them may still be deliverable to it.

An answer of nothing is settled first: the pop hears every notification committed before it
arrived (core/engine/listener.py `heard_through`; the state changes of every process are
announced before they are answered) and looks once more, so a 204 never misses a push, ack
or nack whose answer its client already had, whichever process answered it. Partitions held
back only on another process's word that it claimed them are checked with a claim then.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

from core.counters import COUNTERS
from core.engine.pop import CandidateVerdict, Claimed, PopRequest, PopResult, claim
from core.engine.ready.lane import Lane
from core.engine.ready.ready_set import ReadySet
from core.errors import StorageUnavailable
from core.ids import LeaseId, QueueId
from core.storage import reads as sql
from core.storage.database import Database
from core.tenancy.scoped import unscoped
from core.waiting import first_of

MAX_CANDIDATES = 64  # candidates one claim statement is given
# Candidates per partition a pop still wants: every process hears of every commit, so a
# ready partition may already be taken by a pop of another process (its verdict: leased or
# empty); extra candidates keep the statement filling its width anyway.
_CANDIDATES_PER_WANTED = 4
# Statements of a pop once it delivered something: the first, and one more to fill it.
_STATEMENTS_ONCE_DELIVERED = 2
# How long a pop waits for candidates other pops of this process hold, when nothing else is
# ready (their statements answer within this in all but an outage).
_WAIT_FOR_OTHERS_S = 3.0
# How long a route's queues are trusted without a statement (a queue created later that a
# discovery pop's namespace matches is found within this, or at its first commit here).
ROUTE_TTL_S = 30.0

_STRANGERS_KEPT = 100_000
_ROUTES_KEPT = 100_000  # routes remembered; all are forgotten past that (each looks again)

# tenant, queue, namespace, task, group
RouteKey = tuple[str, str | None, str | None, str | None, str]
Lanes = dict[int, Lane]  # a pop's lanes, by queue id


@dataclass(slots=True)
class Route:
    """The queues a pop's address named at its last statement."""

    queue_ids: list[QueueId]
    conflating: bool
    at: float


AnnounceClaims = Callable[[int, str, Sequence[int], float | None], None]
HeardThrough = Callable[[float], Awaitable[bool]]


async def _alone(since: float) -> bool:
    return True  # a process with no other process to hear from (tests of one Reader)


class Reader:
    def __init__(self, db: Database, ready: ReadySet,
                 claimed: AnnounceClaims = lambda q, g, p, s: None,
                 heard_through: HeardThrough = _alone) -> None:
        """`claimed(queue id, group, partition ids, lease seconds)`: tells the other
        processes what this one's pops claimed (core/engine/listener.py
        `announce_claimed`); `heard_through(t)`: whether every notification committed before
        `t` has reached the ready set (False: it could not tell; look in the tables)."""
        self._db = db
        self._ready = ready
        self._claimed = claimed
        self._heard_through = heard_through
        self._routes: dict[RouteKey, Route] = {}
        self._strangers: set[int] = set()  # queue ids marked here that no lane knew
        self.statements = 0  # claim statements sent (for tests)

    # -- what other parts tell it --------------------------------------------------------

    def marked(self, queue_id: int, partitions: Sequence[int], complete: bool) -> None:
        """Marks from the listener: to the lanes. The first mark of a queue no lane knows
        may come from a queue made since a route last looked (a new queue of a discovery
        pop's namespace, or a queue deleted and made again under its name elsewhere): every
        route looks again at its next pop (one statement each), once per such queue."""
        if not self._ready.knows(queue_id) and queue_id not in self._strangers:
            if len(self._strangers) >= _STRANGERS_KEPT:
                self._strangers.clear()
            self._strangers.add(queue_id)
            self._routes.clear()
        self._ready.marked(queue_id, partitions, complete)

    def forget_routes(self) -> None:
        """Queues were created, deleted or reconfigured here: routes look again."""
        self._routes.clear()

    def next_due(self, request: PopRequest) -> float | None:
        """Seconds until a deferred candidate of the request's route becomes ready."""
        route = self._routes.get(_key(request))
        if route is None:
            return None
        now = time.monotonic()
        dues = [d for q in route.queue_ids
                if (d := self._ready.lane(q, request.group).next_due()) is not None]
        return max(min(dues) - now, 0.0) if dues else None

    def known_ready(self, request: PopRequest) -> tuple[int, float | None]:
        """Ready partitions of the request's route known here, and the oldest one's age."""
        route = self._routes.get(_key(request))
        if route is None:
            return 0, None
        count, oldest = 0, None
        for q in route.queue_ids:
            n, age = self._ready.known_ready(q, request.group)
            count += n
            if age is not None:
                oldest = age if oldest is None else max(oldest, age)
        return count, oldest

    # -- the autopilot's view (core/engine/autopilot.py ReadyView) ------------------------

    def ready(self, queue: str, group: str) -> tuple[int, float | None]:
        """Ready partitions known for (queue, group), and the oldest one's age (`queue`:
        the autopilot's lane key, the name scoped by its tenant, core/tenancy/scoped.py)."""
        return self.known_ready(_route_of(queue, group))

    def taken(self, queue: str, group: str, queue_ids: Sequence[int],
              partition_ids: Sequence[int]) -> float | None:
        """How long the longest-ready of the partitions a pop just claimed had been ready."""
        now = time.monotonic()
        ages = [age for q in queue_ids for pid in partition_ids
                if (age := self._ready.lane(q, group).ready_age_when_taken(pid, now))
                is not None]
        return max(ages) if ages else None

    # -- the pop -------------------------------------------------------------------------

    async def pop(self, request: PopRequest, gone: asyncio.Event | None = None, *,
                  settle: bool = True) -> PopResult:
        """Claim what the route's lanes know to be ready; an empty result (no statement)
        when they know of nothing. `settle`: an empty answer is final (see the module
        docstring); a long poll's intermediate looks need not be."""
        arrived = time.monotonic()
        result = await self._look(request, gone, None)
        if result.claims or not settle or _is_set(gone) or not result.queue_ids:
            return result
        heard = await self._heard_through(arrived)
        # Deaf, it cannot know what it missed: only seeds taken since the pop arrived will do.
        return await self._look(request, gone, None if heard else arrived)

    async def _look(self, request: PopRequest, gone: asyncio.Event | None,
                    seeded_since: float | None) -> PopResult:
        key = _key(request)
        route = self._routes.get(key)
        if route is None or time.monotonic() - route.at > ROUTE_TTL_S:
            # No candidates: the statement registers the group and names the queues (a
            # named partition is claimed by it at once).
            first = await self._statement(request, [], None, 1, {})
            route = self._learn(key, first)
            if first.result.claims or request.partition is not None:
                self._check_in(request, first, [], {}, satisfied=True)
                return first.result
        if not route.queue_ids:
            return PopResult(None)
        lanes: Lanes = {q: self._ready.lane(q, request.group) for q in route.queue_ids}
        for lane in lanes.values():
            await self._ready.ensure_seeded(lane, seeded_since)
        if request.partition is not None:
            return await self._pop_partition(request, route, lanes, gone)
        return await self._pop_any(request, route, lanes, gone)

    async def _pop_partition(self, request: PopRequest, route: Route, lanes: Lanes,
                             gone: asyncio.Event | None) -> PopResult:
        assert request.partition is not None
        [lane] = lanes.values()
        deadline = time.monotonic() + _WAIT_FOR_OTHERS_S
        while True:
            pid = lane.id_of(request.partition)
            if pid is None or lane.take_one(pid, time.monotonic(), request.batch):
                if _is_set(gone):
                    if pid is not None:
                        lane.give_back([pid], time.monotonic())
                    return PopResult(None)
                # Its id unknown here (a partition created since the seed): the statement
                # finds it by name and says what it is.
                taken = [] if pid is None else [pid]
                answer = await self._statement(request, taken, None, 1, lanes)
                self._check_in(request, answer, taken, lanes, satisfied=True)
                return self._with_route(answer.result, route)
            if not lane.holds(pid) or time.monotonic() >= deadline:
                return self._empty(route)
            await first_of([lane.returned()], deadline - time.monotonic())

    async def _pop_any(self, request: PopRequest, route: Route, lanes: Lanes,
                       gone: asyncio.Event | None) -> PopResult:
        width = self._width(request, route)
        total: PopResult | None = None
        lease_id: LeaseId | None = None
        lease_shards: dict[int, None] = {}  # the shards its lease spans, first one first
        statements = 0  # rounds of statements (one per shard of a round's candidates)
        took: list[CandidateVerdict] = []
        reseeds = 0
        # A shard whose statement met an outage (on Citus: its node is down): the others
        # still serve; the pop answers what they gave, or the outage when they gave nothing.
        failure: StorageUnavailable | None = None
        deadline = time.monotonic() + _WAIT_FOR_OTHERS_S
        in_route = list(lanes.values())
        try:
            while failure is None:
                got = 0 if total is None else len(total.claims)
                budget = request.batch - (0 if total is None else total.count)
                if total is not None and (got >= width or budget <= 0 or total.full
                                          or statements >= _STATEMENTS_ONCE_DELIVERED):
                    break
                wanted = max(width - got, 1)
                count = min(max(_CANDIDATES_PER_WANTED * wanted, 8), MAX_CANDIDATES)
                candidates = _take(in_route, count, budget)
                if not candidates and total is None:
                    # About to answer nothing: check what is held back only on hearsay.
                    now = time.monotonic()
                    candidates = [pid for lane in in_route
                                  for pid in lane.take_hearsay(count, now)]
                if not candidates:
                    if total is not None:
                        break
                    partial = [lane for lane in in_route if lane.partial]
                    if partial and reseeds < 2:
                        # It left partitions out (its cap): look for them before answering
                        # nothing (twice at most: from where it stopped, then from the start).
                        reseeds += 1
                        for lane in partial:
                            await self._ready.ensure_seeded(lane)
                        continue
                    if not any(lane.in_flight for lane in in_route) \
                            or time.monotonic() >= deadline:
                        break
                    await first_of([lane.returned() for lane in in_route],
                                   deadline - time.monotonic())
                    continue
                if _is_set(gone):
                    _give_back(in_route, candidates)
                    break
                # One statement per shard the candidates live on (one statement on one
                # PostgreSQL), until the pop has what it wants; the rest go back.
                groups = list(self._db.shards.by_shard(candidates, lambda pid: pid).items())
                for at, (shard, group) in enumerate(groups):
                    later = [p for _, rest in groups[at + 1:] for p in rest]
                    got = 0 if total is None else len(total.claims)
                    budget = request.batch - (0 if total is None else total.count)
                    if total is not None and (got >= width or budget <= 0 or total.full):
                        _give_back(in_route, group + later)
                        break
                    wanted = max(width - got, 1)
                    # A later statement may add only what the byte budget has left (it
                    # still delivers one message at least: the answer may pass the budget
                    # by one message's bytes).
                    max_bytes = request.max_bytes if total is None else max(
                        request.max_bytes - total.bytes_counted(), 1)
                    stated = replace(request, batch=budget, max_bytes=max_bytes)
                    try:
                        answer = await self._statement(stated, group, lease_id, wanted, lanes)
                    except StorageUnavailable as exc:
                        failure = exc  # (the statement gave its candidates back)
                        continue
                    except BaseException:
                        _give_back(in_route, later)  # (the statement gave its own back)
                        raise
                    self._learn(_key(request), answer)
                    satisfied = (len(answer.result.claims) >= wanted
                                 or answer.result.count >= budget or answer.result.full)
                    # What it took stays out until the pop is over: its second statement
                    # must not try a partition it just claimed (with autoAck it is ready
                    # again at once).
                    took.extend(self._check_in(stated, answer, group, lanes,
                                               satisfied=satisfied, hold_took=True))
                    if answer.result.claims:
                        lease_shards.setdefault(shard, None)
                        if total is None:
                            total = answer.result
                            lease_id = total.lease_id
                        else:
                            total.claims.extend(answer.result.claims)
                            total.full = total.full or answer.result.full
                statements += 1
            if lease_id is not None and len(lease_shards) > 1:
                await self._link_lease(lease_id, list(lease_shards))
        finally:
            self._file(request, took, lanes)
        if total is None:
            if failure is not None:
                raise failure
            if any(lane.unreachable for lane in in_route):
                raise StorageUnavailable()  # some partitions could not be looked at
            return self._empty(route, width)
        return self._with_route(total, route)

    # -- pieces --------------------------------------------------------------------------

    async def _link_lease(self, lease_id: LeaseId, shards: list[int]) -> None:
        """On Citus, a lease whose partitions span shards: its first shard's row (the one
        its id names) learns the others, where an extension goes next
        (schema/functions/35_leases.sql)."""
        routes = [self._db.shards.route(s) for s in shards]
        first, others = routes[0], [r for r in routes[1:] if r is not None]
        if first is None or not others:
            return
        async with self._db.session(first) as conn:
            await sql.link_lease(conn, route=first, lease_id=lease_id, routes=others)

    @staticmethod
    def _width(request: PopRequest, route: Route) -> int:
        """Partitions this pop wants (a conflating route's width is the statement's)."""
        if route.conflating:
            return max(min(request.conflation_width, MAX_CANDIDATES), 1)
        return max(request.max_partitions, 1)

    async def _statement(self, request: PopRequest, candidates: list[int],
                         lease_id: LeaseId | None, width: int, lanes: Lanes) -> Claimed:
        try:
            answer = await claim(self._db, request, candidates, width, lease_id)
        except BaseException:
            # Its fate unknown: they are looked at again.
            _give_back(list(lanes.values()), candidates)
            raise
        if not request.auto_ack:
            # Leased now: the others skip them until their release is announced or their
            # lease ends. (Not with autoAck: nothing announces what such a claim leaves
            # behind in the partition.)
            by_queue: dict[int, list[int]] = {}
            lease_s: dict[int, float] = {}
            for v in answer.verdicts:
                if v.kind == "took":
                    by_queue.setdefault(v.queue_id, []).append(v.partition_id)
                    if v.due_in is not None:
                        lease_s[v.queue_id] = min(lease_s.get(v.queue_id, v.due_in), v.due_in)
            for queue_id, pids in by_queue.items():
                self._claimed(queue_id, request.group, pids, lease_s.get(queue_id))
        self.statements += 1
        COUNTERS.add("claim_statements")
        if not answer.result.claims:
            COUNTERS.add("claim_statements_empty")
        return answer

    def _check_in(self, request: PopRequest, answer: Claimed, candidates: list[int],
                  lanes: Lanes, *, satisfied: bool,
                  hold_took: bool = False) -> list[CandidateVerdict]:
        """File every candidate (and anything the statement named) by its verdict; with
        `hold_took`, the partitions it took stay out and are answered for `_file`."""
        held = [v for v in answer.verdicts if hold_took and v.kind == "took"]
        self._file(request, [v for v in answer.verdicts if not (hold_took and v.kind == "took")],
                   lanes, satisfied=satisfied)
        answered = {v.partition_id for v in answer.verdicts}
        for lane in lanes.values():
            for pid in candidates:
                if pid not in answered:  # no answer for it (its queue went away): let it go
                    lane.let_go(pid)
            lane.wake_returned()
        return held

    def _file(self, request: PopRequest, verdicts: list[CandidateVerdict], lanes: Lanes, *,
              satisfied: bool = True) -> None:
        now = time.monotonic()
        touched: dict[int, Lane] = {}
        for verdict in verdicts:
            lane = touched.get(verdict.queue_id)
            if lane is None:
                lane = lanes.get(verdict.queue_id) or self._ready.lane(verdict.queue_id,
                                                                      request.group)
                touched[verdict.queue_id] = lane
            if verdict.partition is not None:
                lane.learn_names([(verdict.partition, verdict.partition_id)])
            due = None if verdict.due_in is None else now + max(verdict.due_in, 0.0)
            lane.check_in(verdict.partition_id, verdict.kind, due, now, satisfied=satisfied,
                          batch=request.batch, waiting=verdict.waiting)
        for lane in touched.values():
            lane.wake_returned()

    def _learn(self, key: RouteKey, answer: Claimed) -> Route:
        result = answer.result
        route = Route(list(result.queue_ids), bool(result.conflation), time.monotonic())
        if route.queue_ids:
            if len(self._routes) >= _ROUTES_KEPT:
                self._routes.clear()
            self._routes[key] = route
        else:
            self._routes.pop(key, None)  # no such queue (yet): ask again next time
        return route

    @staticmethod
    def _empty(route: Route, width: int | None = None) -> PopResult:
        return PopResult(None, queue_ids=list(route.queue_ids), conflation=route.conflating,
                         width=width)

    @staticmethod
    def _with_route(result: PopResult, route: Route) -> PopResult:
        """The result, naming every queue the route covers and the route's conflation
        policy where the claim did not say."""
        result.queue_ids = list(dict.fromkeys([*route.queue_ids, *result.queue_ids]))
        if result.conflation is None:
            result.conflation = route.conflating
        return result


def _route_of(queue: str, group: str) -> PopRequest:
    tenant, name = unscoped(queue)
    return PopRequest(group=group, batch=1, queue=name, tenant=tenant)


def _key(request: PopRequest) -> RouteKey:
    return (request.tenant, request.queue, request.namespace, request.task, request.group)


def _give_back(lanes: list[Lane], candidates: list[int]) -> None:
    now = time.monotonic()
    for lane in lanes:
        lane.give_back(candidates, now)


def _take(lanes: list[Lane], count: int, batch: int) -> list[int]:
    """Up to `count` candidates across the lanes, a fair share from each, for a claim of
    `batch` messages."""
    now = time.monotonic()
    if len(lanes) == 1:
        return lanes[0].take(count, now, batch)
    taken: list[int] = []
    share = max(count // len(lanes), 1)
    for lane in lanes:
        if len(taken) >= count:
            break
        taken.extend(lane.take(min(share, count - len(taken)), now, batch))
    if len(taken) < count:
        for lane in lanes:
            taken.extend(lane.take(count - len(taken), now, batch))
    return taken


def _is_set(event: asyncio.Event | None) -> bool:
    return event is not None and event.is_set()
