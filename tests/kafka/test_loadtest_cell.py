"""A short smoke of the Kafka load cell (`python -m loadtest kafka`): both paths move every
message once, unchanged (the gate), against the session's broker and listener."""

from __future__ import annotations

import asyncio
import uuid

from loadtest import kafka_cell
from tests.kafka.listener import KafkaListener
from tests.support import BrokerProcess


async def test_the_kafka_cell_runs_and_its_gate_passes(broker: BrokerProcess,
                                                       kafka: KafkaListener) -> None:
    figures = await asyncio.to_thread(
        kafka_cell.run, messages=300, partitions=2, rounds=1, connections=2, batch=50,
        workers=1, url=broker.url, bootstrap=kafka.bootstrap)
    assert figures["gate"] == "passed"
    assert figures["kafka_produce"]["median"] > 0 and figures["http_consume"]["median"] > 0


def test_the_gate_catches_a_changed_message(kafka: KafkaListener) -> None:
    """The gate is not a formality: a consumer expecting other bytes fails it."""
    topic = f"lt-gate-{uuid.uuid4().hex[:8]}"
    data = [b"{\"n\": %d}" % i for i in range(20)]
    kafka_cell._create_topic(kafka.bootstrap, topic, 1)
    kafka_cell.kafka_produce(kafka.bootstrap, topic, data, 1)
    import pytest
    with pytest.raises(kafka_cell.GateFailure, match="1 changed"):
        kafka_cell.kafka_consume(kafka.bootstrap, topic,
                                 [*data[:-1], b'{"n": -1}'], 1)
