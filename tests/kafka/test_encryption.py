"""Records produced through Kafka to an `encryptionEnabled` queue: sealed at rest (side-car
included, inside the seal), and read back exactly by Kafka and by a Queen client."""

from __future__ import annotations

import uuid
from pathlib import Path

import asyncpg
import httpx
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.kafka.listener import KafkaListener
from tests.support import BrokerProcess, configure, create_database, pop_json

KEY = "3c" * 32


async def test_kafka_records_in_an_encrypted_queue(pg_server_url: str, tmp_path: Path) -> None:
    database = await create_database(pg_server_url)
    topic = f"enc-{uuid.uuid4().hex[:8]}"
    env = {"QUEEN_ENCRYPTION_KEY": KEY}
    with BrokerProcess(database, workers=1, env=env) as web, \
            KafkaListener(database, env=env, log_path=tmp_path / "kafka.log") as kafka:
        async with httpx.AsyncClient(base_url=web.url, timeout=30) as http:
            await configure(http, topic, encryptionEnabled=True)
            producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap)
            await producer.start()
            try:
                await producer.send_and_wait(topic, b"secret text", key=b"k", partition=0,
                                             headers=[("h", b"v")], timestamp_ms=1_234_567)
            finally:
                await producer.stop()
            consumer = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap,
                                        auto_offset_reset="earliest")
            await consumer.start()
            try:
                consumer.assign([TopicPartition(topic, 0)])
                record = await consumer.getone()
            finally:
                await consumer.stop()
            assert (record.key, record.value, list(record.headers), record.timestamp) == (
                b"k", b"secret text", [("h", b"v")], 1_234_567)
            popped = await pop_json(http, topic, autoAck=True)
            assert popped is not None and popped["messages"][0]["data"] == "secret text"
    conn = await asyncpg.connect(database)
    try:
        blob = await conn.fetchval(
            "SELECT s.blob FROM queen.log_segments s JOIN queen.log_partitions p "
            "ON p.id = s.partition_id JOIN queen.queues q ON q.id = p.queue_id "
            "WHERE q.name = $1", topic)
    finally:
        await conn.close()
    assert blob[:4] == b"QSE\x01" and b"secret" not in blob and b"QKM1" not in blob
