"""The KV store (extensions §14) through the official `queen-mq` client's `client.kv`, with
the database as the witness where the answer alone would not prove the rule."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest
from queen import Queen
from queen.errors import KvError

from tests.support import BrokerProcess


@pytest.fixture
async def queen(broker: BrokerProcess) -> AsyncIterator[Queen]:
    async with Queen(broker.url) as client:
        yield client


@pytest.fixture
def ns() -> str:
    return "t-" + uuid.uuid4().hex[:12]


async def _expire(db: asyncpg.Connection, ns: str, key: str) -> None:
    """Move a key's expiry into the past, as time would (no sweeper runs in these tests)."""
    await db.execute("UPDATE queen.kv SET expires_at = now() - interval '1 second' "
                     "WHERE ns = $1 AND key = $2", ns, key)


async def test_put_then_get_answers_value_version_and_expiry(queen: Queen, ns: str) -> None:
    written = await queen.kv.put(ns, "a/b", {"x": [1, 2.5, None]}, ttl_seconds=60)
    assert written["applied"] is True and written["op"] == "put" and written["index"] == 0
    got = await queen.kv.get(ns, "a/b")
    assert got["found"] is True and got["key"] == "a/b"
    assert got["value"] == {"x": [1, 2.5, None]}
    assert got["version"] == written["version"] > 0
    assert got["expiresAt"].endswith("Z") and got["updatedAt"].endswith("Z")
    forever = await queen.kv.put(ns, "f", None, forever=True)
    got = await queen.kv.get(ns, "f")
    assert got["found"] is True and got["value"] is None and got["expiresAt"] is None
    assert forever["version"] > written["version"]
    missing = await queen.kv.get(ns, "nope")
    assert dict(missing) == {"index": 0, "op": "get", "found": False, "key": "nope"}
    assert not missing


async def test_versions_grow_across_delete_expiry_and_recreation(
        queen: Queen, ns: str, db: asyncpg.Connection) -> None:
    seen = [(await queen.kv.put(ns, "k", 1, ttl_seconds=60))["version"]]
    seen.append((await queen.kv.put(ns, "k", 2, ttl_seconds=60))["version"])
    deleted = await queen.kv.delete(ns, "k")
    assert deleted["applied"] is True and deleted["value"] == 2 and deleted["version"] == seen[-1]
    seen.append((await queen.kv.put(ns, "k", 3, ttl_seconds=60))["version"])
    await _expire(db, ns, "k")
    assert not await queen.kv.get(ns, "k")
    seen.append((await queen.kv.put_if_absent(ns, "k", 4, ttl_seconds=60))["version"])
    assert seen == sorted(seen) and len(set(seen)) == 4


async def test_expect_rules_and_the_current_row_in_a_losers_answer(
        queen: Queen, ns: str, db: asyncpg.Connection) -> None:
    first = await queen.kv.put(ns, "k", "v1", ttl_seconds=60)
    lost = await queen.kv.put(ns, "k", "v2", ttl_seconds=60, expect=first["version"] + 1000)
    assert (lost["applied"], lost["reason"], lost["value"], lost["version"]) == (
        False, "version", "v1", first["version"])
    won = await queen.kv.put(ns, "k", "v2", ttl_seconds=60, expect=first["version"])
    assert won["applied"] is True and won["version"] > first["version"]
    exists = await queen.kv.put_if_absent(ns, "k", "v3", ttl_seconds=60)
    assert (exists["applied"], exists["reason"], exists["value"]) == (False, "exists", "v2")
    absent = await queen.kv.put(ns, "other", 1, ttl_seconds=60, expect=5)
    assert (absent["applied"], absent["reason"], absent["value"], absent["version"]) == (
        False, "absent", None, 0)
    assert not await queen.kv.get(ns, "other")  # expect N > 0 never creates
    # expect 0 wins over an expired row nobody swept yet
    await _expire(db, ns, "k")
    assert (await queen.kv.put(ns, "k", "v4", ttl_seconds=60, expect=0))["applied"] is True
    gone = await queen.kv.delete(ns, "never")
    assert (gone["applied"], gone["reason"]) == (False, "absent")


async def test_incr_is_exact_decimal_with_bounds_type_and_create_only_ttl(
        queen: Queen, ns: str, db: asyncpg.Connection) -> None:
    a = await queen.kv.incr(ns, "c", delta=0.1, ttl_seconds=60)
    b = await queen.kv.incr(ns, "c", delta=0.2, ttl_seconds=3600)
    assert (a["value"], b["value"]) == (0.1, 0.3)
    expiry = await db.fetchval("SELECT expires_at FROM queen.kv WHERE ns=$1 AND key='c'", ns)
    first = await db.fetchval("SELECT now() + interval '61 seconds'")
    assert expiry < first  # a live counter keeps the expiry it was created with
    assert (await queen.kv.incr(ns, "n", delta=2, forever=True))["value"] == 2
    assert (await queen.kv.incr(ns, "n", delta=0.5, forever=True))["value"] == 2.5
    r = await queen._http_client.post("/api/v1/kv", {"operations": [
        {"op": "incr", "ns": ns, "key": "n", "delta": 0.5, "forever": True}]})
    assert r["results"][0]["value"] == 3  # shortest rendering: 3, not 3.0
    raw = await db.fetchval("SELECT value FROM queen.kv WHERE ns=$1 AND key='n'", ns)
    assert raw == "3"
    refused = await queen.kv.incr(ns, "n", delta=10, max=5, forever=True)
    assert (refused["applied"], refused["reason"], refused["value"]) == (False, "limit", 3)
    low = await queen.kv.incr(ns, "fresh", delta=-1, min=0, ttl_seconds=60)
    assert (low["applied"], low["reason"], low["value"], low["version"]) == (
        False, "limit", 0, 0)
    assert not await queen.kv.get(ns, "fresh")
    await queen.kv.put(ns, "s", "text", forever=True)
    typed = await queen.kv.incr(ns, "s", delta=1, forever=True)
    assert (typed["applied"], typed["reason"], typed["value"]) == (False, "type", 0)


