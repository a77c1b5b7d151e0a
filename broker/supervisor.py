"""`queen-broker serve` (and `web`): run the broker's processes and keep them running.

`serve` starts, in order: the embedded PostgreSQL (only when no database is configured), the
schema migrations, the listening socket (bound once, here), N web workers that inherit it
(`broker/worker.py`), the lease reaper (which also fires timers), and the Kafka listener when QUEEN_KAFKA_PORT
is set (broker/kafka). `web` runs only the
socket and the web workers (a Procfile line, beside `postgres` and `reaper`).

Then it watches them. A process that dies is logged with its cause (exit code or signal) and
started again after a backoff (0.5 s, doubling to 10 s; a run longer than 10 s starts the
backoff over), while the others keep serving: the socket stays open, so clients of a dead
worker's share of connections only wait in the backlog. A dead PostgreSQL is started again
on the same data directory and recovers from its WAL; workers and reaper reconnect by
themselves. A process that dies more than 5 times in 60 s (SUPERVISOR_MAX_RESTARTS,
SUPERVISOR_RESTART_WINDOW_MS) stops the whole broker with a message naming it and its last
exit status, rather than restarting forever.

With TLS on, SIGHUP makes the web workers and the Kafka listener load the certificate files
again (broker/tls/rotation.py); without TLS, SIGHUP is left as it always was.

Ctrl-C / SIGTERM stop everything in order: web workers drain first (they finish requests in
flight and answer parked long polls), then the reaper, then PostgreSQL. Children run in
their own process groups, so a terminal's Ctrl-C reaches only this process, which stops them
in that order; they also get a parent-death signal, so killing this process outright leaves
no orphans.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType

from broker.auth.exposure import bind_notice, exposure_warnings
from broker.tls.rotation import describe
from broker.worker import drain_seconds
from core.embedded import EmbeddedPostgres
from core.migrate import prepare_database
from core.settings import Settings
from core.tracing import check_available as check_tracing

log = logging.getLogger("queen.serve")

_TICK = 0.1  # seconds between looks at the children
_READY_CHECK_EVERY = 0.5  # seconds between readiness checks of a restarted PostgreSQL
# Stages, in start order; stopping goes in reverse (web drains first, PostgreSQL last).
DATABASE, MAINTENANCE, WEB = 0, 1, 2


@dataclass(frozen=True)
class RestartPolicy:
    """When to start a dead process again, and when to give up on it."""

    first_delay: float = 0.5
    max_delay: float = 10.0
    max_deaths: int = 5  # more deaths than this within `window` stop the broker
    window: float = 60.0

    def next_delay(self, previous: float | None, uptime: float) -> float:
        if previous is None or uptime > self.max_delay:
            return self.first_delay
        return min(previous * 2, self.max_delay)

    def gives_up(self, deaths: deque[float], now: float) -> bool:
        while deaths and deaths[0] < now - self.window:
            deaths.popleft()
        return len(deaths) > self.max_deaths


@dataclass(eq=False)
class Child:
    """One supervised slot: how to start its process, the process, and its deaths."""

    name: str
    spawn: Callable[[], subprocess.Popen[bytes]]
    stage: int
    stop_signal: int = signal.SIGTERM
    stop_timeout: float = 20.0
    ready: Callable[[], bool] | None = None  # checked after a restart, to log recovery
    # A process the broker cannot serve without: one that keeps dying stops the broker. A
    # non-essential one (the Kafka listener) is started again at the longest delay instead,
    # so its trouble never takes the HTTP side down.
    essential: bool = True
    # Passed the supervisor's SIGHUP (TLS on: the listeners reload their certificates).
    hangup: bool = False
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    died_at: float = 0.0
    restart_at: float | None = None
    delay: float | None = None
    deaths: deque[float] = field(default_factory=deque)
    last_status: str = ""
    awaiting_ready: bool = False
    next_ready_check: float = 0.0

    def start(self, now: float) -> None:
        self.proc = self.spawn()
        self.started_at = now
        self.restart_at = None


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


class Supervisor:
    """Keeps its children running until asked to stop or until one keeps dying."""

    def __init__(self, children: list[Child], policy: RestartPolicy | None = None) -> None:
        self.children = children
        self.policy = policy or RestartPolicy()
        self.stop_requested = False
        self.hangup_requested = False
        self.failure: str | None = None

    def request_stop(self, signum: int = 0, frame: FrameType | None = None) -> None:
        self.stop_requested = True

    def request_hangup(self, signum: int = 0, frame: FrameType | None = None) -> None:
        self.hangup_requested = True

    def pass_hangup(self) -> None:
        """SIGHUP to every running child that takes it."""
        self.hangup_requested = False
        for child in self.children:
            if child.hangup and child.proc is not None and child.proc.poll() is None:
                child.proc.send_signal(signal.SIGHUP)
        log.info("SIGHUP: the listeners reload their TLS certificates")

    def watch(self) -> None:
        """Restart dead children until a stop is requested or one keeps dying."""
        while not self.stop_requested:
            if self.hangup_requested:
                self.pass_hangup()
            now = time.monotonic()
            for child in self.children:
                self._look_after(child, now)
                if self.failure is not None:
                    return
            time.sleep(_TICK)

    def _look_after(self, child: Child, now: float) -> None:
        if child.proc is not None:
            returncode = child.proc.poll()  # also reaps it: no zombie stays behind
            if returncode is None:
                if child.awaiting_ready and now >= child.next_ready_check:
                    self._check_ready(child, now)
                return
            pid, uptime = child.proc.pid, now - child.started_at
            child.proc = None
            self._died(child, f"pid {pid} {describe_exit(returncode)}", uptime, now)
        elif child.restart_at is not None and now >= child.restart_at:
            try:
                child.start(now)
            except (OSError, subprocess.SubprocessError) as exc:
                self._died(child, f"could not be started ({exc})", 0.0, now)
                return
            assert child.proc is not None
            log.info("%s started again (pid %d)", child.name, child.proc.pid)
            child.awaiting_ready = child.ready is not None
            child.next_ready_check = now + _READY_CHECK_EVERY

    def _died(self, child: Child, status: str, uptime: float, now: float) -> None:
        child.died_at = now
        child.awaiting_ready = False
        child.last_status = status
        child.deaths.append(now)
        if self.policy.gives_up(child.deaths, now) and not child.essential:
            child.delay = self.policy.max_delay
            child.restart_at = now + child.delay
            log.error("%s keeps dying (%d times in %.0f s; last: %s); the rest of the broker "
                      "serves on; starting it again in %.0f s", child.name, len(child.deaths),
                      self.policy.window, status, child.delay)
            return
        if self.policy.gives_up(child.deaths, now):
            self.failure = (
                f"{child.name} keeps dying ({len(child.deaths)} times in "
                f"{self.policy.window:.0f} s; last: {status}); stopping the broker")
            log.error("%s", self.failure)
            return
        child.delay = self.policy.next_delay(child.delay, uptime)
        child.restart_at = now + child.delay
        log.warning("%s (%s) after %.1f s; starting it again in %.1f s",
                    child.name, status, uptime, child.delay)

    def _check_ready(self, child: Child, now: float) -> None:
        assert child.ready is not None
        child.next_ready_check = now + _READY_CHECK_EVERY
        if child.ready():
            child.awaiting_ready = False
            log.info("%s is ready again, %.1f s after it died", child.name, now - child.died_at)

    def stop_all(self) -> None:
        """Stop the children stage by stage: web, then the reaper, then PostgreSQL."""
        for stage in sorted({c.stage for c in self.children}, reverse=True):
            running = [c for c in self.children if c.stage == stage and c.proc is not None]
            for child in running:
                assert child.proc is not None
                if child.proc.poll() is None:
                    child.proc.send_signal(child.stop_signal)
            deadline = time.monotonic() + max((c.stop_timeout for c in running), default=0)
            for child in running:
                assert child.proc is not None
                try:
                    child.proc.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    log.error("%s (pid %d) did not stop in %.0f s; killing it",
                              child.name, child.proc.pid, child.stop_timeout)
                    child.proc.kill()
                    child.proc.wait()
                child.proc = None


def bind_listener(settings: Settings) -> socket.socket:
    """The socket every web worker inherits: bound here, so a port in use fails the start at
    once, but not listening. The first worker that can answer listens on it (asyncio's
    server does, broker/worker.py): until then a client is refused at once instead of
    waiting in the kernel's backlog while workers import and wait for the database."""
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((settings.host, settings.port))
    sock.set_inheritable(True)
    return sock


