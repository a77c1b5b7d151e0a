"""`python -m loadtest faults`: the long fault run, figures table and JSON."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from loadtest.faults.base import RESULTS, SINGLE_BROKER_FAULTS, RunConfig
from loadtest.faults.citus import CITUS_FAULTS
from loadtest.faults.ha import HA_FAULTS
from loadtest.faults.report import publish, table
from loadtest.faults.run import TWO_BROKER_FAULTS, run


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("faults", help="the ledger under faults (docs/architecture/reliability.md)")
    p.add_argument("--database", choices=("embedded", "external", "two-brokers", "ha", "citus"),
                   default="embedded",
                   help="embedded: serve's own PostgreSQL; external: one the harness runs; "
                        "two-brokers: two serve instances over one external PostgreSQL; "
                        "ha: one serve on a Patroni pair (pip install -e '.[ha]'); "
                        "citus: one serve on a Citus cluster of two workers (QUEEN_CITUS_BIN)")
    p.add_argument("--duration", type=float, default=120.0,
                   help="seconds of fault schedule (repeated until then; at least one pass)")
    p.add_argument("--faults", nargs="*", help="schedule (default: every fault of the mode)")
    p.add_argument("--producers", type=int, default=3)
    p.add_argument("--consumers", type=int, default=3, help="per group (two groups)")
    p.add_argument("--rate", type=float, default=12.0, help="pushes/s per producer")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--lease-seconds", type=int, default=3)
    p.add_argument("--gap", type=float, default=4.0, help="seconds between faults")
    p.add_argument("--fast-disk", action="store_true",
                   help="fsync off (only the server process is ever killed); default durable")
    p.add_argument("--no-dlq", action="store_true", help="skip the DLQ variant")
    p.add_argument("--auth", action="store_true",
                   help="JWT auth on (HS256); producers, consumers and the driver send tokens")
    p.add_argument("--freeze-seconds", type=float, nargs="+", metavar="S",
                   help="--database ha: the lengths of the ha_freeze faults, in turn; without "
                        "--faults, one ha_freeze per length (default length: TTL + 10 s)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, default=RESULTS)


def main(args: argparse.Namespace) -> int:
    two = args.database == "two-brokers"
    freezes = tuple(args.freeze_seconds or ())
    if freezes and args.database != "ha":
        raise SystemExit("--freeze-seconds applies to --database ha")
    faults = tuple(args.faults) if args.faults else (
        TWO_BROKER_FAULTS if two else ("ha_freeze",) * len(freezes) if freezes
        else HA_FAULTS if args.database == "ha" else CITUS_FAULTS if args.database == "citus"
        else SINGLE_BROKER_FAULTS)
    cfg = RunConfig(database="external" if two else args.database, brokers=2 if two else 1,
                    faults=faults, duration=args.duration, producers=args.producers,
                    consumers=args.consumers, rate=args.rate, workers=args.workers,
                    lease_seconds=args.lease_seconds, gap=args.gap, fast_disk=args.fast_disk,
                    auth=args.auth, dlq=not args.no_dlq, seed=args.seed, out_dir=args.out,
                    freeze_seconds=freezes)
    result = asyncio.run(run(cfg))
    publish(table(result), result["json_path"])
    return 0 if result["passed"] else 1
