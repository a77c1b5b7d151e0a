"""One request's admission (wire-protocol §9): who is calling, and may they use this route.

With auth off everyone is anonymous and every route is open. With auth on:

1. a path in JWT_SKIP_PATHS is served without looking at any token (anonymous);
2. otherwise the token comes from `Authorization` (`Bearer <token>`, any case, or the bare
   token); none → 401 `Authentication required`; an invalid one → 401 naming the reason;
3. the token's roles (JWT_ROLES_CLAIM, JWT_ROLES_ARRAY_CLAIM) must pass the route's access
   level, else 403 `Insufficient permissions`.

The identity's `sub` is what pushes stamp as `producerSub`: the token's, or, when no token
names one (auth off, or a token without `sub`), the verified client certificate's
(broker/tls/peer.py). Its `tenant` is the token's tenant claim (JWT_TENANT_CLAIM), None when
the token names none; broker/tenancy.py decides the request's tenant from it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from broker.auth.access import Role, grants
from broker.auth.errors import Forbidden, Unauthenticated
from broker.auth.jwks import JwksKeys
from broker.auth.tokens import TokenVerifier
from core.auth_settings import HMAC_ALGORITHMS, AuthSettings
from core.tenancy.names import check_tenant

MAX_SUB_BYTES = 65535  # the storage frame keeps producerSub as a str16


@dataclass(frozen=True, slots=True)
class Identity:
    sub: str | None
    roles: frozenset[Role]
    expires: float | None = None  # the token's exp (epoch seconds), when it has one
    tenant: str | None = None  # the token's tenant claim; None: it names none


ANONYMOUS = Identity(None, frozenset())


def _expiry(claims: dict[str, Any]) -> float | None:
    exp = claims.get("exp")
    return float(exp) if isinstance(exp, int | float) else None


class Gate:
    """Admits requests per the auth settings; one per web process."""

    def __init__(self, auth: AuthSettings, jwks: JwksKeys | None = None) -> None:
        self.auth = auth
        self._jwks = jwks
        self._verifier = TokenVerifier(auth, jwks) if auth.enabled else None
        self._role_names = {auth.role_admin: Role.ADMIN, auth.role_read_write: Role.READ_WRITE,
                            auth.role_read_only: Role.READ_ONLY,
                            auth.role_write_only: Role.WRITE_ONLY}

    @classmethod
    async def start(cls, auth: AuthSettings) -> Gate:
        """The gate, with its JWKS keys fetched once (a failure there only logs)."""
        jwks = None
        if auth.enabled and auth.jwks_url and auth.algorithm not in HMAC_ALGORITHMS:
            jwks = JwksKeys(auth.jwks_url, refresh_interval_s=auth.jwks_refresh_interval_s,
                            timeout_ms=auth.jwks_timeout_ms)
            await jwks.start()
        return cls(auth, jwks)

    async def close(self) -> None:
        if self._jwks is not None:
            await self._jwks.close()

    async def admit(self, path: str, authorization: str | None, level: object,
                    certificate: str | None = None) -> Identity:
        """The caller's identity if they may use a route of `level` at `path`; else raise
        Unauthenticated (401), Forbidden (403) or KeysUnavailable (503). `certificate`: the
        identity of the connection's verified client certificate, the caller's `sub` when
        no token names one."""
        if self._verifier is None or self.auth.skips(path):
            return ANONYMOUS if certificate is None else Identity(certificate, frozenset())
        identity = await self.identify(bearer_token(authorization))
        if not grants(identity.roles, level):
            raise Forbidden()
        if identity.sub is None and certificate is not None:
            return replace(identity, sub=certificate)
        return identity

    async def identify(self, token: str) -> Identity:
        """Who a token names and with which roles (auth on); Unauthenticated naming the
        reason when it is not valid. The Kafka listener's SASL/PLAIN calls this."""
        assert self._verifier is not None, "auth is off"
        claims = await self._verifier.verify(token)
        sub = claims.get("sub")
        if isinstance(sub, str) and len(sub.encode()) > MAX_SUB_BYTES:
            raise Unauthenticated(f"token sub is longer than {MAX_SUB_BYTES} bytes")
        return Identity(sub if isinstance(sub, str) else None, self._roles(claims),
                        _expiry(claims), self._tenant(claims))

    def _tenant(self, claims: dict[str, Any]) -> str | None:
        name = self.auth.tenant_claim
        value = claim_value(claims, name)
        if value is None:
            return None
        if not isinstance(value, str):
            raise Unauthenticated(f"token claim {name!r} is not a tenant: must be a string")
        try:
            return check_tenant(value)
        except ValueError as exc:
            raise Unauthenticated(f"token claim {name!r} is not a tenant: {exc}") from None

    def _roles(self, claims: dict[str, Any]) -> frozenset[Role]:
        names: list[str] = []
        for claim in (self.auth.roles_claim, self.auth.roles_array_claim):
            value = claim_value(claims, claim)
            if isinstance(value, str):
                names.append(value)
            elif isinstance(value, list):
                names += (v for v in value if isinstance(v, str))
        return frozenset(self._role_names[n] for n in names if n in self._role_names)


def bearer_token(authorization: str | None) -> str:
    """The token of an `Authorization` value: `Bearer <token>` (any case) or a bare token."""
    value = (authorization or "").strip()
    scheme, _, rest = value.partition(" ")
    if scheme.lower() == "bearer":
        value = rest.strip()
    elif rest:
        raise Unauthenticated(f"Authorization must be 'Bearer <token>', not {scheme[:20]!r}")
    if not value:
        raise Unauthenticated()
    return value


def claim_value(claims: dict[str, Any], name: str) -> Any:
    """A claim by name; a dotted name that is not a claim itself walks nested objects
    (`realm_access.roles`, as some identity providers nest roles)."""
    if name in claims or "." not in name:
        return claims.get(name)
    value: Any = claims
    for part in name.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value
