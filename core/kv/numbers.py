"""Exact decimal arithmetic for `incr` (§14.5): `0.1 + 0.2` is `0.3`, and a counter is
rendered in its shortest form (`3`, `2.5`), never as a binary float."""

from __future__ import annotations

import decimal
from decimal import Decimal
from typing import Any

import msgspec

# Wide enough that no sum of two JSON numbers a client can send within the body limit is
# rounded; an overflow past it is refused as `limit`, never stored rounded.
_CONTEXT = decimal.Context(prec=100_000, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN,
                           traps=[decimal.InvalidOperation, decimal.Overflow, decimal.Inexact])
_READER = msgspec.json.Decoder(float_hook=Decimal)


def stored_number(text: str) -> Decimal | None:
    """The number a stored value holds, or None when it is not a JSON number."""
    try:
        value: Any = _READER.decode(text)
    except msgspec.DecodeError:
        return None
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        return None
    return Decimal(value)


def add(a: Decimal, b: Decimal | int) -> Decimal | None:
    """a + b exactly, or None when it cannot be held exactly."""
    try:
        return _CONTEXT.add(a, Decimal(b))
    except decimal.DecimalException:
        return None


def render(value: Decimal) -> str:
    """The shortest JSON rendering: integers without a point or exponent (up to 40 digits),
    other numbers in Python's shortest decimal form."""
    if value.is_zero():
        return "0"
    normal = value.normalize(_CONTEXT)
    exponent = normal.as_tuple().exponent
    assert isinstance(exponent, int)
    if 0 <= exponent and normal.adjusted() < 40:
        return str(int(normal))
    return str(normal)
