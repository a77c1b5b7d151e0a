"""Hostile input to the timer routes (§16.2, §16.3): every refusal code answers its status
with `{error, reason, detail}` and changes nothing in the database (a digest of every table
before and after); a refused op anywhere in a call applies none of the call's ops."""

from __future__ import annotations

import base64
import json
from typing import Any

import asyncpg
import httpx

from tests.support import configure, schema_snapshot

B64 = base64.b64encode(b'{"a": 1}').decode()


def _op(queue_name: str, **fields: Any) -> dict[str, Any]:
    return {"op": "schedule", "queue": queue_name, "timerKey": "k", "delayMs": 0, "txn": "t",
            "payload": B64, **fields}


def _cases(q: str, sealed: str) -> list[tuple[Any, int, str, str]]:
    good = _op(q, timerKey="fine")
    bad = "timers_bad_request"
    no = {k: v for k, v in _op(q).items()}
    return [
        (b"{not json", 400, bad, "timers_bad_body"),
        ({"ops": []}, 400, bad, "timers_bad_body"),
        ({"operations": "x"}, 400, bad, "timers_bad_body"),
        ("just a string", 400, bad, "timers_bad_body"),
        ([_op(q, timerKey=f"k{i}") for i in range(257)], 400, bad, "timers_too_many_ops"),
        ([good, 5], 400, bad, "timers_bad_op"),
        ([good, _op(q, delayMs="soon")], 400, bad, "timers_bad_op"),
        ([good, _op(q, delayMs=1.5)], 400, bad, "timers_bad_op"),
        ([good, _op(q, queue="a/b")], 400, bad, "timers_bad_op"),
        ([good, _op(q, timerKey="nul\x00")], 400, bad, "timers_bad_op"),
        ([good, _op(q, txn="tab\t")], 400, bad, "timers_bad_op"),
        ([good, _op(q, payloadZstd="yes")], 400, bad, "timers_bad_op"),
        ([good, {**_op(q), "op": None}], 400, bad, "timers_bad_op"),
        ([good, {**_op(q), "op": "fire"}], 400, bad, "timers_unknown_op"),
        ([good, _op(q, producerSub="forged")], 400, bad, "timers_server_owned_field"),
        ([good, _op(q, deliverAt="2030-01-01T00:00:00Z")], 400, bad,
         "timers_server_owned_field"),
        ([good, _op(q, _internal=1)], 400, bad, "timers_server_owned_field"),
        ([good, _op(q, queue="")], 400, bad, "timers_queue_required"),
        ([good, {k: v for k, v in no.items() if k != "queue"}], 400, bad,
         "timers_queue_required"),
        ([good, _op(q, timerKey="")], 400, bad, "timers_key_required"),
        ([good, _op(q, partition="")], 400, bad, "timers_bad_partition"),
        ([good, _op(q, partition="p\n")], 400, bad, "timers_bad_partition"),
        ([good, {k: v for k, v in no.items() if k != "delayMs"}], 400, bad,
         "timers_delay_required"),
        ([good, {k: v for k, v in no.items() if k != "txn"}], 400, bad, "timers_txn_required"),
        ([good, {"op": "cancel", "queue": q, "timerKey": "k", "txn": ""}], 400, bad,
         "timers_txn_required"),
        ([good, {k: v for k, v in no.items() if k != "payload"}], 400, bad,
         "timers_payload_required"),
        ([good, _op(q, payload="not base64!")], 400, bad, "timers_payload_not_base64"),
        ([good, _op(q, payload=12)], 400, bad, "timers_payload_not_base64"),
        ([good, _op(q, timerKey="fine")], 400, bad, "timers_duplicate_key"),
        ([good, _op(sealed, encrypted=True)], 400, bad, "timers_encrypted_conflict"),
        ([good, _op(q, payload=base64.b64encode(b"x" * (1024 * 1024 + 1)).decode())], 413,
         "payload_too_large", "timers_payload_too_large"),
        ([good, _op(q, delayMs=90 * 86400 * 1000 + 1)], 403, "timer_horizon_exceeded",
         "timers_horizon"),
    ]


