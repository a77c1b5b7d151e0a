"""The checker: the figures of docs/architecture/reliability.md computed from the operation log and the tables.

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

from collections import defaultdict
from typing import Any

from loadtest.faults.check_reads import ReadChecks
from loadtest.faults.check_writes import WriteChecks
from loadtest.faults.tally import Inputs

__all__ = ["MUST_BE_ZERO", "Checker", "Inputs", "check", "verdict"]

GRACE = 2.0


def windows(records: list[dict[str, Any]]) -> list[tuple[float, float, dict[str, Any]]]:
    out = []
    for r in records:
        if r["k"] == "fault":
            end = r.get("healed_at") or r.get("repaired_at") or r["injected_at"]
            out.append((r["injected_at"], end + GRACE, r))
    return out


def _in_any(t0: float, t1: float, spans: list[tuple[float, float, dict[str, Any]]]) -> bool:
    return any(t0 <= hi and t1 >= lo for lo, hi, _ in spans)


class Checker(WriteChecks, ReadChecks):
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
                   fault.get("outside_restart"), "longest_s": 0.0, "longest_push_s": 0.0}
            if "first_queued_s" in fault or fault["name"].startswith("ha_"):
                row["first_queued_s"] = fault.get("first_queued_s")
                for key in ("stopped_s", "promoted_s", "pause_after_promotion_s",
                            "committed_while_frozen"):
                    if key in fault:
                        row[key] = fault[key]
            for r in self.records:
                if "t0" not in r or "dl" not in r or not (r["t0"] <= hi and r["t1"] >= lo):
                    continue
                st = r.get("st")
                row["http_500"] += st == 500
                row["http_5xx"] += st is not None and st >= 500
                row["unanswered"] += r.get("err") == "timeout" or r["t1"] - r["t0"] > r["dl"]
                row["transport_errors"] += str(r.get("err", "")).startswith("transport")
                if r["k"] != "pop":  # the longest a push, ack or probe of it waited
                    row["longest_s"] = round(max(row["longest_s"], r["t1"] - r["t0"]), 3)
                if r["k"] in ("push", "probe"):
                    row["longest_push_s"] = round(
                        max(row["longest_push_s"], r["t1"] - r["t0"]), 3)
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


def verdict(figures: dict[str, Any], max_recovery_s: float | None = None) -> list[str]:
    """The figures that break a promise (empty list = pass); recovery is bounded by
    `max_recovery_s` (default MAX_RECOVERY_S)."""
    bad = [k for k in MUST_BE_ZERO if figures.get(k)]
    rec = figures.get("max_recovery_s")
    if rec is not None and rec > (max_recovery_s or MAX_RECOVERY_S):
        bad.append("max_recovery_s")
    return bad


def check(inputs: Inputs) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    checker = Checker(inputs)
    figures, table = checker.run()
    figures["counts"] = checker.counts()
    return figures, table, dict(checker.examples)

