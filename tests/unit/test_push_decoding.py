"""The JSON push body's fast path (broker/wire/push.py) accepts exactly the bodies the
field-by-field decoder accepts, with the same values, and refuses the others in the same
words: it checks each distinct name once and the transactionIds together, and hands any
body it cannot pass whole to the strict decoder."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.wire import push as wire
from broker.wire.decoding import decode_body
from core.errors import BadRequest


def _strict(raw: bytes) -> list[dict[str, Any]] | str:
    try:
        return [_values(i) for i in decode_body(raw, wire.PushBody).items]
    except BadRequest as exc:
        return exc.message


def _fast(raw: bytes) -> list[dict[str, Any]] | str:
    try:
        return [_values(i) for i in wire.decode_json_push(raw)]
    except BadRequest as exc:
        return exc.message


def _values(item: Any) -> dict[str, Any]:
    out = {f: getattr(item, f) for f in ("queue", "partition", "transactionId", "traceId")}
    out = {k: None if v is None else str(v) for k, v in out.items()}  # str subclasses as text
    for f in ("payload", "data"):
        value = getattr(item, f)
        out[f] = value if value is msgspec.UNSET else bytes(value)
    return out


def _body(*items: dict[str, Any]) -> bytes:
    return json.dumps({"items": list(items)}, ensure_ascii=False).encode()


TRACE = "0190A1B2-C3D4-7E5F-8A9B-0C1D2E3F4A5B"
CASES = [
    _body({"queue": "q", "partition": "p", "transactionId": "t1", "payload": {"a": 1}},
          {"queue": "q", "partition": "p", "transactionId": "t2", "data": [1, 2]}),
    _body({"queue": "q", "partition": "", "transactionId": "", "payload": None}),
    _body({"queue": "q", "partition": None, "traceId": TRACE, "payload": "x"}),
    _body({"queue": "q", "traceId": ""}, {"queue": "r", "traceId": None}),
    _body({"queue": "ü名前", "transactionId": "é" * 20000}),  # over the fast path's length
    _body({"queue": "q", "transactionId": "x" * 65536}),
    _body({"queue": "q", "transactionId": "ok"}, {"queue": "q", "transactionId": "a\x85b"}),
    _body({"queue": "q", "transactionId": "tab\there"}),
    _body({"queue": "q"}, {"queue": "a/b"}),
    _body({"queue": "q", "partition": ".."}),
    _body({"queue": "q", "partition": 5}),
    _body({"queue": "q", "traceId": "not-a-uuid"}),
    _body({"queue": "q", "transactionId": 7}),
    _body({"queue": ""}),
    _body({"queue": "x" * 256}),
    _body({"partition": "p"}),
    _body({"queue": "q", "payload": {"quote": "\"\\", "uni": "\u2028"}}),
    b'{"items": [{"queue": "q", "payload": "\xff"}]}',
    b'{"items": [{"queue": "q", "payload": "\xc3\xa9"}]}',
    b'{"items": [{"queue": "q", "payload": ' + b"[" * 2000 + b"]" * 2000 + b"}]}",
    b'{"items": [', b"", b"{}", b"[]", b'{"items": 3}', b'{"items": [{}]}',
    b'{"items": [{"queue": "q", "extra": 1}], "other": true}',
]


@pytest.mark.parametrize("raw", CASES)
def test_the_fast_path_answers_as_the_strict_decoder(raw: bytes) -> None:
    assert _fast(raw) == _strict(raw)


_TEXT = st.text(st.characters(codec="utf-8"), max_size=12)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.fixed_dictionaries({"queue": _TEXT}, optional={
    "partition": st.none() | _TEXT, "transactionId": st.none() | _TEXT,
    "traceId": st.none() | st.just("") | st.uuids().map(str) | _TEXT,
    "payload": st.none() | st.integers() | _TEXT}), max_size=4))
def test_any_items_are_decoded_or_refused_alike(items: list[dict[str, Any]]) -> None:
    raw = _body(*items)
    assert _fast(raw) == _strict(raw)


def test_the_fast_path_does_not_call_the_field_checks_per_item() -> None:
    raw = _body(*({"queue": "q", "partition": "p", "transactionId": f"t{i}", "payload": i}
                  for i in range(100)))
    items = wire.decode_json_push(raw)
    assert all(type(i) is wire.PlainPushItem for i in items)
