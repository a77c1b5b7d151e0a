"""The ack batch's fast path (broker/wire/ack.py) accepts exactly the bodies the
field-by-field decoder accepts, with the same values, and refuses the others in the same
words."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.wire import ack as wire
from broker.wire.decoding import decode_body
from core.errors import BadRequest

_FIELDS = ("transactionId", "partitionId", "status", "leaseId", "error", "consumerGroup")


def _values(body: Any) -> tuple[Any, list[dict[str, Any]]]:
    def text(v: Any) -> Any:
        return v if v is None or isinstance(v, bool) else str(v)
    return (text(body.consumerGroup),
            [{f: text(getattr(i, f)) for f in _FIELDS} for i in body.acknowledgments])


def _answer(decode: Any, raw: bytes) -> Any:
    try:
        return _values(decode(raw))
    except BadRequest as exc:
        return exc.message


def _strict(raw: bytes) -> Any:
    return _answer(lambda r: decode_body(r, wire.AckBatchBody), raw)


def _fast(raw: bytes) -> Any:
    return _answer(wire.decode_ack_batch, raw)


def _body(*items: dict[str, Any], **top: Any) -> bytes:
    return json.dumps({"acknowledgments": list(items), **top}, ensure_ascii=False).encode()


OK = {"transactionId": "t1", "partitionId": "12", "status": "completed", "leaseId": "L1"}
CASES = [
    _body(OK, {**OK, "transactionId": "t2"}, consumerGroup="g"),
    _body({**OK, "status": True}, {**OK, "status": False, "error": "boom\x1f\ttab"}),
    _body({**OK, "leaseId": "", "consumerGroup": ""}, {**OK, "leaseId": None}),
    _body({**OK, "transactionId": "é" * 20000}),
    _body({**OK, "transactionId": "x" * 65536}),
    _body({**OK, "transactionId": "a\x85b"}),
    _body({**OK, "partitionId": "12a"}),
    _body({**OK, "partitionId": "1" * 19}),
    _body({**OK, "partitionId": 12}),
    _body({**OK, "partitionId": ""}),
    _body({**OK, "leaseId": "x" * 256}),
    _body({**OK, "leaseId": "bad\nlease"}),
    _body({**OK, "error": "nul\x00"}),
    _body({**OK, "consumerGroup": "a/b"}),
    _body(OK, consumerGroup="..") ,
    _body({"partitionId": "1"}),
    _body({**OK, "status": 3}),
    b'{"acknowledgments": [{"transactionId": "t", "partitionId": "1", "error": "\xff"}]}',
    b"", b"{}", b"[]", b'{"acknowledgments": 3}', b'{"acknowledgments": [',
]


@pytest.mark.parametrize("raw", CASES)
def test_the_fast_path_answers_as_the_strict_decoder(raw: bytes) -> None:
    assert _fast(raw) == _strict(raw)


_TEXT = st.text(st.characters(codec="utf-8"), max_size=10)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.fixed_dictionaries(
    {"transactionId": _TEXT, "partitionId": st.integers(0, 10**20).map(str) | _TEXT},
    optional={"status": st.none() | st.booleans() | _TEXT, "leaseId": st.none() | _TEXT,
              "error": st.none() | _TEXT, "consumerGroup": st.none() | _TEXT}),
    max_size=4), st.none() | _TEXT)
def test_any_acks_are_decoded_or_refused_alike(items: list[dict[str, Any]],
                                               group: str | None) -> None:
    raw = _body(*items, consumerGroup=group)
    assert _fast(raw) == _strict(raw)


def test_a_pops_acks_take_the_fast_path() -> None:
    raw = _body(*({**OK, "transactionId": f"t{i}"} for i in range(500)), consumerGroup="g")
    assert type(wire.decode_ack_batch(raw)) is wire.PlainAckBatch
