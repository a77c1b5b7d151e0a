"""Several database hosts in one DSN, and following the primary among them.

`DATABASE_URL` may name several servers as libpq does, in the authority
(`postgresql://u@db1:5432,db2:5432/queen`) or in `host=`/`port=` query lists (Unix sockets:
`?host=/run/a,/run/b&port=5432,5433`), with `target_session_attrs`. A broker writes on every
connection, so a DSN with several hosts and no `target_session_attrs` means `read-write`: a
connection to a standby would only ever answer "read-only".

asyncpg understands such DSNs itself, but spends its one connect timeout on the whole list:
a primary that stops answering without closing its socket (SIGSTOP, a partitioned machine)
eats the timeout on the first host and the second is never tried, so the broker could not
follow a failover until the dead machine came back. `HostConnector.connect` therefore tries
the hosts one by one, each with the full timeout, starting with the one that was the primary
last time (so a healthy cluster costs one attempt, as before).

It is also the one place where the broker's connections are opened (pools, LISTEN and
NOTIFY, the flushers, the sweeper, the reaper's and the firer's pools), so it is where they
are made to notice a silent server: every TCP socket gets keepalives and a user timeout
(`core/storage/sockets.py`), and every connection is remembered with its host, so that when
a process's watch finds that host silent (`core/storage/liveness.py`), `forsake` cuts all of
them at once and the host is tried last until it answers again.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg

from core.storage.sockets import keep_alive

_DEFAULT_PORT = 5432
# For callers that give none, the defaults of DB_CONNECTION_TIMEOUT and DB_SILENCE_TIMEOUT_MS
# (core/settings.py imports this module). asyncpg's own connect timeout is 60 s per attempt.
_CONNECT_TIMEOUT = 2.0
_SILENCE = 4.0


@dataclass(frozen=True, slots=True)
class Host:
    host: str  # a name, an address, or a Unix-socket directory
    port: int


def dsn_hosts(dsn: str) -> list[Host]:
    """The servers a DSN names, in order (empty: the driver's default, one local server)."""
    parts = urlsplit(dsn)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    names: list[str] = []
    ports: list[str] = []
    if "host" in query:
        names = [h.strip() for h in query["host"].split(",")]
    else:
        netloc = parts.netloc.rpartition("@")[2]
        for item in filter(None, netloc.split(",")):
            name, port = _split_host_port(item)
            names.append(name)
            ports.append(port)
    if "port" in query:
        ports = [p.strip() for p in query["port"].split(",")]
    if not names:
        return []
    if len(ports) <= 1:  # one port (or none) applies to every host, as in libpq
        ports = [ports[0] if ports else ""] * len(names)
    elif len(ports) != len(names):
        raise ValueError(f"{len(names)} hosts but {len(ports)} ports")
    return [Host(name, _port(port)) for name, port in zip(names, ports)]


def _split_host_port(item: str) -> tuple[str, str]:
    if item.startswith("["):  # [IPv6]:port
        name, _, rest = item[1:].partition("]")
        return name, rest.removeprefix(":")
    name, _, port = item.partition(":")
    return name, port


def _port(text: str) -> int:
    if not text:
        return _DEFAULT_PORT
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"port {text!r} is not a number from 1 to 65535")
    return int(text)


def with_read_write(dsn: str) -> str:
    """`dsn`, with `target_session_attrs=read-write` added when it names several hosts and
    states no target itself."""
    parts = urlsplit(dsn)
    query = parse_qsl(parts.query, keep_blank_values=True)
    if len(dsn_hosts(dsn)) < 2 or any(k == "target_session_attrs" for k, _ in query):
        return dsn
    query.append(("target_session_attrs", "read-write"))
    return urlunsplit(parts._replace(query=urlencode(query, safe="/,")))


