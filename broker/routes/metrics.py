"""`GET /metrics` (JSON) and `GET /metrics/prometheus` (text exposition format), §6.5.

Figures come from the database (shared by every worker) plus this worker's process and pool.
Request counting would need a middleware in the app, so `requests` is reported as unknown.
"""

from __future__ import annotations

import os
import resource
import time

from starlette.requests import Request
from starlette.responses import Response

from broker.state import broker_of
from broker.wire.http import json_response

_STARTED = time.monotonic()  # per worker process; module import happens at app start


async def metrics(request: Request) -> Response:
    broker = broker_of(request)
    row = await broker.resources.overview()
    pool = broker.pool_stats()
    uptime = time.monotonic() - _STARTED
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return json_response({
        "uptime": round(uptime, 3),
        "requests": {"total": None, "rate": None},
        "messages": {"total": row.appended, "retained": row.retained, "rate": None},
        "database": {"poolSize": pool.size, "idleConnections": pool.idle,
                     "waitingRequests": 0, "maxSize": pool.max_size},
        "memory": {"maxRssKb": usage.ru_maxrss},
        "cpu": {"userSeconds": usage.ru_utime, "systemSeconds": usage.ru_stime},
        "queues": row.queues, "partitions": row.partitions,
        "activeLeases": row.live_leases, "deadLetters": row.dead_letters,
        "pid": os.getpid(),
    })


_GAUGES = (
    ("queen_queues", "Queues.", "queues"),
    ("queen_partitions", "Partitions.", "partitions"),
    ("queen_messages_appended", "Messages ever appended (sum of high watermarks).", "appended"),
    ("queen_messages_retained", "Messages currently retained.", "retained"),
    ("queen_segments", "Stored segments.", "segments"),
    ("queen_consumer_cursors", "Consumer cursors (partition, group).", "cursors"),
    ("queen_leases_active", "Live leases.", "live_leases"),
    ("queen_dead_letters", "Rows in the dead-letter store.", "dead_letters"),
)


async def prometheus(request: Request) -> Response:
    broker = broker_of(request)
    row = await broker.resources.overview()
    lines: list[str] = []
    for name, text, key in _GAUGES:
        lines += [f"# HELP {name} {text}", f"# TYPE {name} gauge",
                  f"{name} {getattr(row, key)}"]
    lines += ["# HELP queen_process_uptime_seconds Uptime of this worker process.",
              "# TYPE queen_process_uptime_seconds gauge",
              f"queen_process_uptime_seconds {time.monotonic() - _STARTED:.3f}",
              "# HELP queen_db_pool_connections Open connections in this worker's pool.",
              "# TYPE queen_db_pool_connections gauge",
              f"queen_db_pool_connections {broker.pool_stats().size}"]
    return Response("\n".join(lines) + "\n",
                    media_type="text/plain; version=0.0.4; charset=utf-8")