async def test_check_holds_or_says_why_and_writes_nothing(
        queen: Queen, ns: str, db: asyncpg.Connection) -> None:
    put = await queen.kv.put(ns, "k", {"a": 1}, ttl_seconds=60)
    held = await queen.kv.check(ns, "k", expect=put["version"])
    assert dict(held) == {"index": 0, "op": "check", "applied": True, "key": "k",
                          "version": put["version"]}
    wrong = await queen.kv.check(ns, "k", expect=put["version"] + 1)
    assert (wrong["applied"], wrong["reason"], wrong["value"]) == (False, "version", {"a": 1})
    exists = await queen.kv.check(ns, "k", expect=0)
    assert (exists["applied"], exists["reason"]) == (False, "exists")
    free = await queen.kv.check(ns, "none", expect=0)
    assert (free["applied"], free["version"]) == (True, 0)
    absent = await queen.kv.check(ns, "none", expect=3)
    assert (absent["applied"], absent["reason"]) == (False, "absent")
    rows = await db.fetch("SELECT key, version FROM queen.kv WHERE ns = $1", ns)
    assert [(r["key"], r["version"]) for r in rows] == [("k", put["version"])]


async def test_once_claims_a_key_for_exactly_one_caller(queen: Queen, ns: str) -> None:
    assert await queen.kv.once(ns, "job-1", ttl_seconds=60) is True
    assert await queen.kv.once(ns, "job-1", ttl_seconds=60) is False
    assert (await queen.kv.get(ns, "job-1"))["value"] is True


async def test_get_many_and_prefix_pages_in_byte_order(queen: Queen, ns: str) -> None:
    for key in ("p/b", "p/a", "p/é", "p/c", "q/x"):
        await queen.kv.put(ns, key, key.upper(), ttl_seconds=60)
    many = await queen.kv.get_many(ns, ["p/c", "zz", "p/a", "yy"])
    assert [r["key"] for r in many["rows"]] == ["p/a", "p/c"]
    assert many["missing"] == ["zz", "yy"] and many["truncated"] is False
    page = await queen.kv.get_prefix(ns, "p/", limit=2)
    assert [r["key"] for r in page["rows"]] == ["p/a", "p/b"]
    assert (page["truncated"], page["nextAfter"]) == (True, "p/b")
    rest = await queen.kv.get_prefix(ns, "p/", after="p/b", keys_only=True)
    assert [r["key"] for r in rest["rows"]] == ["p/c", "p/é"]
    assert "value" not in rest["rows"][0] and rest["nextAfter"] is None
    everything = await queen.kv.list_all(ns, "p/", limit=1)
    assert [r["value"] for r in everything] == ["P/A", "P/B", "P/C", "P/É"]


async def test_reads_run_last_and_see_the_calls_writes(queen: Queen, ns: str) -> None:
    op = queen.kv.op
    results = await queen.kv.batch([
        op.get_many(ns, ["b"]), op.get(ns, "b"), op.put(ns, "b", 2, ttl_seconds=60),
        op.get(ns, "b"), op.get(ns, "a"), op.get_prefix(ns, "b")])
    assert results[0]["rows"][0]["value"] == 2  # getMany runs last
    # Single-key ops run in byte order of the key, ties in input order.
    assert results[1]["found"] is False and results[3]["found"] is True
    assert results[4]["found"] is False
    assert [r["value"] for r in results[5]["rows"]] == [2]
    assert [r["op"] for r in results] == ["getMany", "get", "put", "get", "get", "getPrefix"]
    assert [r["index"] for r in results] == list(range(6))


async def test_required_loss_aborts_the_whole_call(queen: Queen, ns: str,
                                                     db: asyncpg.Connection) -> None:
    await queen.kv.put(ns, "m", "taken", ttl_seconds=60)
    op = queen.kv.op
    answer = await queen._http_client.post("/api/v1/kv", {"operations": [
        op.put(ns, "a", 1, ttl_seconds=60), op.put_if_absent(ns, "m", 2, ttl_seconds=60,
                                                             required=True),
        op.incr(ns, "z", delta=1, forever=True)]})
    version = await db.fetchval("SELECT version FROM queen.kv WHERE ns=$1 AND key='m'", ns)
    assert answer == {"ok": False, "reason": "kv_precondition", "failedIndex": 1,
                      "kvReason": "exists", "version": version, "value": "taken"}
    keys = await db.fetch("SELECT key FROM queen.kv WHERE ns=$1 ORDER BY key", ns)
    assert [r["key"] for r in keys] == ["m"]


