"""Authentication settings (wire-protocol §9), checked once, when the settings are built.

Only the literal `true` in `JWT_ENABLED` turns auth on. Any value other than `true`, `false`
or empty refuses to start: a `JWT_ENABLED=1` or `TRUE` that silently left the broker open
would be the worst outcome, so it is an error instead of "off".

With auth on, the keys must be usable before the first request, and a problem stops start-up
with a `SettingsError` naming the variable (never its value, for the secret): an HMAC
secret of at least 32 bytes (48 for HS384, 64 for HS512), a PEM public key of the algorithm's type (RSA keys of at least
2048 bits), or an http(s) JWKS URL (its keys are fetched at run time by the web workers).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric.ed448 import Ed448PublicKey
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from core.env import EnvReader, SettingsError

HMAC_ALGORITHMS = ("HS256", "HS384", "HS512")
RSA_ALGORITHMS = ("RS256", "RS384", "RS512")
EDDSA = "EdDSA"
AUTO = "auto"
ALGORITHMS = (*HMAC_ALGORITHMS, *RSA_ALGORITHMS, EDDSA)
MIN_SECRET_BYTES = 32
# RFC 7518 §3.2: an HMAC key at least as long as the hash's output.
HMAC_MIN_BYTES = {"HS256": 32, "HS384": 48, "HS512": 64}
MIN_RSA_BITS = 2048
# §9's default, plus this API's own description: the OpenAPI document and the page showing it
# are no secret, and a browser opening /docs cannot send a bearer token.
DEFAULT_SKIP_PATHS = ("/health", "/metrics/prometheus", "/metrics", "/", "/openapi.json",
                      "/docs")

PublicKey = RSAPublicKey | Ed25519PublicKey | Ed448PublicKey


@dataclasses.dataclass(frozen=True)
class AuthSettings:
    """JWT authentication as the operator configured it; validated when built."""

    enabled: bool = False
    algorithm: str = "HS256"  # one of ALGORITHMS, or AUTO
    secret: str | None = dataclasses.field(default=None, repr=False)
    public_key: str | None = None  # PEM (a public key or a certificate)
    jwks_url: str | None = None
    jwks_refresh_interval_s: int = 3600
    jwks_timeout_ms: int = 5000
    issuer: str | None = None
    audience: tuple[str, ...] = ()  # a token's `aud` must name one of these (when set)
    clock_skew_s: int = 30
    skip_paths: tuple[str, ...] = DEFAULT_SKIP_PATHS
    roles_claim: str = "role"
    roles_array_claim: str = "roles"
    # The claim naming the token's tenant (docs/security/tenants.md); a token without it acts
    # in the default tenant (an admin token may then name one with the tenant header).
    tenant_claim: str = "tenant"
    role_admin: str = "admin"
    role_read_write: str = "read-write"
    role_read_only: str = "read-only"
    role_write_only: str = "write-only"

    def __post_init__(self) -> None:
        if self.algorithm not in (*ALGORITHMS, AUTO):
            raise SettingsError(f"JWT_ALGORITHM={self.algorithm!r}: expected one of "
                                f"{', '.join((*ALGORITHMS, AUTO))}")
        if self.enabled:
            self._check_keys()

    def _check_keys(self) -> None:
        algorithm = self.algorithm
        uses_secret = algorithm in HMAC_ALGORITHMS or (algorithm == AUTO and self.secret)
        if algorithm in HMAC_ALGORITHMS and not self.secret:
            raise SettingsError(f"JWT_ENABLED=true with JWT_ALGORITHM={algorithm} needs "
                                f"JWT_SECRET (at least {HMAC_MIN_BYTES[algorithm]} bytes)")
        if algorithm in (*RSA_ALGORITHMS, EDDSA) and not (self.public_key or self.jwks_url):
            raise SettingsError(f"JWT_ENABLED=true with JWT_ALGORITHM={algorithm} needs "
                                "JWT_PUBLIC_KEY or JWT_JWKS_URL")
        if algorithm == AUTO and not (self.secret or self.public_key or self.jwks_url):
            raise SettingsError("JWT_ENABLED=true needs a key: JWT_SECRET, JWT_PUBLIC_KEY "
                                "or JWT_JWKS_URL")
        needed = HMAC_MIN_BYTES.get(algorithm, MIN_SECRET_BYTES)
        if uses_secret and len((self.secret or "").encode()) < needed:
            raise SettingsError(f"JWT_SECRET is too short: {algorithm} needs an HMAC secret "
                                f"of at least {needed} bytes")
        if self.public_key and algorithm not in HMAC_ALGORITHMS:
            key = load_public_key(self.public_key)
            if not key_fits(key, algorithm):
                raise SettingsError(f"JWT_PUBLIC_KEY is {_kind(key)} key, which cannot "
                                    f"verify JWT_ALGORITHM={algorithm}")
            if isinstance(key, RSAPublicKey) and key.key_size < MIN_RSA_BITS:
                raise SettingsError(f"JWT_PUBLIC_KEY is an RSA key of {key.key_size} bits; "
                                    f"at least {MIN_RSA_BITS} are needed")
        if self.jwks_url:
            parts = urlsplit(self.jwks_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise SettingsError(f"JWT_JWKS_URL={self.jwks_url!r} is not an http(s) URL")

    def hmac_algorithms(self) -> tuple[str, ...]:
        """The HS* algorithms the secret is long enough for (none without a secret)."""
        size = len(self.secret.encode()) if self.secret else 0
        return tuple(a for a in HMAC_ALGORITHMS if size >= HMAC_MIN_BYTES[a])

    def skips(self, path: str) -> bool:
        """Whether `path` is served without a token (JWT_SKIP_PATHS: an exact match, or a
        prefix match for an entry longer than `/` that ends in `/`)."""
        for entry in self.skip_paths:
            if path == entry or (len(entry) > 1 and entry.endswith("/")
                                 and path.startswith(entry)):
                return True
        return False


def load_public_key(pem: str) -> PublicKey:
    """The key of a PEM public key or certificate; a SettingsError naming JWT_PUBLIC_KEY
    otherwise."""
    data = pem.encode()
    key: object
    try:
        if b"BEGIN CERTIFICATE" in data:
            key = x509.load_pem_x509_certificate(data).public_key()
        else:
            key = load_pem_public_key(data)
    except ValueError:
        raise SettingsError("JWT_PUBLIC_KEY is not a PEM public key or certificate") from None
    if not isinstance(key, RSAPublicKey | Ed25519PublicKey | Ed448PublicKey):
        raise SettingsError(f"JWT_PUBLIC_KEY is a {type(key).__name__}; only RSA and "
                            "Ed25519/Ed448 keys are supported")
    return key


def key_fits(key: PublicKey, algorithm: str) -> bool:
    """Whether `key` can verify tokens of `algorithm` (any asymmetric one for `auto`)."""
    if algorithm == AUTO:
        return True
    if algorithm == EDDSA:
        return not isinstance(key, RSAPublicKey)
    return algorithm in RSA_ALGORITHMS and isinstance(key, RSAPublicKey)


def _kind(key: PublicKey) -> str:
    return "an RSA" if isinstance(key, RSAPublicKey) else "an EdDSA"


def auth_settings_from_env(env: Mapping[str, str]) -> AuthSettings:
    read = EnvReader(env)
    enabled = env.get("JWT_ENABLED", "").strip()
    if enabled not in ("true", "false", ""):
        raise SettingsError(f"JWT_ENABLED={enabled!r}: expected 'true' or 'false' (only "
                            "the literal 'true' turns authentication on)")
    algorithm = env.get("JWT_ALGORITHM", "").strip() or AuthSettings.algorithm
    canonical = {name.lower(): name for name in (*ALGORITHMS, AUTO)}
    defaults = AuthSettings()
    skip = env.get("JWT_SKIP_PATHS")
    return AuthSettings(
        enabled=enabled == "true",
        algorithm=canonical.get(algorithm.lower(), algorithm),
        secret=env.get("JWT_SECRET") or None,
        public_key=_pem(env.get("JWT_PUBLIC_KEY", "")),
        jwks_url=env.get("JWT_JWKS_URL", "").strip() or None,
        jwks_refresh_interval_s=read.integer(
            "JWT_JWKS_REFRESH_INTERVAL", defaults.jwks_refresh_interval_s, low=10),
        jwks_timeout_ms=read.integer("JWT_JWKS_TIMEOUT_MS", defaults.jwks_timeout_ms,
                                     low=100, high=60000),
        issuer=env.get("JWT_ISSUER", "").strip() or None,
        audience=_items(env.get("JWT_AUDIENCE", "")),
        clock_skew_s=read.integer("JWT_CLOCK_SKEW", defaults.clock_skew_s, low=0, high=3600),
        # Set but empty means "no path is skipped": every route needs a token.
        skip_paths=defaults.skip_paths if skip is None else _items(skip),
        roles_claim=_name(read, "JWT_ROLES_CLAIM", defaults.roles_claim),
        roles_array_claim=_name(read, "JWT_ROLES_ARRAY_CLAIM", defaults.roles_array_claim),
        tenant_claim=_name(read, "JWT_TENANT_CLAIM", defaults.tenant_claim),
        role_admin=_name(read, "JWT_ROLE_ADMIN", defaults.role_admin),
        role_read_write=_name(read, "JWT_ROLE_READ_WRITE", defaults.role_read_write),
        role_read_only=_name(read, "JWT_ROLE_READ_ONLY", defaults.role_read_only),
        role_write_only=_name(read, "JWT_ROLE_WRITE_ONLY", defaults.role_write_only),
    )


def _pem(value: str) -> str | None:
    """PEM text as given; a one-line value with `\\n` escapes (common in .env files and
    container settings) is unescaped."""
    value = value.strip()
    if "\\n" in value and "\n" not in value:
        value = value.replace("\\n", "\n")
    return value or None


def _items(value: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in value.split(",") if item.strip())


def _name(read: EnvReader, name: str, default: str) -> str:
    value = read.text(name, default).strip()
    if not value:
        raise SettingsError(f"{name} must not be empty")
    return value
