"""A high-availability PostgreSQL for the broker: two Patroni nodes and a Raft witness.

Patroni (PyPI `patroni[raft]`) runs the embedded PostgreSQL binaries (core/embedded.py ships
initdb, pg_basebackup and pg_rewind) as a primary and a synchronous standby, and elects the
primary through its built-in Raft store (pysyncobj), so no etcd is needed. Raft needs a
majority, so a third member that holds no database (`patroni_raft_controller`, the witness)
lets the survivor of a dead node win an election.

    python -m broker.patroni node pg1      # one Patroni node (and its PostgreSQL)
    python -m broker.patroni node pg2
    python -m broker.patroni witness       # the third Raft member
    python -m broker.patroni dsn           # the broker's DATABASE_URL (both hosts)
    python -m broker.patroni with-dsn CMD  # CMD with DATABASE_URL set to it

`Procfile.ha` starts all of them and the broker (`honcho -f Procfile.ha start`). On one
machine the nodes differ by port and directory; in production each node is its own machine
with the same configuration and its own address (QUEEN_HA_HOSTS).

Settings (environment): QUEEN_HA_DIR (default `.queen-ha`), QUEEN_HA_BASE_PORT (5440:
PostgreSQL on base+1, base+2; Patroni's REST API on base+11, base+12; Raft on base+21..23),
QUEEN_HA_HOSTS (the nodes' addresses, default 127.0.0.1 for all), QUEEN_HA_TTL (seconds a
primary that stops renewing its leader key keeps it; Patroni's minimum is 20).

Run as root, a node or the witness becomes PostgreSQL's system user (PostgreSQL refuses to
run as root) and runs Patroni with this same Python. That user must be able to reach the
interpreter, its standard library and Patroni; a Python under /root (pyenv's default, mode
700) is out of its reach. That is checked first, and the command stops at once naming the
directory in the way and the fix, instead of Patroni dying with a bare PermissionError.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pwd
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.embedded import BIN_DIR, DEFAULT_SERVER_SETTINGS, SYSTEM_USER

NODES = ("pg1", "pg2")
SCOPE = "queen"
DATABASE = "postgres"
SUPERUSER = "postgres"
REPLICATOR = "replicator"


@dataclass(frozen=True)
class Layout:
    """Where every member of the cluster lives."""

    root: Path
    base_port: int = 5440
    hosts: tuple[str, str, str] = ("127.0.0.1", "127.0.0.1", "127.0.0.1")  # pg1, pg2, witness
    ttl: int = 20

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Layout:
        env = os.environ if env is None else env
        hosts = [h.strip() for h in env.get("QUEEN_HA_HOSTS", "").split(",") if h.strip()]
        if len(hosts) == 1:
            hosts *= 3
        if hosts and len(hosts) != 3:
            raise SystemExit("QUEEN_HA_HOSTS: one address, or three (pg1, pg2, witness)")
        return cls(Path(env.get("QUEEN_HA_DIR", ".queen-ha")).expanduser().resolve(),
                   int(env.get("QUEEN_HA_BASE_PORT", "5440")),
                   tuple(hosts) if hosts else cls.hosts,  # type: ignore[arg-type]
                   max(20, int(env.get("QUEEN_HA_TTL", "20"))))

    def index(self, node: str) -> int:
        return NODES.index(node)

    def pg_port(self, node: str) -> int:
        return self.base_port + 1 + self.index(node)

    def rest_port(self, node: str) -> int:
        return self.base_port + 11 + self.index(node)

    def raft_addr(self, member: int) -> str:
        return f"{self.hosts[member]}:{self.base_port + 21 + member}"

    def node_dir(self, node: str) -> Path:
        return self.root / node

    def dsn(self) -> str:
        """The broker's DATABASE_URL: both nodes; the broker connects to the read-write one."""
        hosts = ",".join(f"{self.hosts[self.index(n)]}:{self.pg_port(n)}" for n in NODES)
        return (f"postgresql://{SUPERUSER}@{hosts}/{DATABASE}"
                "?target_session_attrs=read-write")


def _raft(layout: Layout, member: int) -> dict[str, object]:
    return {"data_dir": str(layout.root / f"raft{member}"),
            "self_addr": layout.raft_addr(member),
            "partner_addrs": [layout.raft_addr(m) for m in range(3) if m != member]}


