"""Who is who under one `serve` process: web workers, reaper, postmaster.

Found from the process tree of the `serve` pid the harness started, never by a name pattern
across the machine. The rules do not depend on how `serve` arranges its children (hypercorn
master and workers, or workers of its own):

- a **web worker** is a descendant that listens on the broker's port and has no listening
  child (a hypercorn master, or a supervisor that owns the socket, has listening children);
- the **reaper** is a descendant running `core.reaper`;
- the **postmaster** is a descendant whose program is PostgreSQL's `postgres` binary started
  with `-D` (its backends rename themselves `postgres: ...`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import psutil  # type: ignore[import-untyped]


@dataclass(frozen=True, slots=True)
class Roles:
    serve: int | None
    web: tuple[int, ...] = ()
    reaper: tuple[int, ...] = ()
    postmaster: int | None = None
    everything: tuple[int, ...] = field(default=())  # every descendant pid at the time


def _listens_on(proc: psutil.Process, port: int) -> bool:
    try:
        return any(c.status == psutil.CONN_LISTEN and c.laddr.port == port
                   for c in proc.net_connections("tcp"))
    except psutil.Error:
        return False


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return list(proc.cmdline())
    except psutil.Error:
        return []


def is_postmaster(cmdline: list[str]) -> bool:
    return bool(cmdline) and cmdline[0].endswith("/postgres") and "-D" in cmdline


def roles_of(serve_pid: int, port: int) -> Roles:
    """The roles under `serve_pid` right now (empty when it is gone)."""
    try:
        root = psutil.Process(serve_pid)
        if root.status() == psutil.STATUS_ZOMBIE:
            return Roles(None)
        descendants = root.children(recursive=True)
    except psutil.Error:
        return Roles(None)
    listening = {p.pid for p in descendants if _listens_on(p, port)}
    web: list[int] = []
    reaper: list[int] = []
    postmaster = None
    for proc in descendants:
        cmd = _cmdline(proc)
        if proc.pid in listening:
            try:
                kids = {c.pid for c in proc.children()}
            except psutil.Error:
                kids = set()
            if not kids & listening:
                web.append(proc.pid)
        elif "core.reaper" in cmd:
            reaper.append(proc.pid)
        elif postmaster is None and is_postmaster(cmd):
            postmaster = proc.pid
    return Roles(serve_pid, tuple(sorted(web)), tuple(sorted(reaper)), postmaster,
                 tuple(p.pid for p in descendants))


def postmaster_of(serve_pid: int) -> int | None:
    """Only the postmaster (cheaper than `roles_of`: no socket tables are read)."""
    try:
        for proc in psutil.Process(serve_pid).children(recursive=True):
            if is_postmaster(_cmdline(proc)):
                return int(proc.pid)
    except psutil.Error:
        pass
    return None


def alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def wait_gone(pids: list[int], timeout: float, interval: float = 0.02) -> list[int]:
    """Wait until the processes have exited (a zombie counts: its parent or init reaps it,
    which may take seconds, and it holds no socket or shared memory); answer those still
    alive at the timeout."""
    deadline = time.monotonic() + timeout
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(interval)
    return left
