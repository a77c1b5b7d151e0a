"""One database node's connections for the wake-up notifications (core/engine/listener.py): a
LISTEN session that hands other processes' notifications to their channels' callbacks, and a
notifier session that sends this process's announcements to that node.

This process's own notifications come back on the LISTEN session of the node they were sent
to; they are recognised by the notifier session's server process id, which is unique on
that node only, and dropped there (the announcer already woke its local waiters).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import asyncpg

from core.errors import ServiceError
from core.storage import notify
from core.storage.errors import DRIVER_ERRORS
from core.storage.hosts import connector_for
from core.waiting import first_of, wait_event, within

log = logging.getLogger(__name__)
_RECONNECT_DELAY = 1.0
_PROBE_SECONDS = 3.0
# A barrier's round trip answers within this, or the barrier has failed (the pop reseeds).
_BARRIER_SECONDS = 2.0
# A NOTIFY commits within this, or the node is taken for silent (a frozen server closes
# nothing): its part of the round goes to another node (core/engine/wake_nodes.py), well
# within the 2 s a state change waits for its announcement (core/engine/listener.py).
SEND_SECONDS = 1.0
# A node whose send failed takes no notifications for this long, and then only once its
# LISTEN session has shown it alive since (a node this process does not listen on: the
# next send tries it again).
AVOID_SECONDS = 5.0

Notified = Callable[[str], None]  # another process's notification: its payload


class NodeUnreachable(Exception):
    """The notifier could not connect to the node at all (not a failure mid-statement)."""


class WakeLink:
    def __init__(self, dsn: str, connect_options: Mapping[str, Any],
                 channels: Mapping[str, Notified], *,
                 on_connected: Callable[[], None]) -> None:
        """`channels`: what the LISTEN session listens to (read when it connects; none: it
        does not listen). `on_connected`: called each time the LISTEN session is
        (re)established, since notifications sent while it was down are lost."""
        self.dsn = dsn
        self._connect_options = dict(connect_options)
        self._channels = channels
        self._on_connected = on_connected
        self._stopping = asyncio.Event()
        self.listening = False
        self.listener_pid: int | None = None  # its server process (tests cut it)
        self._notifier: asyncpg.Connection | None = None
        self.notifier_pid: int | None = None  # its server process (tests cut it)
        self.notify_statements = 0  # NOTIFY statements committed (tests and figures count)
        # Health for sending (`sendable`): when a send last failed, when the node last
        # answered on the LISTEN session (a connect, a probe, a barrier).
        self._send_failed_at: float | None = None
        self._alive_at = float("-inf")
        # Barriers (`heard_through`): the LISTEN connection while it is up (one statement at
        # a time on it), the round in flight.
        self._listen_conn: asyncpg.Connection | None = None
        self._listen_lock = asyncio.Lock()
        self._heard_at = float("-inf")  # when the last barrier that answered was sent
        self._barrier_round: asyncio.Future[bool] | None = None
        self._barrier_round_started = 0.0

    @property
    def listens(self) -> bool:
        return bool(self._channels)

    def close(self) -> None:
        """Make `listen_forever` return."""
        self._stopping.set()

    # -- hearing ------------------------------------------------------------------------

    async def listen_forever(self) -> None:
        """Hold the LISTEN session (reconnecting after an outage) until `close`."""
        while not self._stopping.is_set():
            conn: asyncpg.Connection | None = None
            try:
                conn = await connector_for(self.dsn).connect(**self._connect_options)
                # Told at once when the server goes away (crash, restart), so the reconnect
                # starts then and not at the next periodic look.
                lost = asyncio.Event()
                conn.add_termination_listener(lambda _conn, event=lost: event.set())
                for channel, callback in self._channels.items():
                    await conn.add_listener(channel, self._relay(callback))
                self.listener_pid = conn.get_server_pid()
                self._listen_conn = conn
                self.listening = True
                self._alive_at = time.monotonic()
                self._on_connected()
                while not self._stopping.is_set() and not conn.is_closed():
                    await first_of([self._stopping, lost], 5.0)
                    if not lost.is_set() and not self._stopping.is_set():
                        # A server that stopped answering (frozen, partitioned, a failover
                        # in progress) closes nothing: ask, and reconnect if it is silent.
                        async with self._listen_lock:
                            await within(_PROBE_SECONDS, notify.probe(conn))
                        self._alive_at = time.monotonic()
            except asyncio.CancelledError:
                raise
            except (*DRIVER_ERRORS, ServiceError, TimeoutError) as exc:
                log.info("wake-up listener on %s disconnected (%s); reconnecting",
                         _where(self.dsn), type(exc).__name__)
            finally:
                self.listening = False
                self._listen_conn = None
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await within(2.0, conn.close())
            await wait_event(self._stopping, _RECONNECT_DELAY)

    def _relay(self, callback: Notified) -> Callable[..., None]:
        def on_notification(conn: Any, pid: int, channel: str, payload: object) -> None:
            if pid != self.notifier_pid:
                callback(str(payload))
        return on_notification

    async def heard_through(self, since: float) -> bool:
        """Whether every notification committed on this node before `since`
        (time.monotonic()) has been handed to the callbacks: a barrier sent after `since`
        came back (one round at a time, shared by every caller it serves). False while the
        LISTEN session is down or the barrier failed."""
        while self._heard_at < since:
            round_ = self._barrier_round
            if round_ is None or round_.done():
                self._barrier_round_started = time.monotonic()
                round_ = self._barrier_round = asyncio.ensure_future(
                    self._barrier(self._barrier_round_started))
            started = self._barrier_round_started
            if not await asyncio.shield(round_):
                return False
            if started >= since:
                return True
        return True

    async def _barrier(self, started: float) -> bool:
        """One round trip on the LISTEN session. A committing session signals every
        listening session before its own client sees the commit, and an idle session that
        was signalled sends the notifications it has not sent yet before it answers its
        next statement (PostgreSQL's postgres.c: ProcessNotifyInterrupt before
        ReadyForQuery); asyncpg hands them to the callbacks in the order received, before
        the answer resumes us. So when the answer is here, every notification committed
        on this node before `started` has reached the callbacks. (A NOTIFY to itself would
        rely on commit order alone, but would cost an xid and a commit and signal every
        listening session of the database, per barrier.)"""
        conn = self._listen_conn
        if conn is None or not self.listening:
            return False
        try:
            async with self._listen_lock:
                await within(_BARRIER_SECONDS, notify.probe(conn))
        except (TimeoutError, *DRIVER_ERRORS, ServiceError) as exc:
            log.info("wake-up barrier on %s failed (%s)", _where(self.dsn),
                     type(exc).__name__)
            if isinstance(exc, TimeoutError):
                conn.terminate()  # silent: the listener reconnects
            return False
        self._heard_at = max(self._heard_at, started)
        self._alive_at = time.monotonic()
        return True

    # -- telling ------------------------------------------------------------------------

    def sendable(self) -> bool:
        """Whether notifications may go to this node: no send failed, or the last failure
        is AVOID_SECONDS old and the node has answered on the LISTEN session since."""
        failed = self._send_failed_at
        if failed is None:
            return True
        if time.monotonic() - failed < AVOID_SECONDS:
            return False
        return not self.listens or self._alive_at > failed

    async def send(self, channels: Sequence[str], payloads: Sequence[str]) -> None:
        """One notification per (channel, payload), in this order, in one transaction on
        the notifier session (opened if needed). Raises NodeUnreachable if it could not be
        opened, a driver or service error if the statement failed, TimeoutError if it did
        not commit within SEND_SECONDS (the session is dropped: the next send opens
        another). A failure makes the node not `sendable` for a while."""
        try:
            await self._send(channels, payloads)
        except BaseException:
            self._send_failed_at = time.monotonic()
            raise

    async def _send(self, channels: Sequence[str], payloads: Sequence[str]) -> None:
        conn = self._notifier
        if conn is None or conn.is_closed():
            try:
                conn = await connector_for(self.dsn).connect(**self._quick_commit_options())
            except (*DRIVER_ERRORS, ServiceError, TimeoutError) as exc:
                raise NodeUnreachable(type(exc).__name__) from exc
            self._notifier = conn
            self.notifier_pid = conn.get_server_pid()
        try:
            # Bounded: a frozen server holds the statement for as long as it is frozen, and
            # every state change of its queues would wait for it. Given up on, it may still
            # commit when the server wakes: a late wake-up is only an extra look, and a late
            # claim is checked before a pop answers nothing on it (core/engine/ready/lane.py).
            await within(SEND_SECONDS, notify.notify_each(
                conn, channels=channels, payloads=payloads))
        except BaseException:
            self._notifier = None
            conn.terminate()
            raise
        self.notify_statements += 1

    def _quick_commit_options(self) -> dict[str, Any]:
        """Connection options without waiting for a WAL flush at commit: a NOTIFY needs no
        durability, and would otherwise hold PostgreSQL's global notify lock through one."""
        return {**self._connect_options, "server_settings": {
            **self._connect_options.get("server_settings", {}), "synchronous_commit": "off"}}

    def drop_notifier(self) -> None:
        """Drop the notifier session at once (the node left the cluster)."""
        conn, self._notifier = self._notifier, None
        if conn is not None:
            conn.terminate()

    async def close_notifier(self) -> None:
        conn, self._notifier = self._notifier, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await within(2.0, conn.close())


def _where(dsn: str) -> str:
    """A DSN without its credentials, for the log."""
    return dsn.rpartition("@")[2] or dsn
