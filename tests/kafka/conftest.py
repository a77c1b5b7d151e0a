"""A Kafka listener on the session's database, beside the session's HTTP broker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kafka.listener import KafkaListener


@pytest.fixture(scope="session")
def kafka(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaListener]:
    log = tmp_path_factory.mktemp("kafka") / "kafka.log"
    with KafkaListener(database_url, log_path=log) as listener:
        yield listener
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text
