"""Timer op validation (core/timers/ops.py) with the route's limits and the transaction
rider's relaxed ones (§17: no op cap, no payload ceiling, no horizon), and the fire's
backoff (§16.4)."""

from __future__ import annotations

import base64

import pytest

from core.errors import Coded
from core.timers.fire import backoff_seconds
from core.timers.ops import RIDER_LIMITS, ROUTE_LIMITS, operations_of, parse_ops


def _schedule(key: str, **fields: object) -> dict[str, object]:
    return {"op": "schedule", "queue": "q", "timerKey": key, "txn": f"t-{key}", "delayMs": 0,
            "payload": base64.b64encode(b"{}").decode(), **fields}


def _reason(ops: list[object], limits: object = ROUTE_LIMITS) -> str:
    with pytest.raises(Coded) as caught:
        parse_ops(ops, limits)  # type: ignore[arg-type]
    return caught.value.reason


def test_the_rider_lifts_the_op_cap_the_payload_ceiling_and_the_horizon() -> None:
    many = [_schedule(f"k{i}") for i in range(300)]
    big = [_schedule("big", payload=base64.b64encode(b"1" * (1024 * 1024 + 1)).decode())]
    far = [_schedule("far", delayMs=365 * 86400 * 1000)]
    assert _reason(many) == "timers_too_many_ops"
    assert _reason(big) == "timers_payload_too_large"
    assert _reason(far) == "timers_horizon"
    assert len(parse_ops(many, RIDER_LIMITS)) == 300
    assert parse_ops(big, RIDER_LIMITS)[0].payload == b"1" * (1024 * 1024 + 1)
    assert parse_ops(far, RIDER_LIMITS)[0].delay_ms == 365 * 86400 * 1000
    # What the rider keeps: every other rule.
    assert _reason([_schedule("a"), _schedule("a")], RIDER_LIMITS) == "timers_duplicate_key"
    assert _reason([_schedule("a", producerSub="x")], RIDER_LIMITS) == \
        "timers_server_owned_field"


def test_ops_keep_their_fields_and_defaults() -> None:
    [schedule, cancel] = parse_ops(operations_of({"operations": [
        _schedule("a/b", payloadZstd=True, encrypted=False, partition="P"),
        {"op": "cancel", "queue": "q", "timerKey": "c"}]}))
    assert (schedule.kind, schedule.key, schedule.partition, schedule.zstd) == \
        ("schedule", "a/b", "P", True)
    assert (cancel.kind, cancel.txn) == ("cancel", None)
    [reschedule] = parse_ops([_schedule("r", op="reschedule")])
    assert reschedule.kind == "schedule" and reschedule.partition == "Default"


def test_backoff_doubles_from_one_second_up_to_a_minute() -> None:
    assert [backoff_seconds(n) for n in (1, 2, 3, 4, 7, 8, 20)] == \
        [1.0, 2.0, 4.0, 8.0, 60.0, 60.0, 60.0]
