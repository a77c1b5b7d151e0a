"""Tenants on the Kafka listener (docs/security/tenants.md): a connection is the tenant of
its SASL/PLAIN token's claim. Two tenants produce to one topic name and consume one group
name, and each sees its own topic, its own records, its own group and committed offsets; a
topic of another tenant is answered as one that does not exist, and a quota's caps and rates
hold there as on the HTTP side."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import PolicyViolationError

from tests.kafka.listener import KafkaListener
from tests.support import BrokerProcess, create_database
from tests.tokens import AUTH_ENV, AUTH_SECRET, Signer, bearer

SIGNER = Signer(AUTH_SECRET, "HS256")
ACME, GLOBEX = "acme", "globex"


@pytest.fixture(scope="module")
async def kafka_tenants_database(pg_server_url: str) -> str:
    return await create_database(pg_server_url)


@pytest.fixture(scope="module")
def tenant_kafka(kafka_tenants_database: str, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[KafkaListener]:
    log = tmp_path_factory.mktemp("kafka-tenants") / "kafka.log"
    env = {**AUTH_ENV, "QUEEN_TENANT_REFRESH_MS": "200"}
    with KafkaListener(kafka_tenants_database, env=env, log_path=Path(log)) as listener:
        yield listener
    assert "Traceback" not in log.read_text(errors="replace")


@pytest.fixture(scope="module")
def tenant_http(kafka_tenants_database: str) -> Iterator[BrokerProcess]:
    with BrokerProcess(kafka_tenants_database, workers=1, env=AUTH_ENV) as proc:
        yield proc


def _sasl(tenant: str | None, role: str = "admin") -> dict[str, str]:
    claims = {} if tenant is None else {"tenant": tenant}
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
            "sasl_plain_username": "someone",
            "sasl_plain_password": SIGNER.token(f"k-{tenant}", role=role, **claims)}


async def _produce(listener: KafkaListener, tenant: str, topic: str, *values: bytes) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=listener.bootstrap, **_sasl(tenant))
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, value)
    finally:
        await producer.stop()


async def _consume(listener: KafkaListener, tenant: str, topic: str, group: str,
                   count: int) -> list[bytes]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=listener.bootstrap, group_id=group,
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                **_sasl(tenant))
    await consumer.start()
    try:
        got: list[bytes] = []
        async with asyncio.timeout(30):
            while len(got) < count:
                batch = await consumer.getmany(timeout_ms=1000)
                got += [r.value for records in batch.values() for r in records]
        await consumer.commit()
        return got
    finally:
        await consumer.stop()


async def test_two_tenants_one_topic_and_one_group_each_their_own(
        tenant_kafka: KafkaListener, tenant_http: BrokerProcess) -> None:
    topic, group = f"orders-{uuid.uuid4().hex[:8]}", f"billing-{uuid.uuid4().hex[:8]}"
    await _produce(tenant_kafka, ACME, topic, b'"a1"', b'"a2"')
    await _produce(tenant_kafka, GLOBEX, topic, b'"g1"')
    assert await _consume(tenant_kafka, ACME, topic, group, 2) == [b'"a1"', b'"a2"']
    assert await _consume(tenant_kafka, GLOBEX, topic, group, 1) == [b'"g1"']
    admin = AIOKafkaAdminClient(bootstrap_servers=tenant_kafka.bootstrap, **_sasl(GLOBEX))
    await admin.start()
    try:
        groups = {g[0] for g in await admin.list_consumer_groups()}
        assert group in groups
        offsets = await admin.list_consumer_group_offsets(group)
        assert {tp.topic: meta.offset for tp, meta in offsets.items()} == {topic: 1}
    finally:
        await admin.close()
    # The same as seen over HTTP: one queue per tenant, each with its own cursor.
    async with httpx.AsyncClient(base_url=tenant_http.url) as http:
        for tenant, committed in ((ACME, 1), (GLOBEX, 0)):
            token = SIGNER.token("h", role="admin", tenant=tenant)
            r = await http.get(f"/api/v1/consumer-groups/{group}", headers=bearer(token))
            [part] = r.json()[topic]["partitions"]
            assert part["committedOffset"] == committed


async def test_another_tenants_topic_is_not_listed_and_its_records_are_not_read(
        tenant_kafka: KafkaListener) -> None:
    topic = f"acme-only-{uuid.uuid4().hex[:8]}"
    await _produce(tenant_kafka, ACME, topic, b'"secret"')
    admin = AIOKafkaAdminClient(bootstrap_servers=tenant_kafka.bootstrap, **_sasl(GLOBEX))
    await admin.start()
    try:
        assert topic not in await admin.list_topics()
    finally:
        await admin.close()
    # Reading the topic by name, globex reads nothing of acme's (the name is free for a
    # topic of its own).
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=tenant_kafka.bootstrap,
                                auto_offset_reset="earliest", group_id=None,
                                **_sasl(GLOBEX))
    await consumer.start()
    try:
        batch = await consumer.getmany(timeout_ms=3000)
        assert [r.value for rs in batch.values() for r in rs] == []
    finally:
        await consumer.stop()
    assert await _consume(tenant_kafka, ACME, topic, f"g-{uuid.uuid4().hex[:6]}", 1) == [
        b'"secret"']


async def test_a_tenants_queue_cap_refuses_a_topic_the_others_may_create(
        tenant_kafka: KafkaListener, tenant_http: BrokerProcess) -> None:
    capped = f"capped-{uuid.uuid4().hex[:6]}"
    operator = SIGNER.token("op", role="admin")
    async with httpx.AsyncClient(base_url=tenant_http.url) as http:
        r = await http.put(f"/api/v1/tenants/{capped}/quota", json={"maxQueues": 1},
                           headers=bearer(operator))
        assert r.status_code == 200, r.text
    await asyncio.sleep(1)  # the listener's next refresh (QUEEN_TENANT_REFRESH_MS=200)
    admin = AIOKafkaAdminClient(bootstrap_servers=tenant_kafka.bootstrap, **_sasl(capped))
    await admin.start()
    try:
        first = await admin.create_topics([NewTopic("first", 1, 1)])
        second = await admin.create_topics([NewTopic("second", 1, 1)])
    finally:
        await admin.close()
    assert _codes(first) == [0]
    assert _codes(second) == [PolicyViolationError.errno]
    other = AIOKafkaAdminClient(bootstrap_servers=tenant_kafka.bootstrap, **_sasl(GLOBEX))
    await other.start()
    try:
        made = await other.create_topics([NewTopic(f"second-{uuid.uuid4().hex[:6]}", 1, 1)])
    finally:
        await other.close()
    assert _codes(made) == [0]


def _codes(response: Any) -> list[int]:
    """The error code of each topic of a CreateTopics answer."""
    return [t[1] for t in response.topic_errors]
