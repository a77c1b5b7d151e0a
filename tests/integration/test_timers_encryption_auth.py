"""Timers and the message's trust fields: a timer of an `encryptionEnabled` queue is sealed
at schedule (the stored row holds no payload bytes, peek says `encrypted`) and its fired
message is sealed in its segment like a push's, yet popped as sent; with auth on, the fired
message carries the scheduler's JWT `sub` as `producerSub`, whatever the body claims."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import asyncpg
import httpx
import pytest
from queen import Queen

from core.engine import encryption
from tests.support import BrokerProcess, configure, create_database, pop_json, wait_for
from tests.timer_support import FirerProcess
from tests.tokens import AUTH_SECRET, Signer

KEY = "3c" * 32
SECRET_TEXT = "card-4111-timer"


@pytest.fixture(scope="module")
async def key_database(pg_server_url: str) -> str:
    # A database of its own: one that saw a key refuses brokers without it.
    return await create_database(pg_server_url)


@pytest.fixture(scope="module")
def key_broker(key_database: str) -> Iterator[BrokerProcess]:
    env = {"QUEEN_ENCRYPTION_KEY": KEY}
    with BrokerProcess(key_database, workers=1, env=env) as proc, \
            FirerProcess(key_database, **env):
        yield proc


async def test_an_encrypted_queue_seals_the_timer_and_its_fired_message(
        key_broker: BrokerProcess, key_database: str, queue_name: str) -> None:
    async with httpx.AsyncClient(base_url=key_broker.url, timeout=30) as http, \
            Queen(key_broker.url) as queen:
        await configure(http, queue_name, encryptionEnabled=True)
        done = await queen.timers.schedule(queue_name, "k", {"secret": SECRET_TEXT},
                                           delay_ms=2000)
        peeked = await queen.timers.peek(queue_name, "k")
        assert peeked["encrypted"] is True
        stored = base64.b64decode(peeked["payload"])
        assert encryption.is_sealed(stored) and SECRET_TEXT.encode() not in stored
        conn = await asyncpg.connect(key_database)
        try:
            row = await conn.fetchval("SELECT payload FROM queen.timers WHERE queue = $1",
                                      queue_name)
            assert SECRET_TEXT.encode() not in row
            popped = await wait_for(lambda: pop_json(http, queue_name), timeout=20, interval=0.2)
            [message] = popped["messages"]
            assert message["data"] == {"secret": SECRET_TEXT}
            assert message["transactionId"] == done["txn"]
            blobs = await conn.fetch(
                """SELECT s.blob FROM queen.log_segments s JOIN queen.log_partitions p
                     ON p.id = s.partition_id JOIN queen.queues q ON q.id = p.queue_id
                    WHERE q.name = $1""", queue_name)
            assert blobs and all(encryption.is_sealed(b["blob"]) for b in blobs)
        finally:
            await conn.close()


@pytest.fixture(scope="module")
def auth_firer(database_url: str, auth_broker: BrokerProcess) -> Iterator[FirerProcess]:
    with FirerProcess(database_url) as proc:
        yield proc


async def test_the_fired_message_carries_the_schedulers_sub(
        auth_broker: BrokerProcess, auth_firer: FirerProcess, queue_name: str) -> None:
    signer = Signer(AUTH_SECRET, "HS256")
    writer = signer.token("svc-billing", role="write-only")
    reader = signer.token("ops", role="read-write")
    async with httpx.AsyncClient(base_url=auth_broker.url, timeout=30) as http:
        op = {"op": "schedule", "queue": queue_name, "timerKey": "k", "txn": "tx-sub",
              "delayMs": 0, "payload": base64.b64encode(json.dumps({"n": 1}).encode()).decode()}
        r = await http.post("/api/v1/timers", json=[op])
        assert r.status_code == 401  # scheduling needs a token
        r = await http.post("/api/v1/timers", json=[op],
                            headers={"authorization": f"Bearer {writer}"})
        assert r.status_code == 200 and r.json()["results"][0]["status"] == "scheduled", r.text
        r = await http.post("/api/v1/timers", json=[{**op, "producerSub": "forged"}],
                            headers={"authorization": f"Bearer {writer}"})
        assert r.status_code == 400 and r.json()["reason"] == "timers_server_owned_field"
        as_reader = {"authorization": f"Bearer {reader}"}

        async def popped() -> dict | None:  # type: ignore[type-arg]
            r = await http.get(f"/api/v1/pop/queue/{queue_name}",
                               params={"wait": "false"}, headers=as_reader)
            return r.json() if r.status_code == 200 else None
        answer = await wait_for(popped, timeout=20, interval=0.2)
        [message] = answer["messages"]
        assert (message["transactionId"], message["producerSub"]) == ("tx-sub", "svc-billing")
