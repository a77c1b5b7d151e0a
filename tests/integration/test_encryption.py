"""Encryption at rest (QUEEN_ENCRYPTION_KEY, `encryptionEnabled`) against a real broker and
PostgreSQL: what is stored holds no payload bytes, and every reader answers the original.

One broker with a key runs on a database of its own (a database that saw a key refuses a
broker without it, so the session's shared database must never see one).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import httpx
import pytest
from queen.http.pop_frames import decode_pop_frames
from queen.http.push_binary import (
    PushBatch,
    encode_push_binary,
    encode_push_frames,
    encode_transaction_frames,
)

from core import segments
from core.engine import encryption
from tests.integration.test_binary_frames import framed, post_binary
from tests.integration.test_stream_cycles import _ack, cycle, register, runner_pop
from tests.support import (
    PYTHON,
    ROOT,
    BrokerProcess,
    configure,
    create_database,
    fetch_records,
    free_port,
    pop_json,
)

KEY = "5e" * 32
OTHER_KEY = "a7" * 32


@pytest.fixture(scope="module")
async def key_database(pg_server_url: str) -> str:
    return await create_database(pg_server_url)


@pytest.fixture(scope="module")
def key_broker(key_database: str) -> Iterator[BrokerProcess]:
    with BrokerProcess(key_database, workers=2, reaper=False,
                       env={"QUEEN_ENCRYPTION_KEY": KEY}) as proc:
        yield proc


@pytest.fixture
async def enc(key_broker: BrokerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=key_broker.url, timeout=30) as client:
        yield client


@pytest.fixture
async def raw(key_database: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(key_database)
    try:
        yield conn
    finally:
        await conn.close()


def secret(n: int) -> dict[str, Any]:
    """A payload whose bytes are unmistakable in a dump."""
    return {"card": f"SECRET-PAN-4111-{n:04d}", "note": "plaintext-must-not-be-stored"}


MARKERS = (b"SECRET-PAN", b"plaintext-must-not-be-stored")


def plaintext_in(blob: bytes) -> bool:
    """Whether a stored blob shows payload bytes, as stored or once decompressed."""
    views = [blob]
    if blob[:4] == segments.ZSTD_MAGIC:
        views.append(segments.decompress(blob))
    return any(m in v for m in MARKERS for v in views)


async def stored_blobs(conn: asyncpg.Connection, queue: str, table: str = "log_segments"
                       ) -> list[bytes]:
    assert table in ("log_segments", "log_dlq_segments")
    rows = await conn.fetch(
        f"""SELECT s.blob FROM queen.{table} s
              JOIN queen.log_partitions p ON p.id = s.partition_id
              JOIN queen.queues q ON q.id = p.queue_id
             WHERE q.name = $1 ORDER BY s.base_offset""", queue)
    return [bytes(r["blob"]) for r in rows]


async def push_json(client: httpx.AsyncClient, queue: str, payloads: list[Any],
                    prefix: str = "t") -> None:
    r = await client.post("/api/v1/push", json={"items": [
        {"queue": queue, "payload": p, "transactionId": f"{prefix}{i}"}
        for i, p in enumerate(payloads)]})
    assert r.status_code == 201 and {e["status"] for e in r.json()} == {"queued"}, r.text


# --- every reader answers the original; nothing readable is stored -----------------------

async def test_an_encrypted_queue_stores_no_payload_bytes_and_every_reader_decrypts(
        enc: httpx.AsyncClient, raw: asyncpg.Connection, queue_name: str) -> None:
    await configure(enc, queue_name, encryptionEnabled=True, retryLimit=0)
    sent = [secret(i) for i in range(3)]
    await push_json(enc, queue_name, sent)
    blobs = await stored_blobs(raw, queue_name)
    assert blobs and all(encryption.is_sealed(b) and not plaintext_in(b) for b in blobs)
    with pytest.raises(segments.SegmentError):
        segments.decompress(blobs[0])  # not a zstd frame at all: ciphertext

    # fetch
    records = (await fetch_records(enc, queue_name))["records"]
    assert [r["payload"] for r in records] == sent
    # framed pop: the client cannot read encrypted frames, so it gets them decrypted
    r = await framed(enc, f"/api/v1/pop/queue/{queue_name}", batch="3", consumerGroup="f")
    assert r.status_code == 200 and r.content[:4] == b"QPF1", r.text
    assert [m["data"] for m in decode_pop_frames(r.content)["messages"]] == sent
    # JSON pop, then a failed ack past the retry budget: dead-lettered
    popped = await pop_json(enc, queue_name, batch=3, consumerGroup="g")
    assert popped is not None and [m["data"] for m in popped["messages"]] == sent
    partition_id = popped["messages"][0]["partitionId"]
    r = await enc.post("/api/v1/ack", json={
        "transactionId": "t0", "partitionId": partition_id, "status": "failed",
        "consumerGroup": "g", "leaseId": popped["leaseId"], "error": "boom"})
    assert r.json()[0]["dlq"] is True, r.text
    dlq_copies = await stored_blobs(raw, queue_name, "log_dlq_segments")
    assert dlq_copies and not any(plaintext_in(b) for b in dlq_copies)
    dead = (await enc.get("/api/v1/dlq", params={"queue": queue_name})).json()["messages"]
    assert [(d["transactionId"], d["data"], d.get("isEncrypted")) for d in dead] == [
        ("t0", sent[0], True)]
    # message detail, of a live message and of the dead letter
    detail = (await enc.get(f"/api/v1/messages/{partition_id}/t1")).json()
    assert (detail["data"], detail["payload"], detail["isEncrypted"]) == (sent[1], sent[1],
                                                                           True)
    detail = (await enc.get(f"/api/v1/messages/{partition_id}/t0")).json()
    assert (detail["status"], detail["data"], detail["isEncrypted"]) == (
        "dead_letter", sent[0], True)
    # replay: a new message, stored encrypted again
    replay = (await enc.post(f"/api/v1/messages/{partition_id}/t0/retry")).json()
    assert replay["success"] is True, replay
    new_txid = replay["replayedAs"]["transaction_id"]
    detail = (await enc.get(f"/api/v1/messages/{partition_id}/{new_txid}")).json()
    assert (detail["data"], detail["isEncrypted"]) == (sent[0], True)
    blobs = await stored_blobs(raw, queue_name)
    assert len(blobs) == 2 and all(encryption.is_sealed(b) and not plaintext_in(b)
                                   for b in blobs)
    again = await pop_json(enc, queue_name, batch=10, consumerGroup="g")
    assert again is not None and [m["data"] for m in again["messages"]] == [*sent[1:], sent[0]]
    # the message listing too
    listed = (await enc.get("/api/v1/messages", params={"queue": queue_name})).json()
    assert sorted(json.dumps(m["data"]) for m in listed["messages"]) == sorted(
        json.dumps(p) for p in [*sent, sent[0]])


async def test_a_plain_queue_beside_it_stays_plain_and_says_so(
        enc: httpx.AsyncClient, raw: asyncpg.Connection, queue_name: str) -> None:
    """The control: the same checks find the payload in a plain queue's rows."""
    await push_json(enc, queue_name, [secret(7)])
    [blob] = await stored_blobs(raw, queue_name)
    assert not encryption.is_sealed(blob) and plaintext_in(blob)
    popped = await pop_json(enc, queue_name)
    assert popped is not None
    detail = (await enc.get(f"/api/v1/messages/{popped['messages'][0]['partitionId']}/t0"))
    assert (detail.json()["data"], detail.json()["isEncrypted"]) == (secret(7), False)


