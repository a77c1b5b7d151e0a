"""The binary push and transaction bodies (wire-protocol §7.2, §7.3), byte by byte.

Valid bodies come from the official client's own encoders (`queen.http.push_binary`), so
what the broker decodes is what the client sends; malformed ones are built by hand here,
with a builder that shares no code with the decoder. Every malformed body must be a
ClientError (400, or 413 for sizes over the limits) naming the problem; nothing else may
escape, whatever the bytes.
"""

from __future__ import annotations

import os
import re
import struct
import uuid
from typing import Any

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from queen.http.push_binary import (
    PushBatch,
    encode_push_binary,
    encode_push_frames,
    encode_transaction_frames,
)

from broker.wire.binary_push import BinaryPush, decode_push, decode_transaction
from broker.wire.transaction import AckOp
from core import segments
from core.errors import BadRequest, ClientError, PayloadTooLarge

LIMIT = 1 << 20
MAX_ITEMS = 1000
_Z = zstandard.ZstdCompressor(level=1, write_content_size=True)


def push(body: bytes, *, max_bytes: int = LIMIT, max_items: int = MAX_ITEMS) -> BinaryPush:
    return decode_push(body, max_bytes=max_bytes, max_items=max_items)


def refused(body: bytes, text: str, *, kind: type[ClientError] = BadRequest,
            transaction: bool = False, max_bytes: int = LIMIT) -> None:
    """The body is refused with `kind` and a message containing `text`."""
    decode = decode_transaction if transaction else decode_push
    with pytest.raises(ClientError) as caught:
        decode(body, max_bytes=max_bytes, max_items=MAX_ITEMS)
    assert type(caught.value) is kind, caught.value
    assert text in caught.value.message, caught.value.message


# A hand builder for the malformed cases (independent of the decoder).

