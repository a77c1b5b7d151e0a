"""Token verification, roles and access levels, with real keys and tokens signed here; the
JWKS key source against a JWKS server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator, Iterator

import jwt
import pytest

from broker.auth.access import Access, Role, grants
from broker.auth.errors import Forbidden, KeysUnavailable, Unauthenticated
from broker.auth.gate import ANONYMOUS, Gate, bearer_token, claim_value
from broker.auth.jwks import JwksKeys
from core.auth_settings import AuthSettings
from tests.tokens import (
    AUDIENCE,
    ISSUER,
    JwksServer,
    Signer,
    ed_key,
    public_jwk,
    public_pem,
    rsa_key,
    unsigned_token,
)

SECRET = "an-hmac-secret-of-at-least-32-bytes!"
RSA = rsa_key()
ED = ed_key()


def hs_gate(**overrides: object) -> Gate:
    settings = {"enabled": True, "secret": SECRET, "issuer": ISSUER, "audience": (AUDIENCE,),
                **overrides}
    return Gate(AuthSettings(**settings))  # type: ignore[arg-type]


async def admit(gate: Gate, token: str, level: Access = Access.PUBLIC,
                path: str = "/api/v1/x") -> object:
    return await gate.admit(path, f"Bearer {token}", level)


async def refusal(gate: Gate, token: str, level: Access = Access.PUBLIC) -> str:
    with pytest.raises(Unauthenticated) as info:
        await admit(gate, token, level)
    return info.value.message


# --- the 401 reasons ---------------------------------------------------------------------

async def test_a_valid_hs256_token_gives_its_sub_and_roles() -> None:
    token = Signer(SECRET, "HS256").token("alice", role="admin")
    identity = await admit(hs_gate(), token)
    assert (identity.sub, identity.roles) == ("alice", frozenset({Role.ADMIN}))
    assert identity.expires == jwt.decode(token, options={"verify_signature": False})["exp"]


async def test_each_invalid_token_is_refused_naming_its_reason() -> None:
    gate = hs_gate()
    good = Signer(SECRET, "HS256")
    now = int(time.time())
    cases = {
        unsigned_token({"sub": "eve", "role": "admin"}): "token algorithm 'none' is not accepted",
        Signer(SECRET * 2, "HS512").token():
            "token algorithm 'HS512' is not accepted (expected HS256)",
        Signer("another-secret-that-is-32-bytes-long!", "HS256").token():
            "token signature is invalid",
        good.token(exp=now - 120): "token has expired",
        good.token(nbf=now + 120): "token is not yet valid",
        good.token(iat=now + 120): "token is not yet valid",
        Signer(SECRET, "HS256", issuer="https://evil.test").token(): "token issuer is not accepted",
        Signer(SECRET, "HS256", audience="someone-else").token(): "token audience is not accepted",
        Signer(SECRET, "HS256", issuer=None).token(): "token lacks the 'iss' claim",
        good.token(42): "token sub must be a string",
        "not.a.token": "token is malformed",
        "abc": "token is malformed",
    }
    for token, reason in cases.items():
        assert await refusal(gate, token) == reason, token


async def test_a_none_token_is_refused_whatever_the_case_of_its_alg() -> None:
    header = base64.urlsafe_b64encode(json.dumps({"alg": "NoNe"}).encode()).rstrip(b"=")
    body = base64.urlsafe_b64encode(json.dumps({"sub": "eve"}).encode()).rstrip(b"=")
    token = f"{header.decode()}.{body.decode()}."
    assert await refusal(hs_gate(), token) == "token algorithm 'none' is not accepted"


async def test_clock_skew_admits_a_token_just_expired_and_not_one_long_expired() -> None:
    gate = hs_gate(clock_skew_s=30)
    signer = Signer(SECRET, "HS256")
    now = int(time.time())
    assert await admit(gate, signer.token(exp=now - 10, nbf=now + 10))
    assert await refusal(gate, signer.token(exp=now - 60)) == "token has expired"
    strict = hs_gate(clock_skew_s=0)
    assert await refusal(strict, signer.token(exp=now - 10)) == "token has expired"


async def test_issuer_and_audience_are_checked_only_when_configured() -> None:
    gate = hs_gate(issuer=None, audience=())
    assert await admit(gate, Signer(SECRET, "HS256", issuer="any", audience="any").token())
    assert await admit(gate, Signer(SECRET, "HS256", issuer=None, audience=None).token())
    several = hs_gate(audience=("a", AUDIENCE))
    assert await admit(several, Signer(SECRET, "HS256").token())


async def test_a_cached_token_is_still_refused_once_it_expires() -> None:
    gate = hs_gate(clock_skew_s=0)
    token = Signer(SECRET, "HS256").token(exp=int(time.time()) + 2)
    assert await admit(gate, token)
    assert await admit(gate, token)  # from the cache
    await asyncio.sleep(2.2)
    assert await refusal(gate, token) == "token has expired"


# --- algorithms and keys -----------------------------------------------------------------

async def test_rs256_and_eddsa_tokens_verify_with_their_pem_public_keys() -> None:
    rs = hs_gate(algorithm="RS256", secret=None, public_key=public_pem(RSA))
    assert await admit(rs, Signer(RSA, "RS256").token())
    assert await refusal(rs, Signer(rsa_key(), "RS256").token()) == "token signature is invalid"
    assert "'RS512' is not accepted" in await refusal(rs, Signer(RSA, "RS512").token())
    ed = hs_gate(algorithm="EdDSA", secret=None, public_key=public_pem(ED))
    assert await admit(ed, Signer(ED, "EdDSA").token())
    assert await refusal(ed, Signer(ed_key(), "EdDSA").token()) == "token signature is invalid"


async def test_auto_accepts_what_the_configured_keys_can_verify() -> None:
    long_secret = SECRET * 2  # 72 bytes: enough for HS512
    gate = hs_gate(algorithm="auto", secret=long_secret, public_key=public_pem(RSA))
    for algorithm in ("HS256", "HS384", "HS512"):
        assert await admit(gate, Signer(long_secret, algorithm).token())
    for algorithm in ("RS256", "RS384", "RS512"):
        assert await admit(gate, Signer(RSA, algorithm).token())
    assert "'EdDSA' is not accepted" in await refusal(gate, Signer(ED, "EdDSA").token())
    # A 36-byte secret is long enough for HS256 only (RFC 7518 §3.2).
    short = hs_gate(algorithm="auto")
    assert "'HS384' is not accepted (expected HS256)" in await refusal(
        short, Signer(SECRET + "x" * 12, "HS384").token())


async def test_an_hmac_token_signed_with_the_public_key_is_refused() -> None:
    """Key confusion: an attacker signs HS256 with the (public) PEM as the HMAC secret."""
    pem = public_pem(RSA)
    forged = _forge_hs256({"sub": "eve", "role": "admin", "iss": ISSUER, "aud": AUDIENCE},
                          pem.encode())
    gate = hs_gate(algorithm="auto", secret=SECRET, public_key=pem)
    assert await refusal(gate, forged) == "token signature is invalid"
    rs_only = hs_gate(algorithm="auto", secret=None, public_key=pem)
    assert "'HS256' is not accepted" in await refusal(rs_only, forged)


def _forge_hs256(claims: dict[str, object], key: bytes) -> str:
    """An HS256 token MACed with `key` by hand (PyJWT refuses a PEM as an HMAC secret)."""
    import hashlib
    import hmac

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    signing_input = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode()) + "." + b64(
        json.dumps(claims).encode())
    return signing_input + "." + b64(hmac.new(key, signing_input.encode(),
                                              hashlib.sha256).digest())


# --- the Authorization header ------------------------------------------------------------

def test_the_bearer_prefix_is_case_insensitive_and_a_bare_token_is_accepted() -> None:
    for value in ("Bearer abc", "bearer abc", "BEARER   abc ", "abc", "  abc"):
        assert bearer_token(value) == "abc", value
    for value in (None, "", "Bearer", "Bearer   "):
        with pytest.raises(Unauthenticated, match="^Authentication required$"):
            bearer_token(value)
    with pytest.raises(Unauthenticated, match="'Basic'"):
        bearer_token("Basic dXNlcjpwYXNz")


async def test_no_token_is_authentication_required_and_skip_paths_need_none() -> None:
    gate = hs_gate(skip_paths=("/health", "/open/"))
    with pytest.raises(Unauthenticated, match="^Authentication required$"):
        await gate.admit("/api/v1/push", None, Access.WRITE_ONLY)
    assert await gate.admit("/health", None, Access.PUBLIC) is ANONYMOUS
    assert await gate.admit("/open/x", "Bearer garbage", Access.ADMIN) is ANONYMOUS
    off = Gate(AuthSettings())
    assert await off.admit("/api/v1/push", None, Access.ADMIN) is ANONYMOUS



async def test_a_client_certificate_names_the_caller_when_no_token_does() -> None:
    off = Gate(AuthSettings())
    assert (await off.admit("/api/v1/push", None, Access.WRITE_ONLY, "billing")).sub == \
        "billing"
    gate = hs_gate()
    signer = Signer(SECRET, "HS256")
    with_sub = f"Bearer {signer.token('alice', role='write-only')}"
    without_sub = f"Bearer {signer.token(None, role='write-only')}"
    assert (await gate.admit("/api/v1/push", with_sub, Access.WRITE_ONLY, "billing")).sub == \
        "alice"
    identity = await gate.admit("/api/v1/push", without_sub, Access.WRITE_ONLY, "billing")
    assert (identity.sub, identity.roles) == ("billing", frozenset({Role.WRITE_ONLY}))
    with pytest.raises(Unauthenticated):  # a certificate is no token
        await gate.admit("/api/v1/push", None, Access.WRITE_ONLY, "billing")

# --- roles and levels --------------------------------------------------------------------

PASSES = {  # §9: a higher role includes the lower ones
    "admin": set(Access),
    "read-write": {Access.PUBLIC, Access.READ_ONLY, Access.WRITE_ONLY, Access.READ_WRITE},
    "read-only": {Access.PUBLIC, Access.READ_ONLY},
    "write-only": {Access.PUBLIC, Access.WRITE_ONLY},
    None: {Access.PUBLIC},
    "superuser": {Access.PUBLIC},  # not a role the broker knows
}


@pytest.mark.parametrize("role", list(PASSES))
async def test_each_role_passes_exactly_its_levels(role: str | None) -> None:
    gate = hs_gate()
    token = Signer(SECRET, "HS256").token(role=role)
    for level in Access:
        if level in PASSES[role]:
            assert await admit(gate, token, level), (role, level)
        else:
            with pytest.raises(Forbidden, match="^Insufficient permissions$"):
                await admit(gate, token, level)


async def test_roles_come_from_both_claims_and_from_nested_or_renamed_claims() -> None:
    gate = hs_gate()
    signer = Signer(SECRET, "HS256")
    both = signer.token(role="read-only", roles=["write-only", 7])
    assert await admit(gate, both, Access.READ_ONLY) and await admit(gate, both,
                                                                    Access.WRITE_ONLY)
    with pytest.raises(Forbidden):
        await admit(gate, both, Access.READ_WRITE)
    keycloak = hs_gate(roles_array_claim="realm_access.roles", role_admin="queen-admin")
    token = signer.token(realm_access={"roles": ["offline", "queen-admin"]})
    assert await admit(keycloak, token, Access.ADMIN)
    assert claim_value({"a": {"b": 1}}, "a.b") == 1 and claim_value({"a": 1}, "a.b") is None


async def test_a_level_that_is_not_in_the_table_passes_nobody() -> None:
    assert not grants({Role.ADMIN}, None) and not grants({Role.ADMIN}, "admin")
    with pytest.raises(Forbidden):
        await admit(hs_gate(), Signer(SECRET, "HS256").token(role="admin"),
                    None)  # type: ignore[arg-type]


# --- JWKS --------------------------------------------------------------------------------

@pytest.fixture
def jwks() -> Iterator[JwksServer]:
    with JwksServer({"keys": [public_jwk(RSA, "rsa-1", "RS256"), public_jwk(ED, "ed-1")]}
                    ) as server:
        yield server


@pytest.fixture
async def jwks_gate(jwks: JwksServer) -> AsyncIterator[Gate]:
    gate = await Gate.start(AuthSettings(enabled=True, algorithm="auto", jwks_url=jwks.url,
                                         jwks_timeout_ms=1000))
    yield gate
    await gate.close()


async def test_jwks_keys_verify_rs256_and_eddsa_tokens_by_kid(
        jwks: JwksServer, jwks_gate: Gate) -> None:
    assert await admit(jwks_gate, Signer(RSA, "RS256", kid="rsa-1").token())
    assert await admit(jwks_gate, Signer(ED, "EdDSA", kid="ed-1").token())
    # The JWK says RS256: the same key may not verify RS512, and a kid names one key.
    refusals = await asyncio.gather(
        refusal(jwks_gate, Signer(RSA, "RS512", kid="rsa-1").token()),
        refusal(jwks_gate, Signer(ED, "EdDSA", kid="rsa-1").token()))
    assert all("not in the JWKS" in text for text in refusals), refusals
    # Without a kid: the one key of the algorithm's type.
    assert await admit(jwks_gate, Signer(ED, "EdDSA").token())
    assert await refusal(jwks_gate, Signer(SECRET, "HS256").token()) == (
        "token algorithm 'HS256' is not accepted (expected RS256 or RS384 or RS512 or EdDSA)")
    # One fetch at the start, then one (rate-limited, shared) for the two unmatched kids.
    assert jwks.requests == 2


async def test_a_rotated_key_is_fetched_once_and_unknown_kids_do_not_flood_the_jwks(
        jwks: JwksServer) -> None:
    keys = JwksKeys(jwks.url, refresh_interval_s=3600, timeout_ms=1000, min_refresh_gap_s=0.5)
    await keys.start()
    try:
        assert jwks.requests == 1
        rotated = ed_key()
        jwks.document = {"keys": [public_jwk(rotated, "ed-2")]}
        # Right after the start fetch: the request waits for the next allowed fetch (the
        # gap), which finds the rotated key; no spurious 401.
        started = time.monotonic()
        assert await keys.key("ed-2", "EdDSA")
        assert 0.3 < time.monotonic() - started < 5
        assert jwks.requests == 2
        # A burst of made-up kids: all of them share one fetch, one gap later; each a 401.
        started = time.monotonic()
        results = await asyncio.gather(*(keys.key(f"bogus-{i}", "EdDSA") for i in range(50)),
                                       return_exceptions=True)
        assert all(isinstance(r, Unauthenticated) for r in results), results
        assert jwks.requests == 3 and time.monotonic() - started > 0.3
        with pytest.raises(Unauthenticated):  # rotated out
            await keys.key("ed-1", "EdDSA")
        assert jwks.requests == 4
        assert await keys.key("ed-2", "EdDSA")  # known: no fetch
        assert jwks.requests == 4
    finally:
        await keys.close()


async def test_a_jwks_that_goes_down_keeps_the_last_good_keys(jwks: JwksServer) -> None:
    keys = JwksKeys(jwks.url, refresh_interval_s=3600, timeout_ms=500, min_refresh_gap_s=0)
    await keys.start()
    try:
        jwks.stop()
        assert not await keys.refresh()
        assert await keys.key("rsa-1", "RS256")  # last good keys
        # An unknown kid while the JWKS cannot be read: the broker cannot tell, 503.
        with pytest.raises(KeysUnavailable):
            await keys.key("new-kid", "RS256")
        jwks.start()
        jwks.document = {"keys": [public_jwk(ED, "new-kid")]}
        assert await keys.key("new-kid", "EdDSA")
        # Garbage from the JWKS: the last good keys stay.
        jwks.document = {"nothing": "here"}
        assert not await keys.refresh()
        jwks.status = 500
        assert not await keys.refresh()
        assert await keys.key("new-kid", "EdDSA")
    finally:
        await keys.close()


async def test_a_jwks_never_reached_answers_503_not_401() -> None:
    down = JwksServer()  # never started: connection refused
    gate = await Gate.start(AuthSettings(enabled=True, algorithm="RS256", jwks_url=down.url,
                                         jwks_timeout_ms=300))
    try:
        with pytest.raises(KeysUnavailable):
            await admit(gate, Signer(RSA, "RS256", kid="rsa-1").token())
        with down:
            down.document = {"keys": [public_jwk(RSA, "rsa-1")]}
            await asyncio.sleep(0.01)
            assert await gate._jwks.refresh()  # type: ignore[union-attr]
            assert await admit(gate, Signer(RSA, "RS256", kid="rsa-1").token())
    finally:
        await gate.close()


async def test_a_jwks_that_does_not_answer_in_time_does_not_hold_the_event_loop() -> None:
    """The JWKS accepts the connection and never answers: the fetch gives up at its timeout,
    and meanwhile other coroutines keep running."""
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    url = f"http://127.0.0.1:{silent.getsockname()[1]}/jwks.json"
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    started = time.monotonic()
    keys = JwksKeys(url, refresh_interval_s=3600, timeout_ms=500)
    try:
        await keys.start()
        elapsed = time.monotonic() - started
        assert 0.4 < elapsed < 5, elapsed
        assert ticks >= 10  # the loop ran while the fetch waited
    finally:
        task.cancel()
        await keys.close()
        silent.close()


def test_symmetric_and_weak_keys_in_a_jwks_are_skipped() -> None:
    from broker.auth.jwks import JwksUnreadable, parse_key_set

    keys = parse_key_set({"keys": [
        {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
        {**public_jwk(rsa_key(1024), "weak")},
        {**public_jwk(ED, "enc"), "use": "enc"},
        public_jwk(ED, "good"),
        "not a key",
    ]})
    assert list(keys) == ["good"]
    with pytest.raises(JwksUnreadable):
        parse_key_set({"keys": [{"kty": "oct", "k": "c2VjcmV0"}]})