async def test_binary_pushes_and_transactions_to_an_encrypted_queue_are_sealed(
        enc: httpx.AsyncClient, raw: asyncpg.Connection, queue_name: str) -> None:
    await configure(enc, queue_name, encryptionEnabled=True)
    plain = encode_push_binary([PushBatch(queue_name, "", [json.dumps(secret(0)).encode()],
                                          ["b0"])])
    assert (await post_binary(enc, "/api/v1/push", plain)).status_code == 201
    # The client's own zstd frame (which the broker stores as it came in a plain queue).
    client_built = encode_push_frames([PushBatch(
        queue_name, "Default", [json.dumps(secret(i)).encode() for i in (1, 2, 3)],
        ["b1", "b2", "b3"])])
    assert (await post_binary(enc, "/api/v1/push", client_built)).status_code == 201
    tx = encode_transaction_frames(b"{\"operations\": []}", [PushBatch(
        queue_name, "Default", [json.dumps(secret(4)).encode()], ["b4"])])
    r = await post_binary(enc, "/api/v1/transaction", tx)
    assert r.status_code == 200 and r.json()["success"] is True, r.text
    blobs = await stored_blobs(raw, queue_name)
    assert len(blobs) == 3 and all(encryption.is_sealed(b) and not plaintext_in(b)
                                   for b in blobs)
    want = [secret(i) for i in range(5)]
    # One of the framed push's three: only its frame travels (decrypted, decompressed).
    r = await framed(enc, f"/api/v1/pop/queue/{queue_name}", batch="2", consumerGroup="one")
    assert [m["data"] for m in decode_pop_frames(r.content)["messages"]] == want[:2]
    r = await framed(enc, f"/api/v1/pop/queue/{queue_name}", batch="10", consumerGroup="f")
    assert [m["data"] for m in decode_pop_frames(r.content)["messages"]] == want
    popped = await pop_json(enc, queue_name, batch=10, consumerGroup="j")
    assert popped is not None and [m["data"] for m in popped["messages"]] == want


