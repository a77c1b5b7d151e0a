"""JWT verification with PyJWT: which algorithms, which key, which claims, and why a token
is refused.

- Algorithms: `JWT_ALGORITHM` fixes one; `auto` takes the token's own `alg` among those the
  configured keys can verify (HS* with a `JWT_SECRET` long enough for it: 32 bytes for
  HS256, 48 for HS384, 64 for HS512; RS* / EdDSA with `JWT_PUBLIC_KEY` of that type or with
  JWKS keys). `none` is never accepted, and an HMAC token is never checked
  against a public key (the old key-confusion attack): HS* uses the secret only.
- Claims: the signature, then `exp`, `nbf` and `iat` (with `JWT_CLOCK_SKEW`), `iss`
  (`JWT_ISSUER`) and `aud` (`JWT_AUDIENCE`) when configured. `exp` is not required.
- Every refusal is `Unauthenticated` with a text naming the reason (it is the 401's body).
- Verified tokens are cached by their text (verification costs 0.2-0.5 ms of CPU per request,
  and a client sends the same token many times): a cached token is still checked against the
  clock each time, and the cache is dropped when the JWKS key set changes.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import jwt
from jwt.exceptions import InvalidSubjectError

from broker.auth.errors import Unauthenticated
from broker.auth.jwks import JwksKeys
from core.auth_settings import (
    AUTO,
    EDDSA,
    HMAC_ALGORITHMS,
    RSA_ALGORITHMS,
    AuthSettings,
    PublicKey,
    key_fits,
    load_public_key,
)

CACHE_SIZE = 4096
_REASONS: list[tuple[type[jwt.InvalidTokenError], str]] = [
    (jwt.ExpiredSignatureError, "token has expired"),
    (jwt.ImmatureSignatureError, "token is not yet valid"),
    (jwt.InvalidIssuedAtError, "token iat is not a valid time"),
    (jwt.InvalidIssuerError, "token issuer is not accepted"),
    (jwt.InvalidAudienceError, "token audience is not accepted"),
    (jwt.InvalidSignatureError, "token signature is invalid"),
    (jwt.InvalidAlgorithmError, "token algorithm is not accepted"),
    (InvalidSubjectError, "token sub must be a string"),
    (jwt.DecodeError, "token is malformed"),
]


@dataclass(frozen=True, slots=True)
class _Verified:
    claims: dict[str, Any]
    valid_from: float  # epoch seconds, skew included
    valid_until: float


class TokenVerifier:
    def __init__(self, auth: AuthSettings, jwks: JwksKeys | None = None) -> None:
        self._auth = auth
        self._jwks = jwks
        self._secret = auth.secret.encode() if auth.secret else None
        self._public: PublicKey | None = None
        if auth.public_key and auth.algorithm not in HMAC_ALGORITHMS:
            self._public = load_public_key(auth.public_key)
        self.algorithms = self._accepted_algorithms()
        self._decoder = jwt.PyJWT({"enforce_minimum_key_length": True})
        self._cache: OrderedDict[str, _Verified] = OrderedDict()
        self._cache_version = jwks.version if jwks is not None else 0

    def _accepted_algorithms(self) -> tuple[str, ...]:
        auth = self._auth
        if auth.algorithm != AUTO:
            return (auth.algorithm,)
        accepted = list(auth.hmac_algorithms())
        for algorithm in (*RSA_ALGORITHMS, EDDSA):
            if self._jwks is not None or (
                    self._public is not None and key_fits(self._public, algorithm)):
                accepted.append(algorithm)
        return tuple(accepted)

    async def verify(self, token: str) -> dict[str, Any]:
        """The claims of a valid token; `Unauthenticated` naming the reason otherwise."""
        now = time.time()
        if self._jwks is not None and self._jwks.version != self._cache_version:
            self._cache.clear()
            self._cache_version = self._jwks.version
        cached = self._cache.get(token)
        if cached is not None:
            if cached.valid_from <= now < cached.valid_until:
                self._cache.move_to_end(token)
                return cached.claims
            del self._cache[token]  # expired (or not yet valid): verify again for the reason
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise Unauthenticated("token is malformed") from None
        algorithm = header.get("alg")
        if not isinstance(algorithm, str) or algorithm.lower() == "none":
            raise Unauthenticated("token algorithm 'none' is not accepted")
        if algorithm not in self.algorithms:
            raise Unauthenticated(f"token algorithm {algorithm!r} is not accepted (expected "
                                  f"{' or '.join(self.algorithms)})")
        kid = header.get("kid")
        key = await self._key(algorithm, kid if isinstance(kid, str) else None)
        auth = self._auth
        try:
            claims: dict[str, Any] = self._decoder.decode(
                token, key, algorithms=[algorithm], issuer=auth.issuer,
                audience=list(auth.audience) or None, leeway=auth.clock_skew_s,
                options={"verify_aud": bool(auth.audience)})
        except jwt.InvalidTokenError as exc:
            raise Unauthenticated(_reason(exc)) from None
        except jwt.InvalidKeyError:
            raise Unauthenticated("token key is not usable for its algorithm") from None
        self._remember(token, claims)
        return claims

    async def _key(self, algorithm: str, kid: str | None) -> bytes | PublicKey:
        if algorithm in HMAC_ALGORITHMS:
            assert self._secret is not None  # the algorithm is accepted only with a secret
            return self._secret
        public = self._public
        fits = public is not None and key_fits(public, algorithm)
        if self._jwks is not None and (kid is not None or not fits):
            try:
                return await self._jwks.key(kid, algorithm)
            except Unauthenticated:
                if not fits:
                    raise
        if public is None or not fits:
            raise Unauthenticated(f"no key verifies {algorithm} tokens")
        return public

    def _remember(self, token: str, claims: dict[str, Any]) -> None:
        skew = self._auth.clock_skew_s
        starts = [c for c in (claims.get("nbf"), claims.get("iat"))
                  if isinstance(c, int | float)]
        expires = claims.get("exp")
        self._cache[token] = _Verified(
            claims, max(starts, default=-float("inf")) - skew,
            expires + skew if isinstance(expires, int | float) else float("inf"))
        if len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)


def _reason(exc: jwt.InvalidTokenError) -> str:
    for kind, reason in _REASONS:
        if isinstance(exc, kind):
            return reason
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return f"token lacks the {exc.claim!r} claim"
    return f"token is not valid: {str(exc)[:200]}"
