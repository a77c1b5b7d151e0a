"""The JSON pop answer spliced from stored frames (broker/wire/pop_json.py) is, byte for
byte, what msgspec writes for the same delivery built as one `PoppedMessage` per message
(the way the answer was built before): every key, every escape, in the same order."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.wire.pop import Autopilot, PopAnswer, PoppedMessage
from broker.wire.pop_json import SplicedPopAnswer, messages_array, spliced
from broker.wire.types import Name
from core import segments, tracing
from core.engine.pop import Claim, PopResult, StoredSegment
from core.errors import SegmentError
from core.ids import LeaseId, PartitionId, QueueId, uuid7
from core.segments import Frame
from core.timefmt import iso

T0 = datetime(2026, 12, 2, 12, 0, 0, 123456, tzinfo=UTC)
T1 = datetime(2026, 12, 2, 13, 0, 1, tzinfo=UTC)


def _reference(result: PopResult, lease: str, group: str) -> list[PoppedMessage]:
    out = []
    for m in result.messages():
        popped = PoppedMessage(str(m.frame.message_id), m.frame.transaction_id,
                               str(m.frame.trace_id) if m.frame.trace_id else None,
                               msgspec.Raw(m.frame.payload), m.frame.producer_sub,
                               iso(m.created_at), str(m.partition_id), m.partition, lease,
                               group)
        if m.frame.trace_id is not None:
            popped.traceparent = tracing.of_message(m.frame.trace_id,
                                                    m.frame.message_id).header()
        out.append(popped)
    return out


def _result(*claims: tuple[int, str, int, int, list[tuple[datetime, list[Frame]]]]
            ) -> PopResult:
    result = PopResult(LeaseId("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"))
    for pid, name, start, end, stored in claims:
        claim = Claim(QueueId(1), "q", PartitionId(pid), name, start, end, 0)
        base = 0
        for at, frames in stored:
            claim.segments.append(StoredSegment(base, at, segments.pack(frames),
                                                base + len(frames) - 1))
            base += len(frames)
        result.claims.append(claim)
    return result


def _frames(n: int, tag: str, **kw: object) -> list[Frame]:
    return [Frame(uuid7(), f"{tag}{i}", b'{"i":%d}' % i, **kw) for i in range(n)]  # type: ignore[arg-type]


ODD_TEXT = ['quote"d', "back\\slash", "ünïcödé 名前", "del\x7fchar", "tab\tand\nnewline",
            "nul\x00", "\u2028sep", "", "😀", "/slash", "<script>"]


def _odd() -> list[Frame]:
    out = []
    for i, text in enumerate(ODD_TEXT):
        out.append(Frame(uuid7(), text, b'"payload \\" %d"' % i,
                         trace_id=uuid.UUID(int=i * 7919) if i % 2 else None,
                         producer_sub=text if i % 3 else None))
    out.append(Frame(uuid.UUID(int=0), "nil-id", b""))  # an empty payload is null
    return out


CASES = {
    "two claims, spans inside segments": _result(
        (7, "P7", 3, 13, [(T0, _frames(10, "a")), (T1, _frames(4, "b"))]),
        (9, 'P"9', 0, 1, [(T1, _frames(5, "c"))])),
    "escapes and optional fields": _result((1, "ü/\\", 0, 100, [(T0, _odd())])),
    "a span past the stored frames": _result((2, "P2", 2, 50, [(T0, _frames(4, "d"))])),
}


@pytest.mark.parametrize("name", CASES)
def test_the_spliced_answer_is_what_msgspec_writes_for_the_messages(name: str) -> None:
    result = CASES[name]
    # Names arrive as the edge's checked str subclasses.
    for lease, group in (("L-1", "g"), ("", 'grp "x" \\ ü'), ("L", Name("named"))):
        expected = msgspec.json.encode(_reference(result, lease, group), enc_hook=str)
        assert messages_array(result, lease_id=lease, group=group) == expected


def test_an_answer_without_messages_is_an_empty_array() -> None:
    assert messages_array(PopResult(None), lease_id="", group="g") == b"[]"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=8), st.none() | st.text(max_size=8),
                          st.booleans(), st.binary(max_size=4).map(lambda b: b.hex())),
                min_size=1, max_size=6))
def test_any_stored_texts_are_written_as_msgspec_writes_them(
        rows: list[tuple[str, str | None, bool, str]]) -> None:
    frames = [Frame(uuid7(), txid, b'"%s"' % payload.encode(), uuid7() if traced else None,
                    sub) for txid, sub, traced, payload in rows]
    result = _result((3, "P3", 0, len(frames) - 1, [(T0, frames)]))
    assert messages_array(result, lease_id="L", group="g") == msgspec.json.encode(
        _reference(result, "L", "g"))


def test_a_transaction_id_that_is_not_utf8_is_a_segment_error() -> None:
    raw = segments._PLAIN.pack(segments._PLAIN_FIXED + 2, 0, bytes(16), 2) + b"\xff\xfe"
    claim = Claim(QueueId(1), "q", PartitionId(1), "p", 0, 0, 0,
                  [StoredSegment(0, T0, segments._compressor().compress(raw), 0)])
    result = PopResult(None, [claim])
    with pytest.raises(SegmentError):
        result.messages()  # the decoding reader refuses it too
    with pytest.raises(SegmentError):
        messages_array(result, lease_id="", group="g")


def test_the_spliced_answer_has_the_keys_of_the_documented_one_in_order() -> None:
    assert SplicedPopAnswer.__struct_fields__ == PopAnswer.__struct_fields__
    result = CASES["two claims, spans inside segments"]
    messages = _reference(result, "L", "g")
    documented = PopAnswer(True, "q", "P7", "7", "L", "g", messages, 2,
                           autopilot=Autopilot(4, 500, 100), paused=True)
    body = msgspec.json.encode(spliced(documented, msgspec.json.encode(messages)))
    assert body == msgspec.json.encode(documented)
