"""The broker's core as one service: `async with Broker.open(settings) as broker`.

A `Broker` owns the parts of one process: the database pool, the write coalescer and the
wake-up hub (its LISTEN and NOTIFY loops run as side tasks in a TaskGroup: one that dies
cancels the owner of the `async with`, so the process stops and its supervisor starts a new
one). The HTTP edge calls its methods and never its parts. Every state change announces
what it made deliverable to parked pops, here, after its commit: pushes, acks, transactions,
DLQ replays, group deletes, seeks and queue options (lease expiry is announced by the reaper
process), and is answered only once that announcement is published: the next request of the
same client may reach another process, whose pop must not answer 204 for want of it
(core/engine/ready/reader.py).

Pushes go to the push spool (core/engine/spool.py) instead of the database while push maintenance
is on, while the database is unreachable, and until the spool is drained; pops claim
nothing while pop maintenance is on (core/admin/switches.py holds both switches).

    push / pop / serve_pop / ack / ack_batch / transaction / extend_lease / configure /
    delete_queue / fetch / healthy / pool_stats / stop_waiting
    maintenance / set_maintenance / require_direct_writes      the switches and the spool
    dlq.*        dead letters (core/admin/dlq.py)        messages.*   inspection (core/admin/messages.py)
    groups.*     consumer groups (core/admin/groups.py)  resources.*  figures (core/admin/resources.py)
    traces.*     traces (core/admin/traces.py)            streams.*    stream queries (core/streams)
    timers.*     timers (core/timers)                     tenants.*    quotas (core/tenancy)
    stats_refresh / analytics / cluster_figures / partitions_changed   (core/upkeep/stats.py)
    history.*    the analytics family's series (core/upkeep/history.py)

Every call names its tenant (core/tenancy; '' the default tenant, what a call naming none
acts in): names are looked up in that tenant's namespace, and writes pass its quota first
(`tenants.admit_write`: in memory, before any database work).

The message plane counts what it did in `core.counters.COUNTERS` (in memory); a side task
(`core.upkeep.stats.CounterFlusher`) adds the counts to the database every METRICS_FLUSH_MS.
`figures_provider` is where the maintenance switch and push spool report their state to the
metrics (`_operating_figures`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.admin import changes, queues
from core.admin.dlq import DeadLetters
from core.admin.groups import ConsumerGroups
from core.admin.messages import Messages
from core.admin.resources import Resources
from core.admin.switches import CHANNEL as SWITCHES_CHANNEL
from core.admin.switches import Switches, SwitchState
from core.admin.traces import Traces
from core.counters import COUNTERS
from core.embedded import database_dsn
from core.engine import ack as acks
from core.engine import ack_spans, conflation, encryption, give_back, transactions
from core.engine import fetch as offset_reads
from core.engine.autopilot import AutopilotState, Echo, Pilot, PilotLane
from core.engine.batching.acks import AckFlusher, ExtendFlusher
from core.engine.key_check import check_key
from core.engine.listener import WakeupHub
from core.engine.longpoll import Backoff, pop_or_wait
from core.engine.pop import QUEUE_MODE, PopRequest, PopResult
from core.engine.push import Pusher, PushItem, PushOutcome
from core.engine.ready.reader import Reader
from core.engine.ready.ready_set import ReadySet
from core.engine.spool import Spool, SpoolSettings
from core.engine.spool_format import SpoolRecord
from core.engine.writes import Appended, NewMessage
from core.ephemeral.service import Ephemeral
from core.ephemeral.sweeper import Sweeper as EphemeralSweeper
from core.ephemeral.waiters import CHANNEL as EPHEMERAL_CHANNEL
from core.errors import QueenError, ServiceError, StorageReadOnly, StorageUnavailable
from core.kafka.service import Kafka
from core.kv.service import KvService
from core.settings import Settings
from core.storage.database import Database, PoolStats, connect_options
from core.storage.stats import SeriesRow
from core.streams.service import Streams
from core.tenancy.scoped import scoped
from core.tenancy.service import Tenants
from core.timers.service import Timers
from core.tracing import Tracing
from core.upkeep import stats
from core.upkeep.history import History


class WritesPaused(ServiceError):
    """Pushes are in maintenance: this write cannot go to the spool; retry later."""

    retry_after_seconds = 5


@dataclass(frozen=True, slots=True)
class MaintenanceStatus:
    push: bool  # pushes go to the spool
    pop: bool  # pops answer 204
    buffered_messages: int  # in this host's spool for the database, not yet written
    database_healthy: bool  # as this worker last found it
    spool_failed: int  # records this worker refused because the spool could not take them


@dataclass(frozen=True, slots=True)
class ServedPop:
    """What `Broker.serve_pop` answers."""

    request: PopRequest  # as served: the autopilot's choices in
    result: PopResult
    conflating: bool  # the group's effective conflation policy (extensions §20.2)
    echo: Echo | None  # the answer's `autopilot` object, if it gets one


class Broker:
    """One process's broker. Open it with `Broker.open`; see the module docstring."""

    def __init__(self, settings: Settings, db: Database, hub: WakeupHub,
                 stop_waiting: asyncio.Event, tracing: Tracing | None = None) -> None:
        self.settings = settings
        # Spans of pushes, pops and acks (core/tracing.py); off unless TRACING_EXPORTER
        self.tracing = tracing if tracing is not None else Tracing.off()
        self._db = db
        self._hub = hub
        self._stop_waiting = stop_waiting
        # The log's statements go to `db.log`: on Citus, a pool spread over the nodes
        # (core/storage/cluster.py); everything else to `db` (the coordinator there).
        log = db.log
        self._pusher = Pusher(
            log, max_flush_messages=settings.max_flush_messages,
            max_pending_messages=settings.max_pending_messages,
            max_partitions_per_flush=settings.max_partitions_per_flush,
            max_concurrent_flushes=settings.max_concurrent_flushes,
            max_flush_bytes=settings.max_flush_bytes,
            answer_within_s=settings.push_answer_timeout_ms / 1000,
            on_appended=self._appended)
        self._backoff = Backoff(settings.pop_wait_initial_interval_ms,
                                settings.pop_wait_backoff_threshold,
                                settings.pop_wait_backoff_multiplier,
                                settings.pop_wait_max_interval_ms)
        # The read path (core/engine/ready): per (queue, group), the partitions this process
        # knows may be claimable, fed by every mark the listener hears; pops claim from it.
        self.ready = ReadySet(log, hub.session,
                              reseed_interval_s=settings.ready_reseed_interval_ms / 1000)
        self.reader = Reader(log, self.ready, claimed=hub.announce_claimed,
                             heard_through=hub.heard_through)
        hub.on_marks = self.reader.marked
        hub.on_claimed = self.ready.claimed_elsewhere
        # Acks and lease extensions of concurrent requests: one statement per flush.
        # A pop's acks that come back whole skip the per-item resolution on one PostgreSQL
        # (core/engine/ack_spans.py): the deliveries this process answered, by lease.
        self._acks = AckFlusher(log, hub.announce, deliveries=(
            None if log.shards.distributed else ack_spans.Deliveries()))
        self._extends = ExtendFlusher(log)
        # Tenants' quotas (core/tenancy), read every QUEEN_TENANT_REFRESH_MS; a heartbeat
        # younger than the metrics' liveness window counts a process among those sharing
        # a tenant's rates.
        self.tenants = Tenants(db, settings.tenancy, live_seconds=(
            stats.LIVE_INTERVALS * settings.metrics_flush_ms / 1000 + 2))
        self.dlq = DeadLetters(db, hub.publish, self.tenants,
                               list_max_bytes=settings.list_max_bytes)
        self.groups = ConsumerGroups(db, hub.publish)
        self.resources = Resources(db)
        self.messages = Messages(db, list_max_bytes=settings.list_max_bytes)
        self.traces = Traces(db, list_max_bytes=settings.list_max_bytes)
        self.ephemeral = Ephemeral(  # ephemeral queues (§19, core/ephemeral)
            db, cap_bytes=settings.ephemeral_max_bytes, stop_waiting=stop_waiting,
            tenants=self.tenants, pop_max_bytes=settings.pop_max_bytes)
        self.kv = KvService(db, max_keys=settings.kv_max_keys, tenants=self.tenants)
        # timers (core/timers); fired by their own process
        self.timers = Timers(db, settings, self.tenants)
        self.streams = Streams(db, hub.publish, self.require_direct_writes, self.tenants,
                               state_max_bytes=settings.list_max_bytes)
        # Extensions §20.5: live pops, drain rates and widths per lane; what is ready comes
        # from the ready set (no statement).
        self._autopilot = AutopilotState(view=self.reader)
        self.kafka = Kafka(db, hub, stop_waiting,  # the Kafka edge's reads and offsets
                           default_partitions=settings.kafka_default_partitions,
                           tenants=self.tenants)
        self.counters = COUNTERS
        self.history = History(db, settings)  # the analytics family (core/upkeep/history.py)
        self.figures_provider: stats.FiguresProvider = stats.no_spool
        self.flusher: stats.CounterFlusher | None = None  # set by `open`
        self._switches = Switches(db, self._switched)
        self._spool = Spool(SpoolSettings(settings.spool_dir))  # its directory: see `open`

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, settings: Settings, *, dsn: str | None = None, migrate: bool = True,
                   stop_waiting: asyncio.Event | None = None,
                   role: str = "web", tracing: Tracing | None = None) -> AsyncIterator[Broker]:
        """Open the pool (applying migrations), check QUEEN_ENCRYPTION_KEY against the
        database (core/engine/key_check.py), start the side tasks, and yield the broker.

        `stop_waiting`, when given, is the event that makes parked long polls answer at once
        (the owner sets it when it starts to drain; `Broker.stop_waiting` sets it too);
        `role` names the process in the per-process history (web, kafka); `tracing` records
        spans (default: as TRACING_EXPORTER says), flushed when the block is left.
        Leaving the block stops long polls waiting, flushes the coalescer (pushes accepted
        before are written and answered), stops the wake-up loops, then closes the pool."""
        tracer = tracing if tracing is not None else Tracing.from_settings(settings)
        db = await Database.open(settings, dsn if dsn is not None else database_dsn(settings),
                                 migrate=migrate)
        # The side connections: one node for every broker (on Citus the coordinator;
        # core/storage/cluster.py says why); the wake-ups are spread over the workers there
        # (core/engine/wake_nodes.py).
        target = db.home_dsn
        try:
            encryption.install(settings.encryption_key)
            async with db.session() as conn:
                await check_key(conn, settings.encryption_key)
            hub = WakeupHub(target, connect_options(settings, role="wakeup"),
                            nodes=db.wake_nodes if db.topology.citus else None)
            broker = cls(settings, db, hub, stop_waiting or asyncio.Event(), tracer)
            switches, spool = broker._switches, await broker._open_spool()
            await broker.tenants.refresh()  # quotas hold from the first request
            hub.subscribe(SWITCHES_CHANNEL, switches.notified)
            hub.subscribe(EPHEMERAL_CHANNEL, broker.ephemeral.waiters.notified)
            broker.figures_provider = broker._operating_figures
            sweeper = EphemeralSweeper(target, settings)  # its own connection: see the module
            flusher = broker.flusher = stats.CounterFlusher(
                target, settings, pool_stats=db.pool_stats, parked=hub.parked_by_queue,
                figures=lambda: broker.figures_provider(), role=role)
            try:
                async with asyncio.TaskGroup() as side_tasks:
                    side_tasks.create_task(hub.listen_forever(), name="wakeup-listen")
                    side_tasks.create_task(hub.announce_forever(), name="wakeup-notify")
                    side_tasks.create_task(flusher.flush_forever(), name="counter-flush")
                    side_tasks.create_task(switches.reread_forever(), name="switches")
                    side_tasks.create_task(broker.tenants.refresh_forever(),
                                           name="tenant-quotas")
                    side_tasks.create_task(sweeper.run_forever(), name="ephemeral-sweep")
                    side_tasks.create_task(spool.run_forever(
                        broker._replay, paused=lambda: switches.push_paused,
                        healthy=broker.healthy), name="spool-drain")
                    try:
                        yield broker
                    finally:
                        broker.stop_waiting()
                        spool.stop()
                        switches.close()
                        broker.tenants.close()
                        sweeper.close()
                        await broker._pusher.close()
                        await broker._acks.close()
                        await broker._extends.close()
                        hub.close()  # the loops return; the TaskGroup waits for them
                        flusher.close()  # after a last flush, with the pushes just written
            finally:
                await spool.close()  # what it still holds waits for the next worker
        finally:
            tracer.shutdown()  # export the spans still buffered
            await db.close()

    async def _open_spool(self) -> Spool:
        """Read the switches, and place the spool in this database's own directory."""
        await self._switches.load()
        s = self.settings
        self._spool = Spool(SpoolSettings(
            s.spool_dir / self._switches.instance_id, flush_ms=s.file_buffer_flush_ms,
            max_batch=s.file_buffer_max_batch, events_per_file=s.file_buffer_events_per_file,
            max_bytes=s.file_buffer_max_bytes))
        return self._spool

    # --- the message plane ---------------------------------------------------------------

    def admit_request(self, tenant: str) -> None:
        """One request of `tenant`: RateLimited (429) over its request rate (in memory)."""
        self.tenants.limiter.admit_request(tenant)

    async def throttle_request(self, tenant: str) -> None:
        """One request of `tenant`, once its request rate admits it (the Kafka edge: a quota
        delays a Kafka client rather than failing its requests)."""
        await self.tenants.limiter.throttle_request(tenant)

    async def push(self, items: Sequence[PushItem]) -> list[PushOutcome]:
        """Append items (JSON items, or the frames of a client-built blob: see
        `core.engine.writes.NewMessage.packed`); one outcome per item, in order, each answered
        once its flush committed, or once it is fsynced in the spool (`buffered`): while
        push maintenance is on, while the database is unreachable (an item whose write
        failed for that reason is spooled then; one whose partition alone could not be
        written is answered as an outage: `_partitions_alone_failed`), and while the spool
        still holds older messages. Raises SpoolUnavailable when the spool cannot take them, and a
        `Limited` error (nothing written) when the items' tenant's quota refuses them."""
        await self._admit_items(items)
        spool = self._spool
        if self._switches.push_paused or spool.database_down or spool.busy():
            return await self._buffer(items)
        outcomes = await self._pusher.push(items)
        await self._hub.published()
        unwritten = [i for i, o in enumerate(outcomes)
                     if isinstance(o.error, StorageUnavailable)]
        if unwritten and await self._partitions_alone_failed(outcomes, unwritten):
            _count_queued(outcomes)
            return outcomes  # answered as an outage of those items: the client retries them
        if unwritten:
            spool.database_down = True
            try:
                buffered = await self._buffer([outcomes[i].item for i in unwritten])
            except ServiceError:
                return outcomes  # the spool cannot help either: the database error stands
            for i, outcome in zip(unwritten, buffered):
                outcomes[i] = outcome
        _count_queued(outcomes)
        return outcomes

    async def _partitions_alone_failed(self, outcomes: Sequence[PushOutcome],
                                       unwritten: Sequence[int]) -> bool:
        """Whether the writes that failed as an outage failed for their partitions alone: a
        write stalled behind its partition's lock, or a Citus node that is down, while the
        database commits other writes. Those items are then answered as an outage (503, or
        `failed` beside written ones) rather than spooled: the spool's drain replays in
        order, so a spooled write to such a partition would hold every push after it, to any
        partition, behind it. A read-only answer (a failover under way), and commits that
        stall everywhere (a slow disk, a synchronous standby gone), concern the whole
        database: those writes are spooled."""
        if any(isinstance(outcomes[i].error, StorageReadOnly) for i in unwritten):
            return False
        if any(o.verdict is not None for o in outcomes):
            return True  # others of this push were written just now
        return await self._db.commits()

    async def _admit_items(self, items: Sequence[PushItem], *, throttle: bool = False) -> None:
        """The quota checks of pushed items, per tenant (the edge sends one tenant's); with
        `throttle` the message rate waits instead of refusing."""
        by_tenant: dict[str, list[PushItem]] = {}
        for item in items:
            by_tenant.setdefault(item.tenant, []).append(item)
        for tenant, mine in by_tenant.items():
            await self.tenants.admit_write(
                tenant, {(i.queue, i.partition) for i in mine},
                [len(i.message.payload) for i in mine], throttle=throttle)

    async def _buffer(self, items: Sequence[PushItem]) -> list[PushOutcome]:
        await self._spool.append([
            SpoolRecord(m.message_id, m.transaction_id, i.queue, i.partition, m.payload,
                        m.trace_id, m.producer_sub, i.tenant)
            for i in items for m in (i.message,)])
        return [PushOutcome(item, None, None, buffered=True) for item in items]

    async def _replay(self, records: list[SpoolRecord]) -> list[QueenError | None]:
        """Write spooled records through the coalescer; answer each one's failure (None when
        stored). The spool decides which failures it retries (core/engine/spool.py)."""
        outcomes = await self._pusher.push([
            PushItem(r.queue, r.partition, NewMessage(r.message_id, r.transaction_id,
                                                      r.payload, r.trace_id, r.producer_sub),
                     r.tenant)
            for r in records])
        _count_queued(outcomes)  # a buffered message counts as pushed once it is stored
        return [outcome.error for outcome in outcomes]

    async def produce(self, items: Sequence[PushItem]) -> list[PushOutcome]:
        """Append items now, never to the spool: for an edge that answers offsets (Kafka).
        Raises WritesPaused while pushes are in maintenance, StorageUnavailable while this
        process's spool holds older messages or found the database down, and a `Limited`
        error when the items' tenant's quota refuses them."""
        self.require_direct_writes()
        await self._admit_items(items, throttle=True)
        if self._spool.database_down or self._spool.busy():
            raise StorageUnavailable()
        outcomes = await self._pusher.push(items)
        await self._hub.published()
        _count_queued(outcomes)
        return outcomes

    def _appended(self, appended: Appended) -> None:
        self._hub.announce([(appended.queue_id, appended.partition_id)])

    async def pop(self, request: PopRequest, *, wait: bool = False, timeout_ms: int = 0,
                  gone: asyncio.Event | None = None) -> PopResult:
        """Claim and read now; with `wait`, park until something is delivered, `timeout_ms`
        passes, the client is `gone`, or the broker stops waiting (an empty result). A long
        poll holds one of its tenant's parked places (429 when they are taken)."""
        switches = self._switches
        parking = (self.tenants.limiter.parked(request.tenant) if wait
                   else contextlib.nullcontext())
        with parking:
            result = await pop_or_wait(self.reader, self._hub, request, wait=wait,
                                       timeout_ms=timeout_ms, backoff=self._backoff,
                                       gone=gone, stop_waiting=self._stop_waiting,
                                       paused=lambda: switches.pop_paused,
                                       give_back=functools.partial(self._give_back, request))
        for claim in result.claims:
            COUNTERS.add("delivered", claim.count, claim.partition_id)
        COUNTERS.add("pop_messages", result.count)
        return result

    def remembers(self, request: PopRequest, result: PopResult) -> bool:
        """Whether `delivered` keeps `result` (its acks may then come back whole and skip the
        per-item resolution: core/engine/ack_spans.py): a leased pop by the default tenant, on
        one PostgreSQL, without conflation; any other ack of it takes the general path."""
        return (self._acks.deliveries is not None and result.lease_id is not None
                and bool(result.claims) and not request.auto_ack and not request.tenant
                and not request.conflation and result.conflation is not True)

    def delivered(self, request: PopRequest, result: PopResult, txids: list[bytes]) -> None:
        """`result`, which `remembers` accepted, was answered with these stored
        transactionIds (one per delivered offset, in order)."""
        deliveries = self._acks.deliveries
        assert deliveries is not None and result.lease_id is not None
        deliveries.remember(result.lease_id, group=request.group, spans=[
            (c.partition_id, c.start, c.end) for c in result.claims], txids=txids)

    async def _give_back(self, request: PopRequest, result: PopResult) -> None:
        """Release what a look abandoned by its long poll claimed after the pop answered
        (core/engine/give_back.py); if that fails, the lease ends on its own (logged by
        core/engine/longpoll.py)."""
        items = give_back.retry_acks(request, result)
        if items:
            await self._acks.apply(items)

    async def serve_pop(self, request: PopRequest, pilot: Pilot | None, *,
                        wait: bool = False, timeout_ms: int = 0,
                        gone: asyncio.Event | None = None) -> ServedPop:
        """A pop as the edge asks for it: `pilot` (autopilot=true) says which knobs the
        request left to the broker (extensions §20.5), whose choice replaces the request's
        placeholder. Answers the request as served, the result, the effective conflation
        policy, and the autopilot echo (a non-empty autopilot answer only)."""
        autopilot = self._autopilot
        # The autopilot's lanes are keyed by names: the tenant is part of the queue's.
        lane_queue = None if request.queue is None else scoped(request.tenant, request.queue)
        lane = PilotLane(request.queue, request.namespace, request.task, request.group,
                         request.tenant)
        # The width rule is for the queue route alone, never for a pop declaring conflation
        # (one whose stored policy conflates claims the conflation width regardless).
        steered = (pilot is not None and pilot.width and request.queue is not None
                   and request.partition is None and not request.conflation)
        with autopilot.flight(lane) as live:
            if pilot is not None and pilot.batch:
                batch = autopilot.batch(lane)
                request = dataclasses.replace(request, batch=batch, conflation_width=(
                    conflation.conflation_width(None if pilot.width else request.max_partitions, batch)))
            if steered:
                assert lane_queue is not None
                request = dataclasses.replace(request, max_partitions=autopilot.widths.choose(
                    lane_queue, request.group, live))
            result = await self.pop(request, wait=wait, timeout_ms=timeout_ms, gone=gone)
            if steered and result.conflation is not True:
                assert lane_queue is not None
                autopilot.widths.popped(
                    lane_queue, request.group, queue_ids=result.queue_ids,
                    partition_ids=[c.partition_id for c in result.claims],
                    delivered=result.count, requested=request.batch)
        echo = None
        if pilot is not None and result.claims:
            if result.lease_id is not None:
                autopilot.delivered(lane, result.lease_id)
            echo = Echo(result.width if result.width is not None else request.max_partitions,
                        request.batch)
        # A pop that declares conflation, or whose group conflates, never answers 204 (§20.4).
        conflating = await self.conflating(request, result) if (
            request.conflation or request.group != QUEUE_MODE) else False
        return ServedPop(request, result, conflating, echo)

    @property
    def pops_paused(self) -> bool:
        """Pop maintenance is on: pops claim nothing."""
        return self._switches.pop_paused

    async def conflating(self, request: PopRequest, result: PopResult) -> bool:
        """The group's effective conflation policy for a pop's answer (extensions §20.2)."""
        return await conflation.effective(self._db, request, result)

    def stop_waiting(self) -> None:
        """Parked long polls answer now and new ones do not park (the process drains)."""
        self._stop_waiting.set()

    async def ack(self, group: str, item: acks.AckItem, *, tenant: str = "") -> acks.AckOutcome:
        """One ack (§4.5)."""
        [outcome] = (await self.ack_batch([acks.GroupAck(group, item, tenant)])).outcomes
        return outcome

    async def ack_batch(self, items: Sequence[acks.GroupAck]) -> acks.AppliedAcks:
        """Acks of any groups and partitions (§4.6), applied in one statement with the
        concurrent acks on other cursors (core/engine/batching/acks.py): all of it or none; each item
        answers what was applied to it."""
        result = await self._acks.apply(items)
        _count_acks(items, result.outcomes)
        self._autopilot.acked((a.item.lease_id, o.lease_released)
                             for a, o in zip(items, result.outcomes) if o.success)
        await self._hub.published()
        return result

    async def transaction(self, ops: list[PushItem | acks.GroupAck],
                          required_leases: list[str],
                          riders: Sequence[transactions.Rider] = (), *,
                          tenant: str = "") -> transactions.TxResult:
        """Pushes and acks, and the riders' ops (KV: `self.kv.rider`), in one database
        transaction (§4.7, extensions §17), all of `tenant`'s; refused while pushes are in
        maintenance when it pushes (the spool cannot keep a transaction's atomicity)."""
        pushes = [op for op in ops if isinstance(op, PushItem)]
        if pushes:
            self.require_direct_writes()
            await self.tenants.admit_write(tenant, {(p.queue, p.partition) for p in pushes},
                                           [len(p.message.payload) for p in pushes])
        if any(rider.grows for rider in riders):
            self.tenants.limiter.check_storage(tenant)
        created = {pair for rider in riders for pair in rider.creates}
        if created:
            await self.tenants.admit_names(tenant, created)
        result = await transactions.run_transaction(self._db, ops, required_leases, riders,
                                                    tenant=tenant)
        if result.committed:
            self._hub.announce(result.wakes)
            COUNTERS.add("transactions")
            COUNTERS.add("push_messages", sum(1 for v in result.verdicts.values()
                                              if v.status == "queued"))
            applied = sorted(result.acks)
            tx_acks = [op for op in (ops[i] for i in applied) if isinstance(op, acks.GroupAck)]
            _count_acks(tx_acks, [result.acks[i] for i in applied])
            only = required_leases[0] if len(set(required_leases)) == 1 else None
            self._autopilot.acked((a.item.lease_id or only, result.acks[i].lease_released)
                                 for i, a in zip(applied, tx_acks))
            await self._hub.published()
        return result

    async def extend_lease(self, lease_id: str, seconds: int, *,
                           tenant: str = "") -> list[datetime]:
        return await self._extends.extend(lease_id, seconds, tenant)

    async def configure(self, *, queue: str, namespace: str | None, task: str | None,
                        given: Mapping[str, Any], replace: bool,
                        tenant: str = "") -> queues.QueueConfig:
        self.tenants.limiter.check_retention(tenant, given)
        await self.tenants.admit_names(tenant, [(queue, None)])
        config = await queues.configure(self._db, tenant=tenant, queue=queue,
                                        namespace=namespace, task=task, given=dict(given),
                                        replace=replace)
        # Options decide when the clock makes data claimable: this process's lanes reseed
        # and its parked pops look again; a wake-up naming no partition of the queue makes
        # every other process's lanes of the queue reseed too.
        self.reader.forget_routes()
        self.ready.all_stale()
        self._hub.wake_everyone()
        await self._hub.publish([(config.queue_id, None)])
        return config

    async def delete_queue(self, queue: str, *, tenant: str = "") -> bool:
        self.reader.forget_routes()  # a queue of that name made later is another queue
        self.tenants.catalog.forget(tenant)  # its count of the tenant's queues is stale
        return await queues.delete_queue(self._db, queue, tenant=tenant)

    async def fetch(self, entries: Sequence[offset_reads.FetchEntry], *, max_bytes: int,
                    max_wait_ms: int) -> list[offset_reads.FetchResult]:
        return await offset_reads.fetch(self._db.log, entries, max_bytes=max_bytes,
                                        max_wait_ms=max_wait_ms)

    # --- maintenance ----------------------------------------------------------------------

    def require_direct_writes(self) -> None:
        """Raise WritesPaused while push maintenance is on: for writes that must go to the
        database or nowhere (transactions that push, DLQ replays)."""
        if self._switches.push_paused:
            raise WritesPaused("pushes are in maintenance mode: this write is refused "
                               "until maintenance ends")

    async def maintenance(self) -> MaintenanceStatus:
        """The switches as this worker applies them, and the spool's figures."""
        state = self._switches.state
        return MaintenanceStatus(state.push, state.pop, await self._spool.waiting(),
                                 not self._spool.database_down, self._spool.failed)

    async def set_maintenance(self, *, push: bool | None = None,
                              pop: bool | None = None) -> MaintenanceStatus:
        """Turn a switch on or off for every worker of every broker on this database."""
        await self._switches.set(push=push, pop=pop)
        return await self.maintenance()

    def _operating_figures(self) -> stats.OperatingFigures:
        """For the metrics: the push switch and the spool (its count as last taken)."""
        return stats.OperatingFigures(self._switches.push_paused, self._spool.last_waiting,
                                      self._spool.failed)

    def _switched(self, state: SwitchState) -> None:
        if not state.push:
            self._spool.kick()  # drain now
        if not state.pop:
            self._hub.wake_everyone()  # parked pops claim now

    # --- the process ---------------------------------------------------------------------

    async def healthy(self) -> bool:
        """Does the database answer?"""
        return await self._db.ping()

    def pool_stats(self) -> PoolStats:
        return self._db.pool_stats()

    # --- observability (core/upkeep/stats.py) --------------------------------------------------

    async def stats_refresh(self) -> int:
        """Take an analytics sample now; answers the queue rows stored."""
        return await stats.sample(self._db, self.settings)

    async def analytics(self, where: stats.SeriesFilter) -> list[SeriesRow]:
        return await stats.series(self._db, where)

    async def cluster_figures(self, *, tenant: str | None = None) -> stats.ClusterFigures:
        """Every process's counters (this one's flushed first, so its own requests are in),
        live processes and per-queue gauges: of every tenant (None) or of one's queues."""
        assert self.flusher is not None
        await self.flusher.flush()
        return await stats.cluster_figures(
            self._db, live_seconds=stats.live_seconds(self.settings), tenant=tenant)

    async def partitions_changed(self, entries: Sequence[changes.ChangedEntry], *,
                                 tenant: str = ""
                                 ) -> tuple[datetime, list[changes.ChangedResult]]:
        return await changes.partitions_changed(self._db, entries, tenant=tenant)


def _count_acks(items: Sequence[acks.GroupAck], outcomes: Sequence[acks.AckOutcome]) -> None:
    """Count applied acks: all of them, the failed ones per partition (for the analytics),
    and those that dead-lettered a message."""
    applied = failed = dead = 0
    for ack, outcome in zip(items, outcomes):
        if not outcome.success or outcome.noop:
            continue
        applied += 1
        if ack.item.status != "completed":
            failed += 1
            pid = acks.partition_id_of(ack.item.partition_id)
            if pid is not None:
                COUNTERS.add("failed", 1, pid)
        dead += outcome.dlq
    COUNTERS.add("ack_messages", applied)
    COUNTERS.add("ack_failed", failed)
    COUNTERS.add("dlq", dead)


def _count_queued(outcomes: Sequence[PushOutcome]) -> None:
    COUNTERS.add("push_messages", sum(
        1 for o in outcomes if o.verdict is not None and o.verdict.status == "queued"))