def node_config(layout: Layout, node: str) -> dict[str, object]:
    """Patroni's configuration of one node (JSON is YAML, which Patroni reads)."""
    i = layout.index(node)
    here = layout.node_dir(node)
    host = layout.hosts[i]
    # The broker's durable defaults, minus what Patroni manages itself.
    parameters = {k: v for k, v in DEFAULT_SERVER_SETTINGS.items()
                  if k not in ("listen_addresses",)}
    return {
        "scope": SCOPE,
        "name": node,
        "log": {"level": "WARNING"},  # to stderr: the process manager's log
        "restapi": {"listen": f"{host}:{layout.rest_port(node)}",
                    "connect_address": f"{host}:{layout.rest_port(node)}"},
        "raft": _raft(layout, i),
        "bootstrap": {
            "dcs": {
                "ttl": layout.ttl,
                "loop_wait": 2,
                "retry_timeout": 5,
                # Only a synchronous standby may be promoted, and a commit is acknowledged
                # once it is on the standby too (synchronous_commit below). Not strict: with
                # the standby gone the primary goes on alone instead of refusing every write
                # (docs/deploying/high-availability.md: what that trades).
                "synchronous_mode": True,
                "synchronous_mode_strict": False,
                "maximum_lag_on_failover": 1 << 20,
                "postgresql": {
                    "use_pg_rewind": True,
                    "use_slots": True,
                    "parameters": {
                        **parameters,
                        "synchronous_commit": "on",
                        "wal_log_hints": "on",  # pg_rewind needs it (or data checksums)
                        "hot_standby": "on",
                        # A standby that stops answering (frozen, cut off) is dropped after
                        # 5 s instead of 60: until then every commit waits for it, and
                        # Patroni can only take it out of the synchronous set once it is gone.
                        "wal_sender_timeout": "5s",
                        # A standby retries its primary every second (5 s by default), so a
                        # restarted primary finds its synchronous standby sooner.
                        "wal_retrieve_retry_interval": "1s",
                    },
                },
            },
            "initdb": [{"encoding": "UTF8"}, {"locale": "C"}, {"auth": "trust"}],
        },
        "postgresql": {
            "listen": f"{host}:{layout.pg_port(node)}",
            "connect_address": f"{host}:{layout.pg_port(node)}",
            "data_dir": str(here / "pg"),
            "bin_dir": str(BIN_DIR),
            "pgpass": str(here / "pgpass"),
            "authentication": {"superuser": {"username": SUPERUSER},
                               "replication": {"username": REPLICATOR},
                               "rewind": {"username": SUPERUSER}},
            "parameters": {"unix_socket_directories": str(here / "run")},
            # Trust on this machine's loopback only: the single-machine demonstration. On
            # several machines use scram-sha-256 with passwords (docs/deploying/high-availability.md).
            "pg_hba": ["local all all trust",
                       "host all all 127.0.0.1/32 trust",
                       "host replication all 127.0.0.1/32 trust"],
        },
        "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False},
    }


def witness_config(layout: Layout) -> dict[str, object]:
    return {"scope": SCOPE, "name": "witness", "raft": _raft(layout, 2)}


def _prepare(paths: Sequence[Path]) -> str | None:
    """Create the directories; as root, hand them to the system user PostgreSQL runs as
    (it refuses to run as root), and answer that user."""
    for path in paths:
        path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return None
    from core.embedded import _prepare_for_system_user

    _prepare_for_system_user(SYSTEM_USER, list(paths))
    return SYSTEM_USER


def _become(user: str) -> None:
    """Drop root for `user`: its own groups (not root's), then its gid and uid."""
    entry = pwd.getpwnam(user)
    os.initgroups(user, entry.pw_gid)
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)


def _exec(config: dict[str, object], path: Path, program: list[str], user: str | None) -> None:
    path.write_text(json.dumps(config, indent=2))
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)
        check_reachable(user, program)
        _become(user)
        os.environ["HOME"] = str(path.parent)
    argv = [sys.executable, *program, str(path)]
    os.execv(argv[0], argv)


# What Patroni needs of this Python, checked as the user before handing over to it.
_MODULES = ("patroni", "pysyncobj")


def check_reachable(user: str, program: list[str]) -> None:
    """Exit at once, naming what is in the way and the fix, when `user` cannot start this
    interpreter and import Patroni (run as root only: see the module's docstring)."""
    probe = [sys.executable, "-c", "import " + ", ".join(_MODULES)]
    gid = pwd.getpwnam(user).pw_gid
    try:
        done = subprocess.run(probe, user=user, group=gid,
                              extra_groups=os.getgrouplist(user, gid), capture_output=True,
                              timeout=120, check=False)
        if done.returncode == 0:
            return
        reason = done.stderr.decode(errors="replace").strip().splitlines()[-1:]
    except PermissionError as exc:  # the interpreter itself could not be executed
        reason = [str(exc)]
    blocked = unreachable_paths(user, _needed_paths())
    raise SystemExit(refusal(user, blocked, " ".join(reason), program))