def s16(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<H", len(raw)) + raw


def b32(raw: bytes) -> bytes:
    return struct.pack("<I", len(raw)) + raw


def uuid7_bytes() -> bytes:
    raw = bytearray(os.urandom(16))
    raw[6] = 0x70 | raw[6] & 0x0F
    raw[8] = 0x80 | raw[8] & 0x3F
    return bytes(raw)


def frame(payload: bytes = b'{"a":1}', *, txid: str | bytes = "t", flags: int = 0,
          mid: bytes | None = None, trace: bytes = b"", sub: bytes = b"") -> bytes:
    body = bytes([flags]) + (mid or uuid7_bytes()) + trace + s16(txid) + sub + payload
    return struct.pack("<I", len(body)) + body


def framed_group(frames: list[bytes], *, queue: str = "q", partition: str = "p",
                 n: int | None = None, z: bytes | None = None) -> bytes:
    blob = _Z.compress(b"".join(frames)) if z is None else z
    return s16(queue) + s16(partition) + struct.pack("<I", len(frames) if n is None else n) \
        + b32(blob)


def framed_body(*groups: bytes, flags: int = 8) -> bytes:
    return b"QPB1" + bytes([flags]) + struct.pack("<I", len(groups)) + b"".join(groups)


def plain_item(payload: bytes = b"1", txid: str | bytes = "t") -> bytes:
    return s16(txid) + b32(payload)


def plain_body(*items: bytes, queue: str | bytes = "q", partition: str | bytes = "p",
               flags: int = 4, n: int | None = None) -> bytes:
    group = s16(queue) + s16(partition) + struct.pack("<I", len(items) if n is None else n)
    return b"QPB1" + bytes([flags]) + struct.pack("<I", 1) + group + b"".join(items)


# Valid bodies, as the official client sends them.

def client_batches() -> list[PushBatch]:
    return [PushBatch("orders", "eu", [b'{"n":1}', '"ü"'.encode(), b"null"], ["a", "", "c"]),
            PushBatch("orders", "Default", [b"[1,2]"], ["d"]),
            PushBatch("other", "", [b"3"], ["e"])]


def test_plain_body_of_the_client_decodes_to_items_in_wire_order() -> None:
    decoded = push(encode_push_binary(client_batches()))
    assert decoded.counts is False
    got = [(i.queue, i.partition, i.message.transaction_id, i.message.payload)
           for i in decoded.items]
    assert got == [("orders", "eu", "a", b'{"n":1}'),
                   ("orders", "eu", str(decoded.items[1].message.message_id), '"ü"'.encode()),
                   ("orders", "eu", "c", b"null"), ("orders", "Default", "d", b"[1,2]"),
                   ("other", "Default", "e", b"3")]  # partition "" is Default, as in JSON
    assert all(i.message.packed is None for i in decoded.items)
    assert all(i.message.message_id.version == 7 for i in decoded.items)


def test_plain_body_without_transaction_ids_mints_them_and_counts_flag_is_read() -> None:
    body = encode_push_binary([PushBatch("q", "p", [b"1", b"2"])], counts=True)
    assert body[4] == 2
    decoded = push(body)
    assert decoded.counts is True
    assert [i.message.transaction_id for i in decoded.items] == [
        str(i.message.message_id) for i in decoded.items]


def test_zstd_plain_body_decodes_like_the_plain_one() -> None:
    plain = push(encode_push_binary(client_batches()))
    zipped = push(encode_push_binary(client_batches(), compress=True))
    assert [(i.queue, i.partition, i.message.payload) for i in zipped.items] == \
        [(i.queue, i.partition, i.message.payload) for i in plain.items]


def test_framed_body_keeps_client_ids_and_the_blob_to_store_as_is() -> None:
    body = encode_push_frames([PushBatch("q", "p", [b'{"x":1}', b"2"], ["t1", "t2"]),
                               PushBatch("q", "r", [b"3"], ["t3"])])
    decoded = push(body)
    first, second, third = (i.message for i in decoded.items)
    assert [m.transaction_id for m in (first, second, third)] == ["t1", "t2", "t3"]
    assert first.packed is not None and first.packed is second.packed
    assert first.packed.count == 2 and third.packed is not None and third.packed.count == 1
    # The kept blob is the client's zstd frame, and it holds exactly these messages.
    stored = segments.unpack(first.packed.blob)
    assert [(f.message_id, f.transaction_id, f.payload) for f in stored] == [
        (first.message_id, "t1", b'{"x":1}'), (second.message_id, "t2", b"2")]
    assert first.message_id.version == 7


def test_framed_item_without_transaction_id_gets_the_id_text_like_the_client() -> None:
    decoded = push(encode_push_frames([PushBatch("q", "p", [b"1"], [""])]))
    [item] = decoded.items
    # The client writes the id's text into the frame itself: stored as sent.
    assert item.message.transaction_id == str(item.message.message_id)
    assert item.message.packed is not None


def test_framed_frame_with_empty_transaction_id_is_filled_in_and_rebuilt() -> None:
    mid = uuid7_bytes()
    [item] = push(framed_body(framed_group([frame(txid="", mid=mid)]))).items
    assert item.message.transaction_id == str(uuid.UUID(bytes=mid))
    assert item.message.packed is None  # the stored frame must carry the filled-in id


def test_framed_frame_with_producer_sub_is_dropped_and_rebuilt_trace_is_kept() -> None:
    trace = uuid.uuid4()
    [with_sub] = push(framed_body(framed_group([frame(flags=2, sub=s16("mallory"))]))).items
    assert with_sub.message.producer_sub is None and with_sub.message.packed is None
    [traced] = push(framed_body(framed_group([frame(flags=1, trace=trace.bytes)]))).items
    assert traced.message.trace_id == trace and traced.message.packed is not None


def test_empty_frame_payload_is_null() -> None:
    [item] = push(framed_body(framed_group([frame(b"")]))).items
    assert item.message.payload == b"null"


def test_empty_bodies_decode_to_nothing() -> None:
    assert push(framed_body()).items == []
    assert push(b"QPB1\x04" + struct.pack("<I", 0)).items == []


def test_client_transaction_body_decodes_head_then_pushes() -> None:
    head = (b'{"operations":[{"type":"ack","transactionId":"x","partitionId":"7",'
            b'"status":"completed","leaseId":"L"}],"requiredLeases":["L"]}')
    body = encode_transaction_frames(head, [PushBatch("q", "p", [b"1", b"2"], ["a", "b"])])
    decoded = decode_transaction(body, max_bytes=LIMIT, max_items=MAX_ITEMS)
    [ack] = decoded.head.operations
    assert isinstance(ack, AckOp) and ack.transactionId == "x"
    assert decoded.head.requiredLeases == ["L"]
    assert [i.message.transaction_id for i in decoded.pushes] == ["a", "b"]
    assert decoded.counts is False
    counted = encode_transaction_frames(b"", [PushBatch("q", "p", [b"1"], ["a"])], counts=True)
    assert decode_transaction(counted, max_bytes=LIMIT, max_items=MAX_ITEMS).counts is True


# Malformed: the envelope.

@pytest.mark.parametrize(("body", "text"), [
    (b"", "binary push: magic needs 4 bytes at byte 0, only 0 are left"),
    (b"QPB", "magic needs 4 bytes"),
    (b"QPB2\x04", "starts with b'QPB2', not QPB1"),
    (b'{"items": []}', "starts with b'{\"it', not QPB1"),
    (b"QTB1\x00", "not QPB1"),
    (b"QPB1", "flags needs 1 bytes at byte 4, only 0 are left"),
    (b"QPB1\x10", "flags 16 has unknown bits"),
    (b"QPB1\x80", "flags 128 has unknown bits"),
    (b"QPB1\x09", "flags 9: 8 (framed groups) cannot be combined with 1 or 4"),
    (b"QPB1\x0c", "flags 12: 8 (framed groups) cannot be combined"),
    (b"QPB1\x04\x01\x00", "group_count needs 4 bytes at byte 5, only 2 are left"),
    (b"QPB1\x04\xff\xff\xff\xff", "group_count is 4294967295, but only 0 bytes are left"),
    (b"QPB1\x08\x00\x00\x00\x10" + b"x" * 100, "group_count is 268435456"),
    (b"QPB1\x04" + struct.pack("<I", 0) + b"junk", "4 unexpected bytes after the end"),
])
def test_malformed_envelopes_are_400_naming_the_problem(body: bytes, text: str) -> None:
    refused(body, text)


def test_every_truncation_of_valid_bodies_is_a_400() -> None:
    bodies = [encode_push_binary(client_batches()),
              encode_push_binary(client_batches(), compress=True),
              encode_push_frames(client_batches())]
    for body in bodies:
        push(body)  # whole: fine
        for cut in range(len(body)):
            with pytest.raises(BadRequest, match="^binary push"):
                push(body[:cut])
    tx = encode_transaction_frames(b'{"operations":[]}', client_batches())
    for cut in range(len(tx)):
        with pytest.raises(BadRequest, match="^binary transaction"):
            decode_transaction(tx[:cut], max_bytes=LIMIT, max_items=MAX_ITEMS)


# Malformed: plain groups.

@pytest.mark.parametrize(("body", "text"), [
    (plain_body(plain_item(), queue=""), "groups[0].queue must not be empty"),
    (plain_body(plain_item(), queue="a/b"), "groups[0].queue must not contain '/'"),
    (plain_body(plain_item(), queue="x" * 256), "groups[0].queue is longer than 255 bytes"),
    (plain_body(plain_item(), queue=b"\xff"), "groups[0].queue is not valid UTF-8 (byte 0)"),
    (plain_body(plain_item(), partition=".."), "groups[0].partition must not be '..'"),
    (plain_body(plain_item(), partition="a\x00"), "groups[0].partition contains control"),
    (plain_body(plain_item(txid="a\nb")),
     "groups[0].items[0].transactionId contains control characters"),
    (plain_body(plain_item(txid=b"\xc3")), "groups[0].items[0].transactionId is not valid"),
    (plain_body(plain_item(b"{")), "groups[0].items[0].payload is not valid JSON"),
    (plain_body(plain_item(b"")), "groups[0].items[0].payload is not valid JSON"),
    (plain_body(plain_item(b"1 2")), "payload is not valid JSON: JSON is malformed: trailing"),
    (plain_body(plain_item(b"NaN")), "payload is not valid JSON"),
    (plain_body(plain_item(b'"\xff"')), "groups[0].items[0].payload is not valid UTF-8 (byte 1)"),
    (plain_body(plain_item(b'"\xed\xa0\x80"')), "payload is not valid UTF-8"),
    (plain_body(plain_item(b"[" * 100_000 + b"]" * 100_000)), "payload is JSON nested too deeply"),
    (plain_body(plain_item(), plain_item(b"[1]", "u"), n=3), "groups[0].items[2].transactionId"),
    (plain_body(s16("t") + struct.pack("<I", 1000) + b"12"),
     "groups[0].items[0].payload needs 1000 bytes at byte 26, only 2 are left"),
    (plain_body(plain_item(), n=10**6), "groups[0].n is 1000000, but only"),
    (plain_body(b32(b"1"), flags=0, n=2), "groups[0].n is 2, but only 5 bytes are left"),
    (plain_body(b32(b"1"), b"\x00\x00\x00", flags=0, n=2),
     "groups[0].items[1].payload length needs 4 bytes at byte 24, only 3 are left"),
])
def test_malformed_plain_groups_are_400_naming_the_field(body: bytes, text: str) -> None:
    refused(body, text)


def test_plain_items_over_the_limit_are_413() -> None:
    body = plain_body(*[plain_item() for _ in range(MAX_ITEMS + 1)])
    refused(body, f"more than {MAX_ITEMS} items", kind=PayloadTooLarge)


def zstd_plain(section: bytes, *, raw_len: int | None = None, z: bytes | None = None) -> bytes:
    blob = _Z.compress(section) if z is None else z
    return b"QPB1\x05" + struct.pack("<I", len(section) if raw_len is None else raw_len) + blob


SECTION = plain_body(plain_item())[5:]


@pytest.mark.parametrize(("body", "text"), [
    (zstd_plain(SECTION, z=SECTION), "binary push: groups is not a zstd frame"),
    (zstd_plain(SECTION, z=b""), "groups is not a zstd frame"),
    (zstd_plain(SECTION, raw_len=len(SECTION) + 1),
     f"groups declares {len(SECTION)} bytes of content, not {len(SECTION) + 1}"),
    (zstd_plain(SECTION, z=zstandard.ZstdCompressor(write_content_size=False).compress(SECTION)),
     "groups is a zstd frame that does not declare its content size"),
    (zstd_plain(SECTION, z=_Z.compress(SECTION) + _Z.compress(b"more")),
     "groups does not decompress"),
    (zstd_plain(SECTION, z=_Z.compress(SECTION)[:-2]), "groups does not decompress"),
    (zstd_plain(SECTION + b"x"),
     "binary push (decompressed groups): 1 unexpected bytes after the end, at byte 22"),
    (zstd_plain(b"\x01\x00\x00\x00"),
     "(decompressed groups): group_count is 1, but only 0 bytes are left"),
    (zstd_plain(b"\x01\x00\x00\x00" + b"\xff\x00abc" + b"\x00" * 5),
     "(decompressed groups): groups[0].queue needs 255 bytes at byte 6, only 8 are left"),
])
def test_malformed_zstd_plain_bodies_are_400(body: bytes, text: str) -> None:
    refused(body, text)


def test_zstd_plain_raw_len_over_the_limit_is_413_before_decompressing() -> None:
    refused(zstd_plain(SECTION, raw_len=LIMIT + 1), f"raw_len {LIMIT + 1} is over the limit",
            kind=PayloadTooLarge)


# Malformed: framed groups and their storage frames.

def lying_size(blob: bytes, declared: int) -> bytes:
    """`blob` (a zstd frame with a 4-byte content size field) declaring another size."""
    header = zstandard.frame_header_size(blob)
    assert blob[4] & 0xC0 == 0x80  # FCS field of 4 bytes, at the end of the header
    return blob[:header - 4] + struct.pack("<I", declared) + blob[header:]


BIG = _Z.compress(b"".join(frame() for _ in range(3000)))


def _by_text(value: object) -> str:
    """Test ids from the expected text only: the bodies carry fresh UUIDv7 ids, and ids that
    differ between two collections break pytest-xdist (its workers must collect the same)."""
    return value if isinstance(value, str) else "body"


@pytest.mark.parametrize(("body", "text"), [
    (framed_body(framed_group([frame()], queue="")), "groups[0].queue must not be empty"),
    (framed_body(framed_group([frame()], partition="%2F")), "must not contain '%'"),
    (framed_body(framed_group([frame()], z=b"\x28\xb5\x2f\xfd")),
     "groups[0].frames has a malformed zstd frame header"),
    (framed_body(framed_group([frame()], z=b"not zstd")), "groups[0].frames is not a zstd frame"),
    (framed_body(framed_group([frame()], z=zstandard.ZstdCompressor(
        write_content_size=False).compress(frame()))), "does not declare its content size"),
    (framed_body(framed_group([frame()], z=lying_size(BIG, 100_000))),
     "groups[0].frames does not decompress"),
    (framed_body(framed_group([f := frame(), frame()], n=1)),
     f"binary push: {len(f)} unexpected bytes after the 1 frames of groups[0] (decompressed)"),
    (framed_body(framed_group([frame()], n=2)),
     "groups[0].frames[1].body length needs 4 bytes"),
    (framed_body(framed_group([frame()[:-3]])), "groups[0].frames[0].body needs"),
    (framed_body(framed_group([frame(flags=8)])), "groups[0].frames[0].flags 8 has unknown"),
    (framed_body(framed_group([frame(flags=4)])),
     "groups[0].frames[0].flags mark it encrypted (4)"),
    (framed_body(framed_group([frame(mid=uuid.uuid4().bytes)])), "is not a UUIDv7"),
    (framed_body(framed_group([frame(mid=b"\x00" * 16)])),
     "groups[0].frames[0].id 00000000-0000-0000-0000-000000000000 is not a UUIDv7"),
    (framed_body(framed_group([frame(mid=bytes(6) + b"\x70\x00" + b"\x00" + bytes(7))])),
     "is not a UUIDv7"),  # version 7 but not the RFC variant
    (framed_body(framed_group([frame(mid=b"\x01" * 6 + b"\x71\x01\x81" + b"\x01" * 7)] * 2)),
     "appears twice in this body"),
    (framed_body(framed_group([frame(txid="a\x1fb")])),
     "groups[0].frames[0].transactionId contains control characters"),
    (framed_body(framed_group([frame(b"{'a': 1}")])), "frames[0].payload is not valid JSON"),
    (framed_body(framed_group([frame(b'"\xc0\xaf"')])), "frames[0].payload is not valid UTF-8"),
    (framed_body(framed_group([frame(flags=1, trace=b"\x01" * 5)])),
     "frames[0].traceId needs 16 bytes"),
    (framed_body(framed_group([frame(b"", flags=2, sub=b"\x09\x00abc")])),
     "frames[0].producerSub needs 9 bytes"),
    (framed_body(framed_group([frame()]), framed_group([frame()], queue="a?")),
     "groups[1].queue must not contain '?'"),
], ids=_by_text)
def test_malformed_framed_groups_are_400_naming_the_problem(body: bytes, text: str) -> None:
    refused(body, text)


def test_zstd_bomb_is_413_before_anything_is_decompressed(monkeypatch: Any) -> None:
    bomb = _Z.compress(b"\x00" * (64 << 20))  # 64 MiB of zeros in a few KiB
    assert len(bomb) < 8192
    decompressed: list[int] = []
    real = zstandard.ZstdDecompressor()

    class Watching:
        def decompress(self, data: Any, *args: Any, **kwargs: Any) -> Any:
            decompressed.append(len(data))
            return real.decompress(data, *args, **kwargs)

    monkeypatch.setattr(segments, "_decompressor", Watching)
    refused(framed_body(framed_group([frame()], z=bomb)),
            f"groups[0].frames declares {64 << 20} bytes of content, more than the {LIMIT}",
            kind=PayloadTooLarge)
    refused(zstd_plain(SECTION, raw_len=64 << 20, z=bomb), "is over the limit",
            kind=PayloadTooLarge)
    assert decompressed == []
    push(framed_body(framed_group([frame()])))  # the watch works: a good frame is seen
    assert len(decompressed) == 1


def test_the_decompression_budget_is_for_the_whole_body() -> None:
    frames = [frame(b'"' + b"x" * 1000 + b'"') for _ in range(4)]
    groups = [framed_group([f]) for f in frames]
    budget = 3 * len(frames[0]) + 10
    decode_push(framed_body(*groups[:3]), max_bytes=budget, max_items=MAX_ITEMS)
    refused(framed_body(*groups), f"groups[3].frames declares {len(frames[0])} bytes of "
            f"content, more than the 10 bytes allowed", kind=PayloadTooLarge, max_bytes=budget)


def test_framed_items_over_the_limit_are_413_before_their_frames_are_read() -> None:
    body = framed_body(framed_group([frame()], n=MAX_ITEMS + 1))
    refused(body, f"more than {MAX_ITEMS} items", kind=PayloadTooLarge)


# Malformed: the transaction envelope.

def tx_body(head: bytes, *groups: bytes, flags: int = 0) -> bytes:
    return b"QTB1" + bytes([flags]) + b32(head) + struct.pack("<I", len(groups)) + b"".join(
        groups)


@pytest.mark.parametrize(("body", "text"), [
    (b"QPB1\x08", "binary transaction: starts with b'QPB1', not QTB1"),
    (tx_body(b"{}", flags=1), "flags 1 has unknown bits (known: 2 counts)"),
    (tx_body(b"{}", flags=8), "flags 8 has unknown bits"),
    (b"QTB1\x00" + struct.pack("<I", 50) + b"{}", "head needs 50 bytes at byte 9"),
    (tx_body(b"{"), "binary transaction: head: bad body:"),
    (tx_body(b'{"operations":[{"type":"kv"}]}'), "head: operations[0]"),
    (tx_body(b'{"operations":"x"}'), "head: operations array is required"),
    (tx_body(b'{"operations":[],"requiredLeases":["\xff"]}'), "head: bad body: invalid UTF-8"),
    (tx_body(b"{}", framed_group([frame(mid=uuid.uuid4().bytes)])), "is not a UUIDv7"),
    (tx_body(b"{}", framed_group([frame()])) + b"!", "1 unexpected bytes after the end"),
], ids=_by_text)
def test_malformed_transaction_bodies_are_400(body: bytes, text: str) -> None:
    refused(body, text, transaction=True)


# Whatever the bytes: a ClientError or a decoded body, nothing else.

def _decode_any(body: bytes) -> None:
    for decode in (decode_push, decode_transaction):
        try:
            decode(body, max_bytes=LIMIT, max_items=MAX_ITEMS)
        except ClientError as exc:
            assert exc.message and re.match(r"^binary (push|transaction)", exc.message)


VALID = [encode_push_binary(client_batches()),
         encode_push_binary(client_batches(), compress=True),
         encode_push_frames(client_batches()),
         encode_transaction_frames(b'{"operations":[]}', client_batches())]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(VALID), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)),
                                        min_size=1, max_size=4))
