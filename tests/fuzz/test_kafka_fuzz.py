"""The Kafka port under random and mutated frames (tests/fuzz/kafka_frames.py), CI-sized:
no crash, no unexpected error in the log, and a real client still served afterwards."""

from __future__ import annotations

import os
import random
import uuid
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.fuzz.kafka_frames import fuzz
from tests.kafka.listener import KafkaListener

SECONDS = float(os.environ.get("KAFKA_FUZZ_SECONDS", "15"))


async def test_random_and_mutated_frames_find_no_crash(database_url: str,
                                                       tmp_path: Path) -> None:
    log = tmp_path / "kafka.log"
    seed = random.randrange(2**32)
    with KafkaListener(database_url, log_path=log, env={"LOG_LEVEL": "info"}) as kafka:
        tally = await fuzz(kafka.port, seconds=SECONDS, seed=seed,
                           topic=f"fuzz-{uuid.uuid4().hex[:8]}")
        assert kafka.alive(), f"seed {seed}: the listener died"
        assert tally.cases > 200 and tally.answered > 20 and tally.closed > 20, tally
        topic = f"after-fuzz-{uuid.uuid4().hex[:8]}"
        producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap)
        await producer.start()
        try:
            assert (await producer.send_and_wait(topic, b"still here")).offset == 0
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap,
                                    auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, 0)])
            assert (await consumer.getone()).value == b"still here"
        finally:
            await consumer.stop()
    text = log.read_text(errors="replace")
    assert "Traceback" not in text and "after an error" not in text, \
        f"seed {seed}:\n{text[-5000:]}"
