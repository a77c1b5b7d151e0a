"""The DLQ variant of docs/architecture/reliability.md, without faults (the fault runs repeat it under faults):
retry budget 2; `poison` messages always fail, `dlq_now` ones are dead-lettered at once,
`flaky` ones fail once then succeed. Every message ends exactly once, completed xor
dead-lettered, checked against the DLQ table, the DLQ route and the cursors."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import httpx

from loadtest.faults import dlq, snapshot
from loadtest.faults.checker import Inputs, check, verdict
from loadtest.faults.consumer import ConsumerConfig
from loadtest.faults.journal import read_all
from loadtest.faults.producer import Producer, ProducerConfig
from tests.support import BrokerProcess, configure

GROUPS = ["g1", "g2"]
LEASE = 10
RETRY_DELAY_MS = 100


async def test_every_message_ends_completed_xor_dead_lettered_exactly_once(
        broker: BrokerProcess, http: httpx.AsyncClient, database_url: str, queue_name: str,
        tmp_path: Path) -> None:
    # A short retryDelay (default 1 s): each poison message waits it out twice, one after the
    # other in its partition, which was most of this test's time. The delay itself still
    # applies (the default one in the fault runs; tests/integration/test_queue_options.py).
    await configure(http, queue_name, leaseTime=LEASE, retryLimit=dlq.RETRY_LIMIT,
                    retryDelay=RETRY_DELAY_MS)
    stop = tmp_path / "stop"
    producer = Producer(ProducerConfig(
        name="d0", urls=[broker.url], queue=queue_name, partitions=["D0", "D1", "D2"],
        run_dir=str(tmp_path), seed=3, rate=100, max_items=5, dup_prob=0.0,
        stop_file=str(tmp_path / "never"), count=40))
    groups = [asyncio.create_task(dlq.run_group(ConsumerConfig(
        name=f"dlq-{g}", group=g, urls=[broker.url], queue=queue_name, lease_seconds=LEASE,
        run_dir=str(tmp_path), seed=11 + i, stop_file=str(stop),
        drain_file=str(tmp_path / "drain"), poll_timeout_ms=500, max_batch=5,
        max_partitions=2), tasks=2)) for i, g in enumerate(GROUPS)]
    try:
        await producer.run()
        for _ in range(240):
            if await snapshot.drained(database_url, [queue_name], GROUPS):
                break
            await asyncio.sleep(0.25)
    finally:
        stop.touch()
        await asyncio.wait_for(asyncio.gather(*groups), 30)

    snap = await snapshot.take(database_url, [queue_name])
    totals = {}
    for g in GROUPS:
        r = await http.get("/api/v1/dlq", params={"queue": queue_name, "consumerGroup": g})
        totals[g] = r.json()["total"]
    figures, _table, examples = check(Inputs(
        list(read_all(tmp_path)), snap, LEASE, queue_name, GROUPS, queue_name, totals,
        dlq.kind_of))
    assert verdict(figures) == [], (figures, examples)

    stored = snap.stored[queue_name]
    kinds = Counter(dlq.kind_of(s.transaction_id) for s in stored)
    assert len(stored) >= 40 and min(kinds.values()) >= 3, kinds  # every kind took part
    dead = kinds["poison"] + kinds["dlq_now"]
    assert totals == {g: dead for g in GROUPS}
    rows = snap.dlq[queue_name]
    assert sorted(r["retry_count"] for r in rows if dlq.kind_of(r["transaction_id"]) == "poison"
                  ) == [dlq.RETRY_LIMIT] * (2 * kinds["poison"])
    assert all(r["error"] in ("harness: failed", "harness: dlq") for r in rows)
