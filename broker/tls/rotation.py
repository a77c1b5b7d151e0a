"""Certificates replaced under a running listener, without a restart and without a failed
connection.

A listener (asyncio's `start_server`) holds the one SSLContext it was created with. Loading
new files into that context in place is not safe: OpenSSL replaces the certificate and the
key in two steps, and a pair that does not match (a key written a moment after its
certificate) leaves the live context with a certificate and no key. So each reload builds a
fresh context, checked whole (core/tls.py), and the listener's context hands every new
handshake to the newest one from its server-name callback, which OpenSSL calls for every
ClientHello, with or without a server name in it. A handshake under way, and every
connection already open, keeps the certificate it started with. A reload that fails (a
missing file, a key that is not the certificate's) is logged and changes nothing: new
connections go on getting the certificate loaded before.

A reload happens on SIGHUP (`queen-broker serve` passes its SIGHUP to the web workers and
the Kafka listener) and when the files change (their inode, size or modification time,
looked at every TLS_WATCH_INTERVAL_MS). Replace the files by renaming new ones over them,
or as a mounted secret updates (a symbolic link swapped): a file caught half written fails
its check and is loaded at the next look after its writer finished.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import signal
import ssl
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509

from core.env import SettingsError
from core.tls import TlsSettings, check_files, server_context
from core.waiting import wait_event

log = logging.getLogger("queen.tls")

# What identifies a file's content without reading it: inode, size, modification time.
Signature = tuple[tuple[int, int, int] | None, ...]


class CertificateRotation:
    """`context` is what the listener is created with; each handshake on it gets the
    certificates of the last successful (re)load."""

    def __init__(self, tls: TlsSettings, *, alpn: Sequence[str] = ()) -> None:
        self._tls = tls
        self._alpn = tuple(alpn)
        self._signature = _signature(tls)
        self.context = server_context(tls, alpn=self._alpn)
        self.context.sni_callback = self._hand_over
        self.current = self.context

    def _hand_over(self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None,
                   context: ssl.SSLContext) -> None:
        if context is not self.current:
            connection.context = self.current

    def reload(self, why: str) -> bool:
        """Load the files again for the connections to come; answer whether it worked (on a
        problem the certificates in use stay, and the problem is logged)."""
        self._signature = _signature(self._tls)
        try:
            check_files(self._tls)
            fresh = server_context(self._tls, alpn=self._alpn)
        except SettingsError as exc:
            log.error("TLS files not reloaded (%s): %s; new connections still get the "
                      "certificate loaded before", why, exc)
            return False
        self.current = fresh
        log.info("TLS certificate reloaded (%s): %s", why, describe(self._tls.cert_file))
        return True

    def files_changed(self) -> bool:
        return _signature(self._tls) != self._signature

    def reload_on_hangup(self) -> None:
        """SIGHUP reloads the files (in the running loop)."""
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self.reload, "SIGHUP")

    async def watch(self, stop: asyncio.Event) -> None:
        """Reload whenever the files change, until `stop` is set (TLS_WATCH_INTERVAL_MS 0:
        never: SIGHUP only)."""
        interval = self._tls.watch_interval_ms / 1000
        if interval <= 0:
            await stop.wait()
            return
        while not await wait_event(stop, interval):
            if self.files_changed():
                self.reload("the files changed")


def describe(cert_file: Path | None) -> str:
    """The first certificate of the file, as a log line: subject, serial, expiry."""
    if cert_file is None:
        return "no certificate"
    try:
        cert = x509.load_pem_x509_certificates(cert_file.read_bytes())[0]
    except (OSError, ValueError, IndexError) as exc:
        return f"{cert_file} ({exc})"
    expired = " (EXPIRED: clients refuse it)" if cert.not_valid_after_utc < _now() else ""
    return (f"{cert.subject.rfc4514_string()}, serial {cert.serial_number:x}, valid until "
            f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC{expired}")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _signature(tls: TlsSettings) -> Signature:
    found: list[tuple[int, int, int] | None] = []
    for path in (tls.cert_file, tls.key_file, tls.client_ca_file):
        try:
            status = os.stat(path) if path is not None else None
        except OSError:
            status = None
        found.append(None if status is None
                     else (status.st_ino, status.st_size, status.st_mtime_ns))
    return tuple(found)
