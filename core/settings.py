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
from core.env import EnvReader, SettingsError
from core.storage.hosts import dsn_hosts
from core.tenancy.settings import TenancySettings, tenancy_settings_from_env
from core.tls import TlsSettings, tls_settings_from_env


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything a broker process needs to know, read once from the environment."""

    # Loopback unless told otherwise: with auth off anyone who reaches the port owns every
    # queue, so listening beyond this machine must be asked for (from_env picks 0.0.0.0 when
    # auth is on).
    host: str = "127.0.0.1"
    port: int = 6632
    # None means "no database configured": start the embedded PostgreSQL. Not in the repr:
    # the URL may carry the database password.
    database_url: str | None = dataclasses.field(default=None, repr=False)
    data_dir: Path = Path(".queen-data")
    workers: int = 0  # 0 = one per CPU
    db_pool_size: int = 20
    db_connection_timeout_ms: int = 2000
    db_statement_timeout_ms: int = 30000
    db_lock_timeout_ms: int = 10000
    # A database server silent this long is given up on (core/storage/liveness.py): every
    # connection to it is cut and its statements answered as an outage, long before the
    # statement timeout meant for slow queries; 0 = never (the sockets' TCP timeout too).
    db_silence_timeout_ms: int = 4000
    max_body_bytes: int = 16 * 1024 * 1024
    max_push_items: int = 10000
    # How long an idle keep-alive connection stays open (hypercorn's own default is 5 s).
    # Clearly longer than clients keep idle connections for reuse (httpx, and with it the
    # official client: 5 s): a server closing at the instant a client reuses the connection
    # loses that request ("Server disconnected without sending a response"). 75 s, as
    # reverse proxies commonly keep them; a stopping worker closes idle connections at once.
    keep_alive_timeout_s: int = 75
    # Coalescer: the most messages one flush writes as one segment, and the most messages a
    # process holds waiting for a flush before pushes are answered 429.
    max_flush_messages: int = 5000
    max_pending_messages: int = 100_000
    # Ready partitions written together in one statement (one commit), and how many such
    # statements one process runs at once.
    max_partitions_per_flush: int = 64
    max_concurrent_flushes: int = 4
    # A push whose write has not committed by then is answered as if the database were
    # down (503, or `buffered` by the spool): a frozen primary (a failover under way) would
    # otherwise hold it until the driver's timeout, behind earlier flushes stuck the same way.
    push_answer_timeout_ms: int = 8000
    default_timeout_ms: int = 30000
    default_batch_size: int = 1
    default_subscription_mode: str = "all"
    pop_wait_initial_interval_ms: int = 100
    pop_wait_backoff_threshold: int = 3
    pop_wait_backoff_multiplier: float = 2.0
    pop_wait_max_interval_ms: int = 1000
    # The ready set (core/engine/ready): a lane is reseeded from the database at least this
    # often (±10 %), a floor against a notification lost with no sign of it.
    ready_reseed_interval_ms: int = 30000
    retention_interval_ms: int = 300000
    retention_batch_size: int = 1000
    reaper_interval_ms: int = 1000
    # Timers (core/timers): the firer sweeps at least this often, fires at most this many
    # timers per transaction; a schedule may be due at most this far ahead (§16.2).
    timers_sweep_ms: int = 1000
    timers_fire_batch: int = 1000
    timers_horizon_ms: int = 90 * 86400 * 1000
    # Traces older than this are deleted by the reaper's retention step; 0 = keep them.
    trace_retention_days: int = 7
    # Observability: how often each web worker adds its counters to the database, how often
    # the reaper samples the analytics series, and how long samples are kept.
    metrics_flush_ms: int = 1000
    stats_sample_interval_ms: int = 300000
    metrics_retention_days: int = 90
    # `serve` stops the broker when one of its processes dies more than this many times
    # within the window, instead of restarting it forever.
    supervisor_max_restarts: int = 5
    supervisor_restart_window_ms: int = 60000
    log_level: str = "info"
    auth: AuthSettings = dataclasses.field(default_factory=AuthSettings)
    # TLS on the HTTP and Kafka listeners (core/tls.py); off unless a certificate is given.
    tls: TlsSettings = dataclasses.field(default_factory=TlsSettings)
    # Tenants (core/tenancy): the tenant header, trusted proxies, how often limits refresh.
    tenancy: TenancySettings = dataclasses.field(default_factory=TenancySettings)
    # Origins a browser page may call the API from (CORS); `*` is any.
    cors_origins: tuple[str, ...] = ("*",)
    # The push spool (core/upkeep/spool.py), under Queen's names: its directory (None: `spool` in
    # the data directory), how often its drain loop looks, records per replayed batch,
    # records per file, and the most bytes one worker may hold in it.
    file_buffer_dir: Path | None = None
    file_buffer_flush_ms: int = 100
    file_buffer_max_batch: int = 100
    file_buffer_events_per_file: int = 10_000
    file_buffer_max_bytes: int = 1 << 30
    # QUEEN_ENCRYPTION_KEY (32 bytes), for queues with encryptionEnabled; never in the repr.
    encryption_key: bytes | None = dataclasses.field(default=None, repr=False)
    # Ephemeral queues (§19): the deployment-wide ceiling on payload bytes held (503 above
    # it), how long an implicit queue stays empty and untouched before it is collected, and
    # how often the sweep (lease expiry, ttl, idle reclaim) runs.
    ephemeral_max_bytes: int = 256 * 1024 * 1024
    ephemeral_idle_seconds: int = 300
    ephemeral_sweep_ms: int = 500
    # KV (wire-protocol-extensions §14.4): the most keys one call may name (1024, up to 4096).
    kv_max_keys: int = 1024
    # The Kafka listener (broker/kafka): its port (None: off), the address clients are told
    # to connect to (host:port; empty: the listening address), and the partition count of a
    # topic created without one (auto-creation) or of a queue that declares none.
    kafka_port: int | None = None
    kafka_advertised: str = ""
    kafka_default_partitions: int = 1
    # Several listeners (hosts) serving one Kafka cluster: each its own node id, one cluster
    # name; the cluster's group coordinator is elected among them (core/kafka/election.py).
    kafka_node_id: int = 0
    kafka_cluster: str = "queen"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        read = EnvReader(env)
        auth = auth_settings_from_env(env)
        return cls(
            host=bind_host_from_env(env, auth_enabled=auth.enabled),
            port=read.integer("PORT", cls.port, low=0, high=65535),
            database_url=database_url_from_env(env),
            data_dir=Path(read.text("QUEEN_DATA_DIR", str(cls.data_dir))),
            workers=read.integer("WORKERS", cls.workers, low=0, high=256),
            db_pool_size=read.integer("DB_POOL_SIZE", cls.db_pool_size, low=1, high=1000),
            db_connection_timeout_ms=read.integer(
                "DB_CONNECTION_TIMEOUT", cls.db_connection_timeout_ms, low=1),
            db_statement_timeout_ms=read.integer(
                "DB_STATEMENT_TIMEOUT",
                read.integer("QUEEN_STMT_TIMEOUT_MS", cls.db_statement_timeout_ms, low=0),
                low=0),
            db_lock_timeout_ms=read.integer("DB_LOCK_TIMEOUT", cls.db_lock_timeout_ms, low=0),
            db_silence_timeout_ms=read.integer(
                "DB_SILENCE_TIMEOUT_MS", cls.db_silence_timeout_ms, low=0, high=3_600_000),
            max_body_bytes=read.integer("MAX_BODY_BYTES", cls.max_body_bytes, low=1024),
            max_push_items=read.integer("MAX_PUSH_ITEMS", cls.max_push_items, low=1),
            keep_alive_timeout_s=read.integer(
                "KEEP_ALIVE_TIMEOUT_SECONDS", cls.keep_alive_timeout_s, low=1, high=3600),
            max_flush_messages=read.integer(
                "COALESCER_MAX_FLUSH_MESSAGES", cls.max_flush_messages, low=1),
            max_pending_messages=read.integer(
                "COALESCER_MAX_PENDING_MESSAGES", cls.max_pending_messages, low=1),
            max_partitions_per_flush=read.integer(
                "COALESCER_MAX_PARTITIONS_PER_FLUSH", cls.max_partitions_per_flush, low=1,
                high=10_000),
            max_concurrent_flushes=read.integer(
                "COALESCER_MAX_CONCURRENT_FLUSHES", cls.max_concurrent_flushes, low=1,
                high=1000),
            push_answer_timeout_ms=read.integer(
                "PUSH_ANSWER_TIMEOUT_MS", cls.push_answer_timeout_ms, low=100),
            default_timeout_ms=read.integer(
                "DEFAULT_TIMEOUT",
                read.integer("POP_DEFAULT_TIMEOUT_MS", cls.default_timeout_ms, low=0), low=0),
            default_batch_size=read.integer("DEFAULT_BATCH_SIZE", cls.default_batch_size, low=1),
            default_subscription_mode=read.text(
                "DEFAULT_SUBSCRIPTION_MODE", cls.default_subscription_mode),
            pop_wait_initial_interval_ms=read.integer(
                "POP_WAIT_INITIAL_INTERVAL_MS", cls.pop_wait_initial_interval_ms, low=1),
            pop_wait_backoff_threshold=read.integer(
                "POP_WAIT_BACKOFF_THRESHOLD", cls.pop_wait_backoff_threshold, low=1),
            pop_wait_backoff_multiplier=read.number(
                "POP_WAIT_BACKOFF_MULTIPLIER", cls.pop_wait_backoff_multiplier, low=1.0),
            pop_wait_max_interval_ms=read.integer(
                "POP_WAIT_MAX_INTERVAL_MS", cls.pop_wait_max_interval_ms, low=1),
            ready_reseed_interval_ms=read.integer(
                "READY_RESEED_INTERVAL_MS", cls.ready_reseed_interval_ms, low=100),
            retention_interval_ms=read.integer(
                "RETENTION_INTERVAL", cls.retention_interval_ms, low=100),
            retention_batch_size=read.integer(
                "RETENTION_BATCH_SIZE", cls.retention_batch_size, low=1),
            reaper_interval_ms=read.integer("REAPER_INTERVAL_MS", cls.reaper_interval_ms, low=10),
            timers_sweep_ms=read.integer("TIMERS_SWEEP_MS", cls.timers_sweep_ms, low=10,
                                         high=1000),
            timers_fire_batch=read.integer("TIMERS_FIRE_BATCH", cls.timers_fire_batch, low=1,
                                           high=100_000),
            timers_horizon_ms=read.integer("TIMERS_HORIZON_MS", cls.timers_horizon_ms, low=0),
            trace_retention_days=read.integer(
                "TRACE_RETENTION_DAYS", cls.trace_retention_days, low=0, high=36500),
            metrics_flush_ms=read.integer("METRICS_FLUSH_MS", cls.metrics_flush_ms, low=50,
                                          high=600_000),
            stats_sample_interval_ms=read.integer(
                "STATS_SAMPLE_INTERVAL_MS", cls.stats_sample_interval_ms, low=1000),
            metrics_retention_days=read.integer(
                "METRICS_RETENTION_DAYS", cls.metrics_retention_days, low=1, high=3650),
            supervisor_max_restarts=read.integer(
                "SUPERVISOR_MAX_RESTARTS", cls.supervisor_max_restarts, low=0),
            supervisor_restart_window_ms=read.integer(
                "SUPERVISOR_RESTART_WINDOW_MS", cls.supervisor_restart_window_ms, low=1000),
            log_level=read.choice(
                "LOG_LEVEL", cls.log_level, ("debug", "info", "warning", "error", "critical")),
            auth=auth,
            tls=tls_settings_from_env(env),
            tenancy=tenancy_settings_from_env(env),
            cors_origins=cors_origins_from_env(env),
            file_buffer_dir=Path(env["FILE_BUFFER_DIR"]) if env.get("FILE_BUFFER_DIR") else None,
            file_buffer_flush_ms=read.integer(
                "FILE_BUFFER_FLUSH_MS", cls.file_buffer_flush_ms, low=1, high=60_000),
            file_buffer_max_batch=read.integer(
                "FILE_BUFFER_MAX_BATCH", cls.file_buffer_max_batch, low=1, high=100_000),
            file_buffer_events_per_file=read.integer(
                "FILE_BUFFER_EVENTS_PER_FILE", cls.file_buffer_events_per_file, low=1),
            file_buffer_max_bytes=read.integer(
                "FILE_BUFFER_MAX_BYTES", cls.file_buffer_max_bytes, low=1024),
            encryption_key=key_from_env(env),
            ephemeral_max_bytes=read.integer(
                "EPHEMERAL_MAX_BYTES", cls.ephemeral_max_bytes, low=1024),
            ephemeral_idle_seconds=read.integer(
                "EPHEMERAL_IDLE_SECONDS", cls.ephemeral_idle_seconds, low=1),
            ephemeral_sweep_ms=read.integer(
                "EPHEMERAL_SWEEP_MS", cls.ephemeral_sweep_ms, low=10, high=1000),
            kv_max_keys=read.integer("KV_MAX_KEYS", cls.kv_max_keys, low=1, high=4096),
            kafka_port=(read.integer("QUEEN_KAFKA_PORT", 0, low=0, high=65535)
                        if env.get("QUEEN_KAFKA_PORT", "").strip() else None),
            kafka_advertised=read.text("QUEEN_KAFKA_ADVERTISED", cls.kafka_advertised),
            kafka_default_partitions=read.integer(
                "QUEEN_KAFKA_DEFAULT_PARTITIONS", cls.kafka_default_partitions, low=1,
                high=10_000),
            kafka_node_id=read.integer("QUEEN_KAFKA_NODE_ID", cls.kafka_node_id, low=0,
                                       high=2**31 - 1),
            kafka_cluster=read.text("QUEEN_KAFKA_CLUSTER", cls.kafka_cluster).strip()
            or cls.kafka_cluster,
        )

    @property
    def uses_embedded_database(self) -> bool:
        return self.database_url is None

    @property
    def scheme(self) -> str:
        """How clients reach the HTTP listener: `https` with TLS on."""
        return "https" if self.tls.enabled else "http"

    @property
    def spool_dir(self) -> Path:
        """FILE_BUFFER_DIR, or `spool` in the data directory."""
        return self.file_buffer_dir or self.data_dir / "spool"


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
