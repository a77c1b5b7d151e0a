"""WAL and storage per message for one push shape: `python -m loadtest probe walprobe`.

A durable embedded PostgreSQL, a fresh database, the broker's web tier (from this checkout,
or from another one with `--root`, for a before/after comparison on the same shape), one
warm-up push per partition (creates queue and partitions), then `--messages` messages in
pushes of `--batch` spread over `--partitions` from a few connections. Reported: WAL bytes
per message (pg_current_wal_lsn before and after), table bytes per message (segments,
transactionId index, each with its indexes and TOAST), and the WAL records by kind
(pg_waldump --stats).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from loadtest import launch
from loadtest.corpus import build_corpus, payload
from loadtest.probes.rounds import Rounds, arguments

_TABLES = ("queen.log_segments", "queen.log_txn_index")


async def _push_all(url: str, queue: str, *, messages: int, batch: int, partitions: int,
                    connections: int, uuid_ids: bool) -> None:
    corpus = build_corpus()
    count = messages // batch
    requests = asyncio.Queue[int]()
    for n in range(count):
        requests.put_nowait(n)

    async def worker() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            while not requests.empty():
                n = requests.get_nowait()
                # One partition per push, as the load tool's producers do (W1, W4).
                items = [{"queue": queue, "partition": f"p{n % partitions}",
                          "payload": _json(payload(corpus, 1, n * batch + k, time.time())),
                          "transactionId": str(uuid.uuid4()) if uuid_ids
                          else f"p1-{n * batch + k}"} for k in range(batch)]
                r = await http.post("/api/v1/push", json={"items": items})
                assert r.status_code == 201, r.text
                assert all(a["status"] == "queued" for a in r.json()), r.text

    await asyncio.gather(*(worker() for _ in range(connections)))


def _json(raw: bytes) -> Any:
    return json.loads(raw)


async def _lsn(conn: asyncpg.Connection) -> str:
    return str(await conn.fetchval("SELECT pg_current_wal_lsn()::text"))


async def _probe(url: str, broker_url: str, args: argparse.Namespace) -> dict[str, Any]:
    queue = f"walprobe-{uuid.uuid4().hex[:6]}"
    # Warm-up: every partition exists and has its first pages.
    await _push_all(broker_url, queue, messages=args.partitions, batch=1,
                    partitions=args.partitions, connections=4, uuid_ids=args.uuid_ids)
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("CHECKPOINT")  # WAL below comes from the pushes alone ...
        await _push_all(broker_url, queue, messages=args.partitions * 2, batch=1,
                        partitions=args.partitions, connections=4, uuid_ids=args.uuid_ids)
        start = await _lsn(conn)  # ... after each touched page's first full-page image
        await _push_all(broker_url, queue, messages=args.messages, batch=args.batch,
                        partitions=args.partitions, connections=args.connections,
                        uuid_ids=args.uuid_ids)
        end = await _lsn(conn)
        wal = int(await conn.fetchval("SELECT pg_wal_lsn_diff($1::text::pg_lsn, $2::text::pg_lsn)::bigint",
                                      end, start))
        total = args.messages + args.partitions * 3
        sizes = {t: int(await conn.fetchval("SELECT pg_total_relation_size($1::regclass)", t))
                 for t in _TABLES}
        index_rows = int(await conn.fetchval("SELECT count(*) FROM queen.log_txn_index"))
        data_dir = str(await conn.fetchval("SHOW data_directory"))
    finally:
        await conn.close()
    return {"queue": queue, "messages": args.messages, "batch": args.batch,
            "partitions": args.partitions, "uuid_transaction_ids": args.uuid_ids,
            "wal_bytes": wal, "wal_bytes_per_message": round(wal / args.messages, 1),
            "table_bytes_per_message": {t: round(b / total, 1) for t, b in sizes.items()},
            "index_rows": index_rows, "lsn": [start, end],
            "wal_records": _waldump(data_dir, start, end)}


def _waldump(data_dir: str, start: str, end: str) -> list[dict[str, Any]]:
    """WAL bytes by record kind between two LSNs (the largest first)."""
    from core.embedded import BIN_DIR

    done = subprocess.run(
        [str(BIN_DIR / "pg_waldump"), "--stats=record", "-p",
         f"{data_dir}/pg_wal", "-s", start, "-e", end],
        capture_output=True, text=True, check=False)
    rows: list[dict[str, Any]] = []
    for line in done.stdout.splitlines():
        # "Heap/INSERT   1234 ( 12.34)   56789 ( 12.34)   0 (  0.00)   56789 ( 12.34)":
        # type, count, record bytes, full-page-image bytes, combined bytes
        parts = re.sub(r"\([^)]*\)", " ", line).split()
        if len(parts) == 5 and "/" in parts[0] and all(x.isdigit() for x in parts[1:]):
            rows.append({"record": parts[0], "count": int(parts[1]),
                         "bytes": int(parts[4]), "fpi_bytes": int(parts[3])})
    rows.sort(key=lambda r: -r["bytes"])
    return rows[:12]


def main(argv: list[str] | None = None) -> int:
    p = arguments("walprobe", __doc__ or "", rounds=1, connections=8, fast_database=False)
    p.add_argument("--root", type=Path, default=launch.ROOT,
                   help="the broker checkout to measure (default: this one)")
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--partitions", type=int, default=100)
    p.add_argument("--short-ids", dest="uuid_ids", action="store_false",
                   help="transactionIds like 'p1-123' instead of UUIDs (the official "
                        "client sends UUIDs)")
    args = p.parse_args(argv)
    rounds = Rounds("walprobe", args)
    for r in range(args.rounds):  # a fresh server and database each round
        with launch.Postgres() as pg:
            url = asyncio.run(launch.fresh_database(pg.dsn, migrate=False))
            with launch.broker(url, args.workers, root=args.root) as srv:
                result = asyncio.run(_probe(url, srv.url, args))
        rounds.add("WAL bytes per message", result["wal_bytes_per_message"])
        for table, size in result["table_bytes_per_message"].items():
            rounds.add(f"{table} bytes per message", size)
        rounds.detail(f"round {r + 1}", {**result, "root": str(args.root)})
        rounds.end_round()
    return rounds.finish()

if __name__ == "__main__":
    sys.exit(main())
