"""Measure one peer with the W2 shape (same steps, same gate, same figures), one at a time."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import time
from dataclasses import replace
from typing import Any

from loadtest import launch, pgstats
from loadtest.cell import summarize
from loadtest.peers import workers
from loadtest.runner import run_cell
from loadtest.workloads import cells


def measure_peer(peer: str, pg: launch.Postgres | None, args: argparse.Namespace) -> dict[str, Any]:
    _, shape = cells("W2", args, time.strftime("%H%M%S"))[0]
    shape = replace(shape, queue=f"peer-{peer}")
    label = f"peer {peer} W2"
    try:
        with contextlib.ExitStack() as stack:
            note = ""
            dsn = None
            if peer == "rabbitmq":
                from loadtest.peers import rabbitmq

                node = stack.enter_context(rabbitmq.RabbitNode())
                asyncio.run(rabbitmq.declare(node.url))
                url, roots = node.url, {"rabbitmq": node.proc.pid if node.proc else None}
                note = "single quorum queue (no partitions); confirms awaited; prefetch=pop batch"
            else:
                if pg is None:
                    return {"peer": peer, "verdict": "skipped",
                            "note": "pgmq needs the self-contained PostgreSQL"}
                from loadtest.peers import pgmq

                dsn = str(asyncio.run(launch.fresh_database(pg.dsn, migrate=False)))
                version = asyncio.run(pgmq.install_into(dsn))
                url, roots = dsn, {"postgres": pg.proc.pid if pg.proc else None}
                note = f"pgmq SQL {version} from the PyPI wheel, same durable PostgreSQL"
            before = asyncio.run(pgstats.snapshot(dsn)) if dsn else None
            out = run_cell(url, shape, roots, label,
                           producer_fn=functools.partial(workers.run_producer, peer),
                           consumer_fn=functools.partial(workers.run_consumer, peer))
            after = asyncio.run(pgstats.snapshot(dsn)) if dsn else None
            wal = (asyncio.run(pgstats.wal_bytes(dsn, before.wal_lsn, after.wal_lsn))
                   if dsn and before and after else None)
            result = summarize(out, shape, label, before, after, wal, gate=True)
    except (RuntimeError, OSError, ImportError) as exc:
        return {"peer": peer, "verdict": "not measured", "note": f"{type(exc).__name__}: {exc}"}
    result["peer"] = peer
    result["note"] = note
    t = result.get("throughput") or {}
    ok = [s for s in t.get("steps", []) if s["ok"]]
    result["msg_per_s"] = max((s["deliver_msg_per_s"] for s in ok), default=0.0)
    result["e2e_p99_ms"] = (result["latency_ms"].get("e2e") or {}).get("p99_ms")
    return result
