"""What the lag statements cost on a wide queue: `python -m loadtest probe lag_cost`.

Lag counts every partition a group reads, cursor or not (schema/functions/45_group_positions.sql).
This builds one queue of `--partitions` partitions holding `--segments` segments of five
messages each, and three groups on it: `full` has a cursor on every partition, `half` on
every second one (mode all), `sparse` on every tenth (mode `--sparse-mode`; `timestamp`
with an instant in the middle of the history is the costly case: each partition it has not
read needs the binary search of queen.offset_before). Then it times, median of `--rounds`, the
statements behind the consumer-group routes (all groups, one group, the lagging filter), the
Prometheus pop-lag gauge and one analytics sampling pass (rolled back). With `--baseline
DIR` (a checkout of another revision, e.g. `git worktree add /tmp/main main`) the same
statements of that revision run on the same database, for a ratio measured in one run.
Everything talks to an embedded PostgreSQL of its own; nothing else is touched.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import time
from pathlib import Path
from typing import Any

import asyncpg

from loadtest import launch
from loadtest.probes.rounds import FAST_DATABASE, Rounds, arguments, in_turn

_FILES = ("admin", "stats")
_CASES: tuple[tuple[str, str, tuple[Any, ...]], ...] = (
    ("groups list / lagging: every group", "admin_group_cursors", (None, None)),
    ("group detail / `lag -g`: one group", "admin_group_cursors", ("sparse", None)),
    ("Prometheus pop-lag gauge", "stats_queue_gauges", ()),
)


def _statements(root: Path) -> dict[str, str]:
    from core.storage.statements import parse

    found: dict[str, str] = {}
    for name in _FILES:  # schema/queries/NAME.sql, or schema/queries_NAME.sql before it
        path = root / "schema" / "queries" / f"{name}.sql"
        if not path.exists():
            path = root / "schema" / f"queries_{name}.sql"
        found.update(parse(path.read_text()))
    return found


def _populate_sql(partitions: int, segments: int, sparse_mode: str) -> str:
    return f"""
        INSERT INTO queen.queues (name) VALUES ('wide');
        INSERT INTO queen.log_partitions (queue_id, name, last_offset, log_start,
                                          last_write_at, created_at)
        SELECT q.id, 'p' || i, {segments} * 5 - 1, 0,
               now() - interval '1 hour' + make_interval(secs => {segments} * 60),
               now() - interval '2 hours'
          FROM generate_series(1, {partitions}) i, queen.queues q WHERE q.name = 'wide';
        INSERT INTO queen.log_segments (partition_id, base_offset, last_offset, message_count,
                                        created_at, blob)
        SELECT p.id, s * 5, s * 5 + 4, 5,
               now() - interval '1 hour' + make_interval(secs => (s + 1) * 60), ''
          FROM queen.log_partitions p, generate_series(0, {segments} - 1) s;
        INSERT INTO queen.consumer_subscriptions (queue_id, consumer_group, mode,
                                                  subscription_from)
        SELECT q.id, g.name, g.mode, now() - g.since
          FROM queen.queues q,
               (VALUES ('full', 'all', interval '2 hours'), ('half', 'all', interval '2 hours'),
                       ('sparse', '{sparse_mode}',
                        interval '1 hour' - make_interval(secs => {segments} * 30)))
               AS g(name, mode, since);
        INSERT INTO queen.log_consumers (partition_id, consumer_group, committed)
        SELECT p.id, g.name, g.committed
          FROM queen.log_partitions p,
               (VALUES ('full', 1, {segments} * 5 - 3), ('half', 2, {segments} * 2),
                       ('sparse', 10, {segments} * 3)) AS g(name, every, committed)
         WHERE p.id % g.every = 0;
        ANALYZE;"""


def _padded(sql: str, params: tuple[Any, ...]) -> tuple[Any, ...]:
    """The parameters, with null for any the revision's statement takes beyond them (a
    filter another revision does not have)."""
    wanted = max((int(n) for n in re.findall(r"\$(\d+)", sql)), default=0)
    return params + (None,) * (wanted - len(params))


async def _once_ms(conn: asyncpg.Connection, sql: str, args: tuple[Any, ...]
                   ) -> tuple[float, int]:
    start = time.perf_counter()
    rows = len(await conn.fetch(sql, *args))
    return (time.perf_counter() - start) * 1000, rows


async def _sample_ms(conn: asyncpg.Connection, sql: str) -> float:
    """One analytics sampling pass, rolled back (a revision's statement that takes a
    heartbeat horizon gets null: no parked pops, as in this probe's database)."""
    tx = conn.transaction()
    await tx.start()
    start = time.perf_counter()
    await conn.execute(sql, *_padded(sql, ()))
    elapsed = (time.perf_counter() - start) * 1000
    await tx.rollback()
    return elapsed


async def _measure(url: str, args: argparse.Namespace, rounds: Rounds) -> None:
    revisions = {"this": _statements(launch.ROOT)}
    if args.baseline is not None:
        revisions["baseline"] = _statements(args.baseline)
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(_populate_sql(args.partitions, args.segments, args.sparse_mode))
        rounds.detail("shape", f"{args.partitions} partitions x {args.segments} segments; "
                      f"groups: full (a cursor on each), half (on 1/2), sparse "
                      f"({args.sparse_mode}, on 1/10)")
        for r in range(args.rounds):
            for title, name, params in _CASES:
                for label in in_turn(list(revisions), r):
                    sql = revisions[label][name]
                    ms, rows = await _once_ms(conn, sql, _padded(sql, params))
                    rounds.add(f"{title} {label} ms", ms)
                    rounds.detail(f"{title} {label} rows", rows)
            for label in in_turn(list(revisions), r):
                rounds.add(f"analytics sampling pass {label} ms",
                           await _sample_ms(conn, revisions[label]["stats_sample"]))
            rounds.end_round()
    finally:
        await conn.close()
    if args.baseline is not None:
        for title in [c[0] for c in _CASES] + ["analytics sampling pass"]:
            rounds.ratio(f"{title}: this / baseline", f"{title} this ms",
                         f"{title} baseline ms")


def main(argv: list[str] | None = None) -> int:
    parser = arguments("lag_cost", __doc__ or "", rounds=5, connections=None,
                       fast_database=False)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--segments", type=int, default=20, help="per partition")
    parser.add_argument("--sparse-mode", choices=("all", "new", "timestamp"), default="all")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="a checkout of another revision whose statements to time too")
    args = parser.parse_args(argv)
    rounds = Rounds("lag_cost", args)
    with launch.Postgres(FAST_DATABASE) as pg:
        url = str(launch.run_sync(launch.fresh_database(pg.dsn)))
        asyncio.run(_measure(url, args, rounds))
    return rounds.finish()


if __name__ == "__main__":
    raise SystemExit(main())
