"""Idempotent producers: InitProducerId, and the order check of their sequences.

Producer ids come from a database sequence (never handed out twice, on any host, across
restarts); an InitProducerId that names the producer's current id and epoch (KIP-360, how a
producer recovers) gets the same id with the next epoch. Transactional ids are refused with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which clients treat as fatal.

Durability of idempotence is the dedup of the write path (broker/kafka/produce.py): a resend
writes nothing and answers the original offsets. Beside it, this process remembers the next
sequence it expects per (producer, epoch, partition) to refuse a batch that skips ahead
(OUT_OF_ORDER_SEQUENCE_NUMBER: an earlier batch was lost, and the client must not have this
one written first) or comes from an older epoch (INVALID_PRODUCER_EPOCH). That memory is
per process and lost with it: after a restart the first batch of a producer is taken as it
comes, and only the dedup stands guard.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from broker.auth.access import Access
from broker.kafka import errors
from broker.kafka.protocol import Request, field_of
from broker.kafka.session import Session

_MAX_EPOCH = 32767
_REMEMBERED = 100_000  # (producer, partition) pairs whose next sequence is kept


async def init_producer_id(session: Session, request: Request) -> dict[str, Any]:
    body = request.body
    if body.transactional_id is not None:
        return {"throttle_time": 0, "producer_id": -1, "producer_epoch": -1,
                "error_code": errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    if not session.may(Access.WRITE_ONLY):
        return {"throttle_time": 0, "producer_id": -1, "producer_epoch": -1,
                "error_code": errors.CLUSTER_AUTHORIZATION_FAILED}
    current = field_of(body, "producer_id", -1)
    epoch = field_of(body, "producer_epoch", -1)
    if current >= 0 and 0 <= epoch < _MAX_EPOCH:
        return {"throttle_time": 0, "error_code": errors.NONE, "producer_id": current,
                "producer_epoch": epoch + 1}
    return {"throttle_time": 0, "error_code": errors.NONE,
            "producer_id": await session.broker.kafka.new_producer_id(), "producer_epoch": 0}


class Sequences:
    """The next sequence expected per (producer id, topic, partition), with its epoch."""

    def __init__(self, size: int = _REMEMBERED) -> None:
        self._next: OrderedDict[tuple[int, str, int], tuple[int, int]] = OrderedDict()
        self._size = size

    def check(self, producer_id: int, epoch: int, topic: str, partition: int,
              base_sequence: int) -> int:
        """The error code for a batch starting at `base_sequence` (NONE: write it; a
        resend of a written batch also passes, and the dedup answers it)."""
        known = self._next.get((producer_id, topic, partition))
        if known is None:
            return errors.NONE
        known_epoch, expected = known
        if epoch < known_epoch:
            return errors.INVALID_PRODUCER_EPOCH
        if epoch == known_epoch and base_sequence > expected:
            return errors.OUT_OF_ORDER_SEQUENCE_NUMBER
        return errors.NONE

    def written(self, producer_id: int, epoch: int, topic: str, partition: int,
                next_sequence: int) -> None:
        key = (producer_id, topic, partition)
        known = self._next.get(key)
        if known is not None and known[0] == epoch:
            next_sequence = max(next_sequence, known[1])
        self._next[key] = (epoch, next_sequence)
        self._next.move_to_end(key)
        while len(self._next) > self._size:
            self._next.popitem(last=False)


SEQUENCES = Sequences()  # the process's memory (the event loop is its only user)
