"""L-SQL, the storage ceiling: the broker's storage work from a bare asyncpg + uvloop driver.

No HTTP, no coalescer: each connection loops on exactly the statements the broker's write
path runs (`queen.append_segment` with N frames packed by `core.segments.pack`), optionally
fusing 4 or 8 partitions into one transaction; then a pop loop (claim a span of one
partition under a lease, read its segments, decompress, slice to 100) and an ack loop (one
cursor update). Whatever the broker loses against these figures is lost above the database.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from dataclasses import dataclass

import asyncpg

from core import segments
from loadtest.corpus import build_corpus, payload, transaction_id

_APPEND = ("SELECT base_offset FROM queen.append_segment($1, $2::text[], $3::uuid[], $4)")

# Claim one partition of the group that has data past its cursor and no live lease; lock the
# cursor row so concurrent claimers skip it; set the lease; read the overlapping segments.
_CLAIM = """
WITH pick AS (
    SELECT c.partition_id, c.committed, p.last_offset
      FROM queen.log_consumers c JOIN queen.log_partitions p ON p.id = c.partition_id
     WHERE c.consumer_group = $1 AND p.last_offset > c.committed
       AND (c.worker_id IS NULL OR c.lease_expires_at < now())
     LIMIT 1 FOR UPDATE OF c SKIP LOCKED),
leased AS (
    UPDATE queen.log_consumers x
       SET batch_end = least(pick.last_offset, pick.committed + $2), worker_id = $3,
           lease_expires_at = now() + interval '60 seconds'
      FROM pick
     WHERE x.partition_id = pick.partition_id AND x.consumer_group = $1
 RETURNING x.partition_id, pick.committed, x.batch_end)
SELECT l.partition_id, l.committed, l.batch_end, s.base_offset, s.blob
  FROM leased l JOIN queen.log_segments s
    ON s.partition_id = l.partition_id AND s.last_offset > l.committed
   AND s.base_offset <= l.batch_end
 ORDER BY s.base_offset
"""

# The ack: one cursor update that also releases the lease, guarded by the lease holder.
_ACK = """
UPDATE queen.log_consumers
   SET committed = $3, batch_end = NULL, worker_id = NULL, lease_expires_at = NULL,
       total_consumed = total_consumed + ($3 - committed), last_consumed_at = now()
 WHERE partition_id = $1 AND consumer_group = $2 AND worker_id = $4
"""


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


async def _partitions(conn: asyncpg.Connection, queue: str, count: int) -> list[int]:
    rows = []
    for i in range(count):
        rows.append(await conn.fetchval(
            "SELECT partition_id FROM queen.ensure_partition($1, $2, $1, '', '{}'::jsonb)",
            queue, f"p{i}"))
    return sorted(rows)


async def push_loop(dsn: str, *, frames: int, fused: int = 1, connections: int = 32,
                    partitions: int = 100, seconds: float = 5.0, seed: int = 42,
                    queue: str | None = None) -> SqlFigure:
    """Append segments of `frames` messages, `fused` partitions per transaction."""
    queue = queue or f"lsql-{frames}x{fused}-{uuid.uuid4().hex[:6]}"
    corpus = build_corpus(seed=seed)
    setup = await asyncpg.connect(dsn)
    try:
        pids = await _partitions(setup, queue, partitions)
    finally:
        await setup.close()
    pool = await asyncpg.create_pool(dsn, min_size=connections, max_size=connections)
    assert pool is not None
    counts = [0, 0]
    deadline = time.monotonic() + seconds

    async def worker(w: int) -> None:
        rng = random.Random(seed + w)
        seq = 0
        producer = 10_000 + w
        async with pool.acquire() as conn:
            while time.monotonic() < deadline:
                chosen = sorted(rng.sample(pids, fused))  # id order: no deadlocks
                rows = []
                for pid in chosen:
                    now = time.time()
                    txids = [transaction_id(producer, seq + k) for k in range(frames)]
                    mids = [uuid.uuid4() for _ in range(frames)]
                    blob = segments.pack([segments.Frame(m, t, payload(corpus, producer, seq + k, now))
                                          for k, (m, t) in enumerate(zip(mids, txids))])
                    rows.append((pid, txids, mids, blob))
                    seq += frames
                if fused == 1:
                    await conn.fetchval(_APPEND, *rows[0])
                else:
                    async with conn.transaction():
                        await conn.executemany(_APPEND, rows)
                counts[0] += frames * fused
                counts[1] += 1

    start = time.monotonic()
    await asyncio.gather(*(worker(w) for w in range(connections)))
    elapsed = time.monotonic() - start
    await pool.close()
    return SqlFigure(f"push N={frames} fused={fused}", counts[0], counts[1], elapsed)


async def pop_ack_loop(dsn: str, *, queue_prefix: str = "lsql-10x1", group: str = "lsql",
                       batch: int = 100, connections: int = 16,
                       seconds: float = 5.0) -> tuple[SqlFigure, SqlFigure]:
    """Drain what the push loops left: claim+read+decompress `batch`, then ack (one update)."""
    setup = await asyncpg.connect(dsn)
    try:
        await setup.execute(
            "INSERT INTO queen.log_consumers (partition_id, consumer_group)"
            " SELECT p.id, $1 FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id"
            " WHERE q.name LIKE $2 ON CONFLICT DO NOTHING", group, queue_prefix + "%")
    finally:
        await setup.close()
    pool = await asyncpg.create_pool(dsn, min_size=connections, max_size=connections)
    assert pool is not None
    pop = [0, 0, 0.0]
    ack = [0, 0, 0.0]
    deadline = time.monotonic() + seconds

    async def worker() -> None:
        async with pool.acquire() as conn:
            while time.monotonic() < deadline:
                lease = str(uuid.uuid4())
                t0 = time.monotonic()
                rows = await conn.fetch(_CLAIM, group, batch, lease)
                if not rows:
                    return
                lo, hi = rows[0]["committed"], rows[0]["batch_end"]
                got = 0
                for r in rows:
                    for i, _frame in enumerate(segments.unpack(r["blob"])):
                        if lo < r["base_offset"] + i <= hi:
                            got += 1
                t1 = time.monotonic()
                await conn.execute(_ACK, rows[0]["partition_id"], group, hi, lease)
                t2 = time.monotonic()
                pop[0] += got
                pop[1] += 1
                pop[2] += t1 - t0
                ack[0] += got
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
            SqlFigure("ack (one cursor update)", int(ack[0]), int(ack[1]), ack[2] * share))
