"""DSNs naming several servers (core/storage/hosts.py): the hosts and ports found in them,
and the read-write target a broker adds."""

from __future__ import annotations

import pytest

from core.storage.hosts import Host, dsn_hosts, with_read_write


@pytest.mark.parametrize(("dsn", "hosts"), [
    ("postgresql://u:p@db1:5432,db2:5433/queen", [Host("db1", 5432), Host("db2", 5433)]),
    ("postgresql://u@db1,db2/queen", [Host("db1", 5432), Host("db2", 5432)]),
    ("postgresql://u@[::1]:6000,db2/queen", [Host("::1", 6000), Host("db2", 5432)]),
    ("postgresql://u@/queen?host=/run/a,/run/b&port=5432,5433",
     [Host("/run/a", 5432), Host("/run/b", 5433)]),
    ("postgresql://u@/queen?host=/run/a,/run/b&port=6000", [Host("/run/a", 6000),
                                                            Host("/run/b", 6000)]),
    ("postgresql://u@db:7000/queen", [Host("db", 7000)]),
    ("postgresql:///queen", []),
])
def test_hosts_and_ports_are_read_as_libpq_reads_them(dsn: str, hosts: list[Host]) -> None:
    assert dsn_hosts(dsn) == hosts


def test_a_port_list_that_does_not_match_the_hosts_is_refused() -> None:
    with pytest.raises(ValueError, match="2 hosts but 3 ports"):
        dsn_hosts("postgresql://u@/q?host=/a,/b&port=1,2,3")
    with pytest.raises(ValueError, match="port 'x'"):
        dsn_hosts("postgresql://u@db:x/q")


def test_several_hosts_default_to_the_read_write_one() -> None:
    assert with_read_write("postgresql://u@db1,db2/q") == \
        "postgresql://u@db1,db2/q?target_session_attrs=read-write"
    assert with_read_write("postgresql://u@/q?host=/a,/b&port=1,2") == \
        "postgresql://u@/q?host=/a,/b&port=1,2&target_session_attrs=read-write"
    # A target the operator chose stays; one server is left alone.
    assert with_read_write("postgresql://u@db1,db2/q?target_session_attrs=primary") == \
        "postgresql://u@db1,db2/q?target_session_attrs=primary"
    assert with_read_write("postgresql://u@db1/q") == "postgresql://u@db1/q"


class _FakeConnection:
    """What the connector needs of a connection: a transport without a TCP socket."""

    class _Transport:
        def get_extra_info(self, name: str) -> None:
            return None

    def __init__(self, port: int) -> None:
        self.port = port
        self._transport = self._Transport()
        self.terminated = False

    def is_closed(self) -> bool:
        return self.terminated

    def terminate(self) -> None:
        self.terminated = True


def _fake_servers(monkeypatch: pytest.MonkeyPatch, standbys: set[int]) -> list[int]:
    """asyncpg.connect replaced: ports in `standbys` refuse (a standby), others accept;
    answers the list of ports tried, in order."""
    import asyncpg

    tried: list[int] = []

    async def connect(dsn: str, *, host: str, port: int, **kwargs: object) -> _FakeConnection:
        tried.append(port)
        if port in standbys:
            raise asyncpg.exceptions.TargetServerAttributeNotMatched("a standby")
        return _FakeConnection(port)

    monkeypatch.setattr(asyncpg, "connect", connect)
    return tried


async def test_the_connector_tries_every_host_once_starting_with_the_last_good_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A standby listed first is passed over for the primary behind it (a failed attempt
    must not make the next one start at the same host again), and the primary is tried
    first from then on."""
    from core.storage.hosts import HostConnector

    tried = _fake_servers(monkeypatch, standbys={1})
    connector = HostConnector("postgresql://u@db1:1,db2:2/q")
    assert (await connector.connect()).port == 2
    assert tried == [1, 2]
    assert (await connector.connect()).port == 2
    assert tried == [1, 2, 2]


async def test_a_forsaken_host_loses_its_connections_and_is_tried_last_until_it_answers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from core.storage.hosts import HostConnector

    standbys: set[int] = set()
    tried = _fake_servers(monkeypatch, standbys)
    connector = HostConnector("postgresql://u@db1:1,db2:2/q")
    first, second = await connector.connect(), await connector.connect()
    assert first.port == second.port == 1
    assert connector.forsake(first) == 2  # every connection to that host
    assert first.terminated and second.terminated
    tried.clear()
    standbys.add(2)  # the other host is a standby still: the silent one is tried after it
    assert (await connector.connect()).port == 1
    assert tried == [2, 1]
    tried.clear()
    standbys.clear()  # host 1 answered, so it is first again
    assert (await connector.connect()).port == 1
    assert tried == [1]
