"""What the synchronous standby costs a push: L-SQL push throughput on a Patroni pair with
`synchronous_commit` on (the standby has flushed every commit) against `local` (the primary
alone), rounds alternating on the same pair and database.

    python -m loadtest probe sync_cost [--rounds 4] [--seconds 5] [--frames 10]

Reports each round and the ratio on / local. Needs the `ha` extra.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from loadtest import launch
from loadtest.ceiling_sql import push_loop
from loadtest.faults.ha import PatroniPair
from loadtest.probes.rounds import Rounds, arguments, in_turn


def main(argv: list[str] | None = None) -> int:
    parser = arguments("sync_cost", __doc__ or "", seconds=5.0, rounds=4, connections=16,
                       fast_database=False)
    parser.add_argument("--frames", type=int, default=10, help="messages per statement")
    args = parser.parse_args(argv)
    rounds = Rounds("sync_cost", args)
    with tempfile.TemporaryDirectory(prefix="qsync-") as root:
        pair = PatroniPair(Path(root) / "ha", Path(root))
        pair.start()
        try:
            url = asyncio.run(launch.fresh_database(pair.dsn))
            for r in range(args.rounds):
                for mode in in_turn(("on", "local"), r):
                    # Unknown DSN parameters are session settings for asyncpg.
                    fig = asyncio.run(push_loop(f"{url}&synchronous_commit={mode}",
                                                frames=args.frames, seconds=args.seconds,
                                                connections=args.connections))
                    rounds.add(f"L-SQL push N={args.frames} msg/s synchronous_commit={mode}",
                               fig.msg_per_s)
                rounds.end_round()
        finally:
            pair.stop()
    rounds.ratio("synchronous_commit on / local", f"L-SQL push N={args.frames} msg/s "
                 "synchronous_commit=on", f"L-SQL push N={args.frames} msg/s "
                 "synchronous_commit=local")
    return rounds.finish()

if __name__ == "__main__":
    raise SystemExit(main())
