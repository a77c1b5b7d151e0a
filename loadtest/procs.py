"""CPU and memory of process trees (broker, PostgreSQL, the generator), via psutil.

CPU time is summed per pid as the difference between the first and last sample of that pid,
so processes that come and go (PostgreSQL backends, worker processes) are counted for the
time we saw them. Sample about once a second.
"""

from __future__ import annotations

import psutil  # type: ignore[import-untyped]

# A web worker process of the broker (each serves requests with its own pool and coalescer).
_WORKER_COMMAND = "broker.worker"


class TreeSampler:
    def __init__(self, roots: dict[str, int | None]) -> None:
        self.roots = {k: v for k, v in roots.items() if v}
        self._first: dict[tuple[str, int], float] = {}
        self._last: dict[tuple[str, int], float] = {}
        self.peak_rss: dict[str, int] = {k: 0 for k in self.roots}
        # The largest RSS any single web worker reached (the per-worker memory bound).
        self.peak_worker_rss = 0
        self._is_worker: dict[int, bool] = {}

    def _tree(self, pid: int) -> list[psutil.Process]:
        try:
            root = psutil.Process(pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def sample(self) -> None:
        claimed: set[int] = set()
        # The generator's tree contains the broker and PostgreSQL when this process started
        # them: visit the generator last and skip every pid another root already claimed.
        order = sorted(self.roots.items(), key=lambda kv: kv[0] == "generator")
        for name, pid in order:
            rss = 0
            for proc in self._tree(pid):
                if proc.pid in claimed:
                    continue
                claimed.add(proc.pid)
                try:
                    t = proc.cpu_times()
                    cpu = t.user + t.system
                    one = proc.memory_info().rss
                    rss += one
                    if name == "broker" and self._worker(proc):
                        self.peak_worker_rss = max(self.peak_worker_rss, one)
                except psutil.Error:
                    continue
                key = (name, proc.pid)
                self._first.setdefault(key, cpu)
                self._last[key] = cpu
            self.peak_rss[name] = max(self.peak_rss[name], rss)

    def _worker(self, proc: psutil.Process) -> bool:
        known = self._is_worker.get(proc.pid)
        if known is None:
            known = self._is_worker[proc.pid] = _WORKER_COMMAND in " ".join(proc.cmdline())
        return known

    def cpu_seconds(self) -> dict[str, float]:
        out = {k: 0.0 for k in self.roots}
        for key, last in self._last.items():
            out[key[0]] += last - self._first[key]
        return {k: round(v, 2) for k, v in out.items()}


# Command-line fragments of processes that belong to the broker's process tree.
_BROKER_COMMANDS = ("hypercorn", "queen-broker", "broker.cli", "broker.worker")


def postmaster_pid(data_dir: str | None) -> int | None:
    """The PostgreSQL server's pid from its data directory, when we can see it."""
    if not data_dir:
        return None
    try:
        with open(f"{data_dir}/postmaster.pid") as f:
            return int(f.readline())
    except (OSError, ValueError):
        return None


def pid_listening_on(port: int) -> int | None:
    """The top of the broker's process tree that listens on a local port.

    Web workers share the listening socket with their parent; climb while the parent is
    still part of the broker (hypercorn, or the `queen-broker serve` / `web` supervisor), and
    no further, so a shell or test runner that started it is not counted as broker.
    """
    for conn in psutil.net_connections("tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port and conn.pid:
            proc = psutil.Process(conn.pid)
            while True:
                parent = proc.parent()
                if parent is None or parent.pid == 1:
                    break
                cmdline = " ".join(parent.cmdline())
                if not any(name in cmdline for name in _BROKER_COMMANDS):
                    break
                proc = parent
            return int(proc.pid)
    return None
