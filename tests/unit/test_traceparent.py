"""W3C `traceparent` values (core/tracing.py): what parses, what is refused, and the context a
pop hands on with a message."""

from __future__ import annotations

import uuid

import pytest

from core.tracing import TraceParent, from_header, of_message, parse

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_valid_traceparent_parses_and_prints_back() -> None:
    ctx = parse(VALID)
    assert ctx == TraceParent(uuid.UUID("4bf92f35-77b3-4da6-a3ce-929d0e0e4736"),
                              bytes.fromhex("00f067aa0ba902b7"), sampled=True)
    assert ctx.header() == VALID
    assert not parse(VALID[:-2] + "00").sampled


def test_a_later_version_may_carry_more_fields() -> None:
    assert parse("cc" + VALID[2:] + "-what-comes-next").trace_id == parse(VALID).trace_id


@pytest.mark.parametrize("bad", [
    "", "garbage", VALID.upper(), VALID + "-extra",  # version 00 has exactly four fields
    "ff" + VALID[2:], "00-" + "0" * 32 + VALID[35:], VALID[:36] + "0" * 16 + "-01",
    VALID.replace("-", "_"), VALID[:-1]])
def test_invalid_values_are_refused_with_a_reason(bad: str) -> None:
    with pytest.raises(ValueError, match="traceparent|version|all-zero"):
        parse(bad)
    assert from_header(bad) is None  # a header is ignored instead


def test_a_message_hands_on_its_trace_and_its_message_span() -> None:
    trace = uuid.uuid4()
    message = uuid.UUID("01890a5d-ac96-774b-bcce-b302099a8057")
    ctx = of_message(trace, message)
    assert ctx.header() == f"00-{trace.hex}-bcceb302099a8057-01"


def test_the_settings_choose_the_tracer() -> None:
    from core.settings import Settings
    from core.tracing import Tracing, check_available

    assert not Tracing.from_settings(Settings()).enabled
    console = Tracing.from_settings(Settings(tracing_exporter="console"))
    try:
        assert console.enabled
    finally:
        console.shutdown()
    check_available(Settings(tracing_exporter="console"))  # the SDK is there: no error
