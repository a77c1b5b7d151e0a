"""`GET /api/v1/resources/queues/{queue}/depth?group=` (wire-protocol-extensions §21.2):
per partition `lastOffset - max(committed, logStart - 1)`; without a group the lowest
named group's cursor counts, the queue-mode cursor only where no named group has one."""

from __future__ import annotations

import httpx

from tests.support import push_items


async def _pop_and_ack(http: httpx.AsyncClient, queue: str, partition: str, n: int,
                       group: str | None, ack: bool = True) -> None:
    params = {"batch": str(n), "wait": "false", **({"consumerGroup": group} if group else {})}
    r = await http.get(f"/api/v1/pop/queue/{queue}/partition/{partition}", params=params)
    messages = r.json()["messages"]
    assert len(messages) == n
    if ack:
        r = await http.post("/api/v1/ack/batch", json={
            **({"consumerGroup": group} if group else {}), "acknowledgments": [
                {"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                 "status": "completed", "leaseId": m["leaseId"]} for m in messages]})
        assert all(e["success"] for e in r.json())


async def test_depth_counts_from_the_named_groups_before_the_queue_mode_cursor(
        http: httpx.AsyncClient, queue_name: str) -> None:
    await push_items(http, queue_name, list(range(5)), partition="A")
    await push_items(http, queue_name, list(range(3)), partition="B")
    await _pop_and_ack(http, queue_name, "A", 5, "g")  # g read all of A
    await _pop_and_ack(http, queue_name, "A", 2, None, ack=False)  # queue mode: leased only
    whole = (await http.get(f"/api/v1/resources/queues/{queue_name}/depth")).json()
    assert whole == {"queue": queue_name, "group": None, "pending": 3, "partitionsPending": 1,
                     "conflation": False, "effectivePending": 3,
                     "partitions": [{"partition": "A", "pending": 0},
                                    {"partition": "B", "pending": 3}]}
    of_g = (await http.get(f"/api/v1/resources/queues/{queue_name}/depth",
                           params={"group": "g"})).json()
    assert (of_g["group"], of_g["pending"], of_g["partitionsPending"]) == ("g", 3, 1)
    fresh = (await http.get(f"/api/v1/resources/queues/{queue_name}/depth",
                            params={"group": "nobody"})).json()
    assert [p["pending"] for p in fresh["partitions"]] == [5, 3]
    missing = await http.get(f"/api/v1/resources/queues/{queue_name}-x/depth")
    assert (missing.status_code, missing.json()) == (404, {"error": "Queue not found"})
