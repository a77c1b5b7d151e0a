"""The headings of the configuration reference, in its order, and the variables read by
code of their own, with what each means: the listen address, the database URL, TLS
(core/tls.py), authentication (core/auth_settings.py), the spool's directory, the
encryption key, the Kafka port, the trusted proxies of tenants.

Every other setting of `Settings` (core/settings.py), and of the tenants' settings it holds
(core/tenancy/settings.py), is declared once, on its field (`Heading.setting`,
core/env.py), under one of these headings. `tests/unit/test_variables.py` fails when a variable is read without a meaning,
or described and never read.
"""

from __future__ import annotations

from core.auth_settings import DEFAULT_SKIP_PATHS, AuthSettings
from core.env import Described, Heading

LISTENING = Heading("Listening", {
    "QUEEN_HOST": Described(
        "Listen address (`--host`); wins over `HOST` when both are set.",
        default="`127.0.0.1` with auth off, `0.0.0.0` with auth on"),
    "HOST": Described("Listen address, read when `QUEEN_HOST` is not set.",
                      default="as `QUEEN_HOST`"),
    "CORS_ORIGINS": Described(
        "Origins a browser page may call the API from: `*`, or a comma-separated list "
        "such as `https://app.example.com`.", default="`*`"),
})
TLS = Heading("TLS", {
    "TLS_CERT_FILE": Described(
        "PEM certificate (then any intermediate certificates) of the HTTP listener and "
        "of the Kafka listener; with `TLS_KEY_FILE` it turns TLS on for both (see TLS).",
        default="unset: no TLS"),
    "TLS_KEY_FILE": Described("PEM private key of `TLS_CERT_FILE`, without a passphrase.",
                              default="unset"),
    "TLS_CLIENT_CA_FILE": Described(
        "PEM CA certificates that sign client certificates (mutual TLS); a client "
        "certificate's subject becomes the producer identity when no token names one.",
        default="unset: clients show no certificate"),
    "TLS_CLIENT_AUTH": Described(
        "`required` (a client without a certificate signed by `TLS_CLIENT_CA_FILE` "
        "cannot connect), `optional` (one that shows a certificate must show a valid "
        "one) or `none`.",
        default="`required` with `TLS_CLIENT_CA_FILE`, else `none`"),
    "TLS_WATCH_INTERVAL_MS": "How often, in milliseconds, each process looks whether the "
                             "certificate, key or CA file changed, and then loads them for "
                             "new connections; `0`: only on SIGHUP.",
})
DATABASE = Heading("Database", {
    "DATABASE_URL": Described(
        "The PostgreSQL to use instead of the embedded one: any URI asyncpg accepts "
        "(`postgresql://user@/db?host=/socket/dir`). Several hosts as libpq takes them "
        "(`postgresql://u@db1:5432,db2:5432/queen`, or `?host=/a,/b&port=5432,5433`): "
        "the broker follows the read-write one.",
        default="unset: the embedded PostgreSQL in `QUEEN_DATA_DIR`"),
    "PG_HOST": Described(
        "Database host when `DATABASE_URL` is not set; a comma-separated list for "
        "several hosts, or Unix-socket directories (paths starting with `/`). Setting any "
        "`PG_*` variable selects an external server.", default="`localhost`"),
    "PG_PORT": Described("Database port: one for every host, or one per `PG_HOST` host "
                         "(comma-separated).", default="`5432`"),
    "PG_USER": Described("Database user.", default="`postgres`"),
    "PG_PASSWORD": Described("Database password (never logged).", default="`postgres`"),
    "PG_DATABASE": Described("Database name.", default="`postgres`"),
    "PG_DB": Described("Database name, read when `PG_DATABASE` is not set.",
                       default="`postgres`"),
})
REQUESTS = Heading("Requests")
POPS = Heading("Pops and long polls")
COALESCER = Heading("Write coalescer")
REAPER = Heading("Reaper and retention")
METRICS = Heading("Metrics")
TRACING = Heading("Tracing")
PROCESSES = Heading("Processes")
SPOOL = Heading("Push spool", {
    "FILE_BUFFER_DIR": Described(
        "Directory of the push spool, which takes pushes during maintenance or a "
        "database outage; one subdirectory per database.",
        default="`spool` in `QUEEN_DATA_DIR`"),
})
ENCRYPTION = Heading("Encryption", {
    "QUEEN_ENCRYPTION_KEY": Described(
        "64 hex characters (a 32-byte AES-256 key) sealing the messages of queues with "
        "`encryptionEnabled`, and the push spool. Any other non-empty value refuses to "
        "start; so does another key than the one the database's data was sealed with.",
        default="unset: no encryption"),
})
EPHEMERAL = Heading("Ephemeral queues")
KAFKA = Heading("Kafka listener", {
    "QUEEN_KAFKA_PORT": "Port of the Kafka wire-protocol listener (`serve --kafka-port`); "
                        "unset or `0`: no listener (see Kafka clients).",
})
AUTHENTICATION = Heading("Authentication", {
    "JWT_ENABLED": Described(
        "`true` turns authentication on: every request outside `JWT_SKIP_PATHS` needs a "
        "bearer JWT. Only the literal `true` does; any value other than `true`, `false` "
        "or empty refuses to start.", default="`false`"),
    "JWT_ALGORITHM": Described(
        "`HS256`, `HS384`, `HS512`, `RS256`, `RS384`, `RS512`, `EdDSA`, or `auto` (the "
        "token's own `alg`, among those the configured keys can verify).",
        default=f"`{AuthSettings.algorithm}`"),
    "JWT_SECRET": "HMAC secret for HS* tokens: at least 32 bytes for HS256 (48 for HS384, "
                  "64 for HS512). Never logged.",
    "JWT_PUBLIC_KEY": "PEM public key or certificate for RS*/EdDSA tokens (RSA of at "
                      "least 2048 bits, or Ed25519/Ed448); a one-line value with `\\n` "
                      "escapes is accepted.",
    "JWT_JWKS_URL": "http(s) URL of a JWKS; each web worker fetches its keys at start "
                    "and refreshes them in the background.",
    "JWT_JWKS_REFRESH_INTERVAL": "Seconds between JWKS refreshes (10 s between attempts "
                                 "while no fetch has succeeded).",
    "JWT_JWKS_TIMEOUT_MS": "JWKS fetch timeout in milliseconds.",
    "JWT_ISSUER": "When set, a token's `iss` must equal it.",
    "JWT_AUDIENCE": "When set, a token's `aud` must name one of these (comma-separated).",
    "JWT_CLOCK_SKEW": "Seconds of leeway for `exp`, `nbf` and `iat`.",
    "JWT_SKIP_PATHS": Described(
        "Paths served without a token, comma-separated: an exact match, or a prefix for "
        "an entry longer than `/` that ends in `/`. Set but empty: every path needs a "
        "token.", default="`" + ",".join(DEFAULT_SKIP_PATHS) + "`"),
    "JWT_ROLES_CLAIM": "Claim holding one role (a dotted name such as `realm_access.role` "
                       "reads a nested claim).",
    "JWT_ROLES_ARRAY_CLAIM": "Claim holding an array of roles (dotted names read nested "
                             "claims).",
    "JWT_ROLE_ADMIN": "The role name that passes every access level.",
    "JWT_ROLE_READ_WRITE": "The role name that passes READ_ONLY, WRITE_ONLY and READ_WRITE.",
    "JWT_ROLE_READ_ONLY": "The role name that passes READ_ONLY.",
    "JWT_ROLE_WRITE_ONLY": "The role name that passes WRITE_ONLY (producers).",
    "JWT_TENANT_CLAIM": "Claim naming the token's tenant (a dotted name reads a nested "
                        "claim); a token without it acts in the default tenant (see "
                        "Tenants).",
})
# Tenants (core/tenancy/settings.py declares the others).
TENANTS = Heading("Tenants", {
    "QUEEN_TENANT_TRUSTED_PROXIES": Described(
        "Addresses or networks (comma-separated, such as `10.0.0.0/8`) of proxies whose "
        "tenant header binds the request to that tenant.", default="unset: none"),
})

# The reference's headings, in its order.
HEADINGS = (LISTENING, TLS, DATABASE, REQUESTS, POPS, COALESCER, REAPER, METRICS, TRACING,
            PROCESSES, SPOOL, ENCRYPTION, EPHEMERAL, KAFKA, AUTHENTICATION, TENANTS)