def test_mutated_bodies_never_raise_anything_but_a_client_error(
        body: bytes, changes: list[tuple[int, int]]) -> None:
    mutated = bytearray(body)
    for at, value in changes:
        mutated[at % len(mutated)] = value
    _decode_any(bytes(mutated))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([b"QPB1", b"QTB1"]), st.binary(max_size=200))
def test_random_bodies_never_raise_anything_but_a_client_error(magic: bytes,
                                                               rest: bytes) -> None:
    _decode_any(magic + rest)


def test_a_stamped_producer_makes_the_write_path_frame_the_messages_again() -> None:
    from broker.wire.binary_push import stamp_producer
    from core.engine.writes import segments_of

    body = encode_push_frames([PushBatch("q", "p", [b"1", b"2"], ["a", "b"])])
    as_sent = push(body).items
    [kept] = segments_of([i.message for i in as_sent])
    assert kept.blob == as_sent[0].message.packed.blob  # type: ignore[union-attr]
    stamped = push(body).items
    stamp_producer(stamped, "alice")
    [framed] = segments_of([i.message for i in stamped])
    assert framed.blob != kept.blob
    assert [(f.transaction_id, f.payload, f.producer_sub) for f in segments.unpack(
        framed.blob)] == [("a", b"1", "alice"), ("b", b"2", "alice")]
    stamp_producer(stamped, None)  # auth off: nothing to stamp
    assert {i.message.producer_sub for i in stamped} == {"alice"}
