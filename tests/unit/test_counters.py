"""Process counters (core/counters.py): what a request, a driver error and a failed flush do
to them."""

from __future__ import annotations

import pytest

from core.counters import CLUSTER, LATENCY_BOUNDS, Counters, bucket_name
from core.errors import StorageUnavailable
from core.storage import errors


def test_a_timed_request_counts_once_in_its_bucket_with_its_sum() -> None:
    c = Counters()
    c.request("push", 0.004)
    c.request("pop", 100.0)  # beyond the last bound: the +Inf bucket
    c.request(None, 0.1)
    taken = c.take()
    assert taken[(CLUSTER, "requests")] == 3
    assert taken[(CLUSTER, "push_requests")] == 1
    assert taken[(CLUSTER, bucket_name("push", LATENCY_BOUNDS.index(0.005)))] == 1
    assert taken[(CLUSTER, bucket_name("pop", len(LATENCY_BOUNDS)))] == 1
    assert taken[(CLUSTER, "push_seconds_sum_us")] == 4000
    assert c.take() == {}


def test_deltas_a_flush_could_not_write_are_kept_for_the_next() -> None:
    c = Counters()
    c.add("delivered", 2, partition_id=7)
    taken = c.take()
    c.add("delivered", 1, partition_id=7)
    c.give_back(taken)
    assert c.take() == {(7, "delivered"): 3}


def test_every_driver_error_counts_as_a_database_error(monkeypatch: pytest.MonkeyPatch) -> None:
    c = Counters()
    monkeypatch.setattr(errors, "COUNTERS", c)
    with pytest.raises(StorageUnavailable), errors.storage_errors():
        raise ConnectionRefusedError("down")
    assert c.take() == {(CLUSTER, "db_errors"): 1}
