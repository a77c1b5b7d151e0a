"""TLS on the broker's listeners: the settings, checked once at start, and the server
contexts built from them.

One certificate serves both listeners (HTTP and Kafka): TLS_CERT_FILE and TLS_KEY_FILE turn
TLS on for each listener the process runs. TLS_CLIENT_CA_FILE asks clients for certificates
signed by one of its CAs (mutual TLS); TLS_CLIENT_AUTH says whether one is `required` (the
default once a CA is given) or `optional`.

Every file is read and checked when the settings are built, so a missing file, a key that
does not belong to the certificate or a CA file that holds no certificate stops start-up
with a `SettingsError` naming the variable and the path, before anything listens. The
listeners build their contexts with `server_context`, again whenever the files are
reloaded (broker/tls/rotation.py).
"""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import Mapping, Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_pem_private_key,
)

from core.env import EnvReader, SettingsError

CLIENT_AUTH = ("none", "optional", "required")
_VERIFY_MODES = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL,
                 "required": ssl.CERT_REQUIRED}
# TLS 1.2 suites with forward secrecy and an AEAD cipher only (TLS 1.3 has nothing else):
# HTTP/2 forbids the rest (RFC 9113 §9.2.2), and every Kafka client offers these.
_TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


@dataclasses.dataclass(frozen=True)
class TlsSettings:
    """The listeners' certificate, and whether clients must show theirs; checked when built
    (each file is read: see the module docstring)."""

    cert_file: Path | None = None  # PEM: the certificate, then any intermediates
    key_file: Path | None = None  # PEM: its private key, unencrypted
    client_ca_file: Path | None = None  # PEM: the CAs client certificates must chain to
    client_auth: str = "none"  # one of CLIENT_AUTH
    # How often each process looks whether the files changed (then reloads them); 0: only
    # on SIGHUP.
    watch_interval_ms: int = 10_000

    def __post_init__(self) -> None:
        if self.client_auth not in CLIENT_AUTH:
            raise SettingsError(f"TLS_CLIENT_AUTH={self.client_auth!r}: expected one of "
                                f"{', '.join(CLIENT_AUTH)}")
        if (self.cert_file is None) != (self.key_file is None):
            given, missing = (("TLS_CERT_FILE", "TLS_KEY_FILE") if self.key_file is None
                              else ("TLS_KEY_FILE", "TLS_CERT_FILE"))
            raise SettingsError(f"{given} is set but {missing} is not: TLS needs both")
        if self.client_ca_file is not None and self.cert_file is None:
            raise SettingsError("TLS_CLIENT_CA_FILE is set but TLS_CERT_FILE is not: client "
                                "certificates are asked for only on a TLS listener")
        if self.client_auth != "none" and self.client_ca_file is None:
            raise SettingsError(f"TLS_CLIENT_AUTH={self.client_auth} needs TLS_CLIENT_CA_FILE "
                                "(the CAs that sign client certificates)")
        if self.enabled:
            check_files(self)

    @property
    def enabled(self) -> bool:
        return self.cert_file is not None


def tls_settings_from_env(env: Mapping[str, str]) -> TlsSettings:
    read = EnvReader(env)
    cert, key, ca = (_path(read, name) for name in
                     ("TLS_CERT_FILE", "TLS_KEY_FILE", "TLS_CLIENT_CA_FILE"))
    default_auth = "required" if ca is not None else "none"
    return TlsSettings(
        cert_file=cert, key_file=key, client_ca_file=ca,
        client_auth=read.choice("TLS_CLIENT_AUTH", default_auth, CLIENT_AUTH),
        watch_interval_ms=read.integer("TLS_WATCH_INTERVAL_MS",
                                       TlsSettings.watch_interval_ms, low=0, high=3_600_000))


def _path(read: EnvReader, name: str) -> Path | None:
    value = read.text(name, "").strip()
    return Path(value).expanduser() if value else None


def server_context(tls: TlsSettings, *, alpn: Sequence[str] = ()) -> ssl.SSLContext:
    """A server context with the files as they are now; `alpn`: the protocols it offers
    (HTTP: h2 and http/1.1). Raises SettingsError naming the variable at fault."""
    assert tls.cert_file is not None and tls.key_file is not None, "TLS is off"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(_TLS12_CIPHERS)
    if alpn:
        context.set_alpn_protocols(list(alpn))
    try:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    except ssl.SSLError as exc:
        raise SettingsError(_chain_problem(tls, exc)) from None
    except OSError as exc:
        raise SettingsError(f"TLS_CERT_FILE={tls.cert_file} / TLS_KEY_FILE={tls.key_file}: "
                            f"{exc.strerror or exc}") from None
    if tls.client_ca_file is not None:
        try:
            context.load_verify_locations(cafile=tls.client_ca_file)
        except (ssl.SSLError, OSError) as exc:
            raise SettingsError(f"TLS_CLIENT_CA_FILE={tls.client_ca_file}: {exc}") from None
    context.verify_mode = _VERIFY_MODES[tls.client_auth]
    return context


def check_files(tls: TlsSettings) -> None:
    """Each file readable and of the kind its variable promises, and the key the
    certificate's; a SettingsError naming the first variable at fault."""
    assert tls.cert_file is not None and tls.key_file is not None
    certificates = _certificates("TLS_CERT_FILE", tls.cert_file)
    key = _read("TLS_KEY_FILE", tls.key_file)
    if b"-----BEGIN" not in key or b"PRIVATE KEY-----" not in key:
        raise SettingsError(f"TLS_KEY_FILE={tls.key_file} holds no PEM private key")
    try:
        private = load_pem_private_key(key, password=None)
    except TypeError:
        raise SettingsError(f"TLS_KEY_FILE={tls.key_file} is encrypted; give the key "
                            "without a passphrase (readable by the broker only)") from None
    except ValueError as exc:
        raise SettingsError(f"TLS_KEY_FILE={tls.key_file} is not a usable private key "
                            f"({exc})") from None
    if _spki(certificates[0].public_key()) != _spki(private.public_key()):
        raise SettingsError(f"TLS_KEY_FILE={tls.key_file} is not the private key of the "
                            f"(first) certificate in TLS_CERT_FILE={tls.cert_file}")
    if tls.client_ca_file is not None:
        _certificates("TLS_CLIENT_CA_FILE", tls.client_ca_file)
    server_context(tls)  # what OpenSSL itself still refuses (a key size below its floor)


def _read(name: str, path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise SettingsError(f"{name}={path}: {exc.strerror or exc}") from None


def _spki(key: PublicKeyTypes) -> bytes:
    return key.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)


def _certificates(name: str, path: Path) -> list[x509.Certificate]:
    data = _read(name, path)
    try:
        found = x509.load_pem_x509_certificates(data)
    except ValueError:
        found = []
    if not found:
        raise SettingsError(f"{name}={path} holds no PEM certificate")
    return found


def _chain_problem(tls: TlsSettings, exc: ssl.SSLError) -> str:
    if exc.reason == "KEY_VALUES_MISMATCH":
        return (f"TLS_KEY_FILE={tls.key_file} is not the private key of the certificate in "
                f"TLS_CERT_FILE={tls.cert_file}")
    return (f"TLS_CERT_FILE={tls.cert_file} / TLS_KEY_FILE={tls.key_file}: OpenSSL refuses "
            f"them ({exc.reason or exc})")
