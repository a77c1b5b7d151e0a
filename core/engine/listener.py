"""Waking parked long polls: in-process events fed by local commits and by LISTEN.

Each web process holds one LISTEN connection (not a pool connection) on `core.engine.wakeup.CHANNEL`
and one notifier connection, each served by a loop its owner runs as a side task
(`listen_forever`, `announce_forever`; the reaper runs only the second). Thousands of parked
pops cost one `asyncio.Event` each and no database connection.

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
the next. This process's own notifications are ignored when they come back. Missed
notifications (e.g. while the LISTEN connection reconnects) are made up by the ready set's
reseed: a lane seeded under an earlier LISTEN session is not trusted (`session`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import asyncpg

from core.engine.wakeup import (
    CHANNEL,
    CLAIMED_CHANNEL,
    MAX_HINTS,
    Wake,
    decode_claimed,
    decode_payload,
    encode_claimed,
    group_token,
    notify_hinted,
)
from core.errors import ServiceError
from core.parked import leave
from core.storage import notify
from core.storage.errors import DRIVER_ERRORS
from core.storage.hosts import connector_for
from core.storage.statements import Statement
from core.waiting import first_of, wait_event, within

log = logging.getLogger(__name__)
_RECONNECT_DELAY = 1.0
_PROBE_SECONDS = 3.0
_PROBE = Statement[None]("listener_probe")
_ANNOUNCE_GATHER_SECONDS = 0.005
ANY_QUEUE = -1  # the waiting line of discovery pops, which any queue's commit may serve

WaitLine = tuple[str, str | None]  # (consumer group, partition name or None for any)
_token = functools.lru_cache(maxsize=4096)(group_token)


class Waiter:
    """One parked pop; its event is set when it should look again (its lanes have news)."""

    __slots__ = ("event", "line", "slots")

    def __init__(self, line: WaitLine, slots: list[int]) -> None:
        self.event = asyncio.Event()
        self.line = line
        self.slots = slots  # the queue ids (or ANY_QUEUE) it waits on


class WakeupHub:
    def __init__(self, dsn: str, connect_options: Mapping[str, Any]) -> None:
        """`connect_options`: the arguments of its connections (`HostConnector.connect`;
        core.storage.database.connect_options)."""
        self._dsn = dsn
        self._connect_options = dict(connect_options)
        # queue id (or ANY_QUEUE) -> waiting line -> waiters in arrival order
        self._lines: dict[int, dict[WaitLine, dict[Waiter, None]]] = {}
        # Per queue, to announce: the partitions named (in order, distinct) and how many
        # wakes could not be named (no partition given, or past MAX_HINTS).
        self._hints: defaultdict[int, dict[int, None]] = defaultdict(dict)
        self._unnamed: Counter[int] = Counter()
        # Per queue, spans to be announced that this process's pops were woken for, per group.
        self._served: defaultdict[int, Counter[str]] = defaultdict(Counter)
        self._announce_ready = asyncio.Event()
        self._stopping = asyncio.Event()
        self._notifier_pid: int | None = None
        self._channels: dict[str, Callable[[str | None], None]] = {}
        self.listening = False
        # LISTEN sessions so far: a new number at each (re)connect, since notifications sent
        # while it was down are lost (the ready set reseeds lanes seeded under another).
        self._session = 0
        self.listener_pid: int | None = None  # its server process (tests cut it)
        self._deaf_since = time.monotonic()  # when the LISTEN connection was last lost
        # Who hears every mark (queue id, partitions, whether they are all the partitions
        # concerned): the ready set's reader (core/engine/ready).
        self.on_marks: Callable[[int, Sequence[int], bool], None] = _nobody
        # Who hears what other processes' pops claimed (queue id, group token, partitions).
        self.on_claimed: Callable[[int, str, Sequence[int]], None] = _nobody_claimed
        self._claimed: defaultdict[tuple[int, str], dict[int, None]] = defaultdict(dict)

    def session(self) -> int | None:
        """The LISTEN connection's session number; None while it is down."""
        return self._session if self.listening else None

    def deaf_since(self) -> float:
        """When (time.monotonic()) the LISTEN connection was last down or lost."""
        return self._deaf_since

    def subscribe(self, channel: str, callback: Callable[[str | None], None]) -> None:
        """Also LISTEN on `channel` (call before `listen_forever` starts): `callback` gets
        each notification's payload, and None whenever the connection is (re)established,
        since notifications sent while it was down are lost."""
        self._channels[channel] = callback

    def close(self) -> None:
        """Make `listen_forever` and `announce_forever` return (after a last announcement)."""
        self._stopping.set()
        self._announce_ready.set()

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
        commit: wake local waiters now, other processes by NOTIFY."""
        for queue_id, partition_id in wakes:
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
        self._announce_ready.set()

    def announce_claimed(self, queue_id: int, group: str, partitions: Iterable[int]) -> None:
        """This process's pops claimed these partitions for `group`: tell the others, in
        the next announcement (`CLAIMED_CHANNEL`)."""
        claimed = self._claimed[(queue_id, _token(group))]
        for p in partitions:
            if len(claimed) < MAX_HINTS:
                claimed[p] = None
        self._announce_ready.set()

    def _on_claimed(self, conn: Any, pid: int, channel: str, payload: object) -> None:
        if pid == self._notifier_pid:
            return  # our own pops' claims
        try:
            queue_id, token, partitions = decode_claimed(str(payload))
        except ValueError:
            log.warning("ignoring malformed claimed payload %r", payload)
            return
        self.on_claimed(queue_id, token, partitions)

    def _on_notification(self, conn: Any, pid: int, channel: str, payload: object) -> None:
        if pid == self._notifier_pid:
            return  # our own announcement: local waiters were woken when it was made
        try:
            queue_id, count, partitions, served = decode_payload(str(payload))
        except ValueError:
            log.warning("ignoring malformed wake-up payload %r", payload)
            return
        self.wake(queue_id, count, partitions, served)

    def wake_everyone(self) -> None:
        """Every parked pop checks again (e.g. pops were paused and are not any more)."""
        for lines in self._lines.values():
            for waiters in lines.values():
                for waiter in waiters:
                    waiter.event.set()

    async def listen_forever(self) -> None:
        """Hold the LISTEN connection (reconnecting after an outage) until `close`."""
        while not self._stopping.is_set():
            conn: asyncpg.Connection | None = None
            try:
                conn = await connector_for(self._dsn).connect(**self._connect_options)
                # Told at once when the server goes away (crash, restart), so the reconnect
                # starts then and not at the next periodic look.
                lost = asyncio.Event()
                conn.add_termination_listener(lambda _conn, event=lost: event.set())
                await conn.add_listener(CHANNEL, self._on_notification)
                await conn.add_listener(CLAIMED_CHANNEL, self._on_claimed)
                for channel, callback in self._channels.items():
                    await conn.add_listener(channel, _relay(callback))
                    callback(None)
                self._session += 1
                self.listener_pid = conn.get_server_pid()
                self.listening = True
                self.wake_everyone()  # anything missed while disconnected: check once
                while not self._stopping.is_set() and not conn.is_closed():
                    await first_of([self._stopping, lost], 5.0)
                    if not lost.is_set() and not self._stopping.is_set():
                        # A server that stopped answering (frozen, partitioned, a failover
                        # in progress) closes nothing: ask, and reconnect if it is silent.
                        await within(_PROBE_SECONDS, _PROBE.value(conn))
            except asyncio.CancelledError:
                raise
            except (*DRIVER_ERRORS, ServiceError) as exc:
                log.info("wake-up listener disconnected (%s); reconnecting", type(exc).__name__)
            finally:
                if self.listening:
                    self._deaf_since = time.monotonic()
                self.listening = False
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await within(2.0, conn.close())
            await wait_event(self._stopping, _RECONNECT_DELAY)

    async def announce_forever(self) -> None:
        """Send what `announce` gathered, as NOTIFY, until `close` (then once more)."""
        conn: asyncpg.Connection | None = None
        # NOTIFY needs no durability: without this each one would wait for a WAL flush
        # while holding PostgreSQL's global notify lock.
        options = {**self._connect_options, "server_settings": {
            **self._connect_options.get("server_settings", {}), "synchronous_commit": "off"}}
        try:
            while True:
                await self._announce_ready.wait()
                self._announce_ready.clear()
                if not self._hints and not self._unnamed and not self._claimed:
                    if self._stopping.is_set():
                        return
                    continue
                hints, self._hints = self._hints, defaultdict(dict)
                unnamed, self._unnamed = self._unnamed, Counter()
                served, self._served = self._served, defaultdict(Counter)
                claimed, self._claimed = self._claimed, defaultdict(dict)
                # n = the partitions named plus the wakes that could not be: a reader
                # counting fewer names than n knows it was not told everything.
                batch = {q: (len(hints.get(q, {})) + unnamed[q], list(hints.get(q, {})),
                             dict(served.get(q, {})))
                         for q in {*hints, *unnamed}}
                try:
                    if conn is None or conn.is_closed():
                        conn = await connector_for(self._dsn).connect(**options)
                        self._notifier_pid = conn.get_server_pid()
                    await notify_hinted(conn, batch)
                    if claimed:
                        await notify.notify_wakeups(
                            conn, channel=CLAIMED_CHANNEL,
                            payloads=[encode_claimed(q, token, pids)
                                      for (q, token), pids in claimed.items()])
                    # Let announcements gather for a moment: one NOTIFY per few milliseconds
                    # wakes waiters just as well as one per push, at a fraction of the cost.
                    await asyncio.sleep(_ANNOUNCE_GATHER_SECONDS)
                except asyncio.CancelledError:
                    raise
                except (*DRIVER_ERRORS, ServiceError) as exc:
                    # Other processes' ready sets reseed on their floor; try again next time.
                    log.info("wake-up notify failed (%s)", type(exc).__name__)
                    conn = None
                if self._stopping.is_set():
                    return
        finally:
            if conn is not None:
                with contextlib.suppress(Exception):
                    await within(2.0, conn.close())


def _nobody(queue_id: int, partitions: Sequence[int], complete: bool) -> None:
    pass


def _nobody_claimed(queue_id: int, token: str, partitions: Sequence[int]) -> None:
    pass


def _relay(callback: Callable[[str | None], None]) -> Callable[..., None]:
    def on_notification(conn: Any, pid: int, channel: str, payload: object) -> None:
        callback(str(payload))
    return on_notification