SPECIFIED = {
    "timers_bad_body", "timers_too_many_ops", "timers_bad_op", "timers_unknown_op",
    "timers_server_owned_field", "timers_queue_required", "timers_key_required",
    "timers_bad_partition", "timers_delay_required", "timers_txn_required",
    "timers_payload_required", "timers_payload_not_base64", "timers_duplicate_key",
    "timers_encrypted_conflict", "timers_payload_too_large", "timers_horizon"}


async def test_every_validation_code_answers_its_4xx_and_changes_nothing(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    sealed = f"{queue_name}-sealed"
    await configure(http, sealed)  # this broker has no key: the flag is set in the row
    await db.execute("""UPDATE queen.queues SET options = options || '{"encryptionEnabled":
                        true}' WHERE name = $1""", sealed)
    # One pending timer the refused calls would otherwise reschedule.
    r = await http.post("/api/v1/timers", json=[_op(queue_name, delayMs=3_600_000)])
    assert r.json()["results"][0]["status"] == "scheduled"
    cases = _cases(queue_name, sealed)
    assert {reason for *_, reason in cases} == SPECIFIED
    try:
        await _refused_all(http, db, cases)
    finally:  # other tests' brokers would warn about an encrypted queue they cannot write
        await db.execute("""UPDATE queen.queues SET options = options || '{"encryptionEnabled":
                            false}' WHERE name = $1""", sealed)


async def _refused_all(http: httpx.AsyncClient, db: asyncpg.Connection,
                       cases: list[tuple[Any, int, str, str]]) -> None:
    before = await schema_snapshot(db)
    assert "timers" in before
    for body, status, error, reason in cases:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        r = await http.post("/api/v1/timers", content=content,
                            headers={"content-type": "application/json"})
        label = f"{content[:100]!r}"
        assert r.status_code == status, (label, r.text)
        answer = r.json()
        assert (answer["error"], answer["reason"]) == (error, reason), (label, answer)
        assert set(answer) == {"error", "reason", "detail"} and answer["detail"], label
    assert await schema_snapshot(db) == before


async def test_peek_list_count_and_cancel_refusals_change_nothing(
        http: httpx.AsyncClient, db: asyncpg.Connection, queue_name: str) -> None:
    base = f"/api/v1/timers/{queue_name}"
    before = await schema_snapshot(db)
    for method, path, params in [
            ("GET", base, {"mode": "count"}),
            ("GET", base, {"mode": "count", "prefix": ""}),
            ("GET", base, {"mode": "count", "prefix": "x" * 129}),
            ("GET", base, {"mode": "count", "prefix": "a\x00"}),
            ("GET", base, {"mode": "count", "prefix": "a", "after": "b"}),
            ("GET", base, {"mode": "count", "prefix": "a", "limit": "5"}),
            ("GET", base, {"mode": "sum"}),
            ("GET", base, {"limit": "many"}),
            ("GET", "/api/v1/timers/a%00b", {}),
            ("GET", "/api/v1/timers/a%2Fb/k", {}),
            ("GET", f"{base}/k%00", {}),
            ("DELETE", f"{base}/k", {"txn": "a\x01"}),
            ("DELETE", "/api/v1/timers/..%2F/k", {})]:
        r = await http.request(method, path, params=params)
        assert r.status_code == 400, (method, path, params, r.text)
        answer = r.json()
        assert answer["error"] == "timers_bad_request" and answer["reason"], answer
    assert await schema_snapshot(db) == before


async def test_limit_is_clamped_never_refused(http: httpx.AsyncClient, queue_name: str) -> None:
    for limit in ("0", "-5", "100000"):
        r = await http.get(f"/api/v1/timers/{queue_name}", params={"limit": limit})
        assert r.status_code == 200 and r.json() == {"rows": [], "truncated": False,
                                                     "nextAfter": None}
