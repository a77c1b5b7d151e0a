"""What a claim took after its pop had already answered, released at once.

A long poll's look that runs well past its deadline is abandoned and the pop answers empty
(core/engine/longpoll.py): a frozen server would otherwise hold the answer for the driver's
timeouts. On a server that is only slow, the look goes on and commits its claim later, and
nobody receives those messages; left alone they stay leased until the lease ends (the
queue's lease time, 300 s by default), long after every other message was delivered.

They are released as a consumer would release them: an ack `retry` of each claimed
partition's first message under the pop's lease id, which releases the lease without
spending the retry budget (the span is claimable again after the queue's retryDelay, as
after any retry). A pop that acknowledged on claim (autoAck) has nothing to release: its
cursor moved with the claim.
"""

from __future__ import annotations

from core.engine import ack as acks
from core.engine.pop import Delivered, PopRequest, PopResult


def retry_acks(request: PopRequest, result: PopResult) -> list[acks.GroupAck]:
    """The acks that release `result`'s claims (none for an autoAck pop)."""
    if request.auto_ack or result.lease_id is None:
        return []
    heads: dict[int, Delivered] = {}
    for message in result.messages():
        heads.setdefault(message.partition_id, message)
    return [acks.GroupAck(request.group,
                          acks.AckItem(m.frame.transaction_id, str(m.partition_id), "retry",
                                       result.lease_id),
                          request.tenant)
            for m in heads.values()]
