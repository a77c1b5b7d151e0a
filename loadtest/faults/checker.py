"""The checker: the figures of reliability.md computed from the operation log and the tables.

Vocabulary. A *key* is (partition name, transactionId). A push item is *acknowledged* when an
attempt's answer lists it `queued` or `duplicate`; its *acknowledged id* is the message id of
the first such answer. A *first write* is an item of kind `new` or `dup_other` (see
`producer.py`); `dup_same` and `dup_payload` re-send an acknowledged key on purpose. A
*delivery* is one message in one logged pop answer; offsets come from the stored message
with that message id. An ack item *moves the cursor to x* when its call was answered for
that item with `success: true` and x is: its offset for `completed` when the call carries no
other status on that partition; the lowest signal offset − 1, capped by the highest
completed offset, when it does (a mixed call clamps the cursor below its lowest signal); the
signal's offset itself when the answer says `dlq: true`. Times are the client's send (`t0`)
and answer (`t1`) times; L is the queue's lease time (no lease is extended in a run).

Figures (each must be 0 unless said otherwise):

- `messages_lost` = `writes_lost` + `undelivered`.
  `writes_lost`: acknowledged first-write keys with no stored message of that key carrying
  the acknowledged id. `undelivered`: per group, stored messages that appear in no pop
  answer of that group.
- `dedup_stored_duplicates`: Σ over keys of (stored messages with that key − 1).
- `dedup_first_write_lost`: keys re-sent with another payload (`dup_payload`) whose stored
  message is not the first write (payload variant ≠ 0, or not the acknowledged id).
- `cross_partition_dedup`: `dup_other` items (a key never written before in that partition)
  answered `duplicate`.
- `dedup_wrong_answers`: deliberate re-sends of a stored key answered `queued`, or
  `duplicate` with an id other than the stored one.
- `order_violations` = `pop_gaps` + `pops_past_cursor` + `producer_order`.
  `pop_gaps`: pop answers whose messages of one partition are not consecutive ascending
  offsets. `pops_past_cursor`: pops whose first offset on a partition exceeds 1 + the
  highest offset any ack item of that group could have committed there before the pop was
  answered (every completed/dlq ack item sent before the pop's `t1`, whatever its outcome;
  −1 before any). `producer_order`: per producer and partition, first writes in the order
  the producer sent them (one request in flight per producer, so each was acknowledged
  before the next was sent) whose offset is not above the previous one's.
- `lease_overlaps`: pairs of deliveries of one (group, partition, offset) from two pops whose
  leases were both *certainly live* at one moment. A lease is certainly live from its pop's
  `t1` until the earlier of `t0 + L` (the expiry is stamped after the request arrived, so
  never earlier) and the `t0` of the first ack sent with that lease for that partition (which
  may release it). A redelivery after an expiry or a release is legal and not counted.
- `redelivered_after_ack`: deliveries of (group, partition, offset) by a pop sent after an ack
  of that group that moved the cursor to ≥ offset had been answered. Unlike a lease expiry,
  an accepted ack is final.
- `stale_ack_accepted`: ack items carrying a leaseId answered `success: true` although the
  lease was certainly dead when the ack was sent: more than L after its pop was answered
  (`pop.t1 + L < ack.t0`), or after an earlier ack with that lease on that partition had been
  answered `leaseReleased: true`, or a leaseId no pop ever issued (`foreign`).
- `acked_twice`: (group, partition, offset) triples with more than one `completed` item
  answered `success: true` and not `noop`, counting only calls with no other status on that
  partition: the broker reported twice that it committed one message for one group.
- `cursor_final_mismatch`: after the drain, (partition, group) pairs whose cursor is not at
  the partition's last offset or still holds a live lease, or that an accepted ack moved to
  beyond the final cursor.
- `http_500`: answers with status 500, from any process of the run.
- `other_5xx_outside_faults`: answers with another 5xx status whose [t0, t1] meets no fault
  window. A fault window runs from the injection to 2 s after the broker was seen healed
  (or repaired from outside).
- `unanswered`: requests answered later than their deadline (t1 − t0 > deadline) or not at
  all before the client gave up (deadline + 10 s): the deadline is the long-poll timeout
  + 5 s for waiting pops, 10 s for everything else.
- `corrupted_payloads`: deliveries or stored messages whose payload checksum fails.
- `unexpected_4xx`: 4xx answers other than 429 to requests the harness knows to be valid.
- `faults_not_survived`: faults after which the broker was not whole again (every role
  present, /health 200, a push acknowledged) within the heal timeout without a restart from
  outside.
- `max_recovery_s` (must be ≤ 10): over PostgreSQL restarts, from the server accepting
  connections again to the first push answered 2xx that was sent after the crash.

DLQ variant (queue with retryLimit 2; message kind from its transactionId, see `dlq.py`):

- `dlq_wrong_end`: per group, messages whose end is not the one their kind demands: `poison`
  and `dlq_now` must be in the DLQ table, `normal` and `flaky` must not.
- `dlq_double`: (group, partition, offset) with more than one DLQ row.
- `dlq_bad_rows`: DLQ rows whose payload differs from the stored message, or a `poison` row
  whose retry count is not the budget (2).
- `dlq_route_mismatch`: groups whose `GET /api/v1/dlq` total differs from the table.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from loadtest.faults import payloads
from loadtest.faults.snapshot import Snapshot, Stored

GRACE = 2.0
_SIGNALS = ("failed", "retry", "dlq")
# The long-poll deadline is part of each record; 10 s for the rest (client.DEADLINE).


@dataclass(slots=True)
class Inputs:
    records: list[dict[str, Any]]
    snapshot: Snapshot
    lease_seconds: float
    ledger_queue: str
    groups: list[str]
    dlq_queue: str | None = None
    dlq_route_totals: dict[str, int] = field(default_factory=dict)  # group -> total
    dlq_kinds: Any = None  # callable txid -> kind, for the DLQ variant


@dataclass(slots=True)
class _Delivery:
    group: str
    consumer: str
    lease: str
    t0: float
    t1: float
    pid: str
    offset: int


def windows(records: list[dict[str, Any]]) -> list[tuple[float, float, dict[str, Any]]]:
    out = []
    for r in records:
        if r["k"] == "fault":
            end = r.get("healed_at") or r.get("repaired_at") or r["injected_at"]
            out.append((r["injected_at"], end + GRACE, r))
    return out


def _running_max(events: list[tuple[float, int]]) -> tuple[list[float], list[int]]:
    """Times in order and, for each, the highest offset seen up to then (for bisecting)."""
    times, highs, high = [], [], -1
    for t, offset in sorted(events):
        high = max(high, offset)
        times.append(t)
        highs.append(high)
    return times, highs


def _in_any(t0: float, t1: float, spans: list[tuple[float, float, dict[str, Any]]]) -> bool:
    return any(t0 <= hi and t1 >= lo for lo, hi, _ in spans)


class Checker:
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

    # --- writes ------------------------------------------------------------------------

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
                found = stored_by_key.get(key)
                if not found or key not in acknowledged:
                    continue
                if found[0].offset <= last:
                    self._count("producer_order", [producer, partition, key])
                last = found[0].offset

    # --- reads -------------------------------------------------------------------------

    def _deliveries(self) -> list[_Delivery]:
        out: list[_Delivery] = []
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
                out.append(_Delivery(r["g"], r["c"], r["lease"], r["t0"], r["t1"], pid,
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

    def _check_delivered_everything(self, deliveries: list[_Delivery]) -> None:
        seen = {(d.group, d.pid, d.offset) for d in deliveries}
        for queue in self.queues:
            for s in self.x.snapshot.stored.get(queue, []):
                for group in self.x.groups:
                    if (group, s.partition_id, s.offset) not in seen:
                        self._count("undelivered", [queue, group, s.partition, s.offset])

    def _check_after_ack(self, deliveries: list[_Delivery],
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

    def _check_overlaps(self, deliveries: list[_Delivery]) -> None:
        first_ack: dict[tuple[str, str], float] = {}
        for r in self.records:
            if r["k"] == "ack_send" and r.get("lease"):
                for pid, *_ in r["items"]:
                    key = (r["lease"], pid)
                    first_ack[key] = min(first_ack.get(key, r["t0"]), r["t0"])
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

    # --- HTTP ----------------------------------------------------------------------------

    def check_http(self) -> None:
        spans = windows(self.records)
        for r in self.records:
            if "t0" not in r or "dl" not in r:
                continue
            status, t0, t1 = r.get("st"), r["t0"], r["t1"]
            if status == 500:
                self._count("http_500", [r["src"], r["k"], r.get("body")])
            elif status is not None and status >= 500 and not _in_any(t0, t1, spans):
                self._count("other_5xx_outside_faults", [r["src"], r["k"], status, t0])
            elif status is not None and 400 <= status < 500 and status != 429 \
                    and r["k"] != "ack_send":
                self._count("unexpected_4xx", [r["src"], r["k"], status, r.get("body")])
            if r.get("err") == "timeout" or t1 - t0 > r["dl"]:
                self._count("unanswered", [r["src"], r["k"], round(t1 - t0, 2), r.get("url")])

    # --- faults --------------------------------------------------------------------------

    def check_faults(self) -> list[dict[str, Any]]:
        spans = windows(self.records)
        table: list[dict[str, Any]] = []
        for lo, hi, fault in spans:
            row = {"fault": fault["name"], "target": fault.get("target"),
                   "survived": fault.get("survived"), "heal_s": fault.get("heal_s"),
                   "recovery_s": None, "http_500": 0, "http_5xx": 0, "unanswered": 0,
                   "transport_errors": 0, "writes_lost": 0, "outside_restart":
                   fault.get("outside_restart")}
            for r in self.records:
                if "t0" not in r or "dl" not in r or not (r["t0"] <= hi and r["t1"] >= lo):
                    continue
                st = r.get("st")
                row["http_500"] += st == 500
                row["http_5xx"] += st is not None and st >= 500
                row["unanswered"] += r.get("err") == "timeout" or r["t1"] - r["t0"] > r["dl"]
                row["transport_errors"] += str(r.get("err", "")).startswith("transport")
            row["writes_lost"] = sum(lo <= t <= hi for t in self.lost_at)
            ready = fault.get("ready_at")
            if ready is not None:
                firsts = [r["t1"] for r in self.records
                          if r["k"] in ("push", "probe") and r.get("st") == 201
                          and r["t0"] >= fault["injected_at"] and r["t1"] >= ready]
                if firsts:
                    row["recovery_s"] = round(min(firsts) - ready, 3)
            if not fault.get("survived"):
                self._count("faults_not_survived", fault["name"])
            table.append(row)
        recoveries = [r["recovery_s"] for r in table if r["recovery_s"] is not None]
        self.figures["max_recovery_s"] = max(recoveries) if recoveries else None
        return table

    # --- DLQ variant -----------------------------------------------------------------------

    def check_dlq(self) -> None:
        queue = self.x.dlq_queue
        if queue is None:
            return
        snap = self.x.snapshot
        stored = {(s.partition_id, s.offset): s for s in snap.stored.get(queue, [])}
        rows: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
        for row in snap.dlq.get(queue, []):
            rows[(row["group"], row["partition_id"], row["offset"])].append(row)
        for key, found in rows.items():
            if len(found) > 1:
                self._count("dlq_double", list(key))
            s = stored.get((key[1], key[2]))
            for row in found:
                if s is None or row["payload"] != s.payload:
                    self._count("dlq_bad_rows", [*key, "payload"])
                elif self.x.dlq_kinds(s.transaction_id) == "poison" and row["retry_count"] != 2:
                    self._count("dlq_bad_rows", [*key, "retry_count", row["retry_count"]])
        for s in stored.values():
            kind = self.x.dlq_kinds(s.transaction_id)
            for group in self.x.groups:
                dead = (group, s.partition_id, s.offset) in rows
                if dead != (kind in ("poison", "dlq_now")):
                    self._count("dlq_wrong_end", [group, s.partition, s.offset, kind, dead])
        for group in self.x.groups:
            table_count = sum(len(v) for k, v in rows.items() if k[0] == group)
            if self.x.dlq_route_totals.get(group) != table_count:
                self._count("dlq_route_mismatch",
                            [group, self.x.dlq_route_totals.get(group), table_count])

    # --- all -------------------------------------------------------------------------------

    def run(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        for name in ("writes_lost", "undelivered", "dedup_stored_duplicates",
                     "dedup_first_write_lost", "cross_partition_dedup", "dedup_wrong_answers",
                     "pop_gaps", "pops_past_cursor", "producer_order", "lease_overlaps",
                     "redelivered_after_ack", "stale_ack_accepted", "acked_twice",
                     "cursor_final_mismatch", "http_500", "other_5xx_outside_faults",
                     "unanswered", "corrupted_payloads", "unexpected_4xx",
                     "delivered_unknown_message", "faults_not_survived"):
            self.figures[name] = 0
        if self.x.dlq_queue:
            for name in ("dlq_wrong_end", "dlq_double", "dlq_bad_rows", "dlq_route_mismatch"):
                self.figures[name] = 0
        self.check_writes()
        self.check_reads()
        self.check_http()
        self.check_dlq()
        table = self.check_faults()
        f = self.figures
        f["messages_lost"] = f["writes_lost"] + f["undelivered"]
        f["order_violations"] = f["pop_gaps"] + f["pops_past_cursor"] + f["producer_order"]
        return f, table

    def counts(self) -> dict[str, int]:
        kinds: dict[str, int] = defaultdict(int)
        for r in self.records:
            kinds[r["k"]] += 1
        delivered = sum(len(r.get("msgs") or []) for r in self.records if r["k"] == "pop")
        return {"pushes": kinds["push"], "pops": kinds["pop"], "acks": kinds["ack"],
                "probes": kinds["probe"], "deliveries": delivered,
                "stored": sum(len(v) for v in self.x.snapshot.stored.values()),
                "transport_errors": sum(str(r.get("err", "")).startswith("transport")
                                        for r in self.records)}


MUST_BE_ZERO = ("messages_lost", "dedup_stored_duplicates", "dedup_first_write_lost",
                "cross_partition_dedup", "dedup_wrong_answers", "order_violations",
                "lease_overlaps", "redelivered_after_ack", "stale_ack_accepted", "acked_twice",
                "cursor_final_mismatch", "http_500", "other_5xx_outside_faults", "unanswered",
                "corrupted_payloads", "unexpected_4xx", "delivered_unknown_message",
                "faults_not_survived", "dlq_wrong_end", "dlq_double", "dlq_bad_rows",
                "dlq_route_mismatch")
MAX_RECOVERY_S = 10.0


def verdict(figures: dict[str, Any]) -> list[str]:
    """The figures that break a promise (empty list = pass)."""
    bad = [k for k in MUST_BE_ZERO if figures.get(k)]
    rec = figures.get("max_recovery_s")
    if rec is not None and rec > MAX_RECOVERY_S:
        bad.append("max_recovery_s")
    return bad


def check(inputs: Inputs) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    checker = Checker(inputs)
    figures, table = checker.run()
    figures["counts"] = checker.counts()
    return figures, table, dict(checker.examples)


def load_records(chunks: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return list(chunks)
