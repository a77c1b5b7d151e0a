"""The broker's core as one service: `async with Broker.open(settings) as broker`.

A `Broker` owns the parts of one process: the database pool, the write coalescer and the
wake-up hub (its LISTEN and NOTIFY loops run as side tasks in a TaskGroup: one that dies
cancels the owner of the `async with`, so the process stops and its supervisor starts a new
one). The HTTP edge calls its methods and never its parts. Every state change announces
what it made deliverable to parked pops, here, after its commit: pushes, acks, transactions,
DLQ replays, group deletes and seeks (lease expiry is announced by the reaper process).

    push / pop / ack / ack_batch / transaction / extend_lease / configure / delete_queue /
    fetch / healthy / pool_stats / stop_waiting
    dlq.*        dead letters (core/dlq.py)        messages.*   inspection (core/messages.py)
    groups.*     consumer groups (core/groups.py)  resources.*  figures (core/resources.py)
    traces.*     traces (core/traces.py)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from core import ack as acks
from core import fetch as offset_reads
from core import leases, queues, transactions
from core.dlq import DeadLetters
from core.embedded import database_dsn
from core.groups import ConsumerGroups
from core.listener import WakeupHub
from core.longpoll import Backoff, pop_or_wait
from core.messages import Messages
from core.pop import PopRequest, PopResult
from core.push import Pusher, PushItem, PushOutcome
from core.resources import Resources
from core.settings import Settings
from core.storage.database import Database, PoolStats, server_settings
from core.traces import Traces
from core.writes import Appended


class Broker:
    """One process's broker. Open it with `Broker.open`; see the module docstring."""

    def __init__(self, settings: Settings, db: Database, hub: WakeupHub,
                 stop_waiting: asyncio.Event) -> None:
        self.settings = settings
        self._db = db
        self._hub = hub
        self._stop_waiting = stop_waiting
        self._pusher = Pusher(
            db, max_flush_messages=settings.max_flush_messages,
            max_pending_messages=settings.max_pending_messages,
            max_partitions_per_flush=settings.max_partitions_per_flush,
            max_concurrent_flushes=settings.max_concurrent_flushes,
            on_appended=self._appended)
        self._backoff = Backoff(settings.pop_wait_initial_interval_ms,
                                settings.pop_wait_backoff_threshold,
                                settings.pop_wait_backoff_multiplier,
                                settings.pop_wait_max_interval_ms)
        self.dlq = DeadLetters(db, hub.announce)
        self.groups = ConsumerGroups(db, hub.announce)
        self.resources = Resources(db)
        self.messages = Messages(db)
        self.traces = Traces(db)

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, settings: Settings, *, dsn: str | None = None, migrate: bool = True,
                   stop_waiting: asyncio.Event | None = None) -> AsyncIterator[Broker]:
        """Open the pool (applying migrations), start the side tasks, and yield the broker.

        `stop_waiting`, when given, is the event that makes parked long polls answer at once
        (the owner sets it when it starts to drain; `Broker.stop_waiting` sets it too).
        Leaving the block stops long polls waiting, flushes the coalescer (pushes accepted
        before are written and answered), stops the wake-up loops, then closes the pool."""
        target = dsn if dsn is not None else database_dsn(settings)
        db = await Database.open(settings, target, migrate=migrate)
        try:
            hub = WakeupHub(target, server_settings(settings, role="wakeup"))
            broker = cls(settings, db, hub, stop_waiting or asyncio.Event())
            async with asyncio.TaskGroup() as side_tasks:
                side_tasks.create_task(hub.listen_forever(), name="wakeup-listen")
                side_tasks.create_task(hub.announce_forever(), name="wakeup-notify")
                try:
                    yield broker
                finally:
                    broker.stop_waiting()
                    await broker._pusher.close()
                    hub.close()  # the loops return; the TaskGroup waits for them
        finally:
            await db.close()

    # --- the message plane ---------------------------------------------------------------

    async def push(self, items: Sequence[PushItem]) -> list[PushOutcome]:
        """Append items (JSON items, or the frames of a client-built blob: see
        `core.writes.NewMessage.packed`); one outcome per item, in order, each answered
        once its flush committed."""
        return await self._pusher.push(items)

    def _appended(self, appended: Appended) -> None:
        self._hub.announce([(appended.queue_id, appended.partition_id)])

    async def pop(self, request: PopRequest, *, wait: bool = False, timeout_ms: int = 0,
                  gone: asyncio.Event | None = None) -> PopResult:
        """Claim and read now; with `wait`, park until something is delivered, `timeout_ms`
        passes, the client is `gone`, or the broker stops waiting (an empty result)."""
        return await pop_or_wait(self._db, self._hub, request, wait=wait,
                                 timeout_ms=timeout_ms, backoff=self._backoff, gone=gone,
                                 stop_waiting=self._stop_waiting)

    def stop_waiting(self) -> None:
        """Parked long polls answer now and new ones do not park (the process drains)."""
        self._stop_waiting.set()

    async def ack(self, group: str, item: acks.AckItem) -> acks.AckOutcome:
        """One ack (§4.5)."""
        [outcome] = (await self.ack_batch([acks.GroupAck(group, item)])).outcomes
        return outcome

    async def ack_batch(self, items: Sequence[acks.GroupAck]) -> acks.AckResult:
        """Acks of any groups and partitions (§4.6), applied in one statement: all of it or
        none; each item answers what was applied to it."""
        async with self._db.session() as conn:
            result = await acks.apply_acks(conn, items)
        self._hub.announce(result.wakes)
        return result

    async def transaction(self, ops: list[transactions.TxPush | transactions.TxAck],
                          required_leases: list[str]) -> transactions.TxResult:
        """Pushes and acks in one database transaction (§4.7)."""
        result = await transactions.run_transaction(self._db, ops, required_leases)
        if result.committed:
            self._hub.announce(result.wakes)
        return result

    async def extend_lease(self, lease_id: str, seconds: int) -> list[datetime]:
        return await leases.extend_lease(self._db, lease_id, seconds)

    async def configure(self, *, queue: str, namespace: str | None, task: str | None,
                        given: Mapping[str, Any], replace: bool) -> queues.QueueConfig:
        return await queues.configure(self._db, queue=queue, namespace=namespace, task=task,
                                      given=dict(given), replace=replace)

    async def delete_queue(self, queue: str) -> bool:
        return await queues.delete_queue(self._db, queue)

    async def fetch(self, entries: Sequence[offset_reads.FetchEntry], *, max_bytes: int,
                    max_wait_ms: int) -> list[offset_reads.FetchResult]:
        return await offset_reads.fetch(self._db, entries, max_bytes=max_bytes,
                                        max_wait_ms=max_wait_ms)

    # --- the process ---------------------------------------------------------------------

    async def healthy(self) -> bool:
        """Does the database answer?"""
        return await self._db.ping()

    def pool_stats(self) -> PoolStats:
        return self._db.pool_stats()
