"""Waking parked long polls: in-process events fed by local commits and by LISTEN.

Each web process holds one LISTEN connection (not a pool connection) on `core.engine.wakeup.CHANNEL`
and one notifier connection per node that carries notifications (core/engine/wake_link.py;
one node, except on Citus: core/engine/wake_nodes.py), served by two loops its owner runs as
side tasks (`listen_forever`, `announce_forever`; the reaper runs only the second). Thousands
of parked pops cost one `asyncio.Event` each and no database connection.

A commit that makes n spans of a queue deliverable wakes at most n parked pops *per consumer
group* (oldest first), not every pop parked on the queue: with 16 consumers parked, waking
all of them for each push would make 15 of them run an empty claim. Groups are counted
separately because every group receives every message. Pops addressed to one partition form
their own waiting line, so they are never passed over for a pop of another partition.

A local commit wakes local waiters first, and its NOTIFY says, per group, how many of its spans
the local waiters took: the other processes wake only that many fewer of that group's waiters
(none, for a push a local pop took), so the processes do not all race for one span. Every
mark still reaches the ready set (`on_marks`, core/engine/ready), so a group's waiter
elsewhere that is not woken finds data a local pop left behind at its next look (at least
every `POP_WAIT_MAX_INTERVAL_MS`; a look at nothing ready costs no statement).

Local commits wake local waiters at once and are announced to the other processes by NOTIFY;
announcements that arrive while one NOTIFY is in flight are merged (with their counts) into
the next. Pops' claims (hearsay, `announce_claimed`) are announced the same way, but nothing
waits for them to be published, so they need not go alone at once: a NOTIFY costs about the
same whatever it carries (a transaction on the notifier session, a signal to every listening
session and a read by each, our own included), and a consumer that pops one message and acks
it sent two, the claim's and the ack's release. Claims with no wake-up to go with wait up to
`_CLAIMS_GATHER_SECONDS` for one (the ack that follows a pop, usually), and go alone after
it. This process's own notifications are ignored when they come back. Missed notifications
(e.g. while the LISTEN connection reconnects) are made up by the ready set's reseed: a lane
seeded under an earlier LISTEN session is not trusted (`session`).

Two promises make a 204 mean "nothing deliverable when the pop arrived" across processes
(core/engine/ready/reader.py): a state change is answered only once its announcement is
committed (`published`: the caller awaits it), and before a pop answers nothing, this
process has heard every notification committed before the pop arrived (`heard_through`: a
round trip on each node's LISTEN connection, see `WakeLink._barrier`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from core.engine.wake_link import NodeUnreachable, WakeLink
from core.engine.wake_nodes import NodeSource, WakeNodes
from core.engine.wakeup import (
    CHANNEL,
    CLAIMED_CHANNEL,
    MAX_HINTS,
    Wake,
    decode_claimed,
    decode_payload,
    encode_claimed,
    group_token,
    hinted_payloads,
)
from core.errors import ServiceError
from core.parked import leave
from core.storage.errors import DRIVER_ERRORS
from core.waiting import first_of, wait_event

log = logging.getLogger(__name__)
_ANNOUNCE_GATHER_SECONDS = 0.005
# Claims with no wake-up to ride with wait this long for one before they go alone. Meanwhile
# another process may take one of those partitions for a candidate and find it leased (its
# claim says so; a pop checks hearsay before it answers nothing): a candidate's cost, against
# a NOTIFY per pop otherwise.
_CLAIMS_GATHER_SECONDS = 0.02
# A state change waits this long at most for its announcement (the notifier retries on a new
# connection meanwhile); past it, it is answered anyway: its commit stands.
_PUBLISH_WAIT_SECONDS = 2.0
_NOTIFY_RETRY_SECONDS = 0.1
ANY_QUEUE = -1  # the waiting line of discovery pops, which any queue's commit may serve

WaitLine = tuple[str, str | None]  # (consumer group, partition name or None for any)
_token = functools.lru_cache(maxsize=4096)(group_token)
_Heard = TypeVar("_Heard")  # a notification's payload, decoded
_Node = TypeVar("_Node")


class Waiter:
    """One parked pop; its event is set when it should look again (its lanes have news)."""

    __slots__ = ("event", "line", "slots")

    def __init__(self, line: WaitLine, slots: list[int]) -> None:
        self.event = asyncio.Event()
        self.line = line
        self.slots = slots  # the queue ids (or ANY_QUEUE) it waits on


class WakeupHub:
    def __init__(self, dsn: str, connect_options: Mapping[str, Any], *,
                 hears_wakeups: bool = True, nodes: NodeSource | None = None) -> None:
        """`dsn`: the database (on Citus, the coordinator: the channels subscribed are
        notified there); `nodes`: on Citus, where the worker nodes are listed (the wake-up
        notifications are spread over them: core/engine/wake_nodes.py).
        `connect_options`: the arguments of its connections (`HostConnector.connect`;
        core.storage.database.connect_options). `hears_wakeups=False`: a process where no
        pop parks (the reaper) listens to the channels subscribed only (`subscribe`), and
        holds no LISTEN connection without one. The database still signals every listening
        session at each NOTIFY, but a session not listening on its channel reads past it
        without sending it (about half the session's CPU per NOTIFY, measured)."""
        self._hears_wakeups = hears_wakeups
        wake_channels: dict[str, Callable[[str], None]] = (
            {CHANNEL: self._on_notification, CLAIMED_CHANNEL: self._on_claimed}
            if hears_wakeups else {})
        # The home node's LISTEN session also carries the channels subscribed (`subscribe`
        # adds them before it connects).
        self._home_channels = dict(wake_channels)
        home = WakeLink(dsn, connect_options, self._home_channels,
                        on_connected=self._home_connected)
        self._nodes = WakeNodes(home, lambda node_dsn: WakeLink(
            node_dsn, connect_options, wake_channels, on_connected=self._connected), nodes)
        # queue id (or ANY_QUEUE) -> waiting line -> waiters in arrival order
        self._lines: dict[int, dict[WaitLine, dict[Waiter, None]]] = {}
        # Per queue, to announce: the partitions named (in order, distinct) and how many
        # wakes could not be named (no partition given, or past MAX_HINTS).
        self._hints: defaultdict[int, dict[int, None]] = defaultdict(dict)
        self._unnamed: Counter[int] = Counter()
        # Per queue, spans to be announced that this process's pops were woken for, per group.
        self._served: defaultdict[int, Counter[str]] = defaultdict(Counter)
        self._announce_ready = asyncio.Event()
        self._wake_announced = asyncio.Event()  # ends the wait of claims for company
        self._stopping = asyncio.Event()
        self._channels: dict[str, Callable[[str | None], None]] = {}
        # LISTEN sessions so far, over every node: a new number at each (re)connect of any,
        # since notifications sent while it was down are lost (the ready set reseeds lanes
        # seeded under another).
        self._session = 0
        # Who hears every mark (queue id, partitions, whether they are all the partitions
        # concerned): the ready set's reader (core/engine/ready).
        self.on_marks: Callable[[int, Sequence[int], bool], None] = _nobody
        # Who hears what other processes' pops claimed (queue id, group token, partitions).
        # (queue id, group token, partitions, seconds until their lease ends or None).
        self.on_claimed: Callable[[int, str, Sequence[int], float | None], None] = \
            _nobody_claimed
        # Per (queue, group token): partitions this process's pops claimed, and when the
        # earliest of their leases ends (time.monotonic()).
        self._claimed: defaultdict[tuple[int, str], dict[int, None]] = defaultdict(dict)
        self._claimed_until: dict[tuple[int, str], float] = {}
        # Publication: wake-up announcements made here, in order, and how many of them are
        # committed as NOTIFY; state changes awaiting theirs (`published`). Claims are not
        # counted: nothing waits for them.
        self._announced = 0
        self._published = 0
        # Announcements up to this one met a database the notifier could not connect to:
        # their waiters are answered at once (below, `published`).
        self._unreachable_through = 0
        self._on_published = asyncio.Event()
        self._publish_waiting = 0
        self._publish_wanted = asyncio.Event()  # cuts the notifier's gather short
        self._notifier_done = False  # announce_forever has returned: nothing more is sent

    def _listened(self) -> list[WakeLink]:
        return [link for link in self._nodes.links if link.listens]

    @property
    def listening(self) -> bool:
        """Every LISTEN connection is up."""
        listened = self._listened()
        return bool(listened) and all(link.listening for link in listened)

    @property
    def listener_pid(self) -> int | None:
        """The home node's LISTEN session's server process (tests cut it)."""
        return self._nodes.home.listener_pid

    def link_of(self, queue_id: int) -> WakeLink:
        """The node this process sends a queue's notifications to (tests look there)."""
        return self._nodes.target(queue_id)

    @property
    def notify_statements(self) -> int:
        """NOTIFY statements committed, over every node (tests and figures count)."""
        return sum(link.notify_statements for link in self._nodes.links)

    def session(self) -> int | None:
        """The LISTEN connections' session number; None while any of them is down."""
        return self._session if self.listening else None

    def _connected(self) -> None:
        self._session += 1
        self.wake_everyone()  # anything missed while disconnected: check once

    def _home_connected(self) -> None:
        for callback in self._channels.values():
            callback(None)
        self._connected()

    def subscribe(self, channel: str, callback: Callable[[str | None], None]) -> None:
        """Also LISTEN on `channel` (call before `listen_forever` starts): `callback` gets
        each notification's payload, and None whenever the connection is (re)established,
        since notifications sent while it was down are lost."""
        self._channels[channel] = callback
        self._home_channels[channel] = callback

    @property
    def listens(self) -> bool:
        """Whether `listen_forever` has anything to listen to."""
        return self._hears_wakeups or bool(self._channels)

    def close(self) -> None:
        """Make `listen_forever` and `announce_forever` return (after a last announcement)."""
        self._stopping.set()
        self._announce_ready.set()
        self._wake_announced.set()

    @contextlib.contextmanager
    def parked(self, queue_ids: Iterable[int] | None, group: str,
               partition: str | None = None) -> Iterator[Waiter]:
        """Register a waiter for the duration of the block (register *before* checking for
        messages, so a commit between the check and the wait is not missed).
        `queue_ids=None` waits on every queue."""
        line = (group, partition)
        waiter = Waiter(line, [])
        self._register(waiter, [ANY_QUEUE] if queue_ids is None else queue_ids)
        try:
            yield waiter
        finally:
            for slot in waiter.slots:
                leave(self._lines, slot, line, waiter)

    def learnt(self, waiter: Waiter, queue_ids: Iterable[int]) -> None:
        """A waiter parked on every queue (its pop did not know its queue's id yet) now
        knows it: it also waits in that queue's own line, where a wake-up of that queue
        counts it as served here (see `wake`). It stays in the other line until it leaves,
        so nothing announced meanwhile passes it by."""
        self._register(waiter, queue_ids)

    def _register(self, waiter: Waiter, queue_ids: Iterable[int]) -> None:
        for slot in queue_ids:
            if slot not in waiter.slots:
                waiter.slots.append(slot)
                self._lines.setdefault(slot, {}).setdefault(waiter.line, {})[waiter] = None

    def parked_by_queue(self) -> dict[int, int]:
        """Parked pops per queue id (ANY_QUEUE: discovery pops, and pops that have not yet
        learnt their queue's id), for the metrics."""
        return {slot: len({w for ws in lines.values() for w in ws})
                for slot, lines in self._lines.items()}

    @property
    def parked_count(self) -> int:
        return len({w for lines in self._lines.values() for ws in lines.values() for w in ws})

    def wake(self, queue_id: int, count: int = 1, partitions: Sequence[int] = (),
             served: Mapping[str, int] | None = None,
             complete: bool | None = None) -> Counter[str]:
        """Wake up to `count` not-yet-woken waiters per waiting line of the queue, and as many
        discovery waiters per line: the woken pops look at their ready sets, which heard of
        the partitions first (`on_marks`; `complete` says whether `partitions` are all the
        partitions concerned, by default: as many as `count`).

        `served` (from another process's notification): spans its own pops took, per group
        token; the queue's any-partition lines of those groups wake that many fewer. Answers
        how many any-partition waiters of the queue were woken, per group."""
        self.on_marks(queue_id, partitions,
                      len(partitions) >= count if complete is None else complete)
        woken_by_group: Counter[str] = Counter()
        for slot in (queue_id, ANY_QUEUE):
            for (group, partition), waiters in self._lines.get(slot, {}).items():
                own_line = slot == queue_id and partition is None
                limit = count - served.get(_token(group), 0) if served and own_line else count
                woken = 0
                for waiter in waiters:
                    if woken >= limit:
                        break
                    if slot == ANY_QUEUE and queue_id in waiter.slots:
                        continue  # it learnt its queue: its line there had its turn
                    if not waiter.event.is_set():
                        waiter.event.set()
                        woken += 1
                if own_line and woken:
                    woken_by_group[group] += woken
        return woken_by_group

    def announce(self, wakes: Iterable[Wake]) -> None:
        """Spans became deliverable (one per (queue, partition or None) listed), after their
        commit: wake local waiters now, other processes by NOTIFY. Nothing listed: nothing
        to publish (a caller's `published` still waits for the wake-ups announced before)."""
        named = False
        for queue_id, partition_id in wakes:
            named = True
            woken = self.wake(queue_id, 1, [] if partition_id is None else [partition_id])
            if woken:
                served = self._served[queue_id]
                for group, n in woken.items():
                    served[_token(group)] += n
            hints = self._hints[queue_id]
            if partition_id is None or (partition_id not in hints and len(hints) >= MAX_HINTS):
                self._unnamed[queue_id] += 1  # the others' ready sets reseed that queue
            else:
                hints[partition_id] = None
        if not named:
            return
        self._announced += 1
        self._announce_ready.set()
        self._wake_announced.set()

    def announce_claimed(self, queue_id: int, group: str, partitions: Iterable[int],
                         lease_s: float | None = None) -> None:
        """This process's pops claimed these partitions for `group`, leased for `lease_s`
        seconds (None: unknown): tell the others, in the next announcement
        (`CLAIMED_CHANNEL`), before any wake-up announced after it. Nothing waits for it to
        be published (a pop checks hearsay before it answers nothing): an ack or push is not
        held back by a claim's NOTIFY, and it goes with the next wake-up, or alone after
        `_CLAIMS_GATHER_SECONDS`."""
        key = (queue_id, _token(group))
        claimed = self._claimed[key]
        for p in partitions:
            if len(claimed) < MAX_HINTS:
                claimed[p] = None
        if lease_s is not None:
            until = time.monotonic() + lease_s
            self._claimed_until[key] = min(self._claimed_until.get(key, until), until)
        self._announce_ready.set()

    async def publish(self, wakes: Iterable[Wake]) -> None:
        """`announce`, then wait until it is `published`."""
        self.announce(wakes)
        await self.published()

    async def published(self) -> None:
        """Wait until every wake-up announced so far is committed as NOTIFY, so that another
        process hears of it before any pop this process's answer leads to: a state change
        awaits this before it is answered. At most `_PUBLISH_WAIT_SECONDS` (the database is
        away: the commit stands and is answered; the others reseed their lanes at the
        latest on their floor, or when their LISTEN connection comes back)."""
        target = self._announced
        if (self._published >= target or self._notifier_done
                or self._unreachable_through >= target):
            return
        deadline = time.monotonic() + _PUBLISH_WAIT_SECONDS
        self._publish_waiting += 1
        self._publish_wanted.set()
        try:
            while self._published < target:
                remaining = deadline - time.monotonic()
                if self._notifier_done or self._unreachable_through >= target:
                    return
                if remaining <= 0:
                    log.info("an announcement was not published in %.1f s; answering anyway",
                             _PUBLISH_WAIT_SECONDS)
                    return
                await wait_event(self._on_published, remaining)
        finally:
            self._publish_waiting -= 1

    async def heard_through(self, since: float) -> bool:
        """Whether every notification committed before `since` (time.monotonic()) has been
        handed to this process's callbacks: a barrier sent after `since` came back from
        every node it listens on (core/engine/wake_link.py). False while a LISTEN connection
        is down or a barrier failed: the caller must look in the tables."""
        listened = self._listened()
        if not listened:
            return False
        heard = await asyncio.gather(*(link.heard_through(since) for link in listened))
        return all(heard)

    def _on_claimed(self, payload: str) -> None:
        claimed = _decoded(payload, decode_claimed, "claimed")
        if claimed is not None:
            self.on_claimed(*claimed)

    def _on_notification(self, payload: str) -> None:
        wakeup = _decoded(payload, decode_payload, "wake-up")
        if wakeup is not None:
            self.wake(*wakeup)

    def wake_everyone(self) -> None:
        """Every parked pop checks again (e.g. pops were paused and are not any more)."""
        for lines in self._lines.values():
            for waiters in lines.values():
                for waiter in waiters:
                    waiter.event.set()

    async def listen_forever(self) -> None:
        """Hold a LISTEN connection on every node that carries notifications (reconnecting
        after an outage), and on the workers found later, until `close`."""
        nodes = self._nodes
        await nodes.read()
        listening: dict[WakeLink, asyncio.Task[None]] = {}
        async with asyncio.TaskGroup() as tasks:
            while True:
                for link in nodes.links:
                    if link.listens and link not in listening:
                        listening[link] = tasks.create_task(
                            link.listen_forever(), name="wakeup-listen-node")
                nodes.changed.clear()
                await first_of([self._stopping, nodes.changed], 60.0)
                if self._stopping.is_set():
                    # Not waiting for them to notice: a session still connecting to a node
                    # that does not answer would hold the stop for its connect timeout.
                    nodes.close()
                    for task in listening.values():
                        task.cancel()
                    return

    async def announce_forever(self) -> None:
        """Send what `announce` gathered, as NOTIFY, until `close` (then once more), each
        queue's to its node (core/engine/wake_nodes.py). A part whose NOTIFY failed or hung
        is sent again on a new connection, to another node if there is one. Also keeps the
        list of nodes current."""
        refresh = asyncio.create_task(self._nodes.refresh_forever(self._stopping),
                                      name="wakeup-nodes")
        try:
            await self._nodes.read()
            while True:
                await self._announce_ready.wait()
                self._announce_ready.clear()
                if not self._hints and not self._unnamed and not self._claimed:
                    self._publish(self._announced)
                    if self._stopping.is_set():
                        return
                    continue
                if not self._hints and not self._unnamed and not self._stopping.is_set():
                    # Claims alone: let them ride with a wake-up announced soon, if any.
                    self._wake_announced.clear()
                    await wait_event(self._wake_announced, _CLAIMS_GATHER_SECONDS)
                    self._announce_ready.clear()
                upto = self._announced
                parts = self._take_batch().split(self._nodes.target)
                failures = await asyncio.gather(
                    *(self._send(link, part) for link, part in parts.items()))
                failed = [f for f in failures if f is not None]
                if failed:
                    if all(isinstance(f, NodeUnreachable) for f in failed):
                        # No connection to a node at all: the others' LISTEN connections
                        # there are lost with it and reseed when they are back, so waiting
                        # here only delays answers whose commits stand.
                        self._unreachable_through = max(self._unreachable_through, upto)
                        self._on_published.set()
                        self._on_published = asyncio.Event()
                    if self._stopping.is_set():
                        return
                    await wait_event(self._stopping, _NOTIFY_RETRY_SECONDS)
                    continue
                self._publish(upto)
                if self._stopping.is_set():
                    return
                if not self._publish_waiting:
                    # Nobody waits: let announcements gather for a moment (one NOTIFY per
                    # few milliseconds wakes parked pops just as well as one per push, at a
                    # fraction of the cost). A state change awaiting its announcement is
                    # not kept waiting: what gathers while a NOTIFY is in flight is batched.
                    self._publish_wanted.clear()
                    await wait_event(self._publish_wanted, _ANNOUNCE_GATHER_SECONDS)
        finally:
            self._notifier_done = True
            self._on_published.set()  # nobody waits for what will not be sent
            refresh.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await refresh
            for link in self._nodes.links:
                await link.close_notifier()

    async def _send(self, link: WakeLink, part: _Batch) -> Exception | None:
        """Send one node's part of a round; put it back and answer the failure if it failed."""
        channels, payloads = part.notifications()
        try:
            await link.send(channels, payloads)
        except (NodeUnreachable, *DRIVER_ERRORS, ServiceError) as exc:  # timeouts included
            log.info("wake-up notify failed (%s); sending again", type(exc).__name__)
            self._requeue(part)
            return exc
        return None

    def _publish(self, upto: int) -> None:
        if upto > self._published:
            self._published = upto
            self._on_published.set()
            self._on_published = asyncio.Event()

    def _take_batch(self) -> _Batch:
        batch = _Batch(self._hints, self._unnamed, self._served, self._claimed,
                       self._claimed_until)
        self._hints, self._unnamed = defaultdict(dict), Counter()
        self._served, self._claimed = defaultdict(Counter), defaultdict(dict)
        self._claimed_until = {}
        return batch

    def _requeue(self, batch: _Batch) -> None:
        """Put a batch that was not sent back in front of what gathered since."""
        for queue_id, hints in batch.hints.items():
            merged = dict(hints)
            for pid in self._hints.get(queue_id, {}):
                if pid in merged or len(merged) < MAX_HINTS:
                    merged[pid] = None
                else:
                    self._unnamed[queue_id] += 1
            self._hints[queue_id] = merged
        self._unnamed.update(batch.unnamed)
        for queue_id, served in batch.served.items():
            self._served[queue_id].update(served)
        for key, pids in batch.claimed.items():
            self._claimed[key] = {**pids, **self._claimed.get(key, {})}
        for key, until in batch.claimed_until.items():
            self._claimed_until[key] = min(self._claimed_until.get(key, until), until)
        self._announce_ready.set()


class _Batch:
    """One announcement round: wake-ups per queue and claims per (queue, group)."""

    __slots__ = ("claimed", "claimed_until", "hints", "served", "unnamed")

    def __init__(self, hints: defaultdict[int, dict[int, None]], unnamed: Counter[int],
                 served: defaultdict[int, Counter[str]],
                 claimed: defaultdict[tuple[int, str], dict[int, None]],
                 claimed_until: dict[tuple[int, str], float]) -> None:
        self.hints = hints
        self.unnamed = unnamed
        self.served = served
        self.claimed = claimed
        self.claimed_until = claimed_until

    def split(self, node_of: Callable[[int], _Node]) -> dict[_Node, _Batch]:
        """This round, cut by the node each queue's notifications go to."""
        parts: dict[_Node, _Batch] = {}

        def part(queue_id: int) -> _Batch:
            node = node_of(queue_id)
            found = parts.get(node)
            if found is None:
                found = parts[node] = _Batch(defaultdict(dict), Counter(),
                                             defaultdict(Counter), defaultdict(dict), {})
            return found

        for queue_id, hints in self.hints.items():
            part(queue_id).hints[queue_id] = hints
        for queue_id, n in self.unnamed.items():
            part(queue_id).unnamed[queue_id] = n
        for queue_id, served in self.served.items():
            part(queue_id).served[queue_id] = served
        for key, pids in self.claimed.items():
            part(key[0]).claimed[key] = pids
        for key, until in self.claimed_until.items():
            part(key[0]).claimed_until[key] = until
        return parts

    def notifications(self) -> tuple[list[str], list[str]]:
        """(channels, payloads) in the order they are sent: the claims first, so that a
        release announced in the same round (an ack after the claim) arrives after them."""
        now = time.monotonic()
        channels: list[str] = []
        payloads: list[str] = []
        for (queue_id, token), pids in self.claimed.items():
            until = self.claimed_until.get((queue_id, token))
            channels.append(CLAIMED_CHANNEL)
            payloads.append(encode_claimed(queue_id, token, pids,
                                           None if until is None else max(until - now, 0.0)))
        # n = the partitions named plus the wakes that could not be: a reader counting
        # fewer names than n knows it was not told everything.
        wakes = hinted_payloads({
            q: (len(self.hints.get(q, {})) + self.unnamed[q], list(self.hints.get(q, {})),
                dict(self.served.get(q, {})))
            for q in {*self.hints, *self.unnamed}})
        channels.extend([CHANNEL] * len(wakes))
        payloads.extend(wakes)
        return channels, payloads


def _nobody(queue_id: int, partitions: Sequence[int], complete: bool) -> None:
    pass


def _nobody_claimed(queue_id: int, token: str, partitions: Sequence[int],
                    lease_s: float | None) -> None:
    pass


def _decoded(payload: str, decode: Callable[[str], _Heard], what: str) -> _Heard | None:
    """Another process's notification, decoded; None for a malformed one."""
    try:
        return decode(payload)
    except ValueError:
        log.warning("ignoring malformed %s payload %r", what, payload)
        return None
