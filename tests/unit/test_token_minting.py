"""`queen-broker token` (issue 25 point 4): tokens minted from the broker's own auth settings
pass the broker's own gate at the level asked for and no higher, whatever the settings name
the claims and roles; settings minting cannot serve are refused, saying what to do."""

from __future__ import annotations

import json

import jwt
import pytest
from click.testing import CliRunner

from broker.auth.access import Access, Role
from broker.auth.errors import Forbidden
from broker.auth.gate import Gate
from broker.auth.minting import ROLES, mint, ttl_seconds
from broker.cli import main
from core.auth_settings import auth_settings_from_env
from tests.tokens import public_pem, rsa_key

SECRET_64 = "s" * 64
# Each level and the next one up that it must not pass.
LEVELS = {"read-only": (Access.READ_ONLY, Access.READ_WRITE),
          "write-only": (Access.WRITE_ONLY, Access.READ_WRITE),
          "read-write": (Access.READ_WRITE, Access.ADMIN), "admin": (Access.ADMIN, None)}


@pytest.mark.parametrize("env", [
    {"JWT_SECRET": "x" * 32},
    {"JWT_SECRET": SECRET_64, "JWT_ALGORITHM": "HS512", "JWT_ISSUER": "https://id.test",
     "JWT_AUDIENCE": "queen,other-service"},
    {"JWT_SECRET": SECRET_64, "JWT_ALGORITHM": "auto", "JWT_ROLES_CLAIM": "realm_access.roles",
     "JWT_ROLE_ADMIN": "queen-admin", "JWT_ROLE_READ_WRITE": "writer",
     "JWT_ROLE_READ_ONLY": "reader", "JWT_ROLE_WRITE_ONLY": "producer"},
    {"JWT_SECRET": "y" * 48, "JWT_ALGORITHM": "hs384", "JWT_ROLES_CLAIM": "perm"},
], ids=["defaults", "hs512-issuer-audiences", "auto-nested-claim-own-role-names", "hs384"])
async def test_a_minted_token_passes_its_level_and_not_the_next(env: dict[str, str]) -> None:
    auth = auth_settings_from_env({"JWT_ENABLED": "true", **env})
    gate = Gate(auth)
    for role in ROLES:
        minted = mint(auth, role=role, sub="svc-" + role, ttl_s=600)
        granted, higher = LEVELS[role]
        identity = await gate.admit("/api/v1/x", f"Bearer {minted.token}", granted)
        assert identity.sub == "svc-" + role and identity.roles == {Role(role)}
        if higher is not None:
            with pytest.raises(Forbidden):
                await gate.admit("/api/v1/x", f"Bearer {minted.token}", higher)


def test_the_claims_are_the_ones_the_settings_name() -> None:
    auth = auth_settings_from_env({
        "JWT_ENABLED": "true", "JWT_SECRET": SECRET_64, "JWT_ALGORITHM": "HS512",
        "JWT_ISSUER": "https://id.test", "JWT_AUDIENCE": "queen",
        "JWT_ROLES_CLAIM": "realm_access.roles", "JWT_ROLE_READ_WRITE": "writer"})
    minted = mint(auth, role="read-write", sub="billing", ttl_s=3600, now=1_700_000_000)
    assert minted.algorithm == "HS512"
    assert jwt.get_unverified_header(minted.token)["alg"] == "HS512"
    claims = jwt.decode(minted.token, SECRET_64, algorithms=["HS512"], audience="queen",
                        options={"verify_exp": False})
    assert {k: v for k, v in claims.items() if k != "jti"} == {
        "sub": "billing", "iat": 1_700_000_000, "exp": 1_700_003_600,
        "iss": "https://id.test", "aud": "queen", "realm_access": {"roles": "writer"}}
    assert len(claims["jti"]) == 32


def test_durations() -> None:
    assert [ttl_seconds(t) for t in ("90", "90s", "15m", "1h", "7D", " 2d ")] == \
        [90, 90, 900, 3600, 7 * 86400, 2 * 86400]
    for bad in ("0", "0s", "367d", "1w", "-1h", "1.5h", "", "forever"):
        with pytest.raises(ValueError):
            ttl_seconds(bad)


