"""Which Kafka listener coordinates consumer groups: one per cluster (QUEEN_KAFKA_CLUSTER),
elected through PostgreSQL.

Every listener of a cluster serves produce, fetch and offsets; group membership (JoinGroup,
SyncGroup, Heartbeat, ...) lives in memory in one of them, the coordinator, so that members
of one group connected to different hosts still form one group. The coordinator is the
listener whose pooled connection holds the cluster's session advisory lock; it records its
node id and advertised address, which every listener names in FindCoordinator. The others
try for the lock every `_CLAIM_SECONDS`. When the holder stops, crashes or loses its
connection, the lock goes with the connection and another listener takes over within that
interval; the groups' members learn it as Kafka clients do from a coordinator change
(NOT_COORDINATOR, then FindCoordinator again, then a rejoin). A holder that finds its
connection broken steps down at once (`on_lost`): it must not coordinate beside a successor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from core.errors import QueenError
from core.storage import kafka as sql
from core.storage.database import Database
from core.storage.statements import Conn
from core.waiting import wait_event

log = logging.getLogger(__name__)

_CLAIM_SECONDS = 1.0
# A listener not heard from for this long is left out of Metadata.
_ALIVE_SECONDS = 10.0

Node = sql.Node  # a listener of the cluster: node id and advertised address


class Election:
    def __init__(self, db: Database, *, cluster: str, me: Node,
                 on_lost: Callable[[], None]) -> None:
        self._db = db
        self.cluster = cluster
        self.me = me
        self._on_lost = on_lost
        self.holding = False
        self.coordinator: Node | None = None  # as last read (None: unknown)
        self.nodes: list[Node] = [me]  # the cluster's listeners seen lately, this one too
        self._stopping = asyncio.Event()
        self.changed = asyncio.Event()  # set at every turn that read the coordinator

    def close(self) -> None:
        self._stopping.set()

    async def run_forever(self) -> None:
        while not self._stopping.is_set():
            try:
                async with self._db.session() as conn:
                    await self._hold(conn)
            except (QueenError, OSError, TimeoutError) as exc:
                log.warning("Kafka coordinator election: %s; trying again", exc)
            finally:
                self._step_down()
            await wait_event(self._stopping, _CLAIM_SECONDS)

    async def _hold(self, conn: Conn) -> None:
        """On one connection: claim, or follow, until it fails or the process stops."""
        while not self._stopping.is_set():
            async with asyncio.timeout(10):
                if not self.holding and await sql.claim_coordinator(conn, cluster=self.cluster):
                    await sql.record_coordinator(conn, cluster=self.cluster, node=self.me)
                    self.holding = True
                    log.info("this listener (node %d) coordinates the groups of Kafka "
                             "cluster %r", self.me.node_id, self.cluster)
                row = await sql.coordinator(conn, cluster=self.cluster)
                alive = await sql.node_alive(conn, cluster=self.cluster, node=self.me,
                                             within_seconds=_ALIVE_SECONDS)
            self.nodes = sorted(alive)
            self.coordinator = self.me if self.holding else row
            self.changed.set()
            await wait_event(self._stopping, _CLAIM_SECONDS)

    def _step_down(self) -> None:
        if self.holding:
            level = logging.INFO if self._stopping.is_set() else logging.WARNING
            log.log(level, "this listener no longer coordinates Kafka cluster %r", self.cluster)
            self.holding = False
            with contextlib.suppress(Exception):
                self._on_lost()
        self.coordinator = None