def worker_command(fd: int) -> list[str]:
    return [sys.executable, "-m", "broker.worker", "--fd", str(fd)]


def web_command(settings: Settings) -> list[str]:
    """`queen-broker web` for this interpreter: the socket and the web workers, supervised."""
    return [sys.executable, "-m", "broker.cli", "web", "--host", settings.host,
            "--port", str(settings.port), "--workers", str(settings.web_workers)]


def reaper_command() -> list[str]:
    return [sys.executable, "-m", "core.reaper"]


def kafka_command() -> list[str]:
    """The Kafka listener (broker/kafka), when QUEEN_KAFKA_PORT is set."""
    return [sys.executable, "-m", "broker.kafka"]


def serve(settings: Settings, *, with_reaper: bool = True, web_only: bool = False) -> int:
    """Run the broker in the foreground until Ctrl-C / SIGTERM; answer the exit status."""
    supervisor = Supervisor([], RestartPolicy(
        max_deaths=settings.supervisor_max_restarts,
        window=settings.supervisor_restart_window_ms / 1000))
    signal.signal(signal.SIGINT, supervisor.request_stop)
    signal.signal(signal.SIGTERM, supervisor.request_stop)
    # With TLS on, SIGHUP reloads the certificates (broker/tls/rotation.py); the listeners
    # start with it ignored, so one that has not yet set its handler is not killed by it.
    reloads = settings.tls.enabled
    if reloads:
        signal.signal(signal.SIGHUP, supervisor.request_hangup)
    env = dict(os.environ)
    listener: socket.socket | None = None
    try:
        check_tracing(settings)  # a missing `otel` extra stops us here, said once
        if settings.database_url is None and not web_only:
            embedded = EmbeddedPostgres.for_broker(settings)
            log.info("starting embedded PostgreSQL in %s", embedded.pgdata)
            postgres = Child("postgres", embedded.spawn, DATABASE, signal.SIGINT,
                             stop_timeout=30, ready=embedded.is_ready)
            postgres.proc, postgres.started_at = embedded.start(), time.monotonic()
            supervisor.children.append(postgres)
            env["DATABASE_URL"] = embedded.dsn
            # Said once, so a second broker on this machine can share the database.
            log.info("embedded PostgreSQL ready; other brokers on this machine reach it with "
                     "DATABASE_URL=%s", embedded.dsn)
        if not web_only:
            dsn = env.get("DATABASE_URL") or settings.database_url
            assert dsn is not None
            asyncio.run(prepare_database(settings, dsn))
        listener = bind_listener(settings)
        fd = listener.fileno()
        stop_timeout = drain_seconds(settings) + 10
        for n in range(1, settings.web_workers + 1):
            supervisor.children.append(Child(
                f"web worker {n}", _spawner(worker_command(fd), env, pass_fds=(fd,),
                                            ignore_hangup=reloads), WEB,
                stop_timeout=stop_timeout, hangup=reloads))
        if with_reaper and not web_only:
            supervisor.children.append(Child("reaper", _spawner(reaper_command(), env),
                                             MAINTENANCE))
        if settings.kafka_port is not None and not web_only:
            supervisor.children.append(Child(
                "kafka listener", _spawner(kafka_command(), env, ignore_hangup=reloads), WEB,
                stop_timeout=30, essential=False, hangup=reloads))
        now = time.monotonic()
        for child in supervisor.children:
            if child.proc is None:
                child.start(now)
        host, port = listener.getsockname()[:2]
        log.info("queen broker serving on %s://%s:%d (%d web workers)", settings.scheme, host,
                 port, settings.web_workers)
        if settings.tls.enabled:
            log.info("TLS certificate: %s", describe(settings.tls.cert_file))
        for warning in exposure_warnings(settings.auth, host):
            log.warning("%s", warning)
        if (notice := bind_notice(settings.auth, host)) is not None:
            log.info("%s", notice)
        supervisor.watch()
    except Exception as exc:  # noqa: BLE001 - any start-up failure must still stop the children
        log.error("start-up failed: %s", exc)
        supervisor.failure = f"start-up failed: {exc}"
    finally:
        if listener is not None:
            listener.close()  # the workers hold their own copies until they have drained
        supervisor.stop_all()
        log.info("stopped")
    return 0 if supervisor.failure is None else 1


def _spawner(command: list[str], env: dict[str, str], pass_fds: tuple[int, ...] = (), *,
             ignore_hangup: bool = False) -> Callable[[], subprocess.Popen[bytes]]:
    def before_exec() -> None:
        terminate_with_parent(supervisor_pid)
        if ignore_hangup:  # until the child sets its own handler (an ignored signal stays so)
            signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def spawn() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            command, env=env, pass_fds=pass_fds,
            process_group=0,  # a terminal's Ctrl-C reaches the supervisor, which stops us in order
            preexec_fn=before_exec)  # noqa: PLW1509 - no threads
    supervisor_pid = os.getpid()
    return spawn


def terminate_with_parent(parent: int | None = None) -> None:
    """Run in a child before exec: SIGTERM it if this process dies, even by SIGKILL.
    `parent` (the spawning process's pid) also catches a parent that died before that."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)
