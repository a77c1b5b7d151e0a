"""Ceilings measured in the same run as the broker, cached per shape within the run."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from typing import Any

from loadtest import ceiling_sql, launch
from loadtest.cell import steady
from loadtest.runner import Shape, run_cell


class Ceilings:
    """L-SQL needs a database with the schema; L-HTTP needs nothing but this machine."""

    def __init__(self, server_dsn: str | None, database_url: str | None, workers: int,
                 seconds: float = 6.0) -> None:
        self.server_dsn = server_dsn          # self-contained: a fresh database per ceiling
        self.database_url = database_url      # operator's database (L-SQL writes lsql-* queues)
        self.workers = workers
        self.seconds = seconds
        self.results: dict[str, dict[str, Any]] = {}

    def _db(self) -> str | None:
        if self.server_dsn:
            return str(asyncio.run(launch.fresh_database(self.server_dsn)))
        return self.database_url

    def sql_push(self, frames: int, fused: int = 1, connections: int = 32,
                 partitions: int = 100) -> dict[str, Any] | None:
        # At most 1000 partitions: creating 100k partition rows one call at a time would take
        # longer than the measurement, and 64 connections on 1000 rows hardly ever collide.
        partitions = min(partitions, 1000)
        key = f"L-SQL push N={frames} fused={fused} conns={connections} parts={partitions}"
        if key not in self.results:
            dsn = self._db()
            if dsn is None:
                return None
            fig = _uv(ceiling_sql.push_loop(dsn, frames=frames, fused=fused,
                                            connections=connections,
                                            partitions=partitions,
                                            seconds=self.seconds))
            self.results[key] = fig.as_dict()
        return self.results[key]

    def sql_pop_ack(self, batch: int = 100, connections: int = 16) -> dict[str, Any] | None:
        key = f"L-SQL pop+ack batch={batch}"
        if key not in self.results:
            dsn = self._db()
            if dsn is None:
                return None
            # Fill a log first (N=10 segments over 100 partitions), then drain it.
            queue = f"lsql-pop-{uuid.uuid4().hex[:6]}"
            _uv(ceiling_sql.push_loop(dsn, frames=10, seconds=self.seconds, queue=queue))
            pop, ack = _uv(ceiling_sql.pop_ack_loop(dsn, queue=queue, batch=batch,
                                                    connections=connections,
                                                    seconds=self.seconds))
            both = pop.messages / max(1e-9, pop.seconds + ack.seconds)
            self.results[key] = {"pop": pop.as_dict(), "ack": ack.as_dict(),
                                 "msg_per_s": round(both, 1)}
        return self.results[key]

    def http_push(self, shape: Shape) -> dict[str, Any]:
        key = f"L-HTTP push batch={shape.batch} conns={shape.connections}"
        if key not in self.results:
            null = replace(shape, queue="null", groups=(), consumers_per_group=0, rate=0.0,
                           steps=(), duration=self.seconds, partitions=min(shape.partitions, 100))
            with launch.Server("loadtest.null_app:app", workers=self.workers) as srv:
                out = run_cell(srv.url, null, {"l-http": srv.proc.pid if srv.proc else None},
                               key)
            # Median of per-second rates, like the broker's figure: start-up is not load.
            reqs = steady(out.series, "req_rate", warmup=1.0)
            self.results[key] = {"req_per_s": round(reqs, 1),
                                 "msg_per_s": round(reqs * shape.batch, 1),
                                 "cpu_seconds": out.cpu}
        return self.results[key]

    def http_pop(self, consumers: int = 16, batch: int = 100) -> dict[str, Any]:
        key = f"L-HTTP pop+ack consumers={consumers}"
        if key not in self.results:
            shape = Shape(queue="null", duration=0, connections=0, groups=("g",),
                          consumers_per_group=consumers, pop_batch=batch, drain_seconds=0,
                          consumer_grace=self.seconds)
            with launch.Server("loadtest.null_app:app", workers=self.workers) as srv:
                out = run_cell(srv.url, shape, {"l-http": srv.proc.pid if srv.proc else None},
                               key)
            msgs = steady(out.series, "deliver_rate", warmup=1.0)
            self.results[key] = {"pop_req_per_s": round(msgs / batch, 1),
                                 "msg_per_s": round(msgs, 1), "cpu_seconds": out.cpu}
        return self.results[key]


def _uv(coro: Any) -> Any:
    import uvloop

    return uvloop.run(coro)
