"""Long-poll pops (§4.2): woken across worker processes, 204 at the deadline, and dropped
when the client goes away.
"""

from __future__ import annotations

import asyncio
import json
import resource
import statistics
import time
import uuid

import asyncpg
import h11
import httpx

from tests.support import BrokerProcess, configure, cursor_row, pop_json, push_items

TRIALS = 10
PARK_SECONDS = 2.0


async def pinned_client(base_url: str) -> tuple[httpx.AsyncClient, int]:
    """A client with one keep-alive connection, hence always served by one worker process;
    answers it with that process's pid (from /metrics)."""
    client = httpx.AsyncClient(base_url=base_url, timeout=30,
                               limits=httpx.Limits(max_connections=1,
                                                   max_keepalive_connections=1))
    r = await client.get("/metrics")
    assert r.status_code == 200
    return client, int(r.json()["pid"])


async def clients_on_two_workers(base_url: str, parked: int) -> tuple[
        list[httpx.AsyncClient], httpx.AsyncClient]:
    """`parked` pinned clients served by one worker, and one pinned client served by another."""
    by_pid: dict[int, list[httpx.AsyncClient]] = {}
    for _ in range(400):
        client, pid = await pinned_client(base_url)
        by_pid.setdefault(pid, []).append(client)
        if len(by_pid) >= 2:
            pids = sorted(by_pid, key=lambda p: -len(by_pid[p]))
            if len(by_pid[pids[0]]) >= parked:
                keep, pusher = by_pid[pids[0]][:parked], by_pid[pids[1]][0]
                for c in [c for cs in by_pid.values() for c in cs
                          if c is not pusher and c not in keep]:
                    await c.aclose()
                return keep, pusher
    raise AssertionError(f"could not reach two worker processes: {list(by_pid)}")


async def test_long_poll_answers_within_100ms_of_a_push_made_through_another_worker(
        broker: BrokerProcess) -> None:
    """Method: each connection is served by exactly one hypercorn worker process, and the
    `/metrics` answer names that process's pid. So `TRIALS` parked pops are opened on
    connections of worker A, and every push goes through one connection of worker B; the
    wake-up must therefore cross processes (LISTEN/NOTIFY). The pops are parked for 2 s
    first: by then the broker's re-check backoff has grown to ~1 s, so a re-check alone would
    answer ~500 ms after a push on average; a median under 100 ms can only come from the
    wake-up. Latency = pop answer received − push answer received, per queue (one queue per
    trial, so trials do not interfere). The median must be < 100 ms, the max < 1 s (a shared
    CI machine may stall one trial; a missed wake-up would show up in the median)."""
    parked, pusher = await clients_on_two_workers(broker.url, TRIALS)
    queues = ["lp-" + uuid.uuid4().hex[:10] for _ in range(TRIALS)]
    try:
        for q in queues:  # create the queues (so the pops know which queue to wait for)
            await push_items(pusher, q, ["seed"], prefix="seed")
            assert await pop_json(pusher, q, autoAck=True) is not None
        answered: dict[str, float] = {}

        async def park(client: httpx.AsyncClient, q: str) -> httpx.Response:
            r = await client.get(f"/api/v1/pop/queue/{q}",
                                 params={"wait": "true", "timeout": 15000, "batch": 1})
            answered[q] = time.monotonic()
            return r

        tasks = [asyncio.create_task(park(c, q)) for c, q in zip(parked, queues)]
        await asyncio.sleep(PARK_SECONDS)
        assert not any(t.done() for t in tasks)
        latencies = []
        for q, task in zip(queues, tasks):
            await push_items(pusher, q, [{"q": q}], prefix="live")
            pushed = time.monotonic()
            r = await asyncio.wait_for(task, 20)
            assert r.status_code == 200, r.text
            assert r.json()["messages"][0]["data"] == {"q": q}
            latencies.append(answered[q] - pushed)
        ms = sorted(x * 1000 for x in latencies)
        assert statistics.median(ms) < 100, ms
        assert ms[-1] < 1000, ms
    finally:
        for c in [*parked, pusher]:
            await c.aclose()


