"""An ack batch's items as the core takes them (broker/routes/ack.py `to_group_acks`): the
status word of each item parsed as `to_ack_item` parses it alone, whatever the other items
of the batch said (each distinct word is parsed once per batch)."""

from __future__ import annotations

import json
from typing import Any

from broker.routes.ack import to_ack_item, to_group_acks
from broker.wire.ack import decode_ack_batch


def test_each_item_keeps_its_own_status_group_lease_and_error() -> None:
    words: list[Any] = ["completed", "failed", True, False, None, "retry", "dlq", "OK",
                        "completed", True, "nonsense", False, " Retry ", "", None]
    items = []
    for k, word in enumerate(words):
        item = {"transactionId": f"t{k}", "partitionId": str(7 + k % 3), "status": word,
                "leaseId": "L" if k % 2 else "", "error": f"e{k}" if k % 4 == 0 else None}
        if k == 3:
            item["consumerGroup"] = "own"
        items.append(item)
    body = decode_ack_batch(json.dumps(
        {"consumerGroup": "g", "acknowledgments": items}).encode())
    made = to_group_acks(body.acknowledgments, "g", "tenant-a")
    assert [a.item for a in made] == [to_ack_item(i) for i in body.acknowledgments]
    assert [a.item.status for a in made] == [
        "completed", "failed", "completed", "failed", "completed", "retry", "dlq",
        "completed", "completed", "completed", "failed", "failed", "retry", "completed",
        "completed"]
    assert [a.group for a in made] == ["g", "g", "g", "own"] + ["g"] * 11
    assert {a.tenant for a in made} == {"tenant-a"}
