"""What every environment variable of the broker means, by topic.

`Settings.from_env` (core/settings.py) and `auth_settings_from_env` (core/auth_settings.py)
read the variables; this module says what each one is for. The configuration reference is
generated from both: the names, defaults and bounds from reading an empty environment
(`core.env.EnvironmentRecord`), the meanings from here. `tests/unit/test_variables.py` fails
when a variable is read without a meaning here, or described here and never read, so a new
setting gets its line in this module.
"""

from __future__ import annotations

from core.auth_settings import DEFAULT_SKIP_PATHS, AuthSettings
from core.env import Catalogue, Described, EnvironmentRecord, VariableRead

VARIABLES: Catalogue = {
    "Listening": {
        "PORT": "HTTP port the web workers listen on (`--port`).",
        "QUEEN_HOST": Described(
            "Listen address (`--host`); wins over `HOST` when both are set.",
            default="`127.0.0.1` with auth off, `0.0.0.0` with auth on"),
        "HOST": Described("Listen address, read when `QUEEN_HOST` is not set.",
                          default="as `QUEEN_HOST`"),
        "WORKERS": Described("Web worker processes (`--workers`); `0` means one per CPU.",
                             default="`0` (one per CPU)"),
        "CORS_ORIGINS": Described(
            "Origins a browser page may call the API from: `*`, or a comma-separated list "
            "such as `https://app.example.com`.", default="`*`"),
    },
    "TLS": {
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
                                 "certificate, key or CA file changed, and then loads them "
                                 "for new connections; `0`: only on SIGHUP.",
    },
    "Database": {
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
        "QUEEN_DATA_DIR": "Directory of the embedded PostgreSQL (`--data-dir`); unused with "
                          "`DATABASE_URL` or `PG_*`.",
        "DB_POOL_SIZE": "Database connections per web worker.",
        "DB_CONNECTION_TIMEOUT": "Milliseconds to wait for a new database connection, per "
                                 "host tried.",
        "DB_STATEMENT_TIMEOUT": "Milliseconds a statement may run before PostgreSQL cancels "
                                "it; `0` = no limit.",
        "QUEEN_STMT_TIMEOUT_MS": "Older name of `DB_STATEMENT_TIMEOUT`, read when that is "
                                 "not set.",
        "DB_LOCK_TIMEOUT": "Milliseconds a statement may wait for a row lock; `0` = no limit.",
        "DB_SILENCE_TIMEOUT_MS": "Milliseconds a database server may stay silent (asked once "
                                 "a second) before every connection of the process to it is "
                                 "cut and its statements answer as an outage; `0` = never "
                                 "(see high availability).",
    },
    "Requests": {
        "KEEP_ALIVE_TIMEOUT_SECONDS": "Seconds an idle keep-alive HTTP connection stays "
                                      "open (longer than common clients reuse one).",
        "MAX_BODY_BYTES": "Largest request body in bytes (413 above); also bounds what a "
                          "compressed binary body may expand to.",
        "MAX_PUSH_ITEMS": "Most messages in one push (413 above).",
        "PUSH_ANSWER_TIMEOUT_MS": "A push whose write has not committed within this many "
                                  "milliseconds is answered as an outage (503, or `buffered` "
                                  "by the push spool); the write goes on, and a retry of it "
                                  "is then a dedup duplicate.",
        "KV_MAX_KEYS": "Most keys one KV call may name (`kv_too_many_keys` above); a "
                       "transaction's `kv` rider allows 256.",
    },
    "Pops and long polls": {
        "DEFAULT_TIMEOUT": "Long-poll deadline in milliseconds for a pop (and an ephemeral "
                           "pop) that sends no `timeout`.",
        "POP_DEFAULT_TIMEOUT_MS": "Older name of `DEFAULT_TIMEOUT`, read when that is not set.",
        "DEFAULT_BATCH_SIZE": "`batch` of a pop that sends none and does not ask for "
                              "`autopilot`.",
        "DEFAULT_SUBSCRIPTION_MODE": "Where a named consumer group starts on a partition it "
                                     "meets for the first time, when its pop does not say: "
                                     "`all` (the oldest retained message) or `new` (the "
                                     "tail).",
        "POP_WAIT_INITIAL_INTERVAL_MS": "Milliseconds between a parked long poll's first "
                                        "looks while the database is unreachable.",
        "POP_WAIT_BACKOFF_THRESHOLD": "Kept for compatibility; parked long polls no longer "
                                      "back off while the database answers.",
        "POP_WAIT_BACKOFF_MULTIPLIER": "Factor by which a parked long poll spaces its looks "
                                       "out while the database is unreachable.",
        "POP_WAIT_MAX_INTERVAL_MS": "Longest interval, in milliseconds, between a parked long "
                                    "poll's looks at its ready set (a look at nothing ready "
                                    "costs no statement).",
        "READY_RESEED_INTERVAL_MS": "Milliseconds (±10 %) after which a process rescans a "
                                    "queue's partitions for a consumer group it serves: the "
                                    "bound on how long a partition whose notification was "
                                    "lost without trace can stay unseen.",
    },
    "Write coalescer": {
        "COALESCER_MAX_FLUSH_MESSAGES": "Most messages one flush writes as one segment.",
        "COALESCER_MAX_PENDING_MESSAGES": "Messages a web worker holds waiting to be written "
                                          "before pushes are answered 429.",
        "COALESCER_MAX_PARTITIONS_PER_FLUSH": "Ready partitions written together in one "
                                              "statement (one commit).",
        "COALESCER_MAX_CONCURRENT_FLUSHES": "Such statements in flight per web worker.",
    },
    "Reaper and retention": {
        "REAPER_INTERVAL_MS": "Milliseconds between the reaper's passes (lease expiry, dedup "
                              "index pruning), with ±20 % jitter.",
        "RETENTION_INTERVAL": "Milliseconds between retention passes (segments of queues "
                              "with `retentionEnabled`, old traces).",
        "RETENTION_BATCH_SIZE": "Segments one retention statement deletes.",
        "TRACE_RETENTION_DAYS": "Traces older than this many days are deleted; `0` keeps "
                                "them.",
        "TIMERS_SWEEP_MS": "The timer firer (in the reaper) looks for due timers at least "
                           "this often, in milliseconds.",
        "TIMERS_FIRE_BATCH": "Timers fired in one transaction.",
        "TIMERS_HORIZON_MS": "How far ahead, in milliseconds, a timer may be due (403 "
                             "`timers_horizon` past it); 90 days by default.",
    },
    "Metrics": {
        "METRICS_FLUSH_MS": "How often, in milliseconds, each process adds its counters to "
                            "the database.",
        "STATS_SAMPLE_INTERVAL_MS": "How often, in milliseconds, the reaper samples the "
                                    "analytics series (throughput, depth, lag).",
        "METRICS_RETENTION_DAYS": "Analytics samples older than this many days are deleted.",
    },
    "Processes": {
        "SUPERVISOR_MAX_RESTARTS": "`serve` stops the broker when one of its processes dies "
                                   "more than this many times within "
                                   "`SUPERVISOR_RESTART_WINDOW_MS`.",
        "SUPERVISOR_RESTART_WINDOW_MS": "The window of `SUPERVISOR_MAX_RESTARTS`, in "
                                        "milliseconds.",
        "LOG_LEVEL": "Logging level.",
    },
    "Push spool": {
        "FILE_BUFFER_DIR": Described(
            "Directory of the push spool, which takes pushes during maintenance or a "
            "database outage; one subdirectory per database.",
            default="`spool` in `QUEEN_DATA_DIR`"),
        "FILE_BUFFER_FLUSH_MS": "How often, in milliseconds, each worker's drain loop looks "
                                "at the spool (and pings an unreachable database).",
        "FILE_BUFFER_MAX_BATCH": "Spooled records written to the database per statement when "
                                 "draining.",
        "FILE_BUFFER_EVENTS_PER_FILE": "Records per spool file before the next file starts.",
        "FILE_BUFFER_MAX_BYTES": "Most bytes of records waiting in the spool (pushes answer "
                                 "503 with `Retry-After` beyond).",
    },
    "Encryption": {
        "QUEEN_ENCRYPTION_KEY": Described(
            "64 hex characters (a 32-byte AES-256 key) sealing the messages of queues with "
            "`encryptionEnabled`, and the push spool. Any other non-empty value refuses to "
            "start; so does another key than the one the database's data was sealed with.",
            default="unset: no encryption"),
    },
    "Ephemeral queues": {
        "EPHEMERAL_MAX_BYTES": "Payload bytes all ephemeral queues of the deployment may "
                               "hold; a push past it answers 503 `ephemeral_unavailable`.",
        "EPHEMERAL_IDLE_SECONDS": "An implicit ephemeral queue empty and untouched this many "
                                  "seconds is collected.",
        "EPHEMERAL_SWEEP_MS": "How often, in milliseconds, the ephemeral sweep runs (lease "
                              "expiry, ttl, idle queues); one web worker of the deployment "
                              "runs it.",
    },
    "Kafka listener": {
        "QUEEN_KAFKA_PORT": "Port of the Kafka wire-protocol listener (`serve --kafka-port`); "
                            "unset or `0`: no listener (see Kafka clients).",
        "QUEEN_KAFKA_ADVERTISED": "`host:port` Kafka clients are told to connect to; empty: "
                                  "the address each connection reached.",
        "QUEEN_KAFKA_DEFAULT_PARTITIONS": "Partition count of a topic created without one, "
                                          "or of a queue that declares none.",
        "QUEEN_KAFKA_NODE_ID": "This listener's node id (a different one on each host of one "
                               "Kafka cluster).",
        "QUEEN_KAFKA_CLUSTER": "The name of the Kafka cluster the listener belongs to (its "
                               "hosts elect one group coordinator).",
    },
    "Authentication": {
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
    },
    "Tenants": {
        "QUEEN_TENANT_HEADER": "Header naming a tenant: believed from a trusted proxy (any "
                               "caller of it), from an admin token without a tenant claim "
                               "(acting for that tenant), and from anyone with auth off.",
        "QUEEN_TENANT_TRUSTED_PROXIES": Described(
            "Addresses or networks (comma-separated, such as `10.0.0.0/8`) of proxies whose "
            "tenant header binds the request to that tenant.", default="unset: none"),
        "QUEEN_TENANT_REFRESH_MS": "How often, in milliseconds, each process re-reads the "
                                   "tenants' quotas and the number of live broker processes "
                                   "(each enforces its share of a tenant's rates).",
        "QUEEN_TENANT_USAGE_INTERVAL_MS": "How often, in milliseconds, the bytes a tenant "
                                          "with a storage quota stores are measured (by one "
                                          "process of the deployment).",
        "QUEEN_TENANT_REFUSAL_DELAY_MS": "How long, in milliseconds, an answer 429 to a "
                                         "tenant over a rate is held before it is sent, so "
                                         "a client that ignores Retry-After cannot make the "
                                         "broker refuse requests as fast as it sends them "
                                         "(0: answer at once).",
    },
}


def variables_read() -> dict[str, VariableRead]:
    """Every variable the settings read, in reading order, each with the default and bounds
    it is read with (read from an empty environment, so every default applies)."""
    from core.settings import Settings

    record = EnvironmentRecord()
    Settings.from_env(record)
    return record.reads
