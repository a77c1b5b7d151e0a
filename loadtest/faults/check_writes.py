"""Checks of the write path: what producers were told against what is stored.

Figures (defined in `checker.py`): writes_lost, dedup_stored_duplicates,
dedup_first_write_lost, cross_partition_dedup, dedup_wrong_answers, producer_order,
corrupted_payloads (stored side).
"""

from __future__ import annotations

from collections import defaultdict

from loadtest.faults import payloads
from loadtest.faults.snapshot import Stored
from loadtest.faults.tally import Tally


class WriteChecks(Tally):
    def check_writes(self) -> None:
        stored_by_key: dict[tuple[str, str], list[Stored]] = defaultdict(list)
        for s in (s for q in self.x.snapshot.stored.values() for s in q):
            stored_by_key[(s.partition, s.transaction_id)].append(s)
            if not payloads.intact(s.payload):
                self._count("corrupted_payloads", ["stored", s.partition, s.offset])
        for key, found in stored_by_key.items():
            for extra in found[1:]:
                self._count("dedup_stored_duplicates", [key, extra.offset])
        acknowledged: dict[tuple[str, str], tuple[str, float]] = {}
        first_write_order: dict[tuple[str, str], list[tuple[int, tuple[str, str]]]] = \
            defaultdict(list)
        resent_payload: set[tuple[str, str]] = set()
        deliberate: list[tuple[tuple[str, str], str, str | None]] = []
        pushes = sorted((r for r in self.records if r["k"] == "push"),
                        key=lambda r: (r["src"], r["t0"]))
        seen_first: set[tuple[str, str]] = set()
        for seq, r in enumerate(pushes):
            answers = r.get("ans")
            for i, (partition, txid, _variant, kind) in enumerate(r["items"]):
                key = (partition, txid)
                if kind in ("new", "dup_other") and key not in seen_first:
                    seen_first.add(key)
                    first_write_order[(r["src"], partition)].append((seq * 1000 + i, key))
                if kind == "dup_payload":
                    resent_payload.add(key)
                if answers is None:
                    continue
                status, mid = answers[i]
                if status in ("queued", "duplicate") and kind in ("new", "dup_other"):
                    acknowledged.setdefault(key, (mid, r["t1"]))
                if kind == "dup_other" and r.get("att") == 0 and status == "duplicate":
                    self._count("cross_partition_dedup", [partition, txid])
                if kind in ("dup_same", "dup_payload") and status in ("queued", "duplicate"):
                    deliberate.append((key, status, mid))
        for key, (mid, t1) in acknowledged.items():
            if not any(s.message_id == mid for s in stored_by_key.get(key, [])):
                self._count("writes_lost", [key, mid])
                self.lost_at.append(t1)
        for key in resent_payload:
            found = stored_by_key.get(key, [])
            first_id = acknowledged.get(key, ("",))[0]
            if found and (found[0].payload.get("v") != 0 or found[0].message_id != first_id):
                self._count("dedup_first_write_lost", key)
        for key, status, mid in deliberate:
            stored_ids = {s.message_id for s in stored_by_key.get(key, [])}
            if status == "queued" or mid not in stored_ids:
                self._count("dedup_wrong_answers", [key, status, mid])
        for (producer, partition), keys in first_write_order.items():
            last = -1
            for _, key in sorted(keys):
                stored_copies = stored_by_key.get(key)
                if not stored_copies or key not in acknowledged:
                    continue
                if stored_copies[0].offset <= last:
                    self._count("producer_order", [producer, partition, key])
                last = stored_copies[0].offset

