"""The state every check of the checker shares: inputs, figures, examples.

See `checker.py` for what the figures mean.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from loadtest.faults.snapshot import Snapshot, Stored


@dataclass(slots=True)
class Inputs:
    """Everything a check reads: the journals, the tables, and how the run was set up."""

    records: list[dict[str, Any]]
    snapshot: Snapshot
    lease_seconds: float
    ledger_queue: str
    groups: list[str]
    dlq_queue: str | None = None
    dlq_route_totals: dict[str, int] = field(default_factory=dict)  # group -> total
    dlq_kinds: Any = None  # callable txid -> kind, for the DLQ variant


class Tally:
    """The inputs indexed once (message id -> stored message) and the figures so far."""

    def __init__(self, inputs: Inputs) -> None:
        self.x = inputs
        self.records = inputs.records
        self.by_id: dict[str, Stored] = {}
        self.log_start: dict[str, int] = {}  # first stored offset per partition id
        for stored in inputs.snapshot.stored.values():
            for s in stored:
                self.by_id[s.message_id] = s
                self.log_start[s.partition_id] = min(
                    s.offset, self.log_start.get(s.partition_id, s.offset))
        self.lost_at: list[float] = []  # answer times of acknowledged writes found lost
        self.queues = list(dict.fromkeys(q for q in (inputs.ledger_queue, inputs.dlq_queue) if q))
        self.figures: dict[str, Any] = {}
        self.examples: dict[str, list[Any]] = defaultdict(list)

    def _count(self, figure: str, example: Any = None) -> None:
        self.figures[figure] = self.figures.get(figure, 0) + 1
        if example is not None and len(self.examples[figure]) < 5:
            self.examples[figure].append(example)

