"""The ack status vocabulary (§4.5) as a pure function."""

from __future__ import annotations

import pytest

from core.engine.ack import parse_status


@pytest.mark.parametrize("value", [None, True, "", "completed", "success", "acked", "ok",
                                   "COMPLETED", " Ok "])
def test_completed_words_absent_and_true_mean_completed(value: object) -> None:
    assert parse_status(value) == "completed"


@pytest.mark.parametrize(("value", "expected"), [("retry", "retry"), ("RETRY", "retry"),
                                                 ("dlq", "dlq"), (" DLQ", "dlq")])
def test_retry_and_dlq_are_their_own_statuses(value: object, expected: str) -> None:
    assert parse_status(value) == expected


@pytest.mark.parametrize("value", [False, "failed", "failure", "error", "nack", "pending",
                                   "from_beginning", 0, 1, 2.5, [], {}])
def test_anything_else_means_failed(value: object) -> None:
    assert parse_status(value) == "failed"
