"""Ports for the servers our own tools start on 127.0.0.1: the development Citus cluster's
nodes (broker/citus.py), the load tool's and the tests' brokers (loadtest/launch.py), the
fault harness's Patroni pair (loadtest/faults/ha.py, `free_block`).

They are drawn below the kernel's ephemeral range. The kernel's own pick (a bind to port 0)
comes from that range, where every client connection takes its source port: a port picked
there and released until its server binds it can meanwhile become a connection's source port
(and two processes' picks met once, two test brokers handed one port). A plain bind (no
SO_REUSEADDR) proves a port free: any socket bound there, even one in TIME_WAIT, refuses it.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

# How far below the ephemeral range ports are drawn from.
_SPAN = 12000


def free_port() -> int:
    """A port free now, below the kernel's ephemeral range."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free now, below the kernel's ephemeral range (each one's bind
    is held until all are drawn, so no two are the same)."""
    drawn = _below_ephemeral()
    held: list[socket.socket] = []
    try:
        for _ in range(1000 * count):
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", random.choice(drawn)))
            except OSError:
                s.close()
                continue
            held.append(s)
            if len(held) == count:
                return [int(s.getsockname()[1]) for s in held]
        raise RuntimeError("no free port below the ephemeral range")
    finally:
        for s in held:
            s.close()


def free_block(size: int) -> int:
    """A base port whose `size` successors (base+1 .. base+size) are all free now, below the
    kernel's ephemeral range: for a server group laid out from one base port (the Patroni
    pair of broker/patroni.py)."""
    drawn = _below_ephemeral()
    for _ in range(200):
        base = random.randrange(drawn.start, drawn.stop - size, 50)
        try:
            for offset in range(1, size + 1):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", base + offset))
        except OSError:
            continue
        return base
    raise RuntimeError(f"no {size} free ports in a row below the ephemeral range")


def _below_ephemeral() -> range:
    low = ephemeral_low()
    return range(max(1024, low - _SPAN), low)


def ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default
