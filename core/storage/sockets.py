"""TCP keepalives and a TCP user timeout on every database connection's socket.

A database machine that loses power or drops off the network sends nothing more, not even
a reset: a connection to it looks open until the kernel gives up on it, which by default
takes about two hours for an idle connection (keepalives off) and some 15 minutes for one
waiting for an answer (retransmissions). libpq has options for this (`keepalives_idle`,
`tcp_user_timeout`); asyncpg has none, and PostgreSQL settings passed at connect time apply
to the server's end only. So after connecting, the client end of the socket gets:

- keepalive probes after `silence / 2` seconds without traffic, one a second, and the
  connection dropped after `silence / 2` unanswered ones;
- TCP_USER_TIMEOUT = `silence`: the connection is dropped when data it sent (a statement, a
  keepalive probe) stays unacknowledged that long.

Either way a statement waiting on it fails at once as a lost connection (an outage: 503, or
`buffered`), instead of waiting for the statement timeout meant for slow queries.

What this cannot see: a server process that stopped (SIGSTOP, a hung machine whose kernel
still runs) on a kernel that still acknowledges every packet. `core/storage/liveness.py`
watches for that.
"""

from __future__ import annotations

import math
import socket

import asyncpg


def keep_alive(conn: asyncpg.Connection, silence: float) -> bool:
    """Set the options on `conn`'s socket when it is TCP (a Unix socket needs none: its peer
    is on this machine); answer whether it was set. `silence` 0 leaves the socket alone."""
    if silence <= 0:
        return False
    # asyncpg has no public way to its transport; its own connect sets TCP_NODELAY the same
    # way (connect_utils._set_nodelay).
    sock = conn._transport.get_extra_info("socket")  # type: ignore[attr-defined]
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return False
    half = max(1, math.ceil(silence / 2))
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (("TCP_KEEPIDLE", half), ("TCP_KEEPINTVL", 1), ("TCP_KEEPCNT", half),
                        ("TCP_USER_TIMEOUT", int(silence * 1000))):
        if hasattr(socket, name):  # Linux has all four; other systems some
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    for level, option, value in options:
        sock.setsockopt(level, option, value)
    return True
