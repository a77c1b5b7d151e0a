"""On Citus: a pool of log connections per node, so a routed call goes straight to the node of
its shard.

A call that carries a route (core/storage/shards.py) runs on the node holding that shard.
Sent to any other node, it is forwarded there by Citus, and the node that received it pays
for the forwarding: with N workers and connections spread over them, about (N-1)/N of the
calls were. So each process keeps one pool per node that `DATABASE_URL` names for the log,
and the shard map says which node holds each shard.

Nodes are matched by asking each one which group it is (`pg_dist_local_group`, the number
the shards' placements name; one node per group), not by comparing host names: the
coordinator knows the nodes by the names it was given, which need not be the ones the
broker was given (a socket, another address, a proxy).

What is not known goes to the spread pool, where Citus forwards it: a node that did not
answer when asked (asked again at the next refresh), a shard on a node `DATABASE_URL` does
not name, a shard moved since the map was read. The map and the nodes are read again every
`REFRESH_SECONDS` (a shard moved by the rebalancer costs a forward per call until then).
A node that is down fails the calls for its shards only, as it did when they were forwarded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import asyncpg

from core.errors import QueenError
from core.storage import citus
from core.storage.errors import DRIVER_ERRORS, storage_errors
from core.storage.shards import ShardMap
from core.storage.statements import Conn

log = logging.getLogger(__name__)

REFRESH_SECONDS = 30.0


class NodePools:
    """One pool per log node, found by the group it answers; `pool_for(route)` is the pool
    of the node holding that route's shard, if there is one."""

    def __init__(self, dsns: tuple[str, ...], shards: ShardMap,
                 open_pool: Callable[[str], Awaitable[asyncpg.Pool]]) -> None:
        self._dsns = dsns
        self._shards = shards
        self._open_pool = open_pool
        self._pools: dict[str, asyncpg.Pool] = {}  # by DSN
        self._by_group: dict[int, asyncpg.Pool] = {}
        self.dsn_of_group: dict[int, str] = {}  # the DSN of DATABASE_URL found on each node
        self._task: asyncio.Task[None] | None = None

    def pool_for(self, route: int | None) -> asyncpg.Pool | None:
        if route is None:
            return None
        group = self._shards.node_group_of(route)
        return None if group is None else self._by_group.get(group)

    @property
    def pools(self) -> list[asyncpg.Pool]:
        return list(self._pools.values())

    async def find_nodes(self) -> None:
        """Open a pool on each node not known yet and learn its group (a node that does not
        answer is asked again next time)."""
        for dsn in self._dsns:
            if dsn in self._pools:
                continue
            try:
                with storage_errors():
                    pool = await self._open_pool(dsn)
            except QueenError as exc:
                log.info("log node %s not reached (%s); its shards' calls are forwarded",
                         dsn.rpartition("@")[2], type(exc).__name__)
                continue
            try:
                with storage_errors():
                    async with pool.acquire() as conn:
                        group = await citus.local_group(conn)  # type: ignore[arg-type]
            except QueenError:
                pool.terminate()
                continue
            self._pools[dsn] = pool
            if group is not None and group not in self._by_group:
                self._by_group[group] = pool
                self.dsn_of_group[group] = dsn

    def start(self, home_session: Callable[[], contextlib.AbstractAsyncContextManager[Conn]]
              ) -> None:
        """Read the shard map (from `home_session`, the coordinator) and look for the nodes
        not found yet, every REFRESH_SECONDS."""
        self._task = asyncio.create_task(self._refresh(home_session), name="placement")

    async def _refresh(self, home_session: Callable[[],
                       contextlib.AbstractAsyncContextManager[Conn]]) -> None:
        while True:
            await asyncio.sleep(REFRESH_SECONDS)
            try:
                async with home_session() as conn:
                    self._shards.update(await ShardMap.read(conn))
                await self.find_nodes()
            except (QueenError, *DRIVER_ERRORS) as exc:
                log.info("shard placement not refreshed (%s)", type(exc).__name__)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
