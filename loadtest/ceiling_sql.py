"""L-SQL, the storage ceiling: the broker's storage work from a bare asyncpg + uvloop driver.

No HTTP, no coalescer, no wake-ups: each connection loops on exactly the statements the
broker runs, through the same typed calls (`core.storage`): `queen.append` with segments of
N frames packed by `core.segments.pack` (the dedup index work included), optionally
fusing 4 or 8 partitions into one statement as the coalescer does; then a pop loop
(`queen.pop_ready`: claim a span of one partition under a lease, read its segments,
decompress, slice) and an ack loop (`queen.ack` of every popped message, as the official client and the
load tool's consumer do). Whatever the broker loses against these figures is lost above the
database.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from dataclasses import dataclass

import asyncpg

from core import options, segments
from core.storage import reads, writes
from loadtest.corpus import build_corpus, payload, transaction_id


@dataclass(frozen=True, slots=True)
class SqlFigure:
    name: str
    messages: int
    transactions: int
    seconds: float

    @property
    def msg_per_s(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, float | str | int]:
        return {"name": self.name, "messages": self.messages, "transactions": self.transactions,
                "seconds": round(self.seconds, 2), "msg_per_s": round(self.msg_per_s, 1)}


async def push_loop(dsn: str, *, frames: int, fused: int = 1, connections: int = 32,
                    partitions: int = 100, seconds: float = 5.0, seed: int = 42,
                    queue: str | None = None) -> SqlFigure:
    """Append segments of `frames` messages, `fused` partitions per statement."""
    queue = queue or f"lsql-{frames}x{fused}-{uuid.uuid4().hex[:6]}"
    corpus = build_corpus(seed=seed)
    names = [f"p{i}" for i in range(partitions)]
    namespace, task = options.derive_namespace_task(queue)
    pool = await asyncpg.create_pool(dsn, min_size=connections, max_size=connections)
    assert pool is not None
    counts = [0, 0]
    async with pool.acquire() as conn:  # the ids, as a broker learns them once
        ordered = sorted(names)
        rows = await writes.partition_ids(
            conn, tenants=[""] * len(ordered),  # type: ignore[arg-type]
            queues=[queue] * len(ordered),
            partitions=ordered, namespaces=[namespace] * len(ordered),
            tasks=[task] * len(ordered), default_options=options.DEFAULTS_JSON)
    ids = {name: row.partition_id for name, row in zip(ordered, rows)}
    deadline = time.monotonic() + seconds

    async def worker(w: int) -> None:
        rng = random.Random(seed + w)
        seq = 0
        producer = 10_000 + w
        async with pool.acquire() as conn:
            while time.monotonic() < deadline:
                targets = []
                for name in sorted(rng.sample(names, fused)):  # one lock order: no deadlocks
                    now = time.time()
                    txids = [transaction_id(producer, seq + k) for k in range(frames)]
                    blob = segments.pack([
                        segments.Frame(uuid.uuid4(), t, payload(corpus, producer, seq + k, now))
                        for k, t in enumerate(txids)])
                    targets.append(writes.AppendTarget(
                        queue, name, namespace, task, [writes.AppendSegment(blob, txids)],
                        repeats=False, partition_id=ids[name]))
                    seq += frames
                await writes.append(conn, route=None,  # type: ignore[arg-type]
                                    targets=targets, default_options=options.DEFAULTS_JSON)
                counts[0] += frames * fused
                counts[1] += 1

    start = time.monotonic()
    await asyncio.gather(*(worker(w) for w in range(connections)))
    elapsed = time.monotonic() - start
    await pool.close()
    return SqlFigure(f"push N={frames} fused={fused}", counts[0], counts[1], elapsed)


async def pop_ack_loop(dsn: str, *, queue: str, group: str = "lsql", batch: int = 100,
                       connections: int = 16,
                       seconds: float = 5.0) -> tuple[SqlFigure, SqlFigure]:
    """Drain what a push loop left in `queue`: pop (claim + read + decompress `batch`), then
    ack every popped message."""
    pool = await asyncpg.create_pool(dsn, min_size=connections, max_size=connections)
    assert pool is not None
    pop = [0, 0, 0.0]
    ack = [0, 0, 0.0]
    async with pool.acquire() as conn:
        partition_ids = await reads.queue_partition_ids(
            conn, queue=queue, tenant="")  # type: ignore[arg-type]  # a pool proxy behaves as a Connection
    if not partition_ids:
        await pool.close()
        raise RuntimeError(f"queue {queue!r} has no partitions to drain")
    deadline = time.monotonic() + seconds

    async def worker() -> None:
        async with pool.acquire() as conn:
            while time.monotonic() < deadline:
                lease = str(uuid.uuid4())
                t0 = time.monotonic()
                # The broker's claim by key (queen.pop_ready) of a few partitions, as its
                # ready set hands them over; the ceiling has no ready set, so any few.
                rows = await reads.pop_ready(
                    conn,  # type: ignore[arg-type]  # a pool proxy behaves as a Connection
                    route=None, tenant="", queue=queue, namespace=None, task=None,
                    partition=None, group=group,
                    named=True, seed_mode="all", seed_instant=None, store_seed=True,
                    batch=batch, partitions=1, auto_ack=False, lease_seconds=0,
                    lease_fallback=options.POP_LEASE_FALLBACK_SECONDS, lease_id=lease,
                    candidates=random.sample(partition_ids, min(4, len(partition_ids))),
                    max_bytes=options.POP_MAX_BYTES)
                pids: list[int] = []
                txids: list[str] = []
                for r in rows:
                    if r.verdict != "took" or r.blob is None:
                        continue
                    assert r.base_offset is not None and r.partition_id is not None
                    assert r.span_start is not None and r.span_end is not None
                    for k, frame in enumerate(segments.unpack(r.blob)):
                        if r.span_start <= r.base_offset + k <= r.span_end:
                            pids.append(r.partition_id)
                            txids.append(frame.transaction_id)
                if not txids:
                    return
                t1 = time.monotonic()
                # As the broker sends them (core/engine/ack.py): no error column.
                items = reads.AckInputs([group] * len(txids), pids, txids,
                                        ["completed"] * len(txids), [lease] * len(txids),
                                        None, [""] * len(txids))
                await reads.ack(conn, route=None, items=items,  # type: ignore[arg-type]
                                scan_missing=True)
                t2 = time.monotonic()
                pop[0] += len(txids)
                pop[1] += 1
                pop[2] += t1 - t0
                ack[0] += len(txids)
                ack[1] += 1
                ack[2] += t2 - t1

    start = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(connections)))
    elapsed = time.monotonic() - start
    await pool.close()
    # Each loop's own rate: the messages it moved over the wall time its statements took,
    # spread over the connections that ran them concurrently.
    share = elapsed / max(1e-9, pop[2] + ack[2])
    return (SqlFigure(f"pop batch={batch}", int(pop[0]), int(pop[1]), pop[2] * share),
            SqlFigure("ack (every popped message)", int(ack[0]), int(ack[1]), ack[2] * share))
