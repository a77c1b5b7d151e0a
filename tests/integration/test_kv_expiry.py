"""Expiry (extensions §14.5): an expired key is absent everywhere at once, before any sweep;
the reaper's sweeper then deletes dead rows in bounded batches, harmlessly when two run."""

from __future__ import annotations

import asyncio
import signal
import uuid

import asyncpg
import httpx

from core.embedded import stop_process
from core.kv.service import sweep
from core.storage.database import Database
from tests.integration.test_reaper import start_reaper
from tests.support import wait_for


async def _kv(http: httpx.AsyncClient, *ops: dict[str, object]) -> list[dict[str, object]]:
    r = await http.post("/api/v1/kv", json={"operations": list(ops)})
    assert r.status_code == 200, r.text
    results: list[dict[str, object]] = r.json()["results"]
    return results


async def _backdate(db: asyncpg.Connection, ns: str) -> None:
    await db.execute("UPDATE queen.kv SET expires_at = now() - interval '1 second' "
                     "WHERE ns = $1 AND expires_at IS NOT NULL", ns)


async def test_an_expired_key_is_absent_everywhere_before_any_sweep(
        http: httpx.AsyncClient, db: asyncpg.Connection) -> None:
    ns = "exp-" + uuid.uuid4().hex[:10]
    await _kv(http, {"op": "put", "ns": ns, "key": "p/old", "value": 5, "ttlSeconds": 60},
              {"op": "put", "ns": ns, "key": "p/live", "value": 1, "forever": True})
    await _backdate(db, ns)
    assert await db.fetchval("SELECT count(*) FROM queen.kv WHERE ns = $1", ns) == 2
    get, many, prefix = await _kv(
        http, {"op": "get", "ns": ns, "key": "p/old"},
        {"op": "getMany", "ns": ns, "keys": ["p/old", "p/live"]},
        {"op": "getPrefix", "ns": ns, "prefix": "p/"})
    assert get["found"] is False
    assert many["missing"] == ["p/old"] and [r["key"] for r in many["rows"]] == ["p/live"]
    assert [r["key"] for r in prefix["rows"]] == ["p/live"]  # type: ignore[index]
    listing = (await http.get("/api/v1/resources/kv-namespaces",
                              params={"after": ns[:-1], "limit": 1000})).json()
    [row] = [r for r in listing["rows"] if r["ns"] == ns]
    assert (row["keys"], row["expiringSoon"]) == (1, 0)
    check, incr = await _kv(
        http, {"op": "check", "ns": ns, "key": "p/old", "expect": 0},
        {"op": "incr", "ns": ns, "key": "p/old", "delta": 2, "ttlSeconds": 60})
    assert check["applied"] is True and check["version"] == 0
    assert incr["applied"] is True and incr["value"] == 2  # counted from 0, a new window
    listing = (await http.get("/api/v1/resources/kv-namespaces",
                              params={"after": ns[:-1], "limit": 1000})).json()
    [row] = [r for r in listing["rows"] if r["ns"] == ns]
    assert (row["keys"], row["expiringSoon"]) == (2, 1)


async def test_two_sweepers_at_once_delete_each_dead_row_once_and_no_live_row(
        http: httpx.AsyncClient, db: asyncpg.Connection, core_db: Database) -> None:
    ns = "exp-" + uuid.uuid4().hex[:10]
    await db.execute(
        "INSERT INTO queen.kv (ns, key, value, version, expires_at) SELECT $1, 'dead' || g, "
        "'1', nextval('queen.kv_versions'), now() - interval '1 second' "
        "FROM generate_series(1, 700) g", ns)
    await _kv(http, {"op": "put", "ns": ns, "key": "live", "value": 1, "ttlSeconds": 600})
    before = await db.fetchval("SELECT count(*) FROM queen.kv WHERE expires_at <= now()")
    removed = await asyncio.gather(sweep(core_db, batch=50, max_batches=100),
                                   sweep(core_db, batch=50, max_batches=100))
    assert sum(removed) == before >= 700
    assert await db.fetchval("SELECT count(*) FROM queen.kv WHERE expires_at <= now()") == 0
    assert (await _kv(http, {"op": "get", "ns": ns, "key": "live"}))[0]["found"] is True


async def test_the_reaper_process_sweeps_expired_keys(
        http: httpx.AsyncClient, db: asyncpg.Connection, database_url: str) -> None:
    ns = "exp-" + uuid.uuid4().hex[:10]
    await _kv(http, *({"op": "put", "ns": ns, "key": f"k{i}", "value": i, "ttlSeconds": 60}
                      for i in range(5)))
    await _backdate(db, ns)
    reaper = start_reaper(database_url)
    try:
        async def swept() -> bool:
            return await db.fetchval("SELECT count(*) FROM queen.kv WHERE ns = $1", ns) == 0
        await wait_for(swept, timeout=30)
    finally:
        stop_process(reaper, signal.SIGTERM, timeout=10)