def run(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    names = ("JWT_ENABLED", "JWT_SECRET", "JWT_ALGORITHM", "JWT_PUBLIC_KEY", "JWT_JWKS_URL",
             "JWT_ISSUER", "JWT_AUDIENCE", "JWT_ROLES_CLAIM")
    clean: dict[str, str | None] = dict.fromkeys(names)
    result = CliRunner().invoke(main, ["token", *args], env={**clean, **env})
    return result.exit_code, result.stdout, result.stderr


def test_the_command_prints_the_token_alone_and_a_summary_on_stderr() -> None:
    status, out, err = run({"JWT_ENABLED": "true", "JWT_SECRET": "z" * 40},
                           "--role", "read-only", "--sub", "dash", "--ttl", "15m")
    assert status == 0 and out.count("\n") == 1
    claims = jwt.decode(out.strip(), "z" * 40, algorithms=["HS256"])
    assert (claims["role"], claims["sub"], claims["exp"] - claims["iat"]) == \
        ("read-only", "dash", 900)
    assert err.startswith("read-only token for 'dash', HS256, expires ")
    status, out, _ = run({"JWT_ENABLED": "true", "JWT_SECRET": "z" * 40},
                         "--role", "admin", "--sub", "ops", "--json")
    answer = json.loads(out)
    assert status == 0 and answer["algorithm"] == "HS256" and answer["claims"]["role"] == "admin"
    # Auth off in this environment: still minted (for when it is switched on), with a note.
    status, out, err = run({"JWT_SECRET": "z" * 40}, "--role", "admin", "--sub", "ops")
    assert status == 0 and out.strip() and "JWT_ENABLED is not 'true'" in err


@pytest.mark.parametrize(("env", "says"), [
    ({}, "no JWT_SECRET is configured: the broker has no secret to sign HS256 tokens with"),
    # With auth on, the broker's own start-up check speaks first.
    ({"JWT_ENABLED": "true"},
     "JWT_ENABLED=true with JWT_ALGORITHM=HS256 needs JWT_SECRET (at least 32 bytes)"),
    ({"JWT_ENABLED": "true", "JWT_SECRET": "short"},
     "JWT_SECRET is too short: HS256 needs an HMAC secret of at least 32 bytes"),
    ({"JWT_ENABLED": "true", "JWT_SECRET": "x" * 40, "JWT_ALGORITHM": "HS512"},
     "JWT_SECRET is too short: HS512 needs an HMAC secret of at least 64 bytes"),
    ({"JWT_ENABLED": "true", "JWT_ALGORITHM": "RS256",
      "JWT_PUBLIC_KEY": public_pem(rsa_key())},
     "JWT_ALGORITHM=RS256: the broker verifies tokens signed with a private key it does not hold"),
    ({"JWT_ENABLED": "true", "JWT_ALGORITHM": "EdDSA",
      "JWT_JWKS_URL": "https://id.test/jwks.json"}, "get tokens from the identity provider"),
    ({"JWT_ENABLED": "true", "JWT_ALGORITHM": "auto",
      "JWT_JWKS_URL": "https://id.test/jwks.json"},
     "JWT_ALGORITHM=auto without JWT_SECRET: the broker verifies tokens signed with a private"),
    ({"JWT_ENABLED": "yes", "JWT_SECRET": "x" * 40}, "JWT_ENABLED='yes'"),
], ids=["no-secret", "no-secret-auth-on", "short", "short-hs512", "rs256", "eddsa-jwks",
        "auto-jwks", "bad-env"])
def test_what_cannot_be_minted_is_refused_saying_why(env: dict[str, str], says: str) -> None:
    status, out, err = run(env, "--role", "admin", "--sub", "ops")
    assert (status, out) == (2, "")
    assert err.startswith("Error: cannot mint a token: ") and says in err, err


def test_bad_options_are_usage_errors() -> None:
    env = {"JWT_ENABLED": "true", "JWT_SECRET": "x" * 40}
    for args in (("--role", "root", "--sub", "a"), ("--role", "admin"), ("--sub", "a"),
                 ("--role", "admin", "--sub", "a", "--ttl", "1y")):
        status, out, _ = run(env, *args)
        assert (status, out) == (2, ""), args
