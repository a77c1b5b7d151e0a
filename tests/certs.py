"""Test certificates, made when a test runs (never checked in): a CA for the servers, one for
clients (mutual TLS), and leaf certificates written where the broker reads them.

`trustme` is a library made for exactly this; every certificate it issues has a fresh
serial number, which tests compare to see which certificate a connection got.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import trustme
from cryptography import x509

# The names a test server certificate is valid for: tests reach servers by these.
SERVER_NAMES = ("127.0.0.1", "localhost")


class TestPki:
    """A server CA and a client CA, with their files under `directory`."""

    __test__ = False  # not a test class, whatever pytest thinks of its name

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.dir = directory
        self.ca = trustme.CA()
        self.client_ca = trustme.CA()
        self.ca_file = directory / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self.client_ca_file = directory / "client-ca.pem"
        self.client_ca.cert_pem.write_to_path(str(self.client_ca_file))
        self.cert_file = directory / "server.pem"
        self.key_file = directory / "server.key"
        self.serial = self.issue_server()

    def issue_server(self, *, atomically: bool = True) -> int:
        """A new server certificate from the same CA in `cert_file`/`key_file`; answers its
        serial. `atomically`: each file renamed into place, as an operator should."""
        leaf = self.ca.issue_cert(*SERVER_NAMES, common_name="queen-test-server")
        cert = b"".join(pem.bytes() for pem in leaf.cert_chain_pems)
        _write(self.cert_file, cert, atomically)
        _write(self.key_file, leaf.private_key_pem.bytes(), atomically)
        self.serial = serial_of(cert)
        return self.serial

    def client_files(self, common_name: str | None, *, ca: trustme.CA | None = None
                     ) -> tuple[Path, Path]:
        """A client certificate (signed by the client CA unless `ca` is given) and its key."""
        leaf = (ca or self.client_ca).issue_cert(f"{common_name or 'anon'}@example.org",
                                                 common_name=common_name,
                                                 organization_name="Queen tests")
        stem = f"client-{common_name or 'anon'}-{os.urandom(3).hex()}"
        cert, key = self.dir / f"{stem}.pem", self.dir / f"{stem}.key"
        cert.write_bytes(b"".join(pem.bytes() for pem in leaf.cert_chain_pems))
        key.write_bytes(leaf.private_key_pem.bytes())
        return cert, key

    def env(self, *, client_ca: bool = False, **extra: str) -> dict[str, str]:
        """The broker's TLS variables for these files."""
        env = {"TLS_CERT_FILE": str(self.cert_file), "TLS_KEY_FILE": str(self.key_file)}
        if client_ca:
            env["TLS_CLIENT_CA_FILE"] = str(self.client_ca_file)
        return {**env, **extra}

    def client_context(self, client: tuple[Path, Path] | None = None) -> ssl.SSLContext:
        """A client context trusting the server CA, showing `client` when given."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if client is not None:
            context.load_cert_chain(*client)
        return context


def serial_of(pem_or_der: bytes) -> int:
    if pem_or_der.startswith(b"-----"):
        return x509.load_pem_x509_certificates(pem_or_der)[0].serial_number
    return x509.load_der_x509_certificate(pem_or_der).serial_number


def _write(path: Path, data: bytes, atomically: bool) -> None:
    if not atomically:
        path.write_bytes(data)
        return
    staging = path.with_name(path.name + ".new")
    staging.write_bytes(data)
    os.replace(staging, path)
