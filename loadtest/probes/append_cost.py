"""What PostgreSQL spends on a flush's append: `python -m loadtest probe append_cost
[--root ../before]`.

Most of PostgreSQL's share of a pushed message is one call of `queen.append_partitions`
(schema/functions/20_append.sql): the segment row, the transactionId index rows, the
duplicate check, the partition's head. Measured through the broker (`probe path_cost`, the
cost cell) a change to that function hides in the spread of everything around it; this probe
calls the function alone.

One durable embedded PostgreSQL, one database with this checkout's schema. `--partitions`
partitions are created by a first call each; then every round calls the function `--calls`
times, each call one segment of `--batch` corpus messages with fresh transactionIds (the
common case: no duplicates) to the next partition in turn, all arguments built beforehand.
The figure is the CPU of the backend that ran the calls (its user + system time, so the
fsync of each commit is counted, the client's work is not), µs per message.

With `--root`, that checkout's `queen.append_partitions` is installed beside this one's as
`queen.append_partitions_other` (same tables, same database), and the rounds alternate the
two: `this / other` is the same-run ratio. The two must share their signature.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import uuid
from pathlib import Path
from typing import Any

import asyncpg

from core import options, segments
from loadtest import launch
from loadtest.corpus import build_corpus, payload
from loadtest.probes.rounds import FAST_DATABASE, Rounds, arguments, cpu_seconds, in_turn

_FUNCTION = re.compile(r"CREATE OR REPLACE FUNCTION queen\.append_partitions\(.*?\nEND \$\$;",
                       re.DOTALL)
_CALL = """SELECT partition_id FROM queen.{name}(
    NULL, $1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::jsonb,
    $8::integer[], $9::integer[], $10::bytea[], $11::text[], $12::boolean[], $13::boolean[])"""


def append_function(root: Path, name: str) -> str:
    """`root`'s definition of queen.append_partitions, renamed `queen.<name>`."""
    source = (root / "schema" / "functions" / "20_append.sql").read_text()
    found = _FUNCTION.search(source)
    if found is None:
        raise SystemExit(f"no queen.append_partitions in {root}/schema/functions/20_append.sql")
    return found.group(0).replace("FUNCTION queen.append_partitions(",
                                  f"FUNCTION queen.{name}(", 1)


class _Calls:
    """Arguments of append calls: one segment of `batch` fresh messages each."""

    def __init__(self, batch: int) -> None:
        self.batch = batch
        self.defaults = options.DEFAULTS_JSON
        self.corpus = build_corpus()
        self.partition_ids: dict[int, int] = {}
        self.made = 0

    def arguments(self, partition: int) -> tuple[Any, ...]:
        txids = [str(uuid.uuid4()) for _ in range(self.batch)]
        frames = [segments.Frame(uuid.uuid4(), txid,
                                 payload(self.corpus, partition, self.made + k, 1.0))
                  for k, txid in enumerate(txids)]
        self.made += self.batch
        return ([""], [self.partition_ids.get(partition, 0)], ["append_cost"],
                [f"p{partition}"], [""], [""], self.defaults, [1], [self.batch],
                [segments.pack(frames)], txids, [False], [False])


async def _measure(url: str, args: argparse.Namespace) -> Rounds:
    rounds = Rounds("append_cost", args)
    variants = {"this": "append_partitions"}
    conn = await asyncpg.connect(url)
    try:
        if args.root is not None:
            await conn.execute(append_function(args.root, "append_partitions_other"))
            variants["other"] = "append_partitions_other"
        backend = await conn.fetchval("SELECT pg_backend_pid()")
        statements = {label: await conn.prepare(_CALL.format(name=name))
                      for label, name in variants.items()}
        calls = _Calls(args.batch)
        for partition in range(args.partitions):  # creates them
            [row] = await statements["this"].fetch(*calls.arguments(partition))
            calls.partition_ids[partition] = row["partition_id"]
        turn = 0
        for index in range(args.rounds):
            for label in in_turn(list(variants), index):
                prepared = [calls.arguments((turn + k) % args.partitions)
                            for k in range(args.calls)]
                turn += args.calls
                before = cpu_seconds(backend)
                for call in prepared:
                    await statements[label].fetch(*call)
                spent = cpu_seconds(backend) - before
                rounds.add(f"{label} append µs/msg", spent / (args.calls * args.batch) * 1e6)
            rounds.end_round()
    finally:
        await conn.close()
    if args.root is not None:
        rounds.against_checkout(args.root, ["append"])
    rounds.detail("messages per round and variant", args.calls * args.batch)
    return rounds


def main(argv: list[str] | None = None) -> int:
    parser = arguments("append_cost", __doc__ or "", rounds=6, connections=None)
    parser.add_argument("--root", type=Path, default=None,
                        help="another checkout whose queen.append_partitions runs beside this one's")
    parser.add_argument("--calls", type=int, default=800, help="calls per round and variant")
    parser.add_argument("--batch", type=int, default=100, help="messages per call")
    parser.add_argument("--partitions", type=int, default=200)
    args = parser.parse_args(argv)

    async def run() -> Rounds:
        with launch.Postgres(FAST_DATABASE if args.fast_database else None) as pg:
            return await _measure(await launch.fresh_database(pg.dsn), args)

    return asyncio.run(run()).finish()