async def test_long_poll_answers_204_at_its_timeout(
        http: httpx.AsyncClient, queue_name: str) -> None:
    await push_items(http, queue_name, ["only"])
    assert await pop_json(http, queue_name, autoAck=True) is not None
    for path, params in ((f"/api/v1/pop/queue/{queue_name}", {}),
                         (f"/api/v1/pop/queue/{queue_name}-unknown", {}),
                         ("/api/v1/pop", {"namespace": queue_name})):
        started = time.monotonic()
        r = await http.get(path, params={"wait": "true", "timeout": 1200, **params})
        elapsed = time.monotonic() - started
        assert r.status_code == 204 and r.content == b""
        assert 1.15 <= elapsed < 2.2, (path, elapsed)


async def test_wait_false_answers_at_once_and_timeout_zero_does_not_park(
        http: httpx.AsyncClient, queue_name: str) -> None:
    for params in ({"wait": "false", "timeout": 10000}, {"wait": "true", "timeout": 0}):
        started = time.monotonic()
        r = await http.get(f"/api/v1/pop/queue/{queue_name}", params=params)
        assert r.status_code == 204
        assert time.monotonic() - started < 0.8


async def test_discovery_long_poll_is_woken_by_a_push_to_a_matching_queue(
        http: httpx.AsyncClient) -> None:
    ns = "lpns" + uuid.uuid4().hex[:8]
    task = asyncio.create_task(http.get("/api/v1/pop", params={
        "namespace": ns, "wait": "true", "timeout": 10000}))
    await asyncio.sleep(0.3)
    assert not task.done()
    started = time.monotonic()
    await push_items(http, f"{ns}.t.q", ["found"])
    r = await asyncio.wait_for(task, 12)
    assert r.status_code == 200
    assert r.json()["messages"][0]["data"] == "found"
    assert time.monotonic() - started < 5


async def test_client_disconnect_drops_the_parked_pop_and_takes_no_lease(
        broker: BrokerProcess, db: asyncpg.Connection, queue_name: str) -> None:
    async with httpx.AsyncClient(base_url=broker.url, timeout=30) as http:
        await push_items(http, queue_name, ["seed"], prefix="seed")
        assert await pop_json(http, queue_name, consumerGroup="g", autoAck=True) is not None
    leaver = httpx.AsyncClient(base_url=broker.url, timeout=30)
    parked = asyncio.create_task(leaver.get(
        f"/api/v1/pop/queue/{queue_name}",
        params={"wait": "true", "timeout": 20000, "consumerGroup": "g"}))
    await asyncio.sleep(0.5)
    parked.cancel()  # the client gives up: httpx closes the connection
    await asyncio.gather(parked, return_exceptions=True)
    await leaver.aclose()
    await asyncio.sleep(0.3)
    async with httpx.AsyncClient(base_url=broker.url, timeout=30) as http:
        await push_items(http, queue_name, ["after"], prefix="after")
        await asyncio.sleep(1.0)  # time for a still-parked pop to wake up and claim it
        row = await cursor_row(db, queue_name, "g")
        assert row is not None
        assert (row["worker_id"], row["committed"]) == (None, 0)
        body = await pop_json(http, queue_name, consumerGroup="g")
        assert body is not None and body["messages"][0]["data"] == "after"


async def test_parked_pop_of_the_group_is_woken_when_a_failed_ack_releases_the_span(
        http: httpx.AsyncClient, queue_name: str) -> None:
    await configure(http, queue_name, retryDelay=0)  # redelivery at once
    await push_items(http, queue_name, ["work"])
    held = await pop_json(http, queue_name, consumerGroup="g")
    assert held is not None
    async with httpx.AsyncClient(base_url=str(http.base_url), timeout=30) as other:
        parked = asyncio.create_task(other.get(
            f"/api/v1/pop/queue/{queue_name}",
            params={"wait": "true", "timeout": 10000, "consumerGroup": "g"}))
        # Re-checks then happen at ~2.7 s and ~3.7 s: answering within 0.4 s of the release
        # at ~2.8 s takes the wake-up that the release announces.
        await asyncio.sleep(2.8)
        assert not parked.done()
        m = held["messages"][0]
        r = await http.post("/api/v1/ack", json={
            "transactionId": m["transactionId"], "partitionId": m["partitionId"],
            "leaseId": m["leaseId"], "status": "failed", "consumerGroup": "g"})
        assert r.json()[0]["leaseReleased"] is True
        released = time.monotonic()
        r = await asyncio.wait_for(parked, 12)
        assert r.status_code == 200
        assert r.json()["messages"][0]["data"] == "work"
        assert time.monotonic() - released < 0.4


