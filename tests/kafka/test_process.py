"""The Kafka listener as a supervised process of `serve`: started by --kafka-port, off by
default, restarted when it dies while the web workers keep serving."""

from __future__ import annotations

import os
import signal
import socket
import uuid
from pathlib import Path

import httpx
from aiokafka import AIOKafkaProducer

from tests.served import Served, eventually
from tests.support import free_port


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


async def _produce(port: int, topic: str) -> int:
    producer = AIOKafkaProducer(bootstrap_servers=f"127.0.0.1:{port}")
    await producer.start()
    try:
        return int((await producer.send_and_wait(topic, b"x")).offset)
    finally:
        await producer.stop()


async def test_serve_runs_a_listener_that_is_restarted_alone(database_url: str,
                                                              tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    served = Served(log, workers=1, env={"DATABASE_URL": database_url})
    served.argv = [*served.argv, "--kafka-port", str(port)]
    with served:
        (listener,) = await eventually(lambda: served.children("kafka"), timeout=15)
        await eventually(lambda: _listening(port), timeout=30)
        topic = f"proc-{uuid.uuid4().hex[:8]}"
        assert await _produce(port, topic) == 0
        web = served.children("web")
        os.kill(listener, signal.SIGKILL)
        async with httpx.AsyncClient(base_url=served.url, timeout=5) as http:
            assert (await http.get("/health")).status_code == 200  # the web side serves on
            (again,) = await eventually(
                lambda: (k := served.children("kafka")) and listener not in k and k,
                timeout=20)
            assert again != listener
            assert served.children("web") == web  # no web worker was touched
            assert f"kafka listener (pid {listener} was killed by SIGKILL)" in served.log()
            await eventually(lambda: _listening(port), timeout=30)
            assert await _produce(port, topic) == 1
            assert (await http.get("/health")).status_code == 200


async def test_serve_without_a_kafka_port_runs_no_listener(database_url: str,
                                                           tmp_path: Path) -> None:
    with Served(tmp_path / "serve.log", workers=1, env={"DATABASE_URL": database_url}) as s:
        assert s.children("web") and not s.children("kafka")


async def test_a_listener_that_keeps_dying_never_stops_the_broker(database_url: str,
                                                                  tmp_path: Path) -> None:
    """Its port taken: the listener dies at each start, past the restart limit that stops
    the broker for an essential process; the HTTP side serves on."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        served = Served(tmp_path / "serve.log", workers=1, env={
            "DATABASE_URL": database_url, "SUPERVISOR_MAX_RESTARTS": "1"})
        served.argv = [*served.argv, "--kafka-port", str(port)]
        with served:
            await eventually(lambda: "kafka listener keeps dying" in served.log(), timeout=60)
            async with httpx.AsyncClient(base_url=served.url, timeout=5) as http:
                assert (await http.get("/health")).status_code == 200
            assert served.proc is not None and served.proc.poll() is None
