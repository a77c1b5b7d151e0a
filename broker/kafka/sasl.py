"""SASL/PLAIN with a token of our auth as the password (auth on: JWT_ENABLED).

On a listener with auth on, a connection may send only ApiVersions, SaslHandshake and
SaslAuthenticate until it authenticated; anything else closes it. PLAIN's message is
`authzid NUL username NUL password`: the password is a JWT checked exactly as the HTTP edge
checks a bearer token (signature, expiry, issuer, audience), the username is not used, and
the token's roles decide what the connection may do, with the access levels of the HTTP
routes that do the same thing (docs/guide/kafka.md). The token's tenant claim is the
connection's tenant, the default tenant without one (docs/security/tenants.md): the authzid
cannot name one, since clients fill it with the username. A refused token answers
SASL_AUTHENTICATION_FAILED with the reason and the connection is closed. The answer tells
the client the token's remaining lifetime, and the connection is closed when it runs out
unless the client authenticated again.

Both handshake versions are served, as Kafka serves them. After SaslHandshake v1 the PLAIN
message comes in a SaslAuthenticate request. After v0 it comes as a bare frame (a length and
the message, no request header), answered on success by an empty frame; a refused one closes
the connection without an answer, since that exchange has no place for an error. librdkafka
before 2.11.1 enables SASL only when v0 is in the advertised range, though it then uses v1.
"""

from __future__ import annotations

import time
from typing import Any

from broker.auth.errors import Unauthenticated
from broker.auth.gate import Gate
from broker.kafka import errors
from broker.kafka.protocol import Request
from broker.kafka.session import Session

MECHANISMS = ["PLAIN"]


class SaslFailed(Exception):
    """Authentication failed: answer (where the exchange has an answer), then close the
    connection."""

    def __init__(self, answer: dict[str, Any]) -> None:
        super().__init__(answer.get("error_message"))
        self.answer = answer


async def handshake(session: Session, request: Request) -> dict[str, Any]:
    mechanism = request.body.mechanism
    code = errors.NONE if mechanism in MECHANISMS else errors.UNSUPPORTED_SASL_MECHANISM
    if not session.auth_required:
        code = errors.ILLEGAL_SASL_STATE  # nothing to authenticate against
    session.bare_sasl_next = code == errors.NONE and request.api_version == 0
    return {"error_code": code, "mechanisms": MECHANISMS}


class Authenticator:
    """Checks PLAIN messages against the gate and records who authenticated on the
    connection."""

    def __init__(self, gate: Gate | None) -> None:
        self.gate = gate

    async def authenticate(self, session: Session, request: Request) -> dict[str, Any]:
        """The SaslAuthenticate handler (after a v1 handshake)."""
        lifetime = await self._plain(session, bytes(request.body.auth_bytes))
        return {"error_code": errors.NONE, "error_message": None, "auth_bytes": b"",
                "session_lifetime": lifetime}

    async def bare(self, session: Session, message: bytes) -> None:
        """The bare PLAIN message that follows a v0 handshake."""
        session.bare_sasl_next = False
        await self._plain(session, message)

    async def _plain(self, session: Session, message: bytes) -> int:
        """Authenticate the connection with a PLAIN message; answer the session lifetime in
        milliseconds (0: the token does not expire), or raise SaslFailed."""
        if self.gate is None or not session.auth_required:
            raise SaslFailed({"error_code": errors.ILLEGAL_SASL_STATE,
                              "error_message": "authentication is off on this listener",
                              "auth_bytes": b"", "session_lifetime": 0})
        parts = message.split(b"\x00")
        try:
            if len(parts) != 3:
                raise Unauthenticated("not a SASL/PLAIN message")
            identity = await self.gate.identify(parts[2].decode("utf-8", "replace"))
        except Unauthenticated as exc:
            raise SaslFailed({"error_code": errors.SASL_AUTHENTICATION_FAILED,
                              "error_message": f"authentication failed: {exc.message}",
                              "auth_bytes": b"", "session_lifetime": 0}) from None
        session.tenant = identity.tenant or ""
        session.roles, session.principal = identity.roles, identity.sub
        session.expires = identity.expires
        lifetime = 0
        if identity.expires is not None:
            lifetime = max(1, int((identity.expires - time.time()) * 1000))
        return min(lifetime, 2**62)

