"""Run schemathesis against a running broker: the suite's short run and the long one.

    python -m tests.fuzz.run --url http://127.0.0.1:6632 --max-time 600 [--seed N]

Point it at a scratch broker: the fuzzer creates, seeks and deletes queues and groups under
names it makes up. Prints schemathesis' report, then the tally (requests, answers per status
class and code) and exits with schemathesis' status.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def fuzz_command(url: str, tally: Path, *, max_time: int | None = None,
                 seed: int | None = None, max_examples: int = 10, token: str | None = None,
                 extra: tuple[str, ...] = ()) -> tuple[list[str], dict[str, str]]:
    """The schemathesis command line and environment; with `token`, every request (not the
    schema download: /openapi.json needs none) carries it as a bearer token.

    Without `max_time` the run is bounded by `max_examples` alone (each phase runs once and
    ends): what it does does not depend on how fast the machine is. With it, fuzzing and
    stateful testing repeat until the time is spent (the long run of the README).
    Hypothesis' `too_slow` health check is off: it judges the machine's speed, not the API."""
    command = [sys.executable, "-m", "schemathesis.cli", "--config-file",
               str(HERE / "schemathesis.toml"), "run", f"{url}/openapi.json",
               "--checks", "all", "--exclude-checks", "positive_data_acceptance",
               "--mode", "all", "--max-examples", str(max_examples),
               "--suppress-health-check", "too_slow", "--request-timeout", "15",
               "--output-truncate", "true", "--no-color"]
    if max_time is not None:
        command += ["--max-time", str(max_time)]
    if seed is not None:
        command += ["--seed", str(seed)]
    if token is not None:
        command += ["--header", f"Authorization: Bearer {token}"]
    command += extra
    # Run it from a scratch directory (schemathesis keeps a cache in its working directory);
    # the hooks module is found through PYTHONPATH.
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.fuzz.hooks",
           "QUEEN_FUZZ_TALLY": str(tally), "PYTHONPATH": path}
    return command, env


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="base URL of a scratch broker")
    parser.add_argument("--max-time", type=int, default=600, help="seconds of fuzzing")
    parser.add_argument("--max-examples", type=int, default=50,
                        help="test cases per operation and round")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--token", help="a bearer token for a broker with auth on (an admin "
                                        "token fuzzes every route)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        tally = Path(scratch) / "tally.json"
        command, env = fuzz_command(args.url.rstrip("/"), tally, max_time=args.max_time,
                                    seed=args.seed, max_examples=args.max_examples,
                                    token=args.token)
        print("$", " ".join(c if not c.startswith("Authorization") else "Authorization: ..."
                            for c in command), flush=True)
        code = subprocess.run(command, env=env, cwd=scratch, check=False).returncode
        print("tally:", json.dumps(json.loads(tally.read_text()), sort_keys=True))
    return code


if __name__ == "__main__":
    sys.exit(main())