async def test_path_routes(http: httpx.AsyncClient, ns: str) -> None:
    put = await http.put(f"/api/v1/kv/{ns}/a%2Fb/c", json={"value": [1], "ttlSeconds": 60})
    assert put.status_code == 200 and put.json()["applied"] is True
    got = await http.get(f"/api/v1/kv/{ns}/a/b/c")
    assert got.json()["value"] == [1] and got.headers["etag"] == f'"{put.json()["version"]}"'
    missing = await http.get(f"/api/v1/kv/{ns}/nothing")
    assert missing.json()["found"] is False and "etag" not in missing.headers
    query = await http.get(f"/api/v1/kv/{ns}/a/b/c?x=1")
    assert query.status_code == 400 and query.json()["reason"] == "kv_no_query_string"
    field = await http.put(f"/api/v1/kv/{ns}/k", json={"value": 1, "forever": True, "key": "x"})
    assert field.status_code == 400 and field.json()["reason"] == "kv_field_in_path"
    lost = await http.request("DELETE", f"/api/v1/kv/{ns}/a/b/c",
                              json={"expect": 1, "required": True})
    assert lost.json()["reason"] == "kv_precondition"
    gone = await http.delete(f"/api/v1/kv/{ns}/a/b/c")
    assert gone.json()["applied"] is True and gone.json()["value"] == [1]


async def test_refusals_raise_kv_error_with_the_code(queen: Queen, ns: str) -> None:
    with pytest.raises(KvError) as caught:
        await queen.kv.batch([{"op": "put", "ns": "BAD", "key": "k", "value": 1,
                               "forever": True}])
    error = caught.value
    assert (error.status, error.code, error.reason) == (400, "kv_bad_request",
                                                        "kv_bad_namespace")
    assert error.detail and "ns must match" in error.detail


async def test_concurrent_put_if_absent_has_exactly_one_winner(queen: Queen, ns: str) -> None:
    answers = await asyncio.gather(*(queen.kv.put_if_absent(ns, "one", i, ttl_seconds=60)
                                     for i in range(20)))
    winners = [a for a in answers if a["applied"]]
    assert len(winners) == 1
    assert all(a["reason"] == "exists" for a in answers if not a["applied"])
    assert (await queen.kv.get(ns, "one"))["value"] == winners[0]["value"]


async def test_concurrent_bounded_incr_never_passes_the_bound(queen: Queen, ns: str,
                                                               db: asyncpg.Connection) -> None:
    answers = await asyncio.gather(*(queen.kv.incr(ns, "quota", delta=1, max=20,
                                                   ttl_seconds=60) for _ in range(50)))
    assert sum(1 for a in answers if a["applied"]) == 20
    assert sorted(a["value"] for a in answers if a["applied"]) == list(range(1, 21))
    assert await db.fetchval("SELECT value FROM queen.kv WHERE ns=$1 AND key='quota'", ns) == "20"


async def test_one_instant_per_call(queen: Queen, ns: str) -> None:
    op = queen.kv.op
    await queen.kv.batch([op.put(ns, f"k{i}", i, ttl_seconds=60) for i in range(30)])
    rows = (await queen.kv.get_prefix(ns, "k"))["rows"]
    assert len(rows) == 30
    assert len({r["expiresAt"] for r in rows}) == 1 and len({r["updatedAt"] for r in rows}) == 1


async def test_the_read_budget_cuts_reads_past_4_mib(queen: Queen, ns: str) -> None:
    value = "v" * 64_000  # 64,002 bytes of JSON each: the 66th row crosses 4 MiB
    keys = [f"big/{i:03d}" for i in range(70)]
    op = queen.kv.op
    for start in range(0, 70, 10):
        await queen.kv.batch([op.put(ns, k, value, ttl_seconds=60) for k in keys[start:start + 10]])
    many = await queen.kv.get_many(ns, ["zz-absent", *reversed(keys), "a-absent"])
    assert [r["key"] for r in many["rows"]] == keys[:66] and many["truncated"] is True
    # Keys are read in byte order: those past the cut, absent or not, are in neither list.
    assert many["missing"] == ["a-absent"]
    page = await queen.kv.get_prefix(ns, "big/", limit=1000)
    assert len(page["rows"]) == 66 and page["truncated"] is True
    assert page["nextAfter"] == keys[65]
    names = await queen.kv.get_prefix(ns, "big/", limit=1000, keys_only=True)
    assert len(names["rows"]) == 70 and names["truncated"] is False  # keys cost nothing
    # Spent in apply order across the call: a get always answers, and spends.
    first, second = await queen.kv.batch([op.get(ns, keys[0]), op.get_many(ns, keys)])
    assert first["found"] is True and len(second["rows"]) == 65
