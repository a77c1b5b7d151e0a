"""Which ack requests `Deliveries.match` takes for a whole delivery (core/engine/ack_spans.py):
exactly the delivered messages, each `completed` under the pop's lease, by its group and the
default tenant, in delivery order; anything else is None (the general path)."""

from __future__ import annotations

from core.engine.ack import AckItem, GroupAck, Status
from core.engine.ack_spans import Deliveries

SPANS = [(7, 10, 12), (9, 0, 1)]  # (partition, start, end) in the answer's order
IDS = ["a", "b", "c", "d", "e"]
PARTITIONS = ["7", "7", "7", "9", "9"]


def delivered(ids: list[str] = IDS, capacity: int = 8) -> Deliveries:
    deliveries = Deliveries(capacity)
    deliveries.remember("L", group="g", spans=SPANS, txids=[i.encode() for i in ids])
    return deliveries


def acks(ids: list[str] = IDS, *, partitions: list[str] = PARTITIONS,
         status: Status = "completed", lease: str | None = "L", group: str = "g",
         tenant: str = "") -> list[GroupAck]:
    return [GroupAck(group, AckItem(t, p, status, lease), tenant)
            for t, p in zip(ids, partitions)]


def test_the_whole_delivery_in_its_order_matches_every_span() -> None:
    whole = delivered().match(acks())
    assert whole is not None and whole.lease_id == "L"
    assert [(s.partition_id, s.start, s.end) for s in whole.delivery.spans] == SPANS


def test_anything_else_is_the_general_paths() -> None:
    deliveries = delivered()
    assert deliveries.match(acks(IDS[::-1])) is None  # another order
    assert deliveries.match(acks(IDS[:4], partitions=PARTITIONS[:4])) is None  # partial
    assert deliveries.match(acks(["a", "b", "c", "d", "forged"])) is None
    assert deliveries.match(acks(partitions=["7", "7", "9", "9", "9"])) is None
    assert deliveries.match(acks(partitions=["07", "7", "7", "9", "9"])) is None
    assert deliveries.match(acks(status="failed")) is None
    assert deliveries.match(acks(lease="M")) is None
    assert deliveries.match(acks(lease=None)) is None
    assert deliveries.match(acks(group="h")) is None
    assert deliveries.match(acks(tenant="t")) is None
    assert deliveries.match(acks(["a", "b", "c", "d", "\ud800"])) is None  # not UTF-8
    mixed = acks()
    mixed[2] = GroupAck("g", AckItem("c", "7", "retry", "L"), "")
    assert deliveries.match(mixed) is None
    assert deliveries.match([]) is None


def test_a_delivery_whose_ids_could_be_told_apart_wrongly_is_not_remembered() -> None:
    # A repeated id (a queue without deduplication): queen.ack resolves both to the first.
    assert len(delivered(["a", "b", "a", "d", "e"])) == 0
    # An id holding the separator: the joins of other ids could be equal.
    assert len(delivered(["a", "b\x1fc", "d", "e", "f"])) == 0
    # Fewer ids than the spans' offsets: not a whole delivery.
    assert len(delivered(IDS[:4])) == 0


def test_the_oldest_lease_is_forgotten_first_and_a_forgotten_one_matches_nothing() -> None:
    deliveries = delivered(capacity=2)
    for lease in ("M", "N"):
        deliveries.remember(lease, group="g", spans=SPANS, txids=[i.encode() for i in IDS])
    assert len(deliveries) == 2
    assert deliveries.match(acks()) is None  # "L" went first
    assert deliveries.match(acks(lease="M")) is not None
    deliveries.forget("M")
    assert deliveries.match(acks(lease="M")) is None


def test_the_ids_bytes_bound_what_is_remembered() -> None:
    one = len(b"".join(b"\x1f" + i.encode() for i in IDS))  # one delivery's joined ids
    deliveries = Deliveries(capacity=8, capacity_bytes=2 * one)
    for lease in ("L", "M", "N"):
        deliveries.remember(lease, group="g", spans=SPANS, txids=[i.encode() for i in IDS])
    assert len(deliveries) == 2 and deliveries.match(acks()) is None
    deliveries.forget("M")
    deliveries.forget("N")
    deliveries.remember("L", group="g", spans=SPANS, txids=[i.encode() for i in IDS])
    deliveries.remember("M", group="g", spans=SPANS, txids=[i.encode() for i in IDS])
    assert len(deliveries) == 2 and deliveries.match(acks()) is not None
