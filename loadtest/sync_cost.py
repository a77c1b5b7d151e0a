"""What the synchronous standby costs a push: L-SQL push throughput on a Patroni pair with
`synchronous_commit` on (the standby has flushed every commit) against `local` (the primary
alone), rounds alternating on the same pair and database.

    python -m loadtest.sync_cost [--rounds 4] [--seconds 5] [--frames 10]

Prints each round and the ratio of medians (on / local). Needs the `ha` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

from loadtest import launch
from loadtest.ceiling_sql import push_loop
from loadtest.faults.ha import PatroniPair


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.sync_cost")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--frames", type=int, default=10, help="messages per statement")
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="qsync-") as root:
        pair = PatroniPair(Path(root) / "ha", Path(root))
        pair.start()
        try:
            url = asyncio.run(launch.fresh_database(pair.dsn))
            figures: dict[str, list[float]] = {"on": [], "local": []}
            for r in range(args.rounds):
                for mode in (("on", "local") if r % 2 == 0 else ("local", "on")):
                    # Unknown DSN parameters are session settings for asyncpg.
                    fig = asyncio.run(push_loop(f"{url}&synchronous_commit={mode}",
                                                frames=args.frames, seconds=args.seconds,
                                                connections=args.connections))
                    figures[mode].append(fig.msg_per_s)
                    print(f"round {r} synchronous_commit={mode}: {fig.msg_per_s:,.0f} msg/s",
                          file=sys.stderr)
        finally:
            pair.stop()
    on, local = statistics.median(figures["on"]), statistics.median(figures["local"])
    print(f"L-SQL push N={args.frames}, {args.connections} connections, {args.rounds} rounds: "
          f"median on {on:,.0f} msg/s, local {local:,.0f} msg/s, on/local {on / local:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