async def test_turning_encryption_on_keeps_older_messages_readable_and_seals_new_ones(
        enc: httpx.AsyncClient, raw: asyncpg.Connection, queue_name: str) -> None:
    await push_json(enc, queue_name, [secret(0)], prefix="old")
    await configure(enc, queue_name, encryptionEnabled=True)
    await push_json(enc, queue_name, [secret(1)], prefix="new")
    old, new = await stored_blobs(raw, queue_name)
    assert plaintext_in(old) and encryption.is_sealed(new) and not plaintext_in(new)
    popped = await pop_json(enc, queue_name, batch=10)
    assert popped is not None and [m["data"] for m in popped["messages"]] == [secret(0),
                                                                               secret(1)]
    # And off again: the sealed one stays readable, the next is plain.
    await configure(enc, queue_name, encryptionEnabled=False)
    await push_json(enc, queue_name, [secret(2)], prefix="later")
    assert plaintext_in((await stored_blobs(raw, queue_name))[-1])
    records = (await fetch_records(enc, queue_name))["records"]
    assert [r["payload"] for r in records] == [secret(i) for i in range(3)]


async def test_a_sealed_segment_moved_to_another_partition_fails_loudly_not_with_garbage(
        enc: httpx.AsyncClient, raw: asyncpg.Connection, queue_name: str) -> None:
    await configure(enc, queue_name, encryptionEnabled=True)
    for p in ("a", "b"):
        r = await enc.post("/api/v1/push", json={"items": [
            {"queue": queue_name, "partition": p, "payload": secret(0), "transactionId": p}]})
        assert r.status_code == 201
    # Someone with write access to the database swaps b's segment for a's.
    status = await raw.execute(
        """UPDATE queen.log_segments s SET blob = (
                SELECT x.blob FROM queen.log_segments x JOIN queen.log_partitions y
                    ON y.id = x.partition_id WHERE y.queue_id = p.queue_id AND y.name = 'a')
             FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
            WHERE s.partition_id = p.id AND q.name = $1 AND p.name = 'b'""", queue_name)
    assert status == "UPDATE 1"
    r = await enc.get(f"/api/v1/pop/queue/{queue_name}/partition/b", params={"wait": "false"})
    assert r.status_code == 500 and "fails authentication" in r.json()["error"], r.text
    assert "SECRET" not in r.text
    r = await enc.post("/api/v1/fetch", json={"entries": [{"queue": queue_name,
                                                           "partition": "b"}]})
    assert r.status_code == 500 and "QUEEN_ENCRYPTION_KEY" in r.json()["error"], r.text
    # Partition a is untouched.
    r = await enc.get(f"/api/v1/pop/queue/{queue_name}/partition/a", params={"wait": "false"})
    assert r.status_code == 200 and r.json()["messages"][0]["data"] == secret(0)


# --- without a key -------------------------------------------------------------------------