def _needed_paths() -> list[Path]:
    paths = [Path(sys.executable), Path(os.__file__).parent]
    for module in _MODULES:
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.origin:
            paths.append(Path(spec.origin).parent)
    return paths


def unreachable_paths(user: str, paths: list[Path]) -> list[Path]:
    """The directories and files on the way to `paths` (as written and with symlinks
    resolved) that `user` may not pass or read, found by asking the kernel as that user
    (a forked child: ACLs and groups count as they will for Patroni). The paths are resolved
    here, as root: the user cannot resolve a symlink that leads through a directory it may
    not pass (a virtualenv's python linking to pyenv's under /root)."""
    checks = _checks(paths)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: become the user, look, write the answer, leave
        try:
            os.close(read)
            _become(user)
            found = [str(p) for p in _blocked(checks)]
            os.write(write, "\0".join(found).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        data = answer.read().decode()
    os.waitpid(pid, 0)
    return [Path(p) for p in data.split("\0") if p]


# A path to check as the user, and the access it needs once its directories are passed: None
# for a symlink, whose target is checked through the resolved path.
Check = tuple[Path, int | None]


def _checks(paths: list[Path]) -> list[Check]:
    out: list[Check] = []
    for target in paths:
        wanted = os.R_OK | (os.X_OK if target.is_dir() or target == Path(sys.executable) else 0)
        for path in dict.fromkeys([*_links(target.absolute()), target.resolve()]):
            out.append((path, None if path.is_symlink() else wanted))
    return out


def _links(path: Path) -> list[Path]:
    """`path` and every link it leads through: each hop's directory must be passable too
    (a virtualenv's python that links to one under /root, which links on to /usr/bin)."""
    hops = [path]
    while hops[-1].is_symlink() and len(hops) < 40:
        hops.append((hops[-1].parent / os.readlink(hops[-1])).absolute())
    return hops


def _blocked(checks: list[Check]) -> list[Path]:
    out: list[Path] = []
    for path, wanted in checks:
        for parent in reversed(path.parents):
            if not os.access(parent, os.X_OK):
                if parent not in out:
                    out.append(parent)
                break
        else:
            if wanted is not None and not os.access(path, wanted) and path not in out:
                out.append(path)
    return out


def refusal(user: str, blocked: list[Path], reason: str, program: list[str]) -> str:
    """The message of `check_reachable`."""
    what = "a Patroni node" if program[:2] == ["-m", "patroni"] else "the Raft witness"
    lines = [(f"broker.patroni: run as root, {what} runs as PostgreSQL's system user "
              f"{user!r} (PostgreSQL refuses root), with this Python: {sys.executable}."),
             f"That user cannot start it or import Patroni ({reason})."]
    if blocked:
        lines.append("In its way: " + ", ".join(map(str, blocked)) + ".")
        dirs = " ".join(str(p) for p in blocked)
        lines.append(f"Fix, one of: let that user through (setfacl -m u:{user}:rx {dirs}, "
                     f"or chmod o+rx {dirs}); install Python and the project where it can "
                     "read them (outside /root); or run the HA processes as an ordinary "
                     "user instead of root.")
    else:
        lines.append("Fix: install Python and the project where that user can read them, or "
                     "run the HA processes as an ordinary user instead of root.")
    return "\n".join(lines)


def run_node(layout: Layout, node: str) -> None:
    here = layout.node_dir(node)
    raft_dir = layout.root / f"raft{layout.index(node)}"
    user = _prepare([layout.root, here, here / "run", raft_dir])
    _exec(node_config(layout, node), here / "patroni.yml", ["-m", "patroni"], user)


def run_witness(layout: Layout) -> None:
    raft_dir = layout.root / "raft2"
    user = _prepare([layout.root, raft_dir])
    # patroni.raft_controller has a main() but no __main__ guard: `-m` would run nothing.
    _exec(witness_config(layout), layout.root / "witness.yml",
          ["-c", "from patroni.raft_controller import main; main()"], user)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m broker.patroni", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("node", help="run one Patroni node").add_argument("name", choices=NODES)
    sub.add_parser("witness", help="run the third Raft member (no database)")
    sub.add_parser("dsn", help="print the broker's DATABASE_URL")
    run = sub.add_parser("with-dsn", help="run a command with DATABASE_URL set")
    run.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    layout = Layout.from_env()
    if args.command == "node":
        run_node(layout, args.name)
    elif args.command == "witness":
        run_witness(layout)
    elif args.command == "dsn":
        print(layout.dsn())
    else:
        if not args.argv:
            parser.error("with-dsn needs a command")
        os.environ["DATABASE_URL"] = layout.dsn()
        os.execvp(args.argv[0], args.argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
