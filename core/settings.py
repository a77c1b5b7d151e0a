"""Settings: one frozen object built from the environment once per process.

Names follow the Queen server where one exists (wire-protocol §10). A bad value stops start-up
with a `SettingsError` naming the variable and the value.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote, urlsplit

from core.auth_settings import AuthSettings, auth_settings_from_env
from core.engine.encryption import key_from_env
from core.env import (
    Catalogue,
    EnvironmentRecord,
    EnvReader,
    SettingsError,
    VariableRead,
    declarations,
    read_fields,
)
from core.options import POP_MAX_BYTES
from core.storage.hosts import dsn_hosts
from core.tenancy.settings import TenancySettings, tenancy_settings_from_env
from core.tls import TlsSettings, tls_settings_from_env
from core.variables import (
    COALESCER,
    DATABASE,
    EPHEMERAL,
    HEADINGS,
    KAFKA,
    LISTENING,
    METRICS,
    POPS,
    PROCESSES,
    REAPER,
    REQUESTS,
    SPOOL,
    TRACING,
)


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything a broker process needs to know, read once from the environment. A field
    declared with `<heading>.setting(default, VARIABLE, meaning, ...)` is read from that
    variable by `from_env` and listed in the configuration reference under the heading
    (core/variables.py); the others are read by the functions below."""

    # Loopback unless told otherwise: with auth off anyone who reaches the port owns every
    # queue, so listening beyond this machine must be asked for (from_env picks 0.0.0.0 when
    # auth is on).
    host: str = "127.0.0.1"
    port: int = LISTENING.setting(
        6632, "PORT", "HTTP port the web workers listen on (`--port`).", low=0, high=65535)
    # None means "no database configured": start the embedded PostgreSQL. Not in the repr:
    # the URL may carry the database password.
    database_url: str | None = dataclasses.field(default=None, repr=False)
    data_dir: Path = DATABASE.setting(  # noqa: RUF009 - the default, a Path, is immutable
        Path(".queen-data"), "QUEEN_DATA_DIR",
        "Directory of the embedded PostgreSQL (`--data-dir`); unused with `DATABASE_URL` or "
        "`PG_*`.")
    workers: int = LISTENING.setting(
        0, "WORKERS", "Web worker processes (`--workers`); `0` means one per CPU, one fewer "
        "when the broker runs its embedded PostgreSQL.",
        low=0, high=256, shown="`0` (one per CPU; one fewer with the embedded database)")
    db_pool_size: int = DATABASE.setting(
        20, "DB_POOL_SIZE", "Database connections per web worker.", low=1, high=1000)
    db_connection_timeout_ms: int = DATABASE.setting(
        2000, "DB_CONNECTION_TIMEOUT",
        "Milliseconds to wait for a new database connection, per host tried.", low=1)
    db_statement_timeout_ms: int = DATABASE.setting(
        30000, "DB_STATEMENT_TIMEOUT",
        "Milliseconds a statement may run before PostgreSQL cancels it; `0` = no limit.",
        low=0, older="QUEEN_STMT_TIMEOUT_MS")
    db_lock_timeout_ms: int = DATABASE.setting(
        10000, "DB_LOCK_TIMEOUT",
        "Milliseconds a statement may wait for a row lock; `0` = no limit.", low=0)
    # The give-up is core/storage/liveness.py's, long before the statement timeout meant for
    # slow queries (0 turns the sockets' TCP timeout off too).
    db_silence_timeout_ms: int = DATABASE.setting(
        4000, "DB_SILENCE_TIMEOUT_MS",
        "Milliseconds a database server may stay silent (asked once a second) before every "
        "connection of the process to it is cut and its statements answer as an outage; "
        "`0` = never (see high availability).", low=0, high=3_600_000)
    max_body_bytes: int = REQUESTS.setting(
        16 * 1024 * 1024, "MAX_BODY_BYTES",
        "Largest request body in bytes (413 above); also bounds what a compressed binary "
        "body may expand to.", low=1024)
    max_push_items: int = REQUESTS.setting(
        10000, "MAX_PUSH_ITEMS", "Most messages in one push (413 above).", low=1)
    # Hypercorn's own default is 5 s. Clearly longer than clients keep idle connections for
    # reuse (httpx, and with it the official client: 5 s): a server closing at the instant a
    # client reuses the connection loses that request ("Server disconnected without sending
    # a response"). 75 s, as reverse proxies commonly keep them; a stopping worker closes
    # idle connections at once.
    keep_alive_timeout_s: int = REQUESTS.setting(
        75, "KEEP_ALIVE_TIMEOUT_SECONDS",
        "Seconds an idle keep-alive HTTP connection stays open (longer than common clients "
        "reuse one).", low=1, high=3600)
    max_flush_messages: int = COALESCER.setting(
        5000, "COALESCER_MAX_FLUSH_MESSAGES", "Most messages one flush writes as one segment.",
        low=1)
    max_pending_messages: int = COALESCER.setting(
        100_000, "COALESCER_MAX_PENDING_MESSAGES",
        "Messages a web worker holds waiting to be written before pushes are answered 429.",
        low=1)
    max_partitions_per_flush: int = COALESCER.setting(
        64, "COALESCER_MAX_PARTITIONS_PER_FLUSH",
        "Ready partitions written together in one statement (one commit).", low=1,
        high=10_000)
    max_concurrent_flushes: int = COALESCER.setting(
        4, "COALESCER_MAX_CONCURRENT_FLUSHES", "Such statements in flight per web worker.",
        low=1, high=1000)
    # Four of the largest pushes (MAX_BODY_BYTES); PostgreSQL refuses a value over 1 GB.
    max_flush_bytes: int = COALESCER.setting(
        64 * 1024 * 1024, "COALESCER_MAX_FLUSH_BYTES",
        "Payload bytes one such statement writes at most (a larger push alone).",
        low=1024, high=512 * 1024 * 1024)
    # The listings that answer stored payloads page by limit and offset; a page of large
    # messages (the DLQ's limit is 10 000, a message up to MAX_BODY_BYTES) must not be built
    # whole in a worker's memory, nor a listing's walk hold every segment it examines.
    # 64 MiB, as a pop's answer.
    list_max_bytes: int = REQUESTS.setting(
        64 * 1024 * 1024, "QUEEN_LIST_MAX_BYTES",
        "Most payload bytes one page of `GET /api/v1/dlq`, `GET /api/v1/messages` (each "
        "payload counted twice: it goes out as `data` and `payload`), "
        "`GET /api/v1/traces/by-name/{name}` (traces' data and messages' payloads) or "
        "`GET /api/v1/traces/{partitionId}/{transactionId}` (traces' data) answers; the page "
        "ends early (`truncated`, `nextOffset`) where they pass it, its first row kept "
        "whatever its size. Also the stored bytes a message listing or lookup reads at once, "
        "and the keys and values one `POST /streams/v1/state/get` answers (413 above: it "
        "has no pages).",
        low=1024, high=2**40)
    # A frozen primary (a failover under way) would otherwise hold the push until the
    # driver's timeout, behind earlier flushes stuck the same way.
    push_answer_timeout_ms: int = REQUESTS.setting(
        8000, "PUSH_ANSWER_TIMEOUT_MS",
        "A push whose write has not committed within this many milliseconds is answered as "
        "an outage (503, or `buffered` by the push spool); the write goes on, and a retry of "
        "it is then a dedup duplicate.", low=100)
    default_timeout_ms: int = POPS.setting(
        30000, "DEFAULT_TIMEOUT",
        "Long-poll deadline in milliseconds for a pop (and an ephemeral pop) that sends no "
        "`timeout`.", low=0, older="POP_DEFAULT_TIMEOUT_MS")
    default_batch_size: int = POPS.setting(
        1, "DEFAULT_BATCH_SIZE",
        "`batch` of a pop that sends none and does not ask for `autopilot`.", low=1)
    default_subscription_mode: str = POPS.setting(
        "all", "DEFAULT_SUBSCRIPTION_MODE",
        "Where a named consumer group starts on a partition it meets for the first time, "
        "when its pop does not say: `all` (the oldest retained message) or `new` (the tail).")
    pop_wait_initial_interval_ms: int = POPS.setting(
        100, "POP_WAIT_INITIAL_INTERVAL_MS",
        "Milliseconds between a parked long poll's first looks while the database is "
        "unreachable.", low=1)
    pop_wait_backoff_threshold: int = POPS.setting(
        3, "POP_WAIT_BACKOFF_THRESHOLD",
        "Kept for compatibility; parked long polls no longer back off while the database "
        "answers.", low=1)
    pop_wait_backoff_multiplier: float = POPS.setting(
        2.0, "POP_WAIT_BACKOFF_MULTIPLIER",
        "Factor by which a parked long poll spaces its looks out while the database is "
        "unreachable.", low=1.0)
    pop_wait_max_interval_ms: int = POPS.setting(
        1000, "POP_WAIT_MAX_INTERVAL_MS",
        "Longest interval, in milliseconds, between a parked long poll's looks at its ready "
        "set (a look at nothing ready costs no statement).", low=1)
    # A worker builds a pop's whole answer in memory, a few times its size (the segments,
    # decompressed, then the JSON or framed bytes), and a batch may be 10000 messages of up to
    # MAX_BODY_BYTES each. 64 MiB: four of the largest pushes' worth, so a batch of large
    # messages still delivers several per pop, at a few hundred MB of a worker's memory at
    # worst per concurrent pop (Kafka's fetch.max.bytes is 50 MiB).
    pop_max_bytes: int = POPS.setting(
        POP_MAX_BYTES, "QUEEN_POP_MAX_BYTES",
        "Most message bytes (uncompressed) one pop answers; what does not fit stays for the "
        "next pop, neither leased nor committed. A first message larger than that is still "
        "delivered, alone.", low=1024, high=2**40)
    # The ready set (core/engine/ready): a floor against a notification lost with no sign
    # of it.
    ready_reseed_interval_ms: int = POPS.setting(
        30000, "READY_RESEED_INTERVAL_MS",
        "Milliseconds (±10 %) after which a process rescans a queue's partitions for a "
        "consumer group it serves: the bound on how long a partition whose notification was "
        "lost without trace can stay unseen.", low=100)
    retention_interval_ms: int = REAPER.setting(
        300000, "RETENTION_INTERVAL",
        "Milliseconds between retention passes (segments of queues with `retentionEnabled`, "
        "old traces).", low=100)
    retention_batch_size: int = REAPER.setting(
        1000, "RETENTION_BATCH_SIZE", "Segments one retention statement deletes.", low=1)
    reaper_interval_ms: int = REAPER.setting(
        1000, "REAPER_INTERVAL_MS",
        "Milliseconds between the reaper's passes (lease expiry, dedup index pruning), with "
        "±20 % jitter.", low=10)
    # Timers (core/timers), §16.2.
    timers_sweep_ms: int = REAPER.setting(
        1000, "TIMERS_SWEEP_MS",
        "The timer firer (in the reaper) looks for due timers at least this often, in "
        "milliseconds.", low=10, high=1000)
    timers_fire_batch: int = REAPER.setting(
        1000, "TIMERS_FIRE_BATCH", "Timers fired in one transaction.", low=1, high=100_000)
    timers_horizon_ms: int = REAPER.setting(
        90 * 86400 * 1000, "TIMERS_HORIZON_MS",
        "How far ahead, in milliseconds, a timer may be due (403 `timers_horizon` past it); "
        "90 days by default.", low=0)
    trace_retention_days: int = REAPER.setting(
        7, "TRACE_RETENTION_DAYS", "Traces older than this many days are deleted; `0` keeps "
        "them.", low=0, high=36500)
    # Observability: per-process minute rows are one row per process and minute, so more
    # rows, kept less long than the analytics samples.
    metrics_flush_ms: int = METRICS.setting(
        1000, "METRICS_FLUSH_MS",
        "How often, in milliseconds, each process adds its counters to the database.",
        low=50, high=600_000)
    stats_sample_interval_ms: int = METRICS.setting(
        300000, "STATS_SAMPLE_INTERVAL_MS",
        "How often, in milliseconds, the reaper samples the analytics series (throughput, "
        "depth, lag).", low=1000)
    metrics_retention_days: int = METRICS.setting(
        90, "METRICS_RETENTION_DAYS",
        "Analytics samples (per queue, one per sampling pass) older than this many days are "
        "deleted.", low=1, high=3650)
    process_metrics_retention_days: int = METRICS.setting(
        7, "PROCESS_METRICS_RETENTION_DAYS",
        "Per-process minute rows (what each process counted and its pool, memory and CPU, "
        "one row per process and minute) older than this many days are deleted.",
        low=1, high=3650)
    # Tracing (core/tracing.py): a caller's sampled flag wins over the ratio.
    tracing_exporter: str = TRACING.setting(
        "none", "TRACING_EXPORTER",
        "Export spans of pushes, pops and acks with OpenTelemetry: `otlp` (to the "
        "`OTEL_EXPORTER_OTLP_*` endpoint) or `console`; `none` records no span (trace "
        "context still travels with messages). Needs the `otel` extra.",
        choices=("none", "otlp", "console"))
    tracing_sample_ratio: float = TRACING.setting(
        1.0, "TRACING_SAMPLE_RATIO",
        "Share (0 to 1) of the traces the broker starts that it records; a request's own "
        "`traceparent` decides for its trace.", low=0.0, check=lambda name, value: _ratio(
            name, value))
    supervisor_max_restarts: int = PROCESSES.setting(
        5, "SUPERVISOR_MAX_RESTARTS",
        "`serve` stops the broker when one of its processes dies more than this many times "
        "within `SUPERVISOR_RESTART_WINDOW_MS`.", low=0)
    supervisor_restart_window_ms: int = PROCESSES.setting(
        60000, "SUPERVISOR_RESTART_WINDOW_MS",
        "The window of `SUPERVISOR_MAX_RESTARTS`, in milliseconds.", low=1000)
    log_level: str = PROCESSES.setting(
        "info", "LOG_LEVEL", "Logging level.",
        choices=("debug", "info", "warning", "error", "critical"))
    auth: AuthSettings = dataclasses.field(default_factory=AuthSettings)
    # TLS on the HTTP and Kafka listeners (core/tls.py); off unless a certificate is given.
    tls: TlsSettings = dataclasses.field(default_factory=TlsSettings)
    # Tenants (core/tenancy): the tenant header, trusted proxies, how often limits refresh;
    # its settings are declared on its own fields.
    tenancy: TenancySettings = dataclasses.field(default_factory=TenancySettings)
    # Origins a browser page may call the API from (CORS); `*` is any.
    cors_origins: tuple[str, ...] = ("*",)
    # The push spool (core/engine/spool.py), under Queen's names; None: `spool` in the data
    # directory.
    file_buffer_dir: Path | None = None
    file_buffer_flush_ms: int = SPOOL.setting(
        100, "FILE_BUFFER_FLUSH_MS",
        "How often, in milliseconds, each worker's drain loop looks at the spool (and pings "
        "an unreachable database).", low=1, high=60_000)
    file_buffer_max_batch: int = SPOOL.setting(
        100, "FILE_BUFFER_MAX_BATCH",
        "Spooled records written to the database per statement when draining.",
        low=1, high=100_000)
    file_buffer_events_per_file: int = SPOOL.setting(
        10_000, "FILE_BUFFER_EVENTS_PER_FILE",
        "Records per spool file before the next file starts.", low=1)
    file_buffer_max_bytes: int = SPOOL.setting(
        1 << 30, "FILE_BUFFER_MAX_BYTES",
        "Most bytes of records waiting in the spool (pushes answer 503 with `Retry-After` "
        "beyond).", low=1024)
    # QUEEN_ENCRYPTION_KEY (32 bytes), for queues with encryptionEnabled; never in the repr.
    encryption_key: bytes | None = dataclasses.field(default=None, repr=False)
    # Ephemeral queues (§19).
    ephemeral_max_bytes: int = EPHEMERAL.setting(
        256 * 1024 * 1024, "EPHEMERAL_MAX_BYTES",
        "Payload bytes all ephemeral queues of the deployment may hold; a push past it "
        "answers 503 `ephemeral_unavailable`.", low=1024)
    ephemeral_idle_seconds: int = EPHEMERAL.setting(
        300, "EPHEMERAL_IDLE_SECONDS",
        "An implicit ephemeral queue empty and untouched this many seconds is collected.",
        low=1)
    ephemeral_sweep_ms: int = EPHEMERAL.setting(
        500, "EPHEMERAL_SWEEP_MS",
        "How often, in milliseconds, the ephemeral sweep runs (lease expiry, ttl, idle "
        "queues); one web worker of the deployment runs it.", low=10, high=1000)
    # Wire-protocol-extensions §14.4.
    kv_max_keys: int = REQUESTS.setting(
        1024, "KV_MAX_KEYS",
        "Most keys one KV call may name (`kv_too_many_keys` above); a transaction's `kv` "
        "rider allows 256.", low=1, high=4096)
    # The Kafka listener (broker/kafka): its port (None: off).
    kafka_port: int | None = None
    kafka_advertised: str = KAFKA.setting(
        "", "QUEEN_KAFKA_ADVERTISED",
        "`host:port` Kafka clients are told to connect to; empty: the address each "
        "connection reached.")
    kafka_default_partitions: int = KAFKA.setting(
        1, "QUEEN_KAFKA_DEFAULT_PARTITIONS",
        "Partition count of a topic created without one, or of a queue that declares none.",
        low=1, high=10_000)
    # Several listeners (hosts) serving one Kafka cluster: the cluster's group coordinator
    # is elected among them (core/kafka/election.py).
    kafka_node_id: int = KAFKA.setting(
        0, "QUEEN_KAFKA_NODE_ID",
        "This listener's node id (a different one on each host of one Kafka cluster).",
        low=0, high=2**31 - 1)
    kafka_cluster: str = KAFKA.setting(
        "queen", "QUEEN_KAFKA_CLUSTER",
        "The name of the Kafka cluster the listener belongs to (its hosts elect one group "
        "coordinator).", check=lambda name, value: value.strip() or "queen")
    # A Fetch's answer is built whole in memory (a few times its size while it is read and
    # encoded), so what a client may ask is capped here, as Kafka's broker caps it.
    kafka_fetch_max_bytes: int = KAFKA.setting(
        55 * 1024 * 1024, "QUEEN_KAFKA_FETCH_MAX_BYTES",
        "Most record bytes one Fetch answers, whatever the client asks (Kafka's "
        "`fetch.max.bytes`); a first record larger than that is still answered alone.",
        low=1024, high=2**31 - 1)
    kafka_idle_seconds: int = KAFKA.setting(
        600, "QUEEN_KAFKA_IDLE_SECONDS",
        "Seconds a Kafka connection may make no progress (no request sent, or an answer not "
        "read) before it is closed (Kafka's `connections.max.idle.ms`).", low=1, high=86_400)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        auth = auth_settings_from_env(env)  # first: the listen address depends on it
        return cls(**read_fields(cls, env, {
            "host": lambda: bind_host_from_env(env, auth_enabled=auth.enabled),
            "database_url": lambda: database_url_from_env(env),
            "auth": lambda: auth,
            "tls": lambda: tls_settings_from_env(env),
            "tenancy": lambda: tenancy_settings_from_env(env),
            "cors_origins": lambda: cors_origins_from_env(env),
            "file_buffer_dir": lambda: (Path(env["FILE_BUFFER_DIR"])
                                        if env.get("FILE_BUFFER_DIR") else None),
            "encryption_key": lambda: key_from_env(env),
            "kafka_port": lambda: (
                EnvReader(env).integer("QUEEN_KAFKA_PORT", 0, low=0, high=65535)
                if env.get("QUEEN_KAFKA_PORT", "").strip() else None),
        }))

    @property
    def uses_embedded_database(self) -> bool:
        return self.database_url is None

    @property
    def web_workers(self) -> int:
        """Web worker processes: WORKERS, or one per CPU this process may run on, one fewer
        when the broker runs its embedded PostgreSQL, at least one. That database works on
        the same CPUs: on two of them, one web worker beside it moved as many messages as
        two, for about three quarters of the CPU per message (docs/benchmarks/history.md, "Web
        workers beside the database")."""
        if self.workers:
            return self.workers
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
            os.cpu_count() or 1)
        return max(1, cpus - 1) if self.uses_embedded_database else cpus

    @property
    def scheme(self) -> str:
        """How clients reach the HTTP listener: `https` with TLS on."""
        return "https" if self.tls.enabled else "http"

    @property
    def spool_dir(self) -> Path:
        """FILE_BUFFER_DIR, or `spool` in the data directory."""
        return self.file_buffer_dir or self.data_dir / "spool"


