"""Pure rules of the KV store (extensions §14): exact decimal `incr` and its rendering, the
end of a prefix range, and which refusal an op gets first."""

from __future__ import annotations

from decimal import Decimal

import pytest

from core.errors import Refused, RefusedTooLarge
from core.kv import numbers
from core.kv.engine import prefix_end
from core.kv.ops import KvLimits, parse_ops


def test_incr_arithmetic_is_exact_and_rendered_shortest() -> None:
    total = numbers.add(Decimal("0.1"), Decimal("0.2"))
    assert total is not None and numbers.render(total) == "0.3"
    assert numbers.render(Decimal("2.5") + Decimal("0.5")) == "3"
    assert numbers.render(Decimal(100)) == "100"
    assert numbers.render(Decimal("-0.0")) == "0"
    assert numbers.render(Decimal("1E+400")) == "1E+400"
    huge = numbers.add(Decimal(10) ** 30, 1)
    assert huge is not None and numbers.render(huge) == "1" + "0" * 29 + "1"


def test_stored_numbers_are_json_numbers_only() -> None:
    assert numbers.stored_number("2.50") == Decimal("2.50")
    assert numbers.stored_number("7") == 7
    for text in ("true", '"3"', "null", "[1]", "{}"):
        assert numbers.stored_number(text) is None


def test_prefix_end_is_the_first_string_past_the_prefix() -> None:
    assert prefix_end("ab") == "ac"
    assert prefix_end("a\U0010ffff") == "b"
    assert prefix_end("\U0010ffff") is None
    assert prefix_end("a\ud7ff") == "a\ue000"  # surrogates are no characters


def _refusal(ops: list[object], limits: KvLimits | None = None) -> tuple[str, str]:
    with pytest.raises((Refused, RefusedTooLarge)) as caught:
        parse_ops(ops, limits or KvLimits())
    error = caught.value
    assert isinstance(error, Refused | RefusedTooLarge)
    return error.code, error.reason


def test_the_first_bad_op_in_input_order_names_the_refusal() -> None:
    good = {"op": "put", "ns": "a", "key": "k", "value": 1, "forever": True}
    assert _refusal([good, {"op": "put", "ns": "A", "key": ""}, 5]) == (
        "kv_bad_request", "kv_bad_namespace")
    assert _refusal([{"op": "put", "ns": "a", "key": "x" * 600, "value": 1}]) == (
        "payload_too_large", "kv_key_too_large")
    # Counted over the whole call: the clamped getPrefix limit counts as its keys.
    big = [{"op": "getPrefix", "ns": "a", "prefix": "p", "limit": 10_000}] * 2
    assert _refusal(big) == ("kv_bad_request", "kv_too_many_keys")
    assert parse_ops(big[:1], KvLimits())[0].limit == 1000
    assert _refusal([good] * 65, KvLimits.rider()) == ("kv_bad_request", "kv_too_many_ops")


def test_put_if_absent_is_a_put_expecting_0_and_check_may_share_a_written_key() -> None:
    [op] = parse_ops([{"op": "putIfAbsent", "ns": "a", "key": "k", "value": None,
                       "ttlSeconds": 5}], KvLimits())
    assert (op.expect, op.value, op.ttl_seconds, op.forever) == (0, "null", 5, False)
    ops = parse_ops([{"op": "put", "ns": "a", "key": "k", "value": 1, "forever": True},
                     {"op": "check", "ns": "a", "key": "k", "expect": 3}], KvLimits())
    assert [o.op for o in ops] == ["put", "check"]  # decision 3: check is not a write
