"""Certificates replaced under a listening socket (broker/tls/rotation.py), on a bare asyncio
server with the context a listener gets: new handshakes take the new certificate, open
connections keep theirs, a bad pair changes nothing, and a client certificate's subject is
read as an identity."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import re
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trustme

from broker.tls.peer import client_identity
from broker.tls.rotation import CertificateRotation, describe
from core.tls import TlsSettings
from tests.certs import TestPki, serial_of


@dataclasses.dataclass
class Echo:
    """A TLS echo server; `identities` holds each connection's client identity."""

    port: int
    identities: list[str | None]


@pytest.fixture
def pki(tmp_path: Path) -> TestPki:
    return TestPki(tmp_path)


@pytest.fixture
async def echo_of() -> AsyncIterator:  # type: ignore[type-arg]
    servers: list[asyncio.Server] = []

    async def start(rotation: CertificateRotation) -> Echo:
        identities: list[str | None] = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            identities.append(client_identity(writer.get_extra_info("ssl_object")))
            try:
                while data := await reader.read(100):
                    writer.write(data)
                    await writer.drain()
            finally:
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=rotation.context)
        servers.append(server)
        return Echo(server.sockets[0].getsockname()[1], identities)

    yield start
    for server in servers:
        server.close()


async def _connect(port: int, pki: TestPki, client: tuple[Path, Path] | None = None,
                   server_name: str = "127.0.0.1"
                   ) -> tuple[int, asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=pki.client_context(client), server_hostname=server_name)
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    return serial_of(der), reader, writer


async def _serial_of_new_connection(port: int, pki: TestPki, server_name: str = "127.0.0.1"
                                    ) -> int:
    serial, reader, writer = await _connect(port, pki, server_name=server_name)
    writer.write(b"ping")
    assert await reader.readexactly(4) == b"ping"
    writer.close()
    return serial


def _settings(pki: TestPki, **changes: object) -> TlsSettings:
    return dataclasses.replace(TlsSettings(cert_file=pki.cert_file, key_file=pki.key_file),
                               **changes)


async def test_a_reload_gives_new_connections_the_new_certificate_and_keeps_open_ones(
        pki: TestPki, echo_of) -> None:  # type: ignore[no-untyped-def]
    rotation = CertificateRotation(_settings(pki))
    echo = await echo_of(rotation)
    first = pki.serial
    old_serial, old_reader, old_writer = await _connect(echo.port, pki)
    assert old_serial == first
    second = pki.issue_server()
    assert second != first
    # Files replaced, not yet reloaded: still the first.
    assert await _serial_of_new_connection(echo.port, pki) == first
    assert rotation.reload("test")
    # With and without a server name in the ClientHello (an IP address sends none).
    assert await _serial_of_new_connection(echo.port, pki) == second
    assert await _serial_of_new_connection(echo.port, pki, "localhost") == second
    old_writer.write(b"still")  # the connection made before the reload goes on
    assert await old_reader.readexactly(5) == b"still"
    old_writer.close()


async def test_a_reload_of_a_mismatched_pair_keeps_the_certificate_in_use(
        pki: TestPki, echo_of, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    rotation = CertificateRotation(_settings(pki))
    echo = await echo_of(rotation)
    serial = pki.serial
    pki.key_file.write_bytes(trustme.CA().issue_cert("x").private_key_pem.bytes())
    assert not rotation.reload("test")
    assert await _serial_of_new_connection(echo.port, pki) == serial
    pki.cert_file.unlink()
    assert not rotation.reload("test")
    assert await _serial_of_new_connection(echo.port, pki) == serial


async def test_the_watch_reloads_when_the_files_change(
        pki: TestPki, echo_of) -> None:  # type: ignore[no-untyped-def]
    rotation = CertificateRotation(_settings(pki, watch_interval_ms=50))
    echo = await echo_of(rotation)
    stop = asyncio.Event()
    watching = asyncio.create_task(rotation.watch(stop))
    try:
        assert not rotation.files_changed()
        second = pki.issue_server()
        async with asyncio.timeout(10):
            while await _serial_of_new_connection(echo.port, pki) != second:
                await asyncio.sleep(0.05)
    finally:
        stop.set()
        await watching


async def test_a_verified_client_certificate_is_read_as_its_common_name_or_subject(
        pki: TestPki, echo_of) -> None:  # type: ignore[no-untyped-def]
    rotation = CertificateRotation(_settings(pki, client_ca_file=pki.client_ca_file,
                                             client_auth="optional"))
    echo = await echo_of(rotation)
    for client in (pki.client_files("billing"), pki.client_files(None), None):
        _, reader, writer = await _connect(echo.port, pki, client)
        writer.write(b"x")
        assert await reader.readexactly(1) == b"x"
        writer.close()
    assert echo.identities[0] == "billing"
    assert echo.identities[1] is not None and "O=Queen tests" in echo.identities[1]
    assert echo.identities[2] is None  # optional: a client may show none


async def test_a_client_certificate_from_another_ca_cannot_connect(
        pki: TestPki, echo_of) -> None:  # type: ignore[no-untyped-def]
    rotation = CertificateRotation(_settings(pki, client_ca_file=pki.client_ca_file,
                                             client_auth="required"))
    echo = await echo_of(rotation)
    for client in (pki.client_files("mallory", ca=trustme.CA()), None):
        # TLS 1.3: the client's handshake ends before the server checked its certificate;
        # the refusal arrives as the connection's end.
        try:
            _, reader, writer = await _connect(echo.port, pki, client)
        except (ConnectionError, OSError):
            continue
        try:
            writer.write(b"x")
            assert await reader.read(1) == b""
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
    assert echo.identities == []


def test_the_certificate_is_described_by_subject_serial_and_expiry(pki: TestPki,
                                                                   tmp_path: Path) -> None:
    assert re.fullmatch(f"CN=queen-test-server,.*, serial {pki.serial:x}, valid until "
                        r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", describe(pki.cert_file))
    old = pki.ca.issue_cert("127.0.0.1", common_name="old",
                            not_before=datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC),
                            not_after=datetime.datetime(2021, 1, 1, tzinfo=datetime.UTC))
    expired = tmp_path / "expired.pem"
    old.cert_chain_pems[0].write_to_path(str(expired))
    assert describe(expired).endswith(
        "valid until 2021-01-01 00:00 UTC (EXPIRED: clients refuse it)")


async def test_why_a_reload_builds_a_new_context_a_pair_loaded_in_place_can_break_it(
        pki: TestPki, echo_of) -> None:  # type: ignore[no-untyped-def]
    """The hazard CertificateRotation avoids: OpenSSL sets the certificate, then the key, so
    loading a new certificate with a key that is not its own (a key renamed into place a
    moment after its certificate) into a live context fails half done, and from then on
    that context cannot complete a handshake."""
    rotation = CertificateRotation(_settings(pki))
    echo = await echo_of(rotation)
    old_key = pki.key_file.read_bytes()
    pki.issue_server()
    pki.key_file.write_bytes(old_key)  # the new certificate, the old key
    with pytest.raises(ssl.SSLError, match="KEY_VALUES_MISMATCH"):
        rotation.context.load_cert_chain(pki.cert_file, pki.key_file)
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await _serial_of_new_connection(echo.port, pki)
