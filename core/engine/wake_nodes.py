"""Which database nodes carry the wake-up notifications (core/engine/listener.py).

On one PostgreSQL, one node: the database's. On Citus a NOTIFY reaches only the listeners of
the node it is raised on, and raising and reading every notification on the coordinator made
them most of its work (docs/scale-out.md). So they are spread over the worker nodes: each
queue's notifications go to one worker, chosen by its id (`target`), and every process
listens on every worker and on the coordinator. Two rules keep every notification heard:

- **Everyone listens everywhere.** A process listens on every worker the cluster lists
  (`pg_dist_node`, read again every `REFRESH_SECONDS`) and on the coordinator, and a pop's
  barrier (`heard_through`) makes a round trip on each. Which worker a queue's
  notifications go to then need not be agreed between processes: wherever one sends them,
  the others hear them. A queue's claims and wake-ups from one process go to one node, so
  they keep their order (but see below: a node that fails).
- **A worker found late is told nothing at first.** A worker the cluster lists after this
  process started takes notifications only `SETTLE_SECONDS` after this process found it,
  by which time every other running process has found it and listens there (each reads the
  list every `REFRESH_SECONDS`); meanwhile its queues go to the workers known before, or to
  the coordinator when there are none. The workers listed when this process starts take
  notifications at once: a process started within `REFRESH_SECONDS` of a worker's addition
  may notify there before an older process listens there, and that process's parked pops
  then wake at their next periodic look (docs/deploying/citus.md says so).

A worker that is down or frozen fails the notifications sent to it (a NOTIFY that does not
commit within a second is given up: core/engine/wake_link.py), and its queues' go to another
node until its LISTEN session shows it alive again (`WakeLink.sendable`): everyone listens
there too, so parked pops elsewhere are still woken. Meanwhile that node's LISTEN session is
down, so the ready set trusts no lane until it is back (every empty answer looks in the
tables first). Across such a move a queue's claims may arrive after its later wake-ups (one
given up on may still commit when its node wakes): a pop checks a partition held back on
hearsay with its claim before it answers nothing (core/engine/ready/lane.py), so a late
claim costs a statement, not a message.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from core.engine.wake_link import WakeLink
from core.errors import QueenError
from core.storage.errors import DRIVER_ERRORS
from core.waiting import wait_event

log = logging.getLogger(__name__)

REFRESH_SECONDS = 30.0
SETTLE_SECONDS = 2 * REFRESH_SECONDS

# The cluster's worker nodes, by group, each with a DSN reaching it (Database.wake_nodes).
NodeSource = Callable[[], Awaitable[Mapping[int, str]]]


class WakeNodes:
    def __init__(self, home: WakeLink, make_link: Callable[[str], WakeLink],
                 source: NodeSource | None = None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`home`: the coordinator's (or the one server's) link; `make_link(dsn)`: a worker's
        link; `source`: where the workers are listed (None: there are none)."""
        self._clock = clock
        self.home = home
        self._make_link = make_link
        self._source = source
        self._workers: dict[int, WakeLink] = {}  # by group
        self._usable_from: dict[int, float] = {}  # by group: when it may take notifications
        self._read_once = False
        self._lock = asyncio.Lock()
        self.changed = asyncio.Event()  # the set of workers changed (listen on the new ones)

    @property
    def links(self) -> list[WakeLink]:
        return [self.home, *self._workers.values()]

    def target(self, queue_id: int) -> WakeLink:
        """The node this process sends a queue's notifications to: its settled worker, or
        while that one's sends fail, another node whose do not (WakeLink.sendable)."""
        now = self._clock()
        settled = [link for group, link in self._workers.items()
                   if self._usable_from[group] <= now]
        chosen = settled[queue_id % len(settled)] if settled else self.home
        if chosen.sendable():
            return chosen
        # The other workers first: the coordinator only when none of them will do.
        others = ([link for link in settled if link.sendable()]
                  or [link for link in (self.home,) if link.sendable()])
        return others[queue_id % len(others)] if others else chosen

    async def read(self) -> None:
        """Read the cluster's workers (the first time, or again): links for the new ones,
        closed links for those gone. A failed read changes nothing."""
        if self._source is None:
            return
        async with self._lock:
            try:
                listed = dict(await self._source())
            except (QueenError, *DRIVER_ERRORS, OSError, TimeoutError) as exc:
                log.info("wake-up nodes not read (%s)", type(exc).__name__)
                return
            now = self._clock()
            changed = False
            for group in [g for g in self._workers if g not in listed]:
                _drop(self._workers.pop(group))
                del self._usable_from[group]
                changed = True
            for group, dsn in listed.items():
                if group in self._workers and self._workers[group].dsn == dsn:
                    continue
                if group in self._workers:
                    _drop(self._workers[group])
                self._workers[group] = self._make_link(dsn)
                self._usable_from[group] = now if not self._read_once else now + SETTLE_SECONDS
                changed = True
            self._read_once = True
            if changed:
                self.changed.set()

    async def refresh_forever(self, stopping: asyncio.Event) -> None:
        """Read the workers again every REFRESH_SECONDS until `stopping` is set (the hub's
        loops make the first read before they start)."""
        while not await wait_event(stopping, REFRESH_SECONDS):
            await self.read()

    def close(self) -> None:
        for link in self.links:
            link.close()


def _drop(link: WakeLink) -> None:
    link.close()
    link.drop_notifier()
