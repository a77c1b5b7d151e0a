"""A client certificate as the caller's identity (mutual TLS, TLS_CLIENT_CA_FILE).

Only a certificate the handshake verified counts: the listener asks for one only when
TLS_CLIENT_AUTH is `optional` or `required`, and then refuses the connection of a client
whose certificate does not chain to TLS_CLIENT_CA_FILE. Its identity is the subject's common
name, or the whole subject (RFC 4514, `O=Example,OU=Billing`) when it has none. Pushes stamp
it as `producerSub` when no token names a subject (auth off, or a token without `sub`); a
token's `sub` wins over it (broker/auth/gate.py).

It is read once per connection: HTTP requests find it in their ASGI scope
(`scope["extensions"][CLIENT_CERTIFICATE]["identity"]`), Kafka requests in their session.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

from cryptography import x509
from cryptography.x509.oid import NameOID
from hypercorn.typing import AppWrapper, ASGIReceiveCallable, ASGISendCallable, Scope

from broker.auth.gate import MAX_SUB_BYTES

CLIENT_CERTIFICATE = "queen.client_certificate"  # the ASGI scope extension


def client_identity(ssl_object: ssl.SSLObject | None) -> str | None:
    """The identity of the verified client certificate of a connection; None without one
    (TLS off, no certificate asked for or none shown)."""
    if ssl_object is None or ssl_object.context.verify_mode == ssl.CERT_NONE:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    subject = x509.load_der_x509_certificate(der).subject
    names = subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    value = names[0].value if names else subject.rfc4514_string()
    identity = value if isinstance(value, str) else value.decode(errors="replace")
    if not identity or len(identity.encode()) > MAX_SUB_BYTES:
        return None
    return identity


class WithClientIdentity:
    """An ASGI app wrapper for one connection: every request on it carries the identity of
    the connection's client certificate in its scope."""

    def __init__(self, app: AppWrapper, identity: str) -> None:
        self._app = app
        self._extension = {"identity": identity}

    async def __call__(self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable,
                       sync_spawn: Any, call_soon: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            scope["extensions"][CLIENT_CERTIFICATE] = self._extension
        await self._app(scope, receive, send, sync_spawn, call_soon)


def scope_identity(scope: Mapping[str, Any]) -> str | None:
    """The client certificate's identity a request's scope carries, if any."""
    extension = (scope.get("extensions") or {}).get(CLIENT_CERTIFICATE)
    return extension["identity"] if extension else None
