"""Checks of the read path: deliveries and acks against leases, cursors and each other.

Figures (defined in `checker.py`): undelivered, pop_gaps, pops_past_cursor, lease_overlaps,
redelivered_after_ack, stale_ack_accepted, acked_twice, cursor_final_mismatch,
corrupted_payloads (delivered side), delivered_unknown_message.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from loadtest.faults.tally import Tally

_SIGNALS = ("failed", "retry", "dlq")


@dataclass(slots=True)
class _Delivered:
    group: str
    consumer: str
    lease: str
    t0: float
    t1: float
    pid: str
    offset: int



def _running_max(events: list[tuple[float, int]]) -> tuple[list[float], list[int]]:
    """Times in order and, for each, the highest offset seen up to then (for bisecting)."""
    times, highs, high = [], [], -1
    for t, offset in sorted(events):
        high = max(high, offset)
        times.append(t)
        highs.append(high)
    return times, highs


class ReadChecks(Tally):
    def _deliveries(self) -> list[_Delivered]:
        out: list[_Delivered] = []
        for r in self.records:
            if r["k"] != "pop" or not r.get("msgs"):
                continue
            per_partition: dict[str, list[int]] = defaultdict(list)
            for pid, mid, _txid, ok in r["msgs"]:
                if not ok:
                    self._count("corrupted_payloads", ["delivered", pid, mid])
                stored = self.by_id.get(mid)
                if stored is None:
                    self._count("delivered_unknown_message", [pid, mid])
                    continue
                per_partition[pid].append(stored.offset)
                out.append(_Delivered(r["g"], r["c"], r["lease"], r["t0"], r["t1"], pid,
                                     stored.offset))
            for pid, offsets in per_partition.items():
                if offsets != list(range(offsets[0], offsets[0] + len(offsets))):
                    self._count("pop_gaps", [r["c"], pid, offsets])
        return out

    def _ack_moves(self) -> tuple[dict[tuple[str, str], list[tuple[float, int]]],
                                  dict[tuple[str, str], list[tuple[float, int]]]]:
        """Per (group, partition): (answer time, offset the cursor was moved to) of accepted
        acks, and (send time, highest offset the ack could commit) of every ack sent."""
        moved: dict[tuple[str, str], list[tuple[float, int]]] = defaultdict(list)
        sent: dict[tuple[str, str], list[tuple[float, int]]] = defaultdict(list)
        committed_twice: dict[tuple[str, str, int], int] = defaultdict(int)
        for r in self.records:
            if r["k"] not in ("ack", "ack_send"):
                continue
            group = r["g"]
            per_partition: dict[str, list[tuple[int, str, list[Any] | None]]] = \
                defaultdict(list)
            answers = r.get("ans") if r["k"] == "ack" else None
            for i, (pid, _txid, mid, status) in enumerate(r["items"]):
                stored = self.by_id.get(mid)
                if stored is None:
                    continue
                per_partition[pid].append((stored.offset, status,
                                           answers[i] if answers else None))
            for pid, items in per_partition.items():
                if r["k"] == "ack_send":
                    reach = max((o for o, st, _ in items if st in ("completed", "dlq", "failed")),
                                default=None)
                    if reach is not None:
                        sent[(group, pid)].append((r["t0"], reach))
                    continue
                if answers is None:
                    continue
                ok = [(o, st, a) for o, st, a in items if a and a[0]]
                completed = [o for o, st, _ in ok if st == "completed"]
                signals = sorted(o for o, st, _ in ok if st in _SIGNALS)
                dlq_done = [o for o, st, a in ok if st in _SIGNALS and len(a) > 4 and a[4]]
                target = None
                if completed:
                    target = max(completed) if not signals else min(max(completed),
                                                                    signals[0] - 1)
                if dlq_done:
                    target = max(target if target is not None else -1, max(dlq_done))
                if target is not None:
                    moved[(group, pid)].append((r["t1"], target))
                if not signals:
                    for o, st, a in ok:
                        if st == "completed" and not a[1]:
                            committed_twice[(group, pid, o)] += 1
        for key, n in committed_twice.items():
            if n > 1:
                self._count("acked_twice", list(key))
        return moved, sent

    def check_reads(self) -> None:
        deliveries = self._deliveries()
        moved, sent = self._ack_moves()
        self._check_delivered_everything(deliveries)
        self._check_after_ack(deliveries, moved)
        self._check_past_cursor(sent)
        self._check_overlaps(deliveries)
        self._check_stale_acks()
        self._check_cursors(moved)

    def _check_delivered_everything(self, deliveries: list[_Delivered]) -> None:
        seen = {(d.group, d.pid, d.offset) for d in deliveries}
        for queue in self.queues:
            for s in self.x.snapshot.stored.get(queue, []):
                for group in self.x.groups:
                    if (group, s.partition_id, s.offset) not in seen:
                        self._count("undelivered", [queue, group, s.partition, s.offset])

    def _check_after_ack(self, deliveries: list[_Delivered],
                         moved: dict[tuple[str, str], list[tuple[float, int]]]) -> None:
        prefix = {key: _running_max(events) for key, events in moved.items()}
        for d in deliveries:
            found = prefix.get((d.group, d.pid))
            if not found:
                continue
            times, highs = found
            i = bisect.bisect_left(times, d.t0) - 1
            if i >= 0 and highs[i] >= d.offset:
                self._count("redelivered_after_ack", [d.group, d.pid, d.offset, d.consumer])

    def _check_past_cursor(self, sent: dict[tuple[str, str], list[tuple[float, int]]]) -> None:
        prefix = {key: _running_max(events) for key, events in sent.items()}
        for r in self.records:
            if r["k"] != "pop" or not r.get("msgs"):
                continue
            firsts: dict[str, int] = {}
            for pid, mid, _txid, _ok in r["msgs"]:
                stored = self.by_id.get(mid)
                if stored is not None and pid not in firsts:
                    firsts[pid] = stored.offset
            for pid, first in firsts.items():
                times, highs = prefix.get((r["g"], pid), ([], []))
                i = bisect.bisect_left(times, r["t1"]) - 1
                bound = highs[i] if i >= 0 else -1
                if first > max(bound, self.log_start.get(pid, 0) - 1) + 1:
                    self._count("pops_past_cursor", [r["g"], pid, first, bound])

    def _check_overlaps(self, deliveries: list[_Delivered]) -> None:
        first_ack: dict[tuple[str, str], float] = {}
        for r in self.records:
            if r["k"] == "ack_send" and r.get("lease"):
                for pid, *_ in r["items"]:
                    lease_key = (r["lease"], pid)
                    first_ack[lease_key] = min(first_ack.get(lease_key, r["t0"]), r["t0"])
        by_message: dict[tuple[str, str, int], list[tuple[float, float, str]]] = \
            defaultdict(list)
        for d in deliveries:
            end = min(d.t0 + self.x.lease_seconds, first_ack.get((d.lease, d.pid), 1e18))
            by_message[(d.group, d.pid, d.offset)].append((d.t1, end, d.lease))
        for key, spans in by_message.items():
            spans.sort()
            for i, (lo, hi, lease) in enumerate(spans):
                for lo2, hi2, lease2 in spans[i + 1:]:
                    if lo2 >= hi:
                        break
                    if lease2 != lease and lo < hi and lo2 < hi2:
                        self._count("lease_overlaps", [*key, lease, lease2])

    def _check_stale_acks(self) -> None:
        issued: dict[str, float] = {}
        for r in self.records:
            if r["k"] == "pop" and r.get("lease"):
                issued[r["lease"]] = r["t1"]
        released: dict[tuple[str, str], float] = {}
        acks = sorted((r for r in self.records if r["k"] == "ack" and r.get("ans")),
                      key=lambda r: r["t0"])
        for r in acks:
            lease = r.get("lease")
            if lease is None:
                continue
            for (pid, txid, _mid, _status), answer in zip(r["items"], r["ans"]):
                success, _noop, lease_released = answer[0], answer[1], answer[2]
                popped = issued.get(lease)
                rel = released.get((lease, pid))
                dead = (popped is None or popped + self.x.lease_seconds < r["t0"]
                        or (rel is not None and rel < r["t0"]))
                if success and dead:
                    self._count("stale_ack_accepted", [r["c"], lease, pid, txid])
                if success and lease_released:
                    released.setdefault((lease, pid), r["t1"])

    def _check_cursors(self, moved: dict[tuple[str, str], list[tuple[float, int]]]) -> None:
        snap = self.x.snapshot
        for queue in self.queues:
            cursors = snap.cursors.get(queue, {})
            for pid, last in snap.last_offsets.get(queue, {}).items():
                for group in self.x.groups:
                    c = cursors.get((pid, group))
                    committed = c["committed"] if c else -1
                    live = bool(c and c["lease_live"])
                    accepted = max((o for _, o in moved.get((group, pid), [])), default=-1)
                    if committed != last or live or accepted > committed:
                        self._count("cursor_final_mismatch",
                                    [queue, pid, group, committed, last, live, accepted])

