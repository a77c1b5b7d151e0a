"""JWT settings: read from the environment, and checked before anything starts."""

from __future__ import annotations

import pytest

from broker.auth.exposure import exposure_warnings
from core.auth_settings import DEFAULT_SKIP_PATHS, AuthSettings, auth_settings_from_env
from core.settings import Settings, SettingsError
from tests.tokens import ed_key, public_pem, rsa_key

SECRET = "s" * 32


def test_auth_is_off_by_default_and_only_the_literal_true_turns_it_on() -> None:
    assert Settings.from_env({}).auth.enabled is False
    assert auth_settings_from_env({"JWT_ENABLED": "false"}).enabled is False
    assert auth_settings_from_env({"JWT_ENABLED": ""}).enabled is False
    assert auth_settings_from_env({"JWT_ENABLED": "true", "JWT_SECRET": SECRET}).enabled


@pytest.mark.parametrize("value", ["1", "TRUE", "True", "yes", "on", "enabled"])
def test_any_other_spelling_of_enabled_refuses_to_start_rather_than_leave_it_open(
        value: str) -> None:
    with pytest.raises(SettingsError, match="JWT_ENABLED"):
        Settings.from_env({"JWT_ENABLED": value, "JWT_SECRET": SECRET})


def test_enabled_without_any_key_names_the_missing_variable() -> None:
    with pytest.raises(SettingsError, match="needs JWT_SECRET"):
        Settings.from_env({"JWT_ENABLED": "true"})
    with pytest.raises(SettingsError, match="JWT_PUBLIC_KEY or JWT_JWKS_URL"):
        Settings.from_env({"JWT_ENABLED": "true", "JWT_ALGORITHM": "RS256"})
    with pytest.raises(SettingsError, match="JWT_SECRET, JWT_PUBLIC_KEY or JWT_JWKS_URL"):
        Settings.from_env({"JWT_ENABLED": "true", "JWT_ALGORITHM": "auto"})


@pytest.mark.parametrize(("algorithm", "needed"), [
    ("HS256", 32), ("HS384", 48), ("HS512", 64), ("auto", 32)])
def test_an_hmac_secret_shorter_than_its_hash_is_refused_and_never_echoed(
        algorithm: str, needed: int) -> None:
    secret = "recognisable-" + "x" * (needed - 14)
    with pytest.raises(SettingsError, match=f"JWT_SECRET is too short: {algorithm} needs "
                                            f"an HMAC secret of at least {needed} bytes"
                       ) as info:
        Settings.from_env({"JWT_ENABLED": "true", "JWT_ALGORITHM": algorithm,
                           "JWT_SECRET": secret})
    assert secret not in str(info.value)
    assert Settings.from_env({"JWT_ENABLED": "true", "JWT_ALGORITHM": algorithm,
                              "JWT_SECRET": secret + "x"}).auth.enabled
    # Counted as UTF-8 bytes: 16 two-byte characters are 32 bytes.
    assert Settings.from_env({"JWT_ENABLED": "true", "JWT_SECRET": "é" * 16}).auth.enabled


def test_the_secret_is_not_in_the_settings_repr() -> None:
    settings = Settings.from_env({"JWT_ENABLED": "true", "JWT_SECRET": SECRET,
                                  "DATABASE_URL": "postgresql://u:pw-123@h/db"})
    assert SECRET not in repr(settings) and "pw-123" not in repr(settings)


def test_public_keys_are_parsed_and_must_fit_the_algorithm() -> None:
    rsa_pem, ed_pem = public_pem(rsa_key()), public_pem(ed_key())
    on = {"JWT_ENABLED": "true"}
    assert Settings.from_env({**on, "JWT_ALGORITHM": "RS256", "JWT_PUBLIC_KEY": rsa_pem}).auth
    assert Settings.from_env({**on, "JWT_ALGORITHM": "EdDSA", "JWT_PUBLIC_KEY": ed_pem}).auth
    with pytest.raises(SettingsError, match="JWT_PUBLIC_KEY is an RSA key"):
        Settings.from_env({**on, "JWT_ALGORITHM": "EdDSA", "JWT_PUBLIC_KEY": rsa_pem})
    with pytest.raises(SettingsError, match="JWT_PUBLIC_KEY is an EdDSA key"):
        Settings.from_env({**on, "JWT_ALGORITHM": "RS384", "JWT_PUBLIC_KEY": ed_pem})
    with pytest.raises(SettingsError, match="not a PEM public key"):
        Settings.from_env({**on, "JWT_ALGORITHM": "RS256", "JWT_PUBLIC_KEY": "garbage"})
    with pytest.raises(SettingsError, match="1024 bits"):
        Settings.from_env({**on, "JWT_ALGORITHM": "RS256",
                           "JWT_PUBLIC_KEY": public_pem(rsa_key(1024))})


