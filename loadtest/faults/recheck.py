"""Check a finished run again from its journals and snapshot (when working on the checker):
`python -m loadtest.faults.recheck loadtest/results/faults-<run>/`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from loadtest.faults import dlq
from loadtest.faults.checker import Inputs, check
from loadtest.faults.journal import read_all
from loadtest.faults.snapshot import Snapshot


def main() -> int:
    run_dir = Path(sys.argv[1])
    saved = json.loads((run_dir / "snapshot.json").read_text())
    config = saved["config"]
    figures, table, examples = check(Inputs(
        list(read_all(run_dir)), Snapshot.load(saved["snapshot"]), config["lease_seconds"],
        config["ledger_queue"], config["groups"], config["dlq_queue"],
        saved["dlq_route_totals"], dlq.kind_of))
    print(json.dumps({"figures": figures, "faults": table, "examples": examples}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
