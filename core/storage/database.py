"""The connection pools of one process.

Statements run on a connection from `Database.session()` (autocommitted statements) or
`Database.transaction()`; acquiring, committing and every statement translate driver errors
(`core/storage/errors.py`), so nothing above the storage package sees asyncpg exceptions.

On a Citus cluster (core/storage/cluster.py) a process has its `Database` on the
coordinator and `Database.log` for the log's statements; `shards` says which shard each
partition lives in (core/storage/shards.py). A statement that carries a route asks for a
connection for it (`log.session(route)`): one on the node holding that shard
(core/storage/placement.py); the others get one spread over the log's nodes. On one
PostgreSQL `log` is the `Database` itself, `shards` knows one shard and routes are None.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from core.counters import COUNTERS
from core.errors import StorageError, StorageUnavailable
from core.settings import Settings
from core.storage import citus, durability
from core.storage.cluster import SpreadConnector, Topology, only_host
from core.storage.errors import DRIVER_ERRORS, lost_worker, storage_errors, translate
from core.storage.hosts import Host, connector_for
from core.storage.liveness import ServerWatch
from core.storage.migrations import SchemaChanges, apply_schema
from core.storage.placement import NodePools
from core.storage.shards import ShardMap
from core.storage.statements import Conn, Statement
from core.waiting import within

log = logging.getLogger(__name__)

_PING = Statement[None]("ping")
COMMIT_PROBE_FRESH_S = 1.0  # how long `Database.commits` answers from its last probe
_COMMIT_PROBE = Statement[None]("commit_probe")
_ROLLBACK = Statement[None]("rollback")
_ADMITTED = Statement[None]("admitted_connections")


# On a Citus node (core/storage/cluster.py), every connection of the broker:
# - shows shards in pg_class listings: the filter that hides them otherwise runs per row of
#   every catalog scan, and the driver's type lookup (a scan of pg_class and pg_type, on a
#   connection's first statement of a new type) took 2.6 s on the coordinator and over 5 s on
#   a worker holding a few hundred shards instead of 0.05 s. Under load that was enough for
#   the silence watch to give up on the coordinator, and every connection made again paid it
#   again. The broker never lists relations.
# - runs a modification of rows on several shards over one connection per node: a
#   transaction that then writes a reference table (a queue or a group deleted: cursors,
#   then the directory or subscriptions) is refused otherwise. The log's statements each
#   touch one shard, so only the control plane's are slower for it.
# A server without Citus keeps them as placeholders: nothing reads them there.
CITUS_SESSION = {"citus.override_table_visibility": "off",
                 "citus.multi_shard_modify_mode": "sequential"}


def server_settings(settings: Settings, *, role: str = "") -> dict[str, str]:
    """Session settings of every broker connection; `role` names what a connection is for
    (in application_name, so pg_stat_activity tells pool connections from the others)."""
    return {
        "application_name": "queen-broker" + (f"-{role}" if role else ""),
        "statement_timeout": str(settings.db_statement_timeout_ms),
        "lock_timeout": str(settings.db_lock_timeout_ms),
        # Our statements are small and keyed; JIT compilation only adds latency to them.
        "jit": "off",
        **CITUS_SESSION,
    }


def connect_options(settings: Settings, *, role: str = "") -> dict[str, Any]:
    """The arguments of every connection the broker opens (`HostConnector.connect`): the
    connect timeout (per host), how long a silent server is borne (core/storage/sockets.py)
    and the session settings."""
    return {"timeout": settings.db_connection_timeout_ms / 1000,
            "silence": settings.db_silence_timeout_ms / 1000,
            "server_settings": server_settings(settings, role=role)}


@dataclass(frozen=True, slots=True)
class PoolStats:
    size: int
    idle: int
    max_size: int


class Database:
    """The pool of one process. Statements run on `session()` / `transaction()`; the log's
    on `log.session(route)` (see the module docstring)."""

    def __init__(self, pool: asyncpg.Pool, settings: Settings,
                 watches: Sequence[ServerWatch] = (), *, topology: Topology | None = None,
                 shards: ShardMap | None = None, log_pool: asyncpg.Pool | None = None,
                 nodes: NodePools | None = None) -> None:
        self._pool = pool
        self._acquire_timeout = settings.db_connection_timeout_ms / 1000
        self._watches = list(watches)
        self.topology = topology or Topology.single("")
        self.shards = shards or ShardMap()
        self._log_pool = log_pool
        # The log's pools per node (Citus): the `log` Database routes with them, this one
        # (the coordinator's, when there is a `log`) only closes them.
        self._nodes = nodes
        self._routes = nodes if log_pool is None else None
        self._commit_probe: asyncio.Future[bool] | None = None  # see `commits`
        self._commit_probe_at = 0.0
        self.log = self if log_pool is None else Database(
            log_pool, settings, topology=self.topology, shards=self.shards, nodes=nodes)

    @classmethod
    async def open(cls, settings: Settings, dsn: str, *, migrate: bool = True,
                   wait_seconds: float = 30.0) -> Database:
        """Wait for the server (up to `wait_seconds`), apply migrations, open the pool(s),
        and start the process's watch on each server it sends statements to
        (core/storage/liveness.py): the coordinator and every worker named on Citus."""
        topology = await read_topology(dsn, settings, wait_seconds)
        conn = await connect_with_retry(topology.home_dsn, settings, wait_seconds)
        try:
            with storage_errors():
                if migrate:
                    await apply_schema(conn)
                shards = await ShardMap.read(conn)
        finally:
            await conn.close()
        with storage_errors():
            pool = await _create_pool(settings, connector_for(topology.home_dsn))
            log_pool = None
            if topology.log_dsns != (topology.home_dsn,):
                log_pool = await _create_pool(settings, SpreadConnector(topology.log_dsns))
        nodes = None
        if log_pool is not None and shards.distributed:
            # A node's pool keeps no connection floor: while its node is down, asyncpg would
            # otherwise retry the floor forever, logging a traceback at every try.
            nodes = NodePools(topology.log_dsns, shards,
                              lambda dsn: _create_pool(settings, connector_for(dsn), floor=0))
            await nodes.find_nodes()
        # A frozen worker is as silent as a frozen primary: the log's statements routed there
        # (an ack, a claim) would wait for it as long as it is frozen, past their requests'
        # deadlines, unless its connections are cut too.
        watches = [ServerWatch(dsn, settings.db_silence_timeout_ms / 1000,
                               connect_options(settings, role="watch"))
                   for dsn in dict.fromkeys((topology.home_dsn, *topology.log_dsns))]
        for watch in watches:
            watch.start()
        db = cls(pool, settings, watches, topology=topology, shards=shards, log_pool=log_pool,
                 nodes=nodes)
        if nodes is not None:
            nodes.start(db.session)
        return db

    @property
    def home_dsn(self) -> str:
        """Where the side connections of a process go (LISTEN and NOTIFY, the flushers)."""
        return self.topology.home_dsn

    async def wake_nodes(self) -> dict[int, str]:
        """On Citus, each worker node of the cluster (by group) with a DSN reaching it: the
        one `DATABASE_URL` names for it, else the home DSN pointed at the host and port the
        coordinator knows it by. Empty on one PostgreSQL. The wake-up notifications are
        spread over these nodes (core/engine/wake_nodes.py)."""
        if not self.topology.citus:
            return {}
        async with self.session() as conn:
            nodes = await citus.worker_nodes(conn)
        named = self._nodes.dsn_of_group if self._nodes is not None else {}
        return {n.node_group: named.get(n.node_group)
                or only_host(self.home_dsn, Host(n.host, n.port)) for n in nodes}

    async def close(self, timeout: float = 5.0) -> None:
        """Close the pool's connections politely, or drop them after `timeout` seconds: a
        server that stopped answering (frozen, partitioned, a failover under way) never
        acknowledges a close, and asyncpg's own close waits for it with no limit, which
        kept a stopping broker from ever exiting."""
        for watch in self._watches:
            await watch.stop()
        if self._nodes is not None:
            await self._nodes.stop()
        for pool in (self._pool, self._log_pool, *(self._nodes.pools if self._nodes else [])):
            if pool is None:
                continue
            try:
                await within(timeout, pool.close())
            except TimeoutError:
                log.warning("the database did not answer the pool's close in %.0f s; "
                            "dropping its connections", timeout)
                pool.terminate()

    @contextlib.asynccontextmanager
    async def session(self, route: int | None = None) -> AsyncIterator[Conn]:
        """A pooled connection for a few autocommitted statements; for statements carrying
        `route`, one on the node of its shard when there is one (module docstring)."""
        with storage_errors():
            async with self._pool_for(route).acquire(timeout=self._acquire_timeout) as conn:
                with _dropped_after_lost_worker(conn):
                    yield conn  # type: ignore[misc]  # a pool proxy behaves as a Connection

    @contextlib.asynccontextmanager
    async def transaction(self, route: int | None = None) -> AsyncIterator[Conn]:
        """A pooled connection inside one database transaction (commits when the block
        ends, rolls back when it raises; a commit kept without its synchronous standby
        raises StorageUnavailable: core/storage/durability.py); `route` as for `session`.
        A transaction Citus failed on a dead connection to a worker is not run again (the
        block is the caller's): it fails as any other, 503."""
        with storage_errors():
            async with self._pool_for(route).acquire(timeout=self._acquire_timeout) as conn:
                with _dropped_after_lost_worker(conn):
                    async with durability.replicated(conn), conn.transaction():
                        yield conn  # type: ignore[misc]

    def _pool_for(self, route: int | None) -> asyncpg.Pool:
        if self._routes is None:
            return self._pool
        return self._routes.pool_for(route) or self._pool

    async def commits(self) -> bool:
        """Whether a write commits within 2 s (`ping(commit=True)`), asked once for every
        caller of the moment: its answer serves for COMMIT_PROBE_FRESH_S after it was asked.
        Producers retrying into a stalled partition each fail as an outage and each would
        otherwise make a probe commit, a WAL flush on the primary."""
        probe = self._commit_probe
        if probe is None or (probe.done()
                             and time.monotonic() - self._commit_probe_at > COMMIT_PROBE_FRESH_S):
            self._commit_probe_at = time.monotonic()
            COUNTERS.add("commit_probes")
            probe = self._commit_probe = asyncio.ensure_future(self.ping(commit=True))
        return await asyncio.shield(probe)  # a caller that goes does not end it for the rest

    async def ping(self, timeout: float = 2.0, *, commit: bool = False) -> bool:
        """Whether the database answers within `timeout`; with `commit`, whether a write
        commits within it (a server can answer reads while its commits stall: a slow disk, a
        synchronous standby gone)."""
        try:
            async with asyncio.timeout(timeout):
                async with self.session() as conn:
                    await (_COMMIT_PROBE if commit else _PING).value(conn)
            return True
        except (StorageUnavailable, StorageError, TimeoutError):
            return False

    def pool_stats(self) -> PoolStats:
        return PoolStats(self._pool.get_size(), self._pool.get_idle_size(),
                         self._pool.get_max_size())


@contextlib.contextmanager
def _dropped_after_lost_worker(conn: Any) -> Iterator[None]:
    """Close the pooled connection `conn` (its pool opens a new one at its next use) when the
    block fails on Citus' dead connection to a restarted worker (`errors.lost_worker`) that
    its statement could not send again: inside a transaction, or failed twice. Citus drops
    the dead connection it used, but the backend may hold others (to another node restarted
    too); a new backend has none, so the request after this one is served."""
    try:
        yield
    except Exception as exc:
        if lost_worker(exc):
            log.warning("a connection Citus failed on a worker it had lost (%s) is dropped",
                        exc)
            conn.terminate()
        raise


async def _create_pool(settings: Settings, connector: Any, *, floor: int = 1) -> asyncpg.Pool:
    options = connect_options(settings)
    pool = await asyncpg.create_pool(
        connector.dsn, connect=connector.connect, min_size=floor, max_size=settings.db_pool_size,
        max_inactive_connection_lifetime=300, reset=_reset_connection,
        # The last resort for a server that stops answering: the watch and the sockets'
        # timeouts cut such connections much sooner.
        command_timeout=settings.db_statement_timeout_ms / 1000 + 5
        if settings.db_statement_timeout_ms else None, **options)
    assert pool is not None
    return pool


async def read_topology(dsn: str, settings: Settings, wait_seconds: float) -> Topology:
    """One PostgreSQL, or a Citus cluster whose first host is the coordinator: asked of
    the first server that answers (core/storage/cluster.py)."""
    conn = await connect_with_retry(dsn, settings, wait_seconds)
    try:
        with storage_errors():
            found = await citus.version(conn) is not None
    finally:
        await conn.close()
    return Topology.of_citus(dsn) if found else Topology.single(dsn)


async def _reset_connection(conn: asyncpg.Connection) -> None:
    """What a pooled connection needs before reuse.

    asyncpg's default reset runs RESET ALL / UNLISTEN / advisory unlock / CLOSE ALL: a round
    trip on every release, i.e. on every statement of the hot path. Pool connections never
    LISTEN, take session advisory locks, SET parameters or declare cursors (those live on
    dedicated connections), so the only state that can leak is an open transaction.
    """
    if conn.is_in_transaction():
        await _ROLLBACK.run(conn)


async def connect_with_retry(dsn: str, settings: Settings, wait_seconds: float, *,
                             role: str = "") -> Conn:
    """One connection, retried until the server answers or `wait_seconds` pass.

    Processes started side by side (honcho, the serve supervisor) may come up before
    PostgreSQL accepts connections; waiting here saves every caller a retry loop.
    """
    deadline = time.monotonic() + wait_seconds
    delay = 0.1
    while True:
        try:
            return await connector_for(dsn).connect(**connect_options(settings, role=role))
        except DRIVER_ERRORS as exc:
            if time.monotonic() + delay > deadline:
                raise translate(exc) from exc
            log.info("database not ready (%s); retrying", type(exc).__name__)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)


async def admitted_connections(settings: Settings, dsn: str) -> int:
    """How many connections the server at `dsn` admits to roles that are not superusers."""
    conn = await connect_with_retry(dsn, settings, 30.0)
    try:
        return int(await _ADMITTED.value(conn))
    finally:
        await conn.close()


async def migrate(settings: Settings, dsn: str, *, wait_seconds: float = 30.0
                  ) -> SchemaChanges:
    """Wait for the server, apply the schema (core/storage/migrations.py); answer what it
    applied."""
    topology = await read_topology(dsn, settings, wait_seconds)
    conn = await connect_with_retry(topology.home_dsn, settings, wait_seconds)
    try:
        with storage_errors():
            return await apply_schema(conn)
    finally:
        await conn.close()
