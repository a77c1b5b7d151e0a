"""What `DATABASE_URL` names: one server (or a Patroni pair), or the nodes of a Citus cluster.

A DSN with several hosts means one of two things, told apart by the first server that
answers: without the `citus` extension, the hosts are candidates for one primary
(core/storage/hosts.py follows it); with it, they are the nodes of a Citus cluster, the
coordinator first. On Citus the broker splits its statements in two:

- **home** (the first host, the coordinator): migrations and the distribution set-up, the
  control plane (queue configuration, KV, timers, ephemeral queues, streams, statistics,
  the Kafka election: their tables live there), and the notifications of those (queue
  switches, ephemeral queues). The wake-up notifications of the log are spread over the
  worker nodes instead, every process listening on each (core/engine/wake_nodes.py).
- **log** (the other hosts, or the coordinator when it is the only one named): the log's
  statements (push, claim, ack, lease extension, fetch, the ready set's reseed). Each call
  that carries a route runs on the node of its shard (core/storage/shards.py) and is sent
  there on a pool of that node's own (core/storage/placement.py). The statements without a
  route, and those whose node is not known, take a connection of a pool spread over those
  hosts (`SpreadConnector`): since Citus 11 every node holds the metadata and forwards a
  statement to the nodes of its shards itself. A node that is down is skipped there.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg

from core.storage.hosts import Host, connector_for, dsn_hosts


@dataclass(frozen=True, slots=True)
class Topology:
    citus: bool
    home_dsn: str  # migrations, control, the control plane's notifications
    log_dsns: tuple[str, ...]  # where the log's statements are sent

    @classmethod
    def single(cls, dsn: str) -> Topology:
        return cls(False, dsn, (dsn,))

    @classmethod
    def of_citus(cls, dsn: str) -> Topology:
        hosts = dsn_hosts(dsn)
        if len(hosts) < 2:
            return cls(True, dsn, (dsn,))
        each = tuple(only_host(dsn, host) for host in hosts)
        return cls(True, each[0], each[1:])


def only_host(dsn: str, host: Host) -> str:
    """`dsn` naming `host` alone (in the authority, or in `host=`/`port=` for sockets);
    `target_session_attrs` goes: a Citus node is always writable."""
    parts = urlsplit(dsn)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
             if k not in ("host", "port", "target_session_attrs")]
    netloc = parts.netloc
    user = netloc.rpartition("@")[0]
    if host.host.startswith("/"):  # a socket directory goes in the query
        query += [("host", host.host), ("port", str(host.port))]
        netloc = f"{user}@" if user else ""
    else:
        name = f"[{host.host}]" if ":" in host.host else host.host
        netloc = f"{user}@{name}:{host.port}" if user else f"{name}:{host.port}"
    return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query, safe="/,")))


class SpreadConnector:
    """Opens each new connection on the next of several single-host DSNs (skipping those
    that refuse it); usable as an asyncpg pool's `connect`. Each host's connections are
    opened by its own `HostConnector`, so the liveness watch can forsake them."""

    def __init__(self, dsns: tuple[str, ...]) -> None:
        self.dsn = dsns[0]
        self._connectors = [connector_for(d) for d in dsns]
        self._turn = itertools.cycle(range(len(dsns)))

    async def connect(self, dsn: str | None = None, **kwargs: Any) -> asyncpg.Connection:
        start = next(self._turn)
        last: BaseException | None = None
        for step in range(len(self._connectors)):
            connector = self._connectors[(start + step) % len(self._connectors)]
            try:
                return await connector.connect(**kwargs)
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError,
                    asyncpg.InternalClientError) as exc:
                last = exc
        assert last is not None
        raise last
