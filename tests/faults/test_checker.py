"""The fault-suite checker on hand-made journals: a clean history scores zero everywhere, and
each broken promise moves exactly the figure meant to catch it. Legal behaviour under leases
(a redelivery after expiry or release) must not be counted.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from loadtest.faults import payloads
from loadtest.faults.checker import Inputs, check, verdict
from loadtest.faults.snapshot import Snapshot, Stored

LEASE = 3.0
PID = "1"


def _kind(txid: str) -> str:
    return {"p0-0": "normal", "p0-1": "poison"}.get(txid, "normal")


class Scenario:
    """Producer p0 writes 4 messages to P0 (offsets 0..3); group g1 pops all four under
    lease L1 and acks them; the cursor ends at 3."""

    def __init__(self) -> None:
        self.payloads = [payloads.make("p0", i, 0, "ab") for i in range(4)]
        self.stored = [Stored(PID, "P0", i, f"m{i}", f"p0-{i}", self.payloads[i])
                       for i in range(4)]
        self.records: list[dict[str, Any]] = [
            self.push(0.0, [("P0", f"p0-{i}", "new") for i in range(4)],
                      [("queued", f"m{i}") for i in range(4)]),
            self.pop(1.0, "L1", [0, 1, 2, 3]),
            self.ack_send(1.2, "L1", [0, 1, 2, 3]),
            self.ack(1.2, "L1", [0, 1, 2, 3], [[True, False, True, None, False]] * 4),
        ]
        self.cursors = {(PID, "g1"): {"committed": 3, "lease_live": False, "worker_id": None}}
        self.last = {PID: 3}
        self.dlq: list[dict[str, Any]] = []

    @staticmethod
    def push(t0: float, items: list[tuple[str, str, str]], answers: list[tuple[str, str]],
             variant: int = 0, src: str = "producer-p0", att: int = 0) -> dict[str, Any]:
        return {"k": "push", "src": src, "t0": t0, "t1": t0 + 0.05, "dl": 10.0, "st": 201,
                "att": att, "items": [[p, t, variant, kind] for p, t, kind in items],
                "ans": [list(a) for a in answers]}

    @staticmethod
    def pop(t0: float, lease: str, offsets: list[int], group: str = "g1",
            consumer: str = "c1") -> dict[str, Any]:
        return {"k": "pop", "src": f"consumer-{consumer}", "c": consumer, "g": group,
                "t0": t0, "t1": t0 + 0.05, "dl": 7.0, "st": 200, "lease": lease,
                "msgs": [[PID, f"m{o}", f"p0-{o}", True] for o in offsets]}

    @staticmethod
    def ack_send(t0: float, lease: str | None, offsets: list[int], status: str = "completed",
                 group: str = "g1", consumer: str = "c1") -> dict[str, Any]:
        return {"k": "ack_send", "src": f"consumer-{consumer}", "c": consumer, "g": group,
                "t0": t0, "pl": lease, "lease": lease,
                "items": [[PID, f"p0-{o}", f"m{o}", status] for o in offsets]}

    @staticmethod
    def ack(t0: float, lease: str | None, offsets: list[int], answers: list[list[Any]],
            status: str = "completed", group: str = "g1",
            consumer: str = "c1") -> dict[str, Any]:
        return {"k": "ack", "src": f"consumer-{consumer}", "c": consumer, "g": group,
                "t0": t0, "t1": t0 + 0.05, "dl": 10.0, "st": 200, "pl": lease,
                "lease": lease, "mode": "all",
                "items": [[PID, f"p0-{o}", f"m{o}", status] for o in offsets],
                "ans": answers}

    def figures(self, *, dlq: bool = False, totals: dict[str, int] | None = None,
                ) -> dict[str, Any]:
        snap = Snapshot({"q": self.stored}, {"q": self.last}, {"q": self.cursors},
                        {"q": self.dlq})
        figures, _table, _examples = check(Inputs(
            copy.deepcopy(self.records), snap, LEASE, "q", ["g1"], "q" if dlq else None,
            totals or {}, _kind))
        return figures


def nonzero(figures: dict[str, Any]) -> dict[str, Any]:
    skip = {"counts", "max_recovery_s"}
    return {k: v for k, v in figures.items() if v and k not in skip}


def test_a_clean_history_scores_zero_everywhere() -> None:
    figures = Scenario().figures()
    assert nonzero(figures) == {}
    assert verdict(figures) == []


def test_redelivery_after_expiry_or_release_is_legal() -> None:
    s = Scenario()
    # L0: delivered and never acked; its lease runs out (3 s) before L1's pop at t=1.0 ...
    s.records[1:1] = [s.pop(-2.5, "L0", [0, 1])]
    # ... and after L1's ack a retry-released span may be redelivered under a new lease.
    s.records += [s.pop(0.5, "LR", [])]
    assert nonzero(s.figures()) == {}


def test_an_acknowledged_write_missing_from_storage_is_lost() -> None:
    s = Scenario()
    del s.stored[3]
    s.records[1]["msgs"] = s.records[1]["msgs"][:3]
    s.records[2]["items"] = s.records[2]["items"][:3]
    s.records[3]["items"], s.records[3]["ans"] = s.records[3]["items"][:3], s.records[3][
        "ans"][:3]
    s.last = {PID: 2}
    s.cursors[(PID, "g1")]["committed"] = 2
    figures = s.figures()
    assert nonzero(figures) == {"writes_lost": 1, "messages_lost": 1}


def test_a_stored_message_no_pop_delivered_is_lost() -> None:
    s = Scenario()
    s.stored.append(Stored(PID, "P0", 4, "m4", "p0-4", payloads.make("p0", 4, 0, "")))
    s.last = {PID: 4}
    s.cursors[(PID, "g1")]["committed"] = 4
    assert nonzero(s.figures()) == {"undelivered": 1, "messages_lost": 1}


def test_a_key_stored_twice_is_a_dedup_failure() -> None:
    s = Scenario()
    s.stored.append(Stored(PID, "P0", 4, "m4", "p0-1", s.payloads[1]))
    s.records[1]["msgs"].append([PID, "m4", "p0-1", True])
    s.records[3]["items"].append([PID, "p0-1", "m4", "completed"])
    s.records[3]["ans"].append([True, False, True, None, False])
    s.last = {PID: 4}
    s.cursors[(PID, "g1")]["committed"] = 4
    assert nonzero(s.figures()) == {"dedup_stored_duplicates": 1}


def test_a_resent_payload_that_replaced_the_first_write_is_caught() -> None:
    s = Scenario()
    s.records.append(s.push(2.0, [("P0", "p0-1", "dup_payload")], [("duplicate", "m1")],
                            variant=1))
    s.stored[1] = Stored(PID, "P0", 1, "m1", "p0-1", payloads.make("p0", 1, 1, "zz"))
    assert nonzero(s.figures()) == {"dedup_first_write_lost": 1}


def test_a_same_id_in_another_partition_answered_duplicate_is_cross_partition_dedup() -> None:
    s = Scenario()
    s.records.append(s.push(2.0, [("P1", "p0-1", "dup_other")], [("duplicate", "m1")]))
    # The write to P1 was answered as stored but is not there: lost as well.
    assert nonzero(s.figures()) == {"cross_partition_dedup": 1, "writes_lost": 1,
                                    "messages_lost": 1}


def test_a_gap_inside_one_pop_is_an_order_violation() -> None:
    s = Scenario()
    s.records[1]["msgs"] = [s.records[1]["msgs"][i] for i in (0, 2, 1, 3)]
    assert nonzero(s.figures()) == {"pop_gaps": 1, "order_violations": 1}


def test_a_pop_starting_past_cursor_plus_one_is_an_order_violation() -> None:
    s = Scenario()
    # L1 delivers 0..1 and acks only 0; after it expires, L2 starts at 3, skipping 1 and 2
    # (L3 and L4 then deliver the rest, so nothing else is wrong).
    s.records = [s.records[0], s.pop(1.0, "L1", [0, 1]), s.ack_send(1.2, "L1", [0]),
                 s.ack(1.2, "L1", [0], [[True, False, False, None, False]]),
                 s.pop(5.0, "L2", [3]),
                 s.pop(9.0, "L3", [1, 2]), s.ack_send(9.2, "L3", [2]),
                 s.ack(9.2, "L3", [2], [[True, False, True, None, False]]),
                 s.pop(9.5, "L4", [3]), s.ack_send(9.6, "L4", [3]),
                 s.ack(9.6, "L4", [3], [[True, False, True, None, False]])]
    assert nonzero(s.figures()) == {"pops_past_cursor": 1, "order_violations": 1}


def test_offsets_against_the_producers_send_order_are_an_order_violation() -> None:
    s = Scenario()
    s.records[0] = s.push(0.0, [("P0", "p0-0", "new"), ("P0", "p0-1", "new")],
                          [("queued", "m0"), ("queued", "m1")])
    s.records.insert(1, s.push(0.1, [("P0", "p0-3", "new")], [("queued", "m3")]))
    s.records.insert(2, s.push(0.2, [("P0", "p0-2", "new")], [("queued", "m2")]))
    assert nonzero(s.figures()) == {"producer_order": 1, "order_violations": 1}


def test_two_leases_live_at_once_on_one_message_overlap() -> None:
    s = Scenario()
    s.records.insert(1, s.pop(0.5, "L0", [0, 1], consumer="c0"))  # live until 3.5
    assert nonzero(s.figures()) == {"lease_overlaps": 2}


def test_a_pop_after_an_accepted_ack_delivering_it_again_is_caught() -> None:
    s = Scenario()
    s.records.append(s.pop(2.0, "L2", [2, 3]))
    s.records.append(s.ack_send(2.1, "L2", [2, 3]))
    s.records.append(s.ack(2.1, "L2", [2, 3], [[True, True, True, None, False]] * 2))
    assert nonzero(s.figures()) == {"redelivered_after_ack": 2}


def test_an_ack_accepted_on_an_expired_released_or_foreign_lease_is_stale() -> None:
    s = Scenario()
    s.records += [
        s.ack(1.0 + LEASE + 0.5, "L1", [3], [[True, True, False, None, False]]),  # expired
        s.ack(1.5, "L1", [3], [[True, True, False, None, False]]),  # after the release
        s.ack(1.6, "nobody", [3], [[True, True, False, None, False]]),  # foreign
        s.ack(1.7, "L1", [3], [[False, False, False, "invalid lease", False]]),  # refused
    ]
    assert nonzero(s.figures()) == {"stale_ack_accepted": 3}


def test_two_accepted_commits_of_one_message_are_acked_twice() -> None:
    s = Scenario()
    s.records.append(s.ack(1.5, None, [3], [[True, False, False, None, False]]))
    assert nonzero(s.figures()) == {"acked_twice": 1}
    noop = Scenario()
    noop.records.append(noop.ack(1.5, None, [3], [[True, True, False, None, False]]))
    assert nonzero(noop.figures()) == {}


def test_a_cursor_left_behind_or_leased_after_the_drain_is_a_mismatch() -> None:
    s = Scenario()
    s.cursors[(PID, "g1")] = {"committed": 3, "lease_live": True, "worker_id": "L9"}
    assert nonzero(s.figures()) == {"cursor_final_mismatch": 1}
    s.cursors[(PID, "g1")] = {"committed": 2, "lease_live": False, "worker_id": None}
    assert nonzero(s.figures()) == {"cursor_final_mismatch": 1}


def test_500s_late_answers_and_5xx_outside_fault_windows_are_counted() -> None:
    s = Scenario()
    probe = {"k": "probe", "src": "driver", "dl": 10.0}
    s.records += [
        {**probe, "t0": 5.0, "t1": 5.1, "st": 500},
        {**probe, "t0": 6.0, "t1": 17.0, "st": 201},                    # late
        {**probe, "t0": 7.0, "t1": 27.0, "st": None, "err": "timeout"},  # never
        {**probe, "t0": 30.0, "t1": 30.1, "st": 503},                   # outside any window
        {**probe, "t0": 41.0, "t1": 41.1, "st": 503},                   # inside the window
        {"k": "fault", "src": "driver", "name": "pg_kill", "injected_at": 40.0,
         "healed_at": 42.0, "survived": True, "ready_at": 41.5},
        {**probe, "t0": 41.6, "t1": 41.7, "st": 201},
    ]
    figures = s.figures()
    assert nonzero(figures) == {"http_500": 1, "unanswered": 2, "other_5xx_outside_faults": 1}
    assert figures["max_recovery_s"] == pytest.approx(0.2)


def test_a_slow_recovery_and_an_unsurvived_fault_fail_the_run() -> None:
    s = Scenario()
    s.records += [
        {"k": "fault", "src": "driver", "name": "pg_kill", "injected_at": 40.0,
         "healed_at": 55.0, "survived": True, "ready_at": 41.0},
        {"k": "probe", "src": "driver", "dl": 10.0, "t0": 53.9, "t1": 54.0, "st": 201},
        {"k": "fault", "src": "driver", "name": "worker_kill", "injected_at": 60.0,
         "repaired_at": 70.0, "survived": False},
    ]
    figures = s.figures()
    assert figures["max_recovery_s"] == pytest.approx(13.0)
    assert nonzero(figures) == {"faults_not_survived": 1}
    assert set(verdict(figures)) == {"faults_not_survived", "max_recovery_s"}


def test_dlq_figures_catch_a_wrong_end_a_double_row_and_a_route_mismatch() -> None:
    s = Scenario()  # p0-1 is "poison" here: it must end in the DLQ, once, retry count 2
    row = {"partition_id": PID, "group": "g1", "offset": 1, "transaction_id": "p0-1",
           "message_id": "m1", "retry_count": 2, "error": "x", "payload": s.payloads[1]}
    s.dlq = [row]
    assert nonzero(s.figures(dlq=True, totals={"g1": 1})) == {}
    assert nonzero(s.figures(dlq=True, totals={"g1": 0})) == {"dlq_route_mismatch": 1}
    s.dlq = [row, {**row, "retry_count": 1}]
    assert nonzero(s.figures(dlq=True, totals={"g1": 2})) == {"dlq_double": 1,
                                                               "dlq_bad_rows": 1}
    s.dlq = [{**row, "offset": 0, "transaction_id": "p0-0", "payload": s.payloads[0]}]
    assert nonzero(s.figures(dlq=True, totals={"g1": 1})) == {"dlq_wrong_end": 2}
