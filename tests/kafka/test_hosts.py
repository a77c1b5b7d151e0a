"""Several listeners (hosts) in one Kafka cluster: every one serves produce and fetch, one
elected listener coordinates the groups and FindCoordinator names it everywhere, so the
members of a group connected to different hosts form one group; when the coordinator stops,
another listener takes over and the group goes on."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.client import AIOKafkaClient

from tests.kafka.listener import KafkaListener
from tests.support import free_port


def _host(database_url: str, cluster: str, node: int, log: Path) -> KafkaListener:
    port = free_port()
    return KafkaListener(database_url, port=port, log_path=log, env={
        "QUEEN_KAFKA_CLUSTER": cluster, "QUEEN_KAFKA_NODE_ID": str(node),
        "QUEEN_KAFKA_ADVERTISED": f"127.0.0.1:{port}", "LOG_LEVEL": "info"})


async def _settle(a: AIOKafkaConsumer, b: AIOKafkaConsumer | None, total: int) -> None:
    async with asyncio.timeout(40):
        while True:
            parts = [a] if b is None else [a, b]
            await asyncio.gather(*(c.getmany(timeout_ms=300) for c in parts))
            assigned = [c.assignment() for c in parts]
            if all(assigned) and len(set().union(*assigned)) == total and \
                    sum(len(x) for x in assigned) == total:
                return


async def _each_lists_the_other(hosts: list[KafkaListener]) -> None:
    """Until every host's Metadata lists every host. A host lists the others it has seen
    lately; a client that first asked one that had not yet seen the other keeps only that
    host, and once it stops has nowhere left to ask (aiokafka does not go back to its
    bootstrap servers): the test would then wait for nothing."""
    async with asyncio.timeout(30):
        for host in hosts:
            while True:
                client = AIOKafkaClient(bootstrap_servers=host.bootstrap)
                await client.bootstrap()
                listed = {b.nodeId for b in client.cluster.brokers()}
                await client.close()
                if len(listed) == len(hosts):
                    break
                await asyncio.sleep(0.2)


async def test_one_group_across_two_hosts_and_a_coordinator_failover(
        database_url: str, tmp_path: Path) -> None:
    cluster, topic, group = f"c-{uuid.uuid4().hex[:6]}", f"h-{uuid.uuid4().hex[:8]}", \
        f"hg-{uuid.uuid4().hex[:8]}"
    first = _host(database_url, cluster, 1, tmp_path / "one.log").start()
    second = _host(database_url, cluster, 2, tmp_path / "two.log").start()
    try:
        await _each_lists_the_other([first, second])
        admin = AIOKafkaAdminClient(bootstrap_servers=second.bootstrap)
        await admin.start()
        await admin.create_topics([NewTopic(topic, 4, 1)])
        await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=second.bootstrap)
        await producer.start()
        for p in range(4):
            await producer.send_and_wait(topic, b"x", partition=p)
        await producer.stop()

        def member(host: KafkaListener) -> AIOKafkaConsumer:
            return AIOKafkaConsumer(topic, bootstrap_servers=host.bootstrap, group_id=group,
                                    auto_offset_reset="earliest", enable_auto_commit=False,
                                    heartbeat_interval_ms=300, session_timeout_ms=6000,
                                    retry_backoff_ms=100)

        on_first, on_second = member(first), member(second)
        await on_first.start()
        await on_second.start()
        try:
            await _settle(on_first, on_second, 4)  # one group: the partitions are split
            assert not on_first.assignment() & on_second.assignment()
            # The first listener was elected (it started first); it stops: the second
            # takes over, and the member bootstrapped there ends up with every partition.
            await on_first.stop()
            # Off the event loop, so the member left keeps heartbeating meanwhile; and
            # quickly: a stopping listener closes its idle connections (on_second's to the
            # coordinator is one) instead of waiting the 20 s grace for them.
            started = time.monotonic()
            await asyncio.to_thread(first.stop)
            assert time.monotonic() - started < 10
            await _settle(on_second, None, 4)
            await on_second.commit()
        finally:
            await on_second.stop()
        assert "coordinates the groups" in (tmp_path / "two.log").read_text()
    finally:
        first.stop()
        second.stop()
