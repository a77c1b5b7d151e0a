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


async def test_the_connector_tries_every_host_once_starting_with_the_last_good_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A standby listed first is passed over for the primary behind it (a failed attempt
    must not make the next one start at the same host again), and the primary is tried
    first from then on."""
    import asyncpg

    from core.storage.hosts import HostConnector

    tried: list[int] = []

    async def connect(dsn: str, *, host: str, port: int, **kwargs: object) -> str:
        tried.append(port)
        if port == 1:
            raise asyncpg.exceptions.TargetServerAttributeNotMatched("a standby")
        return f"conn to {port}"

    monkeypatch.setattr(asyncpg, "connect", connect)
    connector = HostConnector("postgresql://u@db1:1,db2:2/q")
    assert await connector.connect() == "conn to 2"
    assert tried == [1, 2]
    assert await connector.connect() == "conn to 2"
    assert tried == [1, 2, 2]
