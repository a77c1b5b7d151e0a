"""Hostile input on the KV, lock and transaction-rider routes (extensions §14.4, §14.7,
§15.2, §17): every validation code answers its 4xx with `{error, reason, detail}` (inside
the transaction's failure shape on its route), and the
whole schema is the same before and after (a valid op beside a bad one is not applied)."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import httpx

from tests.support import schema_snapshot

GOOD = {"op": "put", "ns": "hostile", "key": "must-not-appear", "value": 1, "forever": True}
KV, LOCKS, TX = "/api/v1/kv", "/api/v1/locks", "/api/v1/transaction"


def _put(**fields: Any) -> dict[str, Any]:
    return {"op": "put", "ns": "hostile", "key": "k", "value": 1, "forever": True, **fields}


def _acquire(**fields: Any) -> dict[str, Any]:
    return {"op": "acquire", "name": "hostile-lock", "ttlSeconds": 5, **fields}


# (path, body (bytes: sent as is), status, error, reason)
CASES: list[tuple[str, Any, int, str, str]] = [
    (KV, b"{", 400, "kv_bad_request", "kv_bad_body"),
    (KV, b'"ops"', 400, "kv_bad_request", "kv_bad_body"),
    (KV, {"operations": 5}, 400, "kv_bad_request", "kv_bad_body"),
    (KV, {"ops": []}, 400, "kv_bad_request", "kv_bad_body"),
    (KV, [GOOD, 5], 400, "kv_bad_request", "kv_bad_request"),
    (KV, [GOOD, {"op": "zap", "ns": "a", "key": "k"}], 400, "kv_bad_request", "kv_unknown_op"),
    (KV, [{"ns": "a", "key": "k"}], 400, "kv_bad_request", "kv_unknown_op"),
    (KV, [_put(tenant="t")], 400, "kv_bad_request", "kv_tenant_not_an_input"),
    (KV, [_put(tenantId="t")], 400, "kv_bad_request", "kv_tenant_not_an_input"),
    (KV, [_put(_tenant="t")], 400, "kv_bad_request", "kv_tenant_not_an_input"),
    (KV, [_put(ns="Upper")], 400, "kv_bad_request", "kv_bad_namespace"),
    (KV, [_put(ns="-dash")], 400, "kv_bad_request", "kv_bad_namespace"),
    (KV, [_put(ns="n" * 65)], 400, "kv_bad_request", "kv_bad_namespace"),
    (KV, [_put(ns=None)], 400, "kv_bad_request", "kv_bad_namespace"),
    (KV, [_put(key="")], 400, "kv_bad_request", "kv_bad_key"),
    (KV, [_put(key="a\x00b")], 400, "kv_bad_request", "kv_bad_key"),
    (KV, [_put(key=7)], 400, "kv_bad_request", "kv_bad_key"),
    (KV, [{"op": "getMany", "ns": "a"}], 400, "kv_bad_request", "kv_bad_request"),
    (KV, [{"op": "getMany", "ns": "a", "keys": "k"}], 400, "kv_bad_request", "kv_bad_request"),
    (KV, [{"op": "getMany", "ns": "a", "keys": ["k", ""]}], 400, "kv_bad_request",
     "kv_bad_key"),
    (KV, [GOOD, {"op": "put", "ns": "a", "key": "k", "forever": True}], 400, "kv_bad_request",
     "kv_bad_request"),
    (KV, [{"op": "incr", "ns": "a", "key": "k", "forever": True}], 400, "kv_bad_request",
     "kv_bad_request"),
    (KV, [{"op": "incr", "ns": "a", "key": "k", "delta": "1", "forever": True}], 400,
     "kv_bad_request", "kv_bad_request"),
    (KV, [{"op": "incr", "ns": "a", "key": "k", "delta": 1, "max": "9", "forever": True}],
     400, "kv_bad_request", "kv_bad_request"),
    (KV, [{"op": "incr", "ns": "a", "key": "k", "delta": 1, "expect": 0, "forever": True}],
     400, "kv_bad_request", "kv_bad_request"),
    (KV, [_put(required="yes")], 400, "kv_bad_request", "kv_bad_request"),
    (KV, [{"op": "getPrefix", "ns": "a", "prefix": "p", "limit": "5"}], 400,
     "kv_bad_request", "kv_bad_request"),
    (KV, [{"op": "getPrefix", "ns": "a"}], 400, "kv_bad_request", "kv_prefix_required"),
    (KV, [{"op": "getPrefix", "ns": "a", "prefix": ""}], 400, "kv_bad_request",
     "kv_prefix_required"),
    (KV, [{"op": "put", "ns": "a", "key": "k", "value": 1}], 400, "kv_bad_request",
     "kv_expiry_not_specified"),
    (KV, [_put(ttlSeconds=5)], 400, "kv_bad_request", "kv_expiry_not_specified"),
    (KV, [{"op": "incr", "ns": "a", "key": "k", "delta": 1}], 400, "kv_bad_request",
     "kv_expiry_not_specified"),
    (KV, [{**_put(ttlSeconds=0), "forever": None}], 400, "kv_bad_request", "kv_bad_ttl"),
    (KV, [{**_put(ttlSeconds=1.5), "forever": None}], 400, "kv_bad_request", "kv_bad_ttl"),
    (KV, [{**_put(ttlSeconds="5"), "forever": None}], 400, "kv_bad_request", "kv_bad_ttl"),
    (KV, [_put(expect=-1)], 400, "kv_bad_request", "kv_bad_expect"),
    (KV, [_put(expect=None)], 400, "kv_bad_request", "kv_bad_expect"),
    (KV, [{**_put(expect=3), "op": "putIfAbsent"}], 400, "kv_bad_request", "kv_bad_expect"),
    (KV, [{"op": "check", "ns": "a", "key": "k"}], 400, "kv_bad_request", "kv_bad_expect"),
    (KV, [GOOD, {**GOOD, "op": "delete"}], 400, "kv_bad_request",
     "kv_duplicate_key_in_call"),
    (KV, [GOOD] + [{"op": "get", "ns": "a", "key": "k"}] * 256, 400, "kv_bad_request",
     "kv_too_many_ops"),
    (KV, [GOOD, {"op": "getMany", "ns": "a", "keys": [f"k{i}" for i in range(1024)]}], 400,
     "kv_bad_request", "kv_too_many_keys"),
    (KV, [GOOD, _put(key="k" * 513)], 413, "payload_too_large", "kv_key_too_large"),
    (KV, [{"op": "getPrefix", "ns": "a", "prefix": "é" * 257}], 413, "payload_too_large",
     "kv_key_too_large"),
    (KV, [GOOD, _put(value="v" * 65536)], 413, "payload_too_large", "kv_value_too_large"),
    # The path routes (§14.7)
    ("/api/v1/kv/hostile/k?x=1", {"value": 1, "forever": True}, 400, "kv_bad_request",
     "kv_no_query_string"),
    ("/api/v1/kv/hostile/k", {"value": 1, "forever": True, "ns": "x"}, 400, "kv_bad_request",
     "kv_field_in_path"),
    ("/api/v1/kv/hostile/k", [1], 400, "kv_bad_request", "kv_bad_body"),
    ("/api/v1/kv/hostile/k", b"nope", 400, "kv_bad_request", "kv_bad_body"),
    ("/api/v1/kv/hostile/k", {"forever": True}, 400, "kv_bad_request", "kv_bad_request"),
    ("/api/v1/kv/Hostile/k", {"value": 1, "forever": True}, 400, "kv_bad_request",
     "kv_bad_namespace"),
    # The transaction rider (§17)
    (TX, {"operations": [], "kv": {"op": "get"}}, 400, "kv_bad_request", "kv_bad_body"),
    (TX, {"operations": [], "kv": [GOOD, {"op": "getPrefix", "ns": "a", "prefix": "p"}]},
     400, "kv_bad_request", "kv_get_prefix_not_allowed_in_transaction"),
    (TX, {"operations": [], "kv": [GOOD] + [{"op": "get", "ns": "a", "key": "k"}] * 64},
     400, "kv_bad_request", "kv_too_many_ops"),
    (TX, {"operations": [], "kv": [GOOD, {"op": "getMany", "ns": "a",
                                          "keys": [f"k{i}" for i in range(256)]}]},
     400, "kv_bad_request", "kv_too_many_keys"),
    (TX, {"operations": [{"type": "push", "items": [{"queue": "hostile-q", "payload": 1}]}],
          "kv": [GOOD, _put(ns="BAD")]}, 400, "kv_bad_request", "kv_bad_namespace"),
    # Locks (§15.2)
    (LOCKS, b"[", 400, "locks_bad_request", "locks_bad_body"),
    (LOCKS, {"operations": {}}, 400, "locks_bad_request", "locks_bad_body"),
    (LOCKS, [_acquire(name=f"n{i}") for i in range(65)], 400, "locks_bad_request",
     "locks_too_many_ops"),
    (LOCKS, [_acquire(), 3], 400, "locks_bad_request", "locks_bad_request"),
    (LOCKS, [_acquire(op="steal")], 400, "locks_bad_request", "locks_unknown_op"),
    (LOCKS, [_acquire(tenantId="t")], 400, "locks_bad_request", "locks_tenant_not_an_input"),
    (LOCKS, [_acquire(name="a#b")], 400, "locks_bad_request", "locks_bad_name"),
    (LOCKS, [_acquire(name="")], 400, "locks_bad_request", "locks_bad_name"),
    (LOCKS, [_acquire(name="a\nb")], 400, "locks_bad_request", "locks_bad_name"),
    (LOCKS, [_acquire(name="n" * 257)], 400, "locks_bad_request", "locks_bad_name"),
    (LOCKS, [{"op": "acquire", "name": "x"}], 400, "locks_bad_request", "locks_ttl_required"),
    (LOCKS, [_acquire(forever=True)], 400, "locks_bad_request", "locks_ttl_required"),
    (LOCKS, [_acquire(ttlSeconds=0)], 400, "locks_bad_request", "locks_bad_ttl"),
    (LOCKS, [_acquire(ttlSeconds="5")], 400, "locks_bad_request", "locks_bad_ttl"),
    (LOCKS, [_acquire(owner="")], 400, "locks_bad_request", "locks_bad_owner"),
    (LOCKS, [_acquire(owner="a\x01")], 400, "locks_bad_request", "locks_bad_owner"),
    (LOCKS, [{"op": "release", "name": "x"}], 400, "locks_bad_request",
     "locks_token_required"),
    (LOCKS, [{"op": "release", "name": "x", "token": 0}], 400, "locks_bad_request",
     "locks_bad_token"),
    (LOCKS, [{"op": "renew", "name": "x", "token": "1", "ttlSeconds": 5}], 400,
     "locks_bad_request", "locks_bad_token"),
    (LOCKS, [{"op": "release", "name": "x", "token": 1, "slot": 1024}], 400,
     "locks_bad_request", "locks_bad_slot"),
    (LOCKS, [{"op": "release", "name": "x", "token": 1, "slot": -1}], 400,
     "locks_bad_request", "locks_bad_slot"),
    (LOCKS, [_acquire(limit=0)], 400, "locks_bad_request", "locks_bad_limit"),
    (LOCKS, [_acquire(limit=1025)], 400, "locks_bad_request", "locks_bad_limit"),
    (LOCKS, [_acquire(), {"op": "get", "name": "hostile-lock"}], 400, "locks_bad_request",
     "locks_duplicate_in_call"),
    (LOCKS, [_acquire(name=f"m{i}", limit=1000) for i in range(5)], 400, "locks_bad_request",
     "locks_too_many_keys"),
]


# Every `reason` of §14.4, §14.7 and §15.2.
SPECIFIED = {
    "kv_bad_body", "kv_bad_request", "kv_unknown_op", "kv_tenant_not_an_input",
    "kv_bad_namespace", "kv_bad_key", "kv_prefix_required", "kv_expiry_not_specified",
    "kv_bad_ttl", "kv_bad_expect", "kv_duplicate_key_in_call", "kv_too_many_ops",
    "kv_too_many_keys", "kv_get_prefix_not_allowed_in_transaction", "kv_key_too_large",
    "kv_value_too_large", "kv_no_query_string", "kv_field_in_path",
    "locks_bad_body", "locks_too_many_ops", "locks_bad_request", "locks_unknown_op",
    "locks_tenant_not_an_input", "locks_bad_name", "locks_ttl_required", "locks_bad_ttl",
    "locks_bad_owner", "locks_token_required", "locks_bad_token", "locks_bad_slot",
    "locks_bad_limit", "locks_duplicate_in_call", "locks_too_many_keys"}


async def test_every_validation_code_answers_its_4xx_and_changes_nothing(
        http: httpx.AsyncClient, db: asyncpg.Connection) -> None:
    assert {r for *_, r in CASES} == SPECIFIED
    before = await schema_snapshot(db)
    assert "kv" in before and "kv_versions" in before
    for path, body, status, error, reason in CASES:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        method = "PUT" if path.startswith("/api/v1/kv/") else "POST"
        r = await http.request(method, path, content=content,
                               headers={"content-type": "application/json"})
        label = f"{method} {path} {content[:120]!r}"
        assert r.status_code == status, (label, r.text)
        answer = r.json()
        assert (answer["error"], answer["reason"]) == (error, reason), (label, answer)
        shape = {"error", "reason", "detail"}
        if path == TX:  # the transaction's failure shape (§4.7) around the code (§17)
            shape |= {"transactionId", "success", "results"}
            assert answer["success"] is False and answer["results"] == [], label
        assert set(answer) == shape and answer["detail"], label
    assert await schema_snapshot(db) == before


async def test_a_path_delete_takes_no_body_or_a_json_one_and_refuses_whitespace(
        http: httpx.AsyncClient, db: asyncpg.Connection) -> None:
    """`DELETE /api/v1/kv/{ns}/{key}` may come without a body; a body that is only
    whitespace is not a JSON document (400), and changes nothing."""
    put = await http.put("/api/v1/kv/hostile/ws", json={"value": 1, "forever": True})
    assert put.status_code == 200, put.text
    before = await schema_snapshot(db)
    for body in (b" ", b"\n\t ", b"{"):
        r = await http.request("DELETE", "/api/v1/kv/hostile/ws", content=body,
                               headers={"content-type": "application/json"})
        assert r.status_code == 400, (body, r.text)
        assert (r.json()["error"], r.json()["reason"]) == ("kv_bad_request", "kv_bad_body")
    assert await schema_snapshot(db) == before
    r = await http.request("DELETE", "/api/v1/kv/hostile/ws")
    assert r.status_code == 200 and r.json()["applied"] is True, r.text
