"""Tokens this broker accepts, signed with its own HMAC secret (`queen-broker token`).

A token is minted from the same settings the broker verifies with (core/auth_settings.py), so
it carries exactly what the gate reads: the role under JWT_ROLES_CLAIM with the name the
broker maps to that level (JWT_ROLE_ADMIN, JWT_ROLE_READ_WRITE, ...), `iss` when JWT_ISSUER is
set, `aud` when JWT_AUDIENCE is, `sub` (what pushes stamp as producerSub), `iat`, `exp` and a
random `jti`. It is signed with JWT_SECRET, with the HMAC algorithm the broker accepts
(JWT_ALGORITHM when it names one, HS256 under `auto`).

Only a broker that verifies with a shared secret can be given tokens this way. With RS*/EdDSA
keys (JWT_PUBLIC_KEY, JWT_JWKS_URL) the broker holds only public keys: tokens come from the
identity provider that holds the private key, and minting refuses, saying so.
"""

from __future__ import annotations

import dataclasses
import re
import time
import uuid
from typing import Any

import jwt

from core.auth_settings import AUTO, HMAC_ALGORITHMS, AuthSettings
from core.env import SettingsError

# The levels a token can grant, by the names the gate's defaults use (broker/auth/access.py).
ROLES = ("admin", "read-write", "read-only", "write-only")
MAX_TTL_SECONDS = 366 * 86400  # a token that never expires could only be revoked by a new secret
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^\s*(\d+)\s*([smhd]?)\s*$")


class CannotMint(Exception):
    """The broker's settings do not allow minting here; the text says what to do instead."""


@dataclasses.dataclass(frozen=True, slots=True)
class Minted:
    token: str
    algorithm: str
    claims: dict[str, Any]


def ttl_seconds(text: str) -> int:
    """`90`, `90s`, `15m`, `1h`, `7d` as seconds, from 1 s to MAX_TTL_SECONDS; ValueError
    naming the problem otherwise."""
    match = _DURATION.match(text.lower())
    if match is None:
        raise ValueError(f"{text!r} is not a duration such as 90s, 15m, 1h or 7d")
    seconds = int(match.group(1)) * _UNITS[match.group(2)]
    if not 1 <= seconds <= MAX_TTL_SECONDS:
        raise ValueError(f"{text!r} is outside 1s..{MAX_TTL_SECONDS // 86400}d")
    return seconds


def signing_algorithm(auth: AuthSettings) -> str:
    """The HMAC algorithm the broker accepts with its secret; CannotMint otherwise."""
    asymmetric = auth.algorithm not in (*HMAC_ALGORITHMS, AUTO) or (
        auth.algorithm == AUTO and not auth.secret and (auth.public_key or auth.jwks_url))
    if asymmetric:
        named = f"JWT_ALGORITHM={auth.algorithm}"
        if auth.algorithm == AUTO:
            named += " without JWT_SECRET"
        raise CannotMint(
            f"{named}: the broker verifies tokens signed with a private key it does not hold "
            "(JWT_PUBLIC_KEY / JWT_JWKS_URL are public keys); get tokens from the identity "
            "provider (the issuer) that signs them")
    if not auth.secret:
        raise CannotMint(f"no JWT_SECRET is configured: the broker has no secret to sign "
                         f"{auth.algorithm} tokens with (set JWT_SECRET, as the broker has "
                         "it, in this command's environment)")
    try:  # the checks the broker runs at start-up when auth is on (secret length, ...)
        dataclasses.replace(auth, enabled=True)
    except SettingsError as exc:
        raise CannotMint(str(exc)) from None
    return HMAC_ALGORITHMS[0] if auth.algorithm == AUTO else auth.algorithm


def mint(auth: AuthSettings, *, role: str, sub: str, ttl_s: int, now: float | None = None,
         tenant: str | None = None) -> Minted:
    """A token granting `role` (one of ROLES) to `sub` for `ttl_s` seconds, bound to
    `tenant` (under JWT_TENANT_CLAIM) when one is given."""
    algorithm = signing_algorithm(auth)
    issued = int(time.time() if now is None else now)
    claims: dict[str, Any] = {"sub": sub, "iat": issued, "exp": issued + ttl_s,
                              "jti": uuid.uuid4().hex}
    if auth.issuer:
        claims["iss"] = auth.issuer
    if auth.audience:
        claims["aud"] = auth.audience[0] if len(auth.audience) == 1 else list(auth.audience)
    _put(claims, auth.roles_claim, _role_name(auth, role))
    if tenant is not None:
        _put(claims, auth.tenant_claim, tenant)
    assert auth.secret is not None  # signing_algorithm checked it
    return Minted(jwt.encode(claims, auth.secret, algorithm=algorithm), algorithm, claims)


def _role_name(auth: AuthSettings, role: str) -> str:
    names = {"admin": auth.role_admin, "read-write": auth.role_read_write,
             "read-only": auth.role_read_only, "write-only": auth.role_write_only}
    return names[role]


def _put(claims: dict[str, Any], name: str, value: str) -> None:
    """Set a claim where the gate looks for it: a dotted name (`realm_access.roles`) is a
    path through nested objects, as the gate reads it (broker/auth/gate.py: claim_value)."""
    if "." not in name or name in claims:
        claims[name] = value
        return
    *path, last = name.split(".")
    node = claims
    for part in path:
        node = node.setdefault(part, {})
    node[last] = value
