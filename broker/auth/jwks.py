"""Signing keys from `JWT_JWKS_URL`, fetched at run time and kept fresh off the request path.

- The key set is fetched when the worker starts (bounded by `JWT_JWKS_TIMEOUT_MS`; a failure
  only logs), then again every `JWT_JWKS_REFRESH_INTERVAL` seconds by a background task, or
  every `RETRY_SECONDS` while no fetch has succeeded yet. Fetching is asynchronous
  (httpx): the event loop never waits on the JWKS server.
- A failed fetch, an unreadable document or one with no usable key keeps the last good keys.
- A token whose `kid` is unknown triggers one refresh, shared by every request that waits
  for it, and at most one per `MIN_REFRESH_GAP_SECONDS` after the previous fetch: a request
  that comes sooner waits for that next fetch (at most the gap) rather than being refused,
  so a key rotated in just after a fetch is not a spurious 401, and a flood of made-up key
  ids is still at most one fetch per gap.
- Only public signature keys are taken: RSA (at least 2048 bits) and OKP Ed25519/Ed448.
  Symmetric (`oct`) keys and keys whose `use` is not `sig` are skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed448 import Ed448PrivateKey, Ed448PublicKey
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from jwt.algorithms import OKPAlgorithm, RSAAlgorithm

from broker.auth.errors import KeysUnavailable, Unauthenticated
from core.auth_settings import (
    EDDSA,
    MIN_RSA_BITS,
    RSA_ALGORITHMS,
    PublicKey,
    key_fits,
)

log = logging.getLogger("queen.auth")

RETRY_SECONDS = 10.0  # between fetches while none has succeeded, or after a failure
MIN_REFRESH_GAP_SECONDS = 2.0  # at most one fetch caused by unknown key ids per this
MAX_DOCUMENT_BYTES = 1024 * 1024


class JwksUnreadable(Exception):
    """The JWKS answer is not a usable key set."""


@dataclass(frozen=True, slots=True)
class SigningKey:
    key: PublicKey
    algorithm: str | None  # the JWK's `alg`, when it names one

    def verifies(self, algorithm: str) -> bool:
        if self.algorithm is not None and self.algorithm != algorithm:
            return False
        return key_fits(self.key, algorithm)


class JwksKeys:
    """The current key set of one JWKS URL, by key id."""

    def __init__(self, url: str, *, refresh_interval_s: float, timeout_ms: int,
                 min_refresh_gap_s: float = MIN_REFRESH_GAP_SECONDS) -> None:
        self._url = url
        self._interval = refresh_interval_s
        self._gap = min_refresh_gap_s
        # Imported here: only a broker configured with a JWKS URL needs it, and importing
        # httpx pulls in its CLI (rich, click) when those are installed: ~0.1 s of CPU at
        # every worker start, which restarts under load pay.
        import httpx

        self._client = httpx.AsyncClient(timeout=timeout_ms / 1000, follow_redirects=False)
        self._keys: dict[str, SigningKey] = {}
        self._last_attempt = -math.inf
        self._last_ok = False
        self._fetching: asyncio.Task[bool] | None = None
        self._due_fetch: asyncio.Task[bool] | None = None  # the next fetch for unknown kids
        self._stop = asyncio.Event()
        self._refresher: asyncio.Task[None] | None = None
        # Bumped whenever the key set changes, so the verified-token cache can be dropped.
        self.version = 0

    async def start(self) -> None:
        await self.refresh()
        self._refresher = asyncio.create_task(self._refresh_forever(), name="jwks-refresh")

    async def close(self) -> None:
        self._stop.set()
        for task in (self._refresher, self._fetching, self._due_fetch):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await self._client.aclose()

    async def key(self, kid: str | None, algorithm: str) -> PublicKey:
        """The key that verifies a token with this `kid` and `alg`.

        Unknown → the next rate-limited refresh, then 401 if the JWKS answered without it,
        or 503 (KeysUnavailable) if the JWKS could not be read: then the broker cannot tell.
        """
        found = self._lookup(kid, algorithm)
        if found is None:
            if self._due_fetch is None:
                self._due_fetch = asyncio.create_task(self._fetch_when_due(),
                                                      name="jwks-fetch-for-kid")
            await asyncio.shield(self._due_fetch)
            found = self._lookup(kid, algorithm)
        if found is not None:
            return found
        if not self._last_ok:
            raise KeysUnavailable()
        if kid is None:
            raise Unauthenticated("token has no kid, and the JWKS has no single key for "
                                  f"{algorithm}")
        raise Unauthenticated(f"token key id {kid!r} is not in the JWKS (or not for "
                              f"{algorithm})")

    def _lookup(self, kid: str | None, algorithm: str) -> PublicKey | None:
        if kid is not None:
            key = self._keys.get(kid)
            return key.key if key is not None and key.verifies(algorithm) else None
        fitting = [k for k in self._keys.values() if k.verifies(algorithm)]
        return fitting[0].key if len(fitting) == 1 else None

    async def refresh(self) -> bool:
        """Fetch the key set now (joining a fetch already under way); answer success."""
        if self._fetching is None:
            self._fetching = asyncio.create_task(self._fetch(), name="jwks-fetch")
            self._fetching.add_done_callback(self._fetched)
        return await asyncio.shield(self._fetching)

    async def _fetch_when_due(self) -> bool:
        try:
            await asyncio.sleep(max(0.0, self._last_attempt + self._gap - time.monotonic()))
            return await self.refresh()
        finally:
            self._due_fetch = None

    def _fetched(self, task: asyncio.Task[bool]) -> None:
        if self._fetching is task:
            self._fetching = None

    async def _refresh_forever(self) -> None:
        while True:
            pause = self._interval if self._last_ok else min(self._interval, RETRY_SECONDS)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(pause):
                    await self._stop.wait()
                    return
            await self.refresh()

    async def _fetch(self) -> bool:
        self._last_attempt = time.monotonic()
        try:
            document = await self._download()
            keys = parse_key_set(document)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever went wrong, the last good keys stay
            self._last_ok = False
            log.warning("could not read the key set of JWT_JWKS_URL (%s: %s); keeping the "
                        "%d keys it had", type(exc).__name__, _short(exc), len(self._keys))
            return False
        if keys != self._keys:
            log.info("JWKS key ids now: %s", ", ".join(sorted(keys)) or "(none)")
            self._keys = keys
            self.version += 1
        self._last_ok = True
        return True

    async def _download(self) -> Any:
        async with self._client.stream("GET", self._url,
                                       headers={"Accept": "application/json"}) as answer:
            if answer.status_code != 200:
                raise JwksUnreadable(f"HTTP {answer.status_code}")
            body = bytearray()
            async for chunk in answer.aiter_bytes():
                body += chunk
                if len(body) > MAX_DOCUMENT_BYTES:
                    raise JwksUnreadable(f"document over {MAX_DOCUMENT_BYTES} bytes")
        return msgspec.json.decode(bytes(body))


def parse_key_set(document: Any) -> dict[str, SigningKey]:
    """The usable signature keys of a JWKS document, by kid (`""` for a key without one).
    A document with no usable key is an error (JwksUnreadable): the last good keys stay."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise JwksUnreadable("not a JWKS document (no `keys` array)")
    keys: dict[str, SigningKey] = {}
    for jwk in document["keys"]:
        if not isinstance(jwk, dict) or jwk.get("use", "sig") != "sig":
            continue
        algorithm = jwk.get("alg")
        if algorithm is not None and algorithm not in (*RSA_ALGORITHMS, EDDSA):
            continue
        try:
            key = _public_key(jwk)
        except (ValueError, TypeError, KeyError) as exc:
            log.warning("skipping JWKS key %r: %s", jwk.get("kid"), _short(exc))
            continue
        if key is None:
            continue
        kid = jwk.get("kid")
        keys[kid if isinstance(kid, str) else ""] = SigningKey(key, algorithm)
    if not keys:
        raise JwksUnreadable("no usable RSA or Ed25519/Ed448 signature key")
    return keys


def _public_key(jwk: dict[str, Any]) -> PublicKey | None:
    kty = jwk.get("kty")
    if kty == "RSA":
        rsa = RSAAlgorithm.from_jwk(jwk)
        public = rsa.public_key() if isinstance(rsa, RSAPrivateKey) else rsa
        if public.key_size < MIN_RSA_BITS:
            raise ValueError(f"RSA key of {public.key_size} bits")
        return public
    if kty == "OKP" and jwk.get("crv") in ("Ed25519", "Ed448"):
        okp = OKPAlgorithm.from_jwk(jwk)
        if isinstance(okp, Ed25519PrivateKey | Ed448PrivateKey):
            return okp.public_key()
        if isinstance(okp, Ed25519PublicKey | Ed448PublicKey):
            return okp
    return None  # symmetric and other key types are not signature keys we take from a URL


def _short(exc: BaseException) -> str:
    return str(exc)[:200]
