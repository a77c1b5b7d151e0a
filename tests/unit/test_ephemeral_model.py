"""Pure rules of ephemeral queues (core/ephemeral/model.py): options, ids, ack statuses."""

from __future__ import annotations

import pytest

from core.ephemeral import EphemeralBadRequest
from core.ephemeral.model import (
    DEFAULTS,
    Options,
    ack_status,
    message_id,
    options_in_force,
    parse_id,
)


def test_options_default_and_clamp() -> None:
    assert options_in_force(None) == DEFAULTS == options_in_force({})
    assert options_in_force({"maxBytes": 0, "maxLength": 0, "leaseSeconds": 0}) == DEFAULTS
    clamped = options_in_force({"maxBytes": 1 << 40, "maxLength": 10 ** 9,
                                "leaseSeconds": 10 ** 9, "retryLimit": 10 ** 6,
                                "windowBuffer": {"ms": 10 ** 9, "count": 10 ** 9},
                                "ttlSeconds": 10 ** 12, "policy": "dropOldest"})
    assert clamped == Options(16 << 20, 10_000, "dropOldest", 10 * 365 * 86_400, 86_400,
                              1000, 60_000, 10_000)
    assert options_in_force({"retryLimit": 0}).retry_limit == 0  # 0 is a limit, not "default"


@pytest.mark.parametrize("bad", [
    [], "x", {"maxLen": 1}, {"maxLength": -1}, {"maxLength": 1.0}, {"maxLength": True},
    {"ttlSeconds": "5"}, {"policy": "drop"}, {"policy": None}, {"windowBuffer": 3},
    {"windowBuffer": {"size": 1}}, {"windowBuffer": {"ms": -1}}])
def test_bad_options_name_the_allowed_keys(bad: object) -> None:
    with pytest.raises(EphemeralBadRequest) as refused:
        options_in_force(bad)
    assert "allowed keys: maxBytes, maxLength, policy" in refused.value.message


def test_ids_round_trip_with_colons_in_the_partition() -> None:
    text = message_id(0x1F, "room:7:a", 42)
    assert text == "e:1f:room:7:a:42"
    parsed = parse_id(text)
    assert (parsed.epoch, parsed.partition, parsed.seq) == (31, "room:7:a", 42)


@pytest.mark.parametrize("text", [
    "", "e:", "e:1f", "e:1f:p", "e:1f::3", "x:1f:p:3", "e:zz:p:3", "e:1f:p:x", "e:1F:p:3",
    "e:1f:p:-3", f"e:{1 << 64:x}:p:3", f"e:1f:p:{1 << 63}", "e:1f:p\x00:3", "e:1f:p\n:3",
    "e:1f:" + "p" * 600 + ":3"])
def test_unparsable_ids(text: str) -> None:
    assert parse_id(text).epoch is None


def test_ack_statuses() -> None:
    for s in (None, "completed", "success", "acked", "ok"):
        assert ack_status(s) == "completed"
    assert ack_status("retry") == "retry"
    for s in ("failed", "FAILED", "nope", ""):
        assert ack_status(s) == "failed"