def _ratio(name: str, value: float) -> float:
    if value > 1:
        raise SettingsError(f"{name}={value!r}: must be at most 1")
    return value


def from_env_or_exit(program: str) -> Settings:
    """Settings from the environment for a process's `main`; on a bad value, print the
    error under `program`'s name and exit with status 2."""
    try:
        return Settings.from_env()
    except SettingsError as exc:
        print(f"{program}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def bind_host_from_env(env: Mapping[str, str], *, auth_enabled: bool) -> str:
    """QUEEN_HOST, else HOST; when neither is set, every interface with auth on and only
    loopback with auth off (an open broker must not be reachable from the network by
    accident)."""
    for name in ("QUEEN_HOST", "HOST"):
        value = env.get(name, "").strip()
        if value:
            return value
    return "0.0.0.0" if auth_enabled else Settings.host


def cors_origins_from_env(env: Mapping[str, str]) -> tuple[str, ...]:
    """CORS_ORIGINS: `*` (the default) or a comma-separated list of `scheme://host[:port]`."""
    raw = env.get("CORS_ORIGINS", "").strip() or "*"
    origins = tuple(item.strip().rstrip("/") for item in raw.split(",") if item.strip())
    for origin in origins:
        parts = urlsplit(origin)
        if origin != "*" and (parts.scheme not in ("http", "https") or not parts.netloc
                              or parts.path or parts.query):
            raise SettingsError(f"CORS_ORIGINS: {origin!r} is not '*' or an origin such as "
                                "https://app.example.com")
    return origins


def database_url_from_env(env: Mapping[str, str]) -> str | None:
    """DATABASE_URL wins; else any PG_* variable builds a URL; else None (embedded)."""
    url = env.get("DATABASE_URL", "").strip()
    if url:
        if not url.startswith(("postgres://", "postgresql://")):
            raise SettingsError(
                f"DATABASE_URL={url.split('@')[-1]!r} is not a postgres:// or postgresql:// URL")
        try:
            dsn_hosts(url)
        except ValueError as exc:
            raise SettingsError(f"DATABASE_URL={url.split('@')[-1]!r}: {exc}") from None
        return url
    names = ("PG_HOST", "PG_PORT", "PG_USER", "PG_PASSWORD", "PG_DATABASE", "PG_DB")
    if not any(env.get(name) for name in names):
        return None
    read = EnvReader(env)
    hosts = [h.strip() for h in read.text("PG_HOST", "localhost").split(",")]
    ports = [p.strip() for p in (env.get("PG_PORT", "").strip() or "5432").split(",")]
    if "" in hosts:
        raise SettingsError(f"PG_HOST={env.get('PG_HOST')!r} names an empty host")
    if not all(p.isdigit() and 0 < int(p) < 65536 for p in ports):
        raise SettingsError(f"PG_PORT={env.get('PG_PORT')!r}: expected an integer from 1 to "
                            "65535, or a comma-separated list of them (one per PG_HOST)")
    if len(ports) == 1:
        ports *= len(hosts)
    elif len(ports) != len(hosts):
        raise SettingsError(f"PG_PORT lists {len(ports)} ports for {len(hosts)} PG_HOST hosts")
    user = read.text("PG_USER", "postgres")
    password = env.get("PG_PASSWORD", "postgres")
    database = env.get("PG_DATABASE") or env.get("PG_DB") or "postgres"
    auth = quote(user, safe="") + (":" + quote(password, safe="") if password else "")
    if all(h.startswith("/") for h in hosts):  # Unix-socket directories
        return (f"postgresql://{auth}@/{quote(database, safe='')}"
                f"?host={','.join(hosts)}&port={','.join(ports)}")
    if any(h.startswith("/") for h in hosts):
        raise SettingsError("PG_HOST mixes Unix-socket directories and network hosts")
    netloc = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in zip(hosts, ports))
    return f"postgresql://{auth}@{netloc}/{quote(database, safe='')}"


def variables_read() -> dict[str, VariableRead]:
    """Every variable the settings read, in reading order, each with the default and bounds
    it is read with (read from an empty environment, so every default applies)."""
    record = EnvironmentRecord()
    Settings.from_env(record)
    return record.reads


def meanings() -> Catalogue:
    """What each variable means, by heading of the configuration reference, in its order:
    under each, the variables read by code of their own (core/variables.py), then the
    declared settings in field order (those of `Settings`, then the tenants'), each older
    name after the name that replaced it."""
    catalogue: Catalogue = {heading.title: dict(heading.elsewhere) for heading in HEADINGS}
    for _, declared in [*declarations(Settings), *declarations(TenancySettings)]:
        under = catalogue[declared.heading]
        under[declared.name] = declared.described
        if declared.older is not None:
            under[declared.older] = (f"Older name of `{declared.name}`, read when that is "
                                     "not set.")
    return catalogue
