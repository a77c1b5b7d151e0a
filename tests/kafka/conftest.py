"""A Kafka listener on the session's database, beside the session's HTTP broker."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from tests.kafka.listener import KafkaListener
from tests.kept import Kept


@contextlib.contextmanager
def _checked_listener(database_url: str, tmp_path_factory: pytest.TempPathFactory
                      ) -> Iterator[KafkaListener]:
    """A listener whose log must hold no traceback once it has stopped."""
    log = tmp_path_factory.mktemp("kafka") / "kafka.log"
    with KafkaListener(database_url, log_path=log) as listener:
        yield listener
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text


@pytest.fixture(scope="session")
def kafka(database_url: str, deployment: str, kept: Kept,
          tmp_path_factory: pytest.TempPathFactory) -> KafkaListener:
    # Kept for the session on each deployment, as the brokers are (tests/conftest.py).
    return kept.enter(deployment, "kafka",
                      lambda: _checked_listener(database_url, tmp_path_factory))
