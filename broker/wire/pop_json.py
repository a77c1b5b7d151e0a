"""The JSON pop answer's messages (§3, §4.2), spliced from the stored frames.

Each delivered message is an object of the keys of `PoppedMessage`, in its order (ten, and
`traceparent` after them for a message that has a trace: core/tracing.py). Its bytes
are put together from its storage frame as stored: the payload is the stored JSON (never
decoded and encoded again), the ids are written as text, a transactionId or producerSub
that needs no escaping goes in as stored, and the five keys every message of a segment
shares (createdAt, partitionId, partition, leaseId, consumerGroup) are encoded once per
segment. The bytes are those msgspec writes for the same `PoppedMessage`s
(tests/unit/test_pop_json.py compares them), without a Python object per message.
"""

from __future__ import annotations

import binascii
import re

import msgspec

from broker.wire.pop import PopAnswer, PopHead
from core import segments
from core.errors import SegmentError
from core.timefmt import iso
from core.types import PopResult

# What a JSON string must escape (msgspec escapes exactly these).
_NEEDS_ESCAPE = re.compile(rb'[\x00-\x1f"\\]')
_encode = msgspec.json.encode


def messages_array(result: PopResult, *, lease_id: str, group: str,
                   txids: list[bytes] | None = None) -> bytes:
    """The `messages` array of the JSON answer to `result`'s delivery; `txids`, when given,
    receives each delivered message's stored transactionId, in delivery order."""
    out: list[bytes] = []
    add = out.append
    hexlify, escapes = binascii.hexlify, _NEEDS_ESCAPE.search
    # (str(): names arrive as the checked str subclasses of broker/wire/types.py)
    lease_and_group = (b',"leaseId":' + _encode(str(lease_id)) + b',"consumerGroup":'
                       + _encode(str(group)))
    for claim, seg, raw, first, last in result.spans():
        shared = (b',"createdAt":"' + iso(seg.created_at).encode() + b'","partitionId":"'
                  + str(claim.partition_id).encode() + b'","partition":'
                  + _encode(str(claim.partition)) + lease_and_group)
        for mid, trace, txid, sub, payload in segments.iter_frame_parts(raw, first, last):
            if txids is not None:
                txids.append(txid)
            h = hexlify(mid)
            # One formatting per message: a message costs one piece of the join, not twelve;
            # the transactionId is checked inline as `_string` checks it (most need no
            # escaping).
            add(_MESSAGE % (
                h[:8], h[8:12], h[12:16], h[16:20], h[20:],
                b'"' + txid + b'"' if txid.isascii() and escapes(txid) is None
                else _string(txid),
                b"null" if trace is None else b'"' + _uuid_text(trace) + b'"',
                payload or b"null", b"null" if sub is None else _string(sub), shared,
                # The consumer continues the message's trace from the message's own span
                # (its id: the message id's last 8 bytes, core/tracing.py message_span_id).
                b"}," if trace is None else
                b',"traceparent":"00-' + hexlify(trace) + b"-" + h[16:] + b'-01"},'))
    if out:
        out[-1] = out[-1][:-1]  # the last object's comma
        return b"[" + b"".join(out) + b"]"
    return b"[]"


_MESSAGE = (b'{"id":"%b-%b-%b-%b-%b","transactionId":%b,"traceId":%b,"data":%b,'
            b'"producerSub":%b%b%b')


def _uuid_text(raw: bytes) -> bytes:
    h = binascii.hexlify(raw)
    return b"%b-%b-%b-%b-%b" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])


def _string(utf8: bytes) -> bytes:
    """A stored UTF-8 text as a JSON string."""
    if utf8.isascii() and _NEEDS_ESCAPE.search(utf8) is None:
        return b'"' + utf8 + b'"'
    try:
        return _encode(utf8.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise SegmentError(f"malformed frame: {exc}") from exc


class SplicedPopAnswer(PopHead):
    """`PopAnswer` with its `messages` array already encoded (`messages_array`): the same
    keys in the same order (tests/unit/test_pop_json.py holds them together)."""

    messages: msgspec.Raw
    partitionsClaimed: int
    autopilot: object = msgspec.UNSET
    conflation: object = msgspec.UNSET
    conflationConflict: object = msgspec.UNSET
    paused: object = msgspec.UNSET


def spliced(answer: PopAnswer, messages: bytes) -> SplicedPopAnswer:
    """`answer` (whose own `messages` are ignored) with `messages` as its array."""
    return SplicedPopAnswer(
        answer.success, answer.queue, answer.partition, answer.partitionId, answer.leaseId,
        answer.consumerGroup, msgspec.Raw(messages), answer.partitionsClaimed,
        answer.autopilot, answer.conflation, answer.conflationConflict, answer.paused)