class HostConnector:
    """Opens connections to the DSN's servers, trying each in turn with its own timeout and
    starting with the last one that was accepted (a host found silent comes last). Usable
    as an asyncpg pool's `connect`."""

    def __init__(self, dsn: str) -> None:
        self.dsn = with_read_write(dsn)
        self.hosts = dsn_hosts(dsn)
        self._preferred = 0
        self._silent: set[int] = set()  # hosts forsaken and not accepted since: tried last
        # Every open connection: its host (an index of `hosts`) and its event loop.
        self._open: weakref.WeakKeyDictionary[
            asyncpg.Connection, tuple[int, asyncio.AbstractEventLoop]] = \
            weakref.WeakKeyDictionary()

    async def connect(self, dsn: str | None = None, *, silence: float = _SILENCE,
                      **kwargs: Any) -> asyncpg.Connection:
        """A connection to the first acceptable server; raises the last server's error when
        none is. `dsn`, if given (the pool passes its own), must be this connector's.
        `silence` (seconds; 0 = never): the socket gives up on a server silent that long
        (core/storage/sockets.py). Other arguments go to `asyncpg.connect`."""
        kwargs.setdefault("timeout", _CONNECT_TIMEOUT)
        if len(self.hosts) < 2:
            only: asyncpg.Connection = await asyncpg.connect(self.dsn, **kwargs)
            return self._opened(only, 0, silence)
        last: BaseException | None = None
        for index in self._order():
            host = self.hosts[index]
            connected = False
            try:
                conn: asyncpg.Connection = await asyncpg.connect(
                    self.dsn, host=host.host, port=host.port, **kwargs)
                connected = True
            except (OSError, TimeoutError, asyncpg.PostgresError,
                    asyncpg.InterfaceError, asyncpg.InternalClientError) as exc:
                # Down, silent, refusing us, or a standby (TargetServerAttributeNotMatched):
                # the next host may be the primary.
                last = exc
                continue
            finally:
                if not connected:
                    # Also when the caller gives up on us meanwhile (a pool's acquire
                    # timeout cancels the attempt): the next attempt starts past this host,
                    # or a silent first host would be all any attempt ever tried.
                    self._preferred = (index + 1) % len(self.hosts)
            self._preferred = index
            self._silent.discard(index)  # it answered: no longer silent
            return self._opened(conn, index, silence)
        assert last is not None
        raise last

    def _order(self) -> list[int]:
        """Host indexes in the order to try them: from the preferred one on, round the list,
        the hosts found silent last."""
        count = len(self.hosts)
        start = self._preferred  # read once: a failed attempt moves it
        ring = [(start + step) % count for step in range(count)]
        return [i for i in ring if i not in self._silent] + [i for i in ring if i in self._silent]

    def _opened(self, conn: asyncpg.Connection, index: int,
                silence: float) -> asyncpg.Connection:
        try:
            keep_alive(conn, silence)
        except OSError:
            conn.terminate()
            raise
        self._open[conn] = (index, asyncio.get_running_loop())
        return conn

    def forsake(self, conn: asyncpg.Connection) -> int:
        """The server behind `conn` stopped answering: cut every connection this event loop
        holds to that host (statements in flight fail at once, as a lost connection: an
        outage), and try that host last until it accepts a connection again. Answers how
        many connections were cut (`conn` included)."""
        found = self._open.get(conn)
        if found is None:
            conn.terminate()
            return 1
        index, loop = found
        self._silent.add(index)
        doomed = [c for c, (i, owner) in list(self._open.items())
                  if i == index and owner is loop and not c.is_closed()]
        for c in doomed:
            c.terminate()
        return len(doomed)


_CONNECTORS: dict[str, HostConnector] = {}


def connector_for(dsn: str) -> HostConnector:
    """The process's connector for `dsn`: every pool and side connection of a process shares
    one, so all of them start at the primary any one of them found."""
    connector = _CONNECTORS.get(dsn)
    if connector is None:
        connector = _CONNECTORS[dsn] = HostConnector(dsn)
    return connector