async def _raw_get(port: int, target: str) -> tuple[int, bytes, float]:
    """One GET on its own connection, without a client library's pool: answers the status,
    the body and the seconds from sending the request to the end of the answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    conn = h11.Connection(h11.CLIENT)
    writer.write(conn.send(h11.Request(method="GET", target=target, headers=[("Host", "q")])))
    sent = time.monotonic()
    status, body = 0, b""
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(65536))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                return status, body, time.monotonic() - sent
    finally:
        writer.close()


async def test_500_parked_polls_get_every_push_once_and_the_rest_answer_at_their_timeout(
        broker: BrokerProcess, queue_name: str) -> None:
    """500 long polls parked on their own connections (both workers), then 200 pushes of one
    message each to 200 partitions: every message reaches exactly one poll, the 300 others
    answer 204 at their timeout (not before, and not held long after), nothing else. The same
    held at 2,000 polls and 1,000 pushes (figures in the commit that added this test).

    The polls' timeout leaves room for the pushes on a loaded machine: they ended 2.7 s after
    the polls were sent on a quiet one, up to 8.2 s beside three busy loops (on a machine
    shared with other work), and with a 4 s timeout the last of them came after the polls
    had answered 204 (messages left in the queue: a failure of the test's timing, not of the
    broker). So the pushes' window is measured and must end 1 s before the earliest poll's
    deadline, or the test says so instead of blaming delivery."""
    polls, pushes, timeout_ms = 500, 200, 12_000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4 * polls:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4 * polls), hard))
    target = f"/api/v1/pop/queue/{queue_name}?wait=true&timeout={timeout_ms}&batch=1"
    async with asyncio.timeout(timeout_ms / 1000 + 30):
        # No poll is sent before this, so none's deadline comes before it + the timeout.
        parking = time.monotonic()
        parked = [asyncio.create_task(_raw_get(broker.port, target)) for _ in range(polls)]
        await asyncio.sleep(1.0)  # connected and parked
        sent = [f"m{i}" for i in range(pushes)]
        limits = httpx.Limits(max_connections=20)
        async with httpx.AsyncClient(base_url=broker.url, timeout=30, limits=limits) as http:
            async def push(i: int) -> None:
                r = await http.post("/api/v1/push", json={"items": [
                    {"queue": queue_name, "partition": f"p{i}", "payload": {"i": i},
                     "transactionId": sent[i]}]})
                assert r.status_code == 201 and r.json()[0]["status"] == "queued", r.text
            await asyncio.gather(*(push(i) for i in range(pushes)))
        pushed_by = time.monotonic() - parking
        answers = await asyncio.gather(*parked)
    # The last pushes' wake-ups and pops need time before the polls give up: without it a
    # message left in the queue would say nothing about the broker.
    assert pushed_by <= timeout_ms / 1000 - 1, (
        f"the pushes ended {pushed_by:.1f} s after the polls were sent, too near their "
        f"{timeout_ms / 1000:.0f} s timeout: the machine is too slow for this test to judge")
    delivered = [m["transactionId"] for status, body, _ in answers if status == 200
                 for m in json.loads(body)["messages"]]
    assert sorted(delivered) == sorted(sent)  # none lost, none twice
    waited = [seconds for status, _, seconds in answers if status == 204]
    assert len(waited) == polls - pushes, sorted({status for status, _, _ in answers})
    # The broker's clock starts when it reads the request, a little after it was sent.
    assert timeout_ms / 1000 - 0.1 <= min(waited) and max(waited) <= timeout_ms / 1000 + 3
