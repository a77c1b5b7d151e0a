"""The operation log: one JSON object per line, one file per process.

Every process of a run appends to its own file and flushes each line, so a process killed
with SIGKILL loses at most the line it was writing (the reader skips a torn last line).
Times are `time.time()` seconds: the database's `now()` reads the same clock on this
machine, which lets the checker compare client timings with lease lengths.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: TextIO = open(path, "a", buffering=1)  # noqa: SIM115 - closed in close()

    def write(self, kind: str, **fields: Any) -> None:
        fields["k"] = kind
        self._file.write(json.dumps(fields, separators=(",", ":")) + "\n")

    def close(self) -> None:
        self._file.close()


def now() -> float:
    return time.time()


def read_all(directory: Path) -> Iterator[dict[str, Any]]:
    """Every record of every journal in the run directory (torn lines skipped)."""
    for path in sorted(directory.glob("*.jsonl")):
        source = path.stem
        with open(path) as f:
            for line in f:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # the last line of a killed process
                record["src"] = source
                yield record
