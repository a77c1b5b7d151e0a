"""The binary push and transaction bodies (wire-protocol §7.2, §7.3), decoded into the
core's push items with every check the JSON bodies get.

    push:         "QPB1" | u8 flags | groups
    transaction:  "QTB1" | u8 flags | blob32 head (JSON) | framed groups

Push flags: 1 = the plain groups are one zstd frame (preceded by u32 raw_len), 2 = answer
with counts, 4 = plain items carry a transactionId, 8 = framed groups. A plain group is
`str16 queue | str16 partition | u32 n | n x ([str16 transactionId] | blob32 payload)`; a
framed group is `str16 queue | str16 partition | u32 n | blob32 z`, z being one zstd frame
of n storage frames (§7.1) with client-minted UUIDv7 message ids.

Checked as in JSON: the name rule for queue and partition (`""` = `Default`), the
transactionId rule, each payload one UTF-8 JSON document, at most `max_items` messages.
A framed group's zstd frame must declare its content size; the sizes of all of a body's
frames together may not exceed the body limit, and that is checked before anything is
decompressed. A framed group whose frames can be stored as they are (no transactionId to
fill in, no producerSub to drop) keeps its blob (`PackedFrames`): the write path then
stores it as the segment without compressing the messages again.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from broker.wire.binary import BinaryReader
from broker.wire.decoding import check_document, decode_body
from broker.wire.transaction import TransactionHead
from broker.wire.types import check_name_or_empty, check_transaction_id
from core import segments
from core.errors import BadRequest, PayloadTooLarge
from core.ids import uuid7, uuid_of_int
from core.names import check_name
from core.types import DEFAULT_PARTITION, NewMessage, PackedFrames, PushItem

PUSH_MAGIC = b"QPB1"
TRANSACTION_MAGIC = b"QTB1"
FLAG_ZSTD = 1
FLAG_COUNTS = 2
FLAG_TRANSACTION_IDS = 4
FLAG_FRAMED = 8
_FRAME_KNOWN_FLAGS = segments.FLAG_TRACE | segments.FLAG_PRODUCER | segments.FLAG_ENCRYPTED
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_FRAME_HEAD = struct.Struct("<IB16sH")  # body_len, flags, message id, transactionId length


def stamp_producer(items: list[PushItem], producer_sub: str | None) -> None:
    """The caller's identity (JWT `sub`, §9) on every decoded item, as the JSON path stamps
    it. A framed message that gets one is no longer what its client-built frame says, so
    the write path frames it again (`core.engine.writes.segments_of`): the stored frame carries the
    producerSub (flag 2), which pops, fetches and the DLQ read from there."""
    if producer_sub is not None:
        for item in items:
            item.message.producer_sub = producer_sub


@dataclass(slots=True)
class BinaryPush:
    """A decoded `QPB1` body: the items in wire order, and whether to answer with counts."""

    items: list[PushItem]
    counts: bool


@dataclass(slots=True)
class BinaryTransaction:
    """A decoded `QTB1` body: the JSON head (acks, leases, riders), then the pushed items."""

    head: TransactionHead
    pushes: list[PushItem]
    counts: bool


@dataclass(slots=True)
class _Limits:
    max_bytes: int  # what all zstd frames of one body may decompress to, together
    max_items: int
    items: int = 0

    def admit(self, n: int, subject: str) -> None:
        self.items += n
        if self.items > self.max_items:
            raise PayloadTooLarge(f"{subject}: more than {self.max_items} items in one body")


def decode_push(body: bytes, *, max_bytes: int, max_items: int) -> BinaryPush:
    """A `QPB1` body (`Content-Type: application/x-queen-push`, §7.2) as push items."""
    r = BinaryReader(body, "binary push")
    _magic(r, PUSH_MAGIC)
    flags = r.u8("flags")
    if flags & ~(FLAG_ZSTD | FLAG_COUNTS | FLAG_TRANSACTION_IDS | FLAG_FRAMED):
        raise r.fail(f"flags {flags} has unknown bits (known: 1 zstd, 2 counts, "
                     f"4 transaction ids, 8 framed groups)")
    limits = _Limits(max_bytes, max_items)
    if flags & FLAG_FRAMED:
        if flags & (FLAG_ZSTD | FLAG_TRANSACTION_IDS):
            raise r.fail(f"flags {flags}: 8 (framed groups) cannot be combined with 1 or 4")
        items = _framed_groups(r, limits)
    else:
        groups = r
        if flags & FLAG_ZSTD:
            raw_len = r.u32("raw_len")
            if raw_len > max_bytes:
                raise PayloadTooLarge(f"binary push: raw_len {raw_len} is over the limit of "
                                      f"{max_bytes} bytes")
            section = _unzstd(r, r.take(r.left, "groups"), "groups", raw_len, raw_len)
            groups = BinaryReader(section, "binary push (decompressed groups)")
        items = _plain_groups(groups, limits, bool(flags & FLAG_TRANSACTION_IDS))
        groups.end()
    r.end()
    return BinaryPush(items, bool(flags & FLAG_COUNTS))


def decode_transaction(body: bytes, *, max_bytes: int, max_items: int) -> BinaryTransaction:
    """A `QTB1` body (`Content-Type: application/x-queen-push`, §7.3): the JSON head and the
    pushed items."""
    r = BinaryReader(body, "binary transaction")
    _magic(r, TRANSACTION_MAGIC)
    flags = r.u8("flags")
    if flags & ~FLAG_COUNTS:
        raise r.fail(f"flags {flags} has unknown bits (known: 2 counts)")
    raw_head = r.blob32("head")
    try:
        head = decode_body(raw_head, TransactionHead)
    except BadRequest as exc:
        raise r.fail(f"head: {exc.message}") from None
    pushes = _framed_groups(r, _Limits(max_bytes, max_items))
    r.end()
    return BinaryTransaction(head, pushes, bool(flags & FLAG_COUNTS))


def _magic(r: BinaryReader, magic: bytes) -> None:
    given = r.take(len(magic), "magic")
    if given != magic:
        raise r.fail(f"starts with {given!r}, not {magic.decode()}")


def _checked(r: BinaryReader, check: Callable[[object], str], value: str, field: str) -> str:
    try:
        return check(value)
    except (ValueError, TypeError) as exc:
        raise r.fail(f"{field} {exc}") from None


def _group_head(r: BinaryReader, g: int) -> tuple[str, str]:
    r.where = ("groups[{}].", g)
    queue = _checked(r, check_name, r.text16("queue"), "queue")
    partition = _checked(r, check_name_or_empty, r.text16("partition"), "partition")
    return queue, partition or DEFAULT_PARTITION


def _payload(r: BinaryReader, data: bytes) -> bytes:
    try:
        check_document(data)
    except ValueError as exc:
        raise r.fail(f"payload {exc}") from None
    return data


def _unzstd(r: BinaryReader, blob: bytes, field: str, max_size: int,
            exact_size: int | None = None) -> bytes:
    try:
        return segments.unpack_client_frame(blob, max_size=max_size, exact_size=exact_size)
    except PayloadTooLarge as exc:
        raise PayloadTooLarge(r.fail(f"{field} {exc.message}").message) from None
    except BadRequest as exc:
        raise r.fail(f"{field} {exc.message}") from None


def _plain_groups(r: BinaryReader, limits: _Limits, with_ids: bool) -> list[PushItem]:
    items: list[PushItem] = []
    # Each group takes at least 8 bytes, each item at least 4 (6 with its transactionId).
    for g in range(r.count("group_count", 8)):
        queue, partition = _group_head(r, g)
        n = r.count("n", 6 if with_ids else 4)
        limits.admit(n, r.subject)
        fast = _plain_items_fast(r, n, with_ids)
        for i, (txid, payload) in enumerate(fast or _plain_items(r, g, n, with_ids)):
            message_id = uuid7()
            items.append(PushItem(queue, partition,
                                  NewMessage(message_id, txid or str(message_id), payload)))
    return items


def _plain_items(r: BinaryReader, g: int, n: int, with_ids: bool) -> list[tuple[str, bytes]]:
    """n plain items, read field by field: every problem is named precisely."""
    out = []
    for i in range(n):
        r.where = ("groups[{}].items[{}].", g, i)
        txid = _checked(r, check_transaction_id, r.text16("transactionId"),
                        "transactionId") if with_ids else ""
        out.append((txid, _payload(r, r.blob32("payload"))))
    return out


def _plain_items_fast(r: BinaryReader, n: int, with_ids: bool) -> list[tuple[str, bytes]] | None:
    """The same items on a lean path that only accepts what `_plain_items` accepts; None
    (and `r` untouched) at the first doubt, so that path names the problem."""
    data, pos, end = r.data, r.pos, len(r.data)
    out = []
    try:
        for _ in range(n):
            txid = ""
            if with_ids:
                (size,) = _U16.unpack_from(data, pos)
                pos += 2 + size
                if pos > end:
                    return None
                txid = check_transaction_id(data[pos - size:pos].decode("utf-8"))
            (size,) = _U32.unpack_from(data, pos)
            pos += 4 + size
            if pos > end:
                return None
            payload = data[pos - size:pos]
            check_document(payload)
            out.append((txid, payload))
    except (struct.error, ValueError, TypeError):  # UnicodeDecodeError is a ValueError
        return None
    r.pos = pos
    return out


def _framed_groups(r: BinaryReader, limits: _Limits) -> list[PushItem]:
    items: list[PushItem] = []
    seen: set[bytes] = set()
    budget = limits.max_bytes
    # Each group takes at least 12 bytes: two str16, n and the blob's length.
    for g in range(r.count("group_count", 12)):
        queue, partition = _group_head(r, g)
        n = r.u32("n")
        limits.admit(n, r.subject)
        blob = r.blob32("frames")
        raw = _unzstd(r, blob, "frames", budget)
        budget -= len(raw)
        messages, as_sent = _frames_fast(raw, n, seen) or _frames(
            BinaryReader(raw, r.subject), g, n, seen)
        if as_sent:
            packed = PackedFrames(blob, n)
            for message in messages:
                message.packed = packed
        items += (PushItem(queue, partition, m) for m in messages)
    return items


def _frames_fast(raw: bytes, n: int, seen: set[bytes]) -> tuple[list[NewMessage], bool] | None:
    """The frames as the official client makes them (flags 0, a transactionId), on a lean
    path that only accepts what `_frames` accepts; None at the first doubt (anything else,
    a problem), and `_frames` then reads them field by field and names the problem."""
    end = len(raw)
    pos = 0
    ids: set[bytes] = set()
    messages: list[NewMessage] = []
    try:
        for _ in range(n):
            size, flags, raw_id, txid_size = _FRAME_HEAD.unpack_from(raw, pos)
            start = pos + _FRAME_HEAD.size
            pos += 4 + size
            if flags or pos > end or start + txid_size > pos or raw_id[6] >> 4 != 7 or \
                    raw_id[8] & 0xC0 != 0x80 or raw_id in seen or raw_id in ids:
                return None
            ids.add(raw_id)
            txid = check_transaction_id(raw[start:start + txid_size].decode("utf-8"))
            payload = raw[start + txid_size:pos]
            if not txid or not payload:
                return None
            check_document(payload)
            messages.append(NewMessage(uuid_of_int(int.from_bytes(raw_id)), txid, payload))
    except (struct.error, ValueError, TypeError):
        return None
    if pos != end:
        return None
    seen |= ids
    return messages, True


def _frames(r: BinaryReader, g: int, n: int, seen: set[bytes]) -> tuple[list[NewMessage], bool]:
    """The n storage frames (§7.1) of group g, exactly, field by field; answers the messages
    and whether the frames can be stored as they are."""
    messages: list[NewMessage] = []
    as_sent = True
    for i in range(n):
        r.where = ("groups[{}].frames[{}].", g, i)
        frame = BinaryReader(r.blob32("body"), r.subject)
        frame.where = r.where
        flags = frame.u8("flags")
        if flags & ~_FRAME_KNOWN_FLAGS:
            raise frame.fail(f"flags {flags} has unknown bits (known: 1 trace id, "
                             f"2 producerSub, 4 encrypted)")
        if flags & segments.FLAG_ENCRYPTED:
            raise frame.fail("flags mark it encrypted (4): a push carries plain JSON payloads")
        raw_id = frame.take(16, "id")
        if raw_id[6] >> 4 != 7 or raw_id[8] & 0xC0 != 0x80:
            raise frame.fail(f"id {uuid.UUID(bytes=raw_id)} is not a UUIDv7")
        if raw_id in seen:
            raise frame.fail(f"id {uuid.UUID(bytes=raw_id)} appears twice in this body")
        seen.add(raw_id)
        message_id = uuid.UUID(bytes=raw_id)
        trace = uuid.UUID(bytes=frame.take(16, "traceId")) \
            if flags & segments.FLAG_TRACE else None
        txid = _checked(frame, check_transaction_id, frame.text16("transactionId"),
                        "transactionId")
        if not txid:
            txid = str(message_id)  # the stored frame must then carry it: rebuilt
            as_sent = False
        if flags & segments.FLAG_PRODUCER:
            frame.text16("producerSub")  # never settable by a client (§9): dropped
            as_sent = False
        payload = frame.data[frame.pos:]
        messages.append(NewMessage(message_id, txid,
                                   _payload(frame, payload) if payload else b"null", trace))
    r.end(f"the {n} frames of groups[{g}] (decompressed)")
    return messages, as_sent