async def test_without_a_key_configure_refuses_encryption_and_stores_nothing(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    r = await http.post("/api/v1/configure", json={
        "queue": queue_name, "options": {"encryptionEnabled": True, "retryLimit": 9}})
    assert r.status_code == 400 and "QUEEN_ENCRYPTION_KEY" in r.json()["error"], r.text
    assert await db.fetchval("SELECT count(*) FROM queen.queues WHERE name = $1",
                             queue_name) == 0
    # An existing queue is left as it was.
    await configure(http, queue_name, retryLimit=5)
    r = await http.post("/api/v1/configure", json={
        "queue": queue_name, "options": {"encryptionEnabled": True, "retryLimit": 9}})
    assert r.status_code == 400
    stored = await db.fetchval("SELECT options FROM queen.queues WHERE name = $1", queue_name)
    assert json.loads(stored)["retryLimit"] == 5
    assert json.loads(stored)["encryptionEnabled"] is False
    # Turning it off needs no key.
    await configure(http, queue_name, encryptionEnabled=False)


async def test_without_a_key_a_queue_flagged_before_refuses_pushes_and_stores_nothing(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    """A queue configured with encryptionEnabled before encryption existed (the flag was
    accepted and ignored): a broker without a key never writes plain text to it."""
    await configure(http, queue_name, retryLimit=1)
    await db.execute("""UPDATE queen.queues SET options = options ||
                        '{"encryptionEnabled": true}'::jsonb WHERE name = $1""", queue_name)
    r = await http.post("/api/v1/push", json={"items": [
        {"queue": queue_name, "payload": secret(0)}]})
    # A push answers per item (§4.1): this one failed, naming the missing key.
    [item] = r.json()
    assert item["status"] == "failed" and "QUEEN_ENCRYPTION_KEY" in item["error"], r.text
    assert await db.fetchval(
        """SELECT count(*) FROM queen.log_segments s JOIN queen.log_partitions p
             ON p.id = s.partition_id JOIN queen.queues q ON q.id = p.queue_id
            WHERE q.name = $1""", queue_name) == 0


# --- start-up ------------------------------------------------------------------------------

def _serve(database_url: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-m", "broker.cli", "serve"], cwd=ROOT, capture_output=True, text=True,
        check=False, timeout=90,
        env={"PATH": "/usr/bin:/bin", "DATABASE_URL": database_url, "HOST": "127.0.0.1",
             "PORT": str(free_port()), "WORKERS": "1", **env})


@pytest.mark.parametrize(("env", "named"), [
    ({"QUEEN_ENCRYPTION_KEY": OTHER_KEY}, "is not the key this database's encrypted data"),
    ({}, "QUEEN_ENCRYPTION_KEY is not set, but this database holds data encrypted"),
])
def test_a_wrong_or_missing_key_refuses_to_start(
        key_broker: BrokerProcess, key_database: str, env: dict[str, str],
        named: str) -> None:
    started = time.monotonic()
    done = _serve(key_database, **env)
    assert done.returncode == 1, done.stderr
    assert named in done.stderr and "QUEEN_ENCRYPTION_KEY" in done.stderr
    assert OTHER_KEY not in done.stderr and KEY not in done.stderr
    assert time.monotonic() - started < 60


@pytest.mark.parametrize("value", ["abc", "5e" * 31 + "zz", "5e" * 33])
def test_a_malformed_key_refuses_to_start_naming_the_variable(
        database_url: str, value: str) -> None:
    done = _serve(database_url, QUEEN_ENCRYPTION_KEY=value)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("queen-broker: QUEEN_ENCRYPTION_KEY must be exactly 64 hex")
    assert value not in done.stderr


async def test_the_database_records_the_key_it_was_first_started_with(
        key_broker: BrokerProcess, raw: asyncpg.Connection) -> None:
    row = await raw.fetchrow("SELECT key_id, check_value FROM queen.encryption_key")
    assert row is not None
    key = bytes.fromhex(KEY)
    assert bytes(row["key_id"]) == encryption.key_id(key)
    assert encryption.SegmentCipher(key).open(bytes(row["check_value"]),
                                              *encryption.CHECK_PLACE) == \
        encryption.CHECK_PLAINTEXT


async def test_traces_by_name_show_the_decrypted_payload_of_an_encrypted_message(
        enc: httpx.AsyncClient, raw: asyncpg.Connection, queue_name: str) -> None:
    await configure(enc, queue_name, encryptionEnabled=True)
    await push_json(enc, queue_name, [secret(42)])
    popped = await pop_json(enc, queue_name)
    assert popped is not None
    [message] = popped["messages"]
    name = f"enc-{queue_name}"
    r = await enc.post("/api/v1/traces", json={
        "transactionId": message["transactionId"], "partitionId": message["partitionId"],
        "traceNames": [name], "data": {"step": "charged"}})
    assert r.status_code == 201, r.text
    [found] = (await enc.get(f"/api/v1/traces/by-name/{name}")).json()["traces"]
    assert found["message_payload"] == secret(42)
    assert all(encryption.is_sealed(b) for b in await stored_blobs(raw, queue_name))


# --- a stream cycle's sink pushes take the write path, sealing included --------------------

async def test_a_stream_cycle_pushing_to_an_encrypted_sink_stores_it_sealed(
        enc: httpx.AsyncClient, raw: asyncpg.Connection, queue_name: str) -> None:
    sink = queue_name + "-sink"
    await configure(enc, sink, encryptionEnabled=True)
    qid = await register(enc, queue_name, sink=sink)
    await push_json(enc, queue_name, [{"n": i} for i in range(3)])
    body = await runner_pop(enc, queue_name)
    r = await cycle(enc, qid, body["messages"][0]["partitionId"], ack=_ack(body),
                    group=body["consumerGroup"],
                    push=[{"queue": sink, "payload": secret(i)} for i in range(3)])
    assert r.status_code == 200, r.text
    blobs = await stored_blobs(raw, sink)
    assert blobs and not any(plaintext_in(b) for b in blobs)
    popped = await pop_json(enc, sink, batch=10)
    assert popped is not None and [m["data"] for m in popped["messages"]] == [
        secret(i) for i in range(3)]
