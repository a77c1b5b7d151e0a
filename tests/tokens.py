"""Real signing keys made in the test run, tokens signed with them, and a JWKS server on
127.0.0.1 that a test can rotate, break and stop."""

from __future__ import annotations

import http.server
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Self

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from jwt.algorithms import OKPAlgorithm, RSAAlgorithm

from tests.support import free_port

ISSUER = "https://issuer.test"
AUDIENCE = "queen-broker"
# The session's auth-on broker (`auth_broker` in conftest): HS256 with issuer and audience,
# and one CORS origin.
AUTH_SECRET = "integration-secret-with-more-than-32-bytes"
APP_ORIGIN = "https://app.test"
AUTH_ENV = {"JWT_ENABLED": "true", "JWT_SECRET": AUTH_SECRET, "JWT_ISSUER": ISSUER,
            "JWT_AUDIENCE": AUDIENCE, "CORS_ORIGINS": APP_ORIGIN}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def public_pem(private: Any) -> str:
    return private.public_key().public_bytes(  # type: ignore[no-any-return]
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def rsa_key(bits: int = 2048) -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=bits)


def ed_key() -> ed25519.Ed25519PrivateKey:
    return ed25519.Ed25519PrivateKey.generate()


def public_jwk(private: Any, kid: str, alg: str | None = None) -> dict[str, Any]:
    """The public half of `private` as a JWK (RSA or OKP)."""
    if isinstance(private, rsa.RSAPrivateKey):
        jwk = RSAAlgorithm.to_jwk(private.public_key(), as_dict=True)
    else:
        jwk = OKPAlgorithm.to_jwk(private.public_key(), as_dict=True)
    jwk = {**jwk, "kid": kid, "use": "sig"}
    if alg:
        jwk["alg"] = alg
    return jwk


@dataclass
class Signer:
    """Signs tokens with one key and algorithm; claims default to a valid, hour-long token."""

    key: Any
    algorithm: str
    kid: str | None = None
    issuer: str | None = ISSUER
    audience: str | None = AUDIENCE

    def token(self, sub: Any = "alice", *, role: str | None = None,
              roles: list[str] | None = None, headers: dict[str, Any] | None = None,
              **claims: Any) -> str:
        now = int(time.time())
        body: dict[str, Any] = {"iat": now, "exp": now + 3600, "jti": uuid.uuid4().hex}
        if sub is not None:
            body["sub"] = sub
        if self.issuer:
            body["iss"] = self.issuer
        if self.audience:
            body["aud"] = self.audience
        if role is not None:
            body["role"] = role
        if roles is not None:
            body["roles"] = roles
        body.update(claims)
        body = {k: v for k, v in body.items() if v is not None}
        head = dict(headers or {})
        if self.kid:
            head.setdefault("kid", self.kid)
        return jwt.encode(body, self.key, algorithm=self.algorithm, headers=head or None)


def unsigned_token(claims: dict[str, Any]) -> str:
    """An `alg: none` token (no signature), as an attacker would send it."""
    return jwt.encode(claims, None, algorithm="none")


@dataclass
class JwksServer:
    """Serves `document` at http://127.0.0.1:<port>/jwks.json; counts requests; can be
    stopped and started again on the same port (the JWKS endpoint going down and back)."""

    document: dict[str, Any] = field(default_factory=lambda: {"keys": []})
    port: int = field(default_factory=free_port)
    requests: int = 0
    status: int = 200
    _server: http.server.ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/jwks.json"

    def start(self) -> Self:
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.requests += 1
                body = json.dumps(owner.document).encode()
                self.send_response(owner.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        http.server.ThreadingHTTPServer.allow_reuse_address = True
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
