"""A JSON document holding an integer Python will not decode is told apart cheaply
(broker/wire/decoding.py)."""

from __future__ import annotations

import pytest

from broker.wire.decoding import (
    MAX_INTEGER_DIGITS,
    check_document,
    long_integer_refusal,
    may_hold_a_long_integer,
)

LONG = b"7" * (MAX_INTEGER_DIGITS + 1)


@pytest.mark.parametrize("pad", range(0, 2 * MAX_INTEGER_DIGITS, 331))
def test_a_long_integer_anywhere_is_found(pad: int) -> None:
    # Wherever the run falls against the samples, two neighbouring samples are digits.
    doc = b'{"a": "' + b"x" * pad + b'", "n": -' + LONG + b"}"
    assert may_hold_a_long_integer(doc)
    assert long_integer_refusal(doc) is not None
    with pytest.raises(ValueError, match="more than 4300 digits"):
        check_document(doc)


def test_documents_without_one_pass() -> None:
    assert long_integer_refusal(b"9" * MAX_INTEGER_DIGITS) is None  # at the limit
    assert long_integer_refusal(b'"' + LONG + b'"') is None  # a string of digits
    assert long_integer_refusal(LONG + b".5") is None  # a float: Python decodes it
    spread = b"[" + b",".join(b"12345" for _ in range(5000)) + b"]"  # many short numbers
    assert long_integer_refusal(spread) is None
    check_document(spread)


def test_the_cheap_look_spares_a_document_without_neighbouring_digit_samples() -> None:
    assert not may_hold_a_long_integer(b'{"text": "' + b"a" * 100_000 + b'"}')