def test_a_one_line_pem_with_backslash_n_escapes_is_accepted() -> None:
    pem = public_pem(ed_key()).strip().replace("\n", "\\n")
    auth = auth_settings_from_env({"JWT_ENABLED": "true", "JWT_ALGORITHM": "eddsa",
                                   "JWT_PUBLIC_KEY": pem})
    assert auth.algorithm == "EdDSA" and auth.public_key is not None
    assert auth.public_key.startswith("-----BEGIN PUBLIC KEY-----\n")


def test_unknown_algorithms_and_bad_urls_are_refused() -> None:
    with pytest.raises(SettingsError, match="JWT_ALGORITHM='none'"):
        Settings.from_env({"JWT_ALGORITHM": "none"})
    with pytest.raises(SettingsError, match="JWT_ALGORITHM='ES256'"):
        Settings.from_env({"JWT_ENABLED": "true", "JWT_ALGORITHM": "ES256",
                           "JWT_SECRET": SECRET})
    with pytest.raises(SettingsError, match="JWT_JWKS_URL"):
        Settings.from_env({"JWT_ENABLED": "true", "JWT_ALGORITHM": "RS256",
                           "JWT_JWKS_URL": "file:///etc/passwd"})
    with pytest.raises(SettingsError, match="JWT_CLOCK_SKEW"):
        Settings.from_env({"JWT_CLOCK_SKEW": "-5"})
    with pytest.raises(SettingsError, match="JWT_ROLE_ADMIN"):
        Settings.from_env({"JWT_ROLE_ADMIN": " "})


def test_the_rest_of_the_variables_are_read() -> None:
    auth = auth_settings_from_env({
        "JWT_ENABLED": "true", "JWT_ALGORITHM": "RS256",
        "JWT_JWKS_URL": "https://idp.test/jwks", "JWT_JWKS_REFRESH_INTERVAL": "60",
        "JWT_JWKS_TIMEOUT_MS": "1500", "JWT_ISSUER": "https://idp.test",
        "JWT_AUDIENCE": "queen, other", "JWT_CLOCK_SKEW": "5",
        "JWT_SKIP_PATHS": "/health, /public/", "JWT_ROLES_CLAIM": "realm_access.role",
        "JWT_ROLES_ARRAY_CLAIM": "groups", "JWT_ROLE_ADMIN": "root",
        "JWT_ROLE_READ_WRITE": "rw", "JWT_ROLE_READ_ONLY": "ro", "JWT_ROLE_WRITE_ONLY": "wo"})
    assert (auth.jwks_refresh_interval_s, auth.jwks_timeout_ms, auth.clock_skew_s) == (60, 1500, 5)
    assert auth.audience == ("queen", "other") and auth.issuer == "https://idp.test"
    assert auth.skip_paths == ("/health", "/public/")
    assert (auth.roles_claim, auth.roles_array_claim) == ("realm_access.role", "groups")
    assert (auth.role_admin, auth.role_read_write, auth.role_read_only,
            auth.role_write_only) == ("root", "rw", "ro", "wo")


def test_skip_paths_match_exactly_or_as_a_prefix_when_they_end_in_a_slash() -> None:
    auth = AuthSettings(skip_paths=("/", "/health", "/public/"))
    assert auth.skips("/") and auth.skips("/health") and auth.skips("/public/x/y")
    assert not auth.skips("/healthz") and not auth.skips("/health/x")
    assert not auth.skips("/api/v1/push")  # "/" alone is not a prefix of everything
    assert Settings.from_env({}).auth.skip_paths == DEFAULT_SKIP_PATHS
    assert auth_settings_from_env({"JWT_SKIP_PATHS": ""}).skip_paths == ()


def test_cors_origins_are_read_and_checked() -> None:
    assert Settings.from_env({}).cors_origins == ("*",)
    assert Settings.from_env({"CORS_ORIGINS": "https://a.test, http://b.test:8080/"}
                             ).cors_origins == ("https://a.test", "http://b.test:8080")
    with pytest.raises(SettingsError, match="CORS_ORIGINS"):
        Settings.from_env({"CORS_ORIGINS": "https://a.test/app"})


def test_start_up_warns_when_auth_is_off_beyond_loopback() -> None:
    off, on = AuthSettings(), AuthSettings(enabled=True, secret=SECRET)
    assert exposure_warnings(off, "0.0.0.0") and exposure_warnings(off, "::")
    assert exposure_warnings(off, "192.0.2.10")
    for loopback in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        assert exposure_warnings(off, loopback) == []
    assert exposure_warnings(on, "0.0.0.0") == []
    assert "JWT_ENABLED is not 'true'" in exposure_warnings(
        AuthSettings(secret=SECRET), "127.0.0.1")[0]
