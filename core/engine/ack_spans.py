"""The ack of a whole delivery: a pop's acks committed without resolving each transactionId.

The common ack acknowledges, `completed` and under the pop's lease, every message a pop
delivered. `queen.ack` (schema/functions/40_ack.sql) would resolve each
transactionId to its offset (a key and an index probe per item) and run its loop over the
items, to decide what is known beforehand here: the cursor commits the span's end and the
lease is released. So the process that answered the pop remembers, per lease, the spans and
the transactionIds it delivered (`Deliveries`); an ack request that names exactly those,
in delivery order, is applied by `queen.ack_spans`, which checks under the cursor's lock
what only the database knows (the lease is still the live holder's, the cursor has not
moved since, the span is still retained) and answers what `queen.ack` would.

Why a memory of the answering process rather than a digest stored with the lease: it costs
the pop no write, and an ack that lands on another process (several web workers behind one
port), or after the memory let the lease go, takes the general path and gets the same
answer. In the cost cell's runs (two web workers) every ack landed on the process that
answered its pop, with the load tool's consumer and with the official client's `consume()`
(docs/benchmarks/history.md, "The ack of a whole delivery").

The delivered ids are kept as the stored bytes, each preceded by U+001F, and compared with
the request's ids joined the same way: one comparison instead of one per item. A delivery
whose ids hold U+001F, or repeat one (a queue without deduplication stores an id more than
once: `queen.ack` then resolves both items to the first occurrence), is not remembered, so
equal bytes mean the same ids item by item, each once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from core.engine.ack import AckOutcome, GroupAck

_SEPARATOR = "\x1f"
# Leases remembered at most, and the bytes of their ids (the oldest is forgotten first): a
# pop of 500 keeps about 20 KB; the bytes bound larger pops.
CAPACITY = 512
CAPACITY_BYTES = 32 << 20
# What `queen.ack` answers each item of a whole delivery acknowledged: applied, lease
# released (the commit reaches the lease's span end), no dead letter, nothing conflated.
WHOLE = AckOutcome(True, None, lease_released=True)


@dataclass(frozen=True, slots=True)
class Span:
    """The offsets [start, end] of one partition a pop delivered."""

    partition_id: int
    partition_text: str  # as the pop answer wrote it, as the acks send it back
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Delivery:
    """What one pop delivered under its lease: its spans, in the answer's order."""

    group: str
    spans: tuple[Span, ...]
    joined_txids: bytes  # each delivered transactionId as stored, preceded by U+001F
    count: int  # messages delivered


@dataclass(frozen=True, slots=True)
class WholeAck:
    """An ack request that acknowledges exactly the delivery `delivery` of `lease_id`."""

    lease_id: str
    delivery: Delivery


class Deliveries:
    """The deliveries of the latest pops this process answered, by lease id (at most
    CAPACITY). Only pops by the default tenant are remembered: any other ack takes the
    general path."""

    def __init__(self, capacity: int = CAPACITY, capacity_bytes: int = CAPACITY_BYTES) -> None:
        self._capacity = capacity
        self._capacity_bytes = capacity_bytes
        self._bytes = 0  # of the remembered deliveries' ids
        self._by_lease: OrderedDict[str, Delivery] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_lease)

    def remember(self, lease_id: str, *, group: str, spans: Sequence[tuple[int, int, int]],
                 txids: Sequence[bytes]) -> None:
        """Remember that `lease_id` delivered `spans` ((partition id, start, end) each, in
        the answer's order), whose stored transactionIds are `txids` (one per offset, in
        delivery order)."""
        count = sum(end - start + 1 for _, start, end in spans)
        joined = b"\x1f" + b"\x1f".join(txids)
        if (not txids or len(txids) != count or joined.count(b"\x1f") != count
                or len(set(txids)) != count):
            return  # not whole spans, or ids an equal join could not tell apart
        self.forget(lease_id)
        self._by_lease[lease_id] = Delivery(
            group, tuple(Span(pid, str(pid), start, end) for pid, start, end in spans),
            joined, count)
        self._bytes += len(joined)
        while len(self._by_lease) > self._capacity or self._bytes > self._capacity_bytes:
            _, oldest = self._by_lease.popitem(last=False)
            self._bytes -= len(oldest.joined_txids)

    def forget(self, lease_id: str) -> None:
        gone = self._by_lease.pop(lease_id, None)
        if gone is not None:
            self._bytes -= len(gone.joined_txids)

    def match(self, request: Sequence[GroupAck]) -> WholeAck | None:
        """The delivery `request` acknowledges whole (every item `completed` under its
        lease, by its group, the default tenant, its ids and partitions in delivery
        order), or None."""
        if not request:
            return None
        lease_id = request[0].item.lease_id
        if lease_id is None:
            return None
        delivery = self._by_lease.get(lease_id)
        if delivery is None or len(request) != delivery.count:
            return None
        group = delivery.group
        spans = iter(delivery.spans)
        left, partition = 0, ""
        for ack in request:
            if not left:
                span = next(spans)
                left, partition = span.end - span.start + 1, span.partition_text
            left -= 1
            item = ack.item
            if (item.status != "completed" or item.lease_id != lease_id
                    or item.partition_id != partition or ack.group != group or ack.tenant):
                return None
        try:
            sent = "".join([_SEPARATOR + a.item.transaction_id for a in request]).encode()
        except UnicodeEncodeError:  # a lone surrogate: no stored id is one
            return None
        if sent != delivery.joined_txids:
            return None
        return WholeAck(lease_id, delivery)
