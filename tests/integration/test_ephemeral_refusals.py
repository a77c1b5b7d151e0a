"""Every refusal of §19 answers `{"error", "code"}` with its status and changes nothing: the
ephemeral tables (contents, cursors, leases, declarations, counters) read the same after."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import httpx
import pytest

EPH = "/api/v1/ephemeral"
_LONG = "x" * 513
_TABLES = ("eph_declared", "eph_queue", "eph_partition", "eph_group", "eph_cursor",
           "eph_message", "eph_lease")


async def _snapshot(db: asyncpg.Connection, *queues: str) -> dict[str, list[Any]]:
    """Every row of the named queues (and of names a refusal might have stored), in every
    ephemeral table, timestamps included: a refusal must not touch them either. Other
    tests' queues are left out: the sweep may change them meanwhile."""
    names = [*queues, "7", "None", "", _LONG, "a\x01b", "tab\there", "q"]
    out = {}
    for table in _TABLES:
        rows = await db.fetch(f"SELECT * FROM queen.{table} WHERE queue = ANY($1::text[]) "
                              "ORDER BY 1, 2", names)
        out[table] = [tuple(r) for r in rows]
    return out


@pytest.fixture
async def seeded(http: httpx.AsyncClient) -> str:
    """A queue with a declaration, messages, a group and a lease, so a refusal that wrote
    anything anywhere shows."""
    q = "er-" + uuid.uuid4().hex[:10]
    assert (await http.post(EPH + "/configure", json={"queue": q, "options": {
        "maxLength": 50}})).status_code == 201
    assert (await http.post(EPH + "/push", json={"queue": q, "messages": [
        {"payload": 1}, {"payload": 2}]})).status_code == 201
    assert (await http.get(EPH + "/pop", params={"queue": q, "group": "g"})).status_code == 200
    return q


_BAD_NAMES = ["", _LONG, "a\x01b", "tab\there", 7, None]


def _bodies(q: str) -> list[tuple[str, str, Any]]:
    """(method, path, JSON body or None) of requests §19 refuses with 400."""
    cases: list[tuple[str, str, Any]] = []
    for bad in _BAD_NAMES:
        cases += [("POST", "/push", {"queue": bad, "messages": [{"payload": 1}]}),
                  ("POST", "/push", {"queue": q, "partition": bad, "messages": [{"payload": 1}]}),
                  ("POST", "/ack", {"queue": bad, "acks": []}),
                  ("POST", "/ack", {"queue": q, "group": bad, "acks": [{"id": "e:1:a:1"}]}),
                  ("POST", "/configure", {"queue": bad}),
                  ("POST", "/reset", {"queue": bad})]
    cases += [
        ("POST", "/push", {"queue": q}),
        ("POST", "/push", {"queue": q, "messages": {"payload": 1}}),
        ("POST", "/push", {"queue": q, "messages": [{"payload": 1}, {"data": 2}]}),
        ("POST", "/push", {"queue": q, "messages": [{"payload": 1}] * 10_001}),
        ("POST", "/push", {"messages": [{"payload": 1}]}),
        ("POST", "/ack", {"queue": q}),
        ("POST", "/ack", {"queue": q, "acks": [{"status": "completed"}]}),
        ("POST", "/ack", {"queue": q, "acks": [{"id": 5}]}),
        ("POST", "/ack", {"queue": q, "acks": [{"id": "e:1:a:1"}] * 10_001}),
        ("POST", "/configure", {"queue": q, "options": {"maxLen": 3}}),
        ("POST", "/configure", {"queue": q, "options": [1]}),
        ("POST", "/configure", {"queue": q, "options": "big"}),
        ("POST", "/configure", {"queue": q, "options": {"maxLength": -1}}),
        ("POST", "/configure", {"queue": q, "options": {"maxLength": 1.5}}),
        ("POST", "/configure", {"queue": q, "options": {"ttlSeconds": True}}),
        ("POST", "/configure", {"queue": q, "options": {"leaseSeconds": "30"}}),
        ("POST", "/configure", {"queue": q, "options": {"policy": "dropNewest"}}),
        ("POST", "/configure", {"queue": q, "options": {"windowBuffer": 5}}),
        ("POST", "/configure", {"queue": q, "options": {"windowBuffer": {"size": 5}}}),
        ("POST", "/configure", {"queue": q, "options": {"windowBuffer": {"ms": -5}}}),
        ("POST", "/configure", {}),
        ("POST", "/reset", {}),
    ]
    return cases


async def test_every_bad_body_is_400_with_the_code_and_changes_nothing(
        http: httpx.AsyncClient, db: asyncpg.Connection, seeded: str) -> None:
    before = await _snapshot(db, seeded)
    for method, path, body in _bodies(seeded):
        r = await http.request(method, EPH + path, json=body)
        assert r.status_code == 400, (path, body, r.status_code, r.text)
        answer = r.json()
        assert answer["code"] == "ephemeral_bad_request" and answer["error"], (path, body)
    for raw in (b"{", b"[1]", b"\xff\xfe", b'{"queue": "q", "messages": [{"payload": }]}'):
        r = await http.post(EPH + "/push", content=raw,
                            headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["code"] == "ephemeral_bad_request"
    assert await _snapshot(db, seeded) == before


async def test_bad_configure_names_the_allowed_keys(http: httpx.AsyncClient,
                                                    seeded: str) -> None:
    r = await http.post(EPH + "/configure", json={"queue": seeded, "options": {"maxLen": 1}})
    assert "maxLen" in r.json()["error"] and "windowBuffer" in r.json()["error"]


async def test_bad_query_and_path_are_400_and_change_nothing(
        http: httpx.AsyncClient, db: asyncpg.Connection, seeded: str) -> None:
    before = await _snapshot(db, seeded)
    for params in ({}, {"queue": _LONG}, {"queue": "a\x02"}, {"queue": seeded, "batch": "x"},
                   {"queue": seeded, "batch": "1.5"}, {"queue": seeded, "wait": "maybe"},
                   {"queue": seeded, "timeout": "soon"}, {"queue": seeded, "group": "g\x1f"},
                   {"queue": seeded, "partition": "p\n"}, {"queue": seeded, "autoAck": "2"}):
        r = await http.get(EPH + "/pop", params=params)
        assert r.status_code == 400, (params, r.text)
        assert r.json()["code"] == "ephemeral_bad_request"
    for path in ("/queue/a%01b", "/queue/" + _LONG):
        r = await http.delete(EPH + path)
        assert r.status_code == 400 and r.json()["code"] == "ephemeral_bad_request"
    r = await http.get(EPH + f"/queues/{seeded}/depth", params={"group": "g\x01"})
    assert r.status_code == 400 and r.json()["code"] == "ephemeral_bad_request"
    assert await _snapshot(db, seeded) == before


async def test_only_depth_answers_404_and_with_its_code(http: httpx.AsyncClient,
                                                        db: asyncpg.Connection) -> None:
    missing = "nope-" + uuid.uuid4().hex
    before = await _snapshot(db, missing)
    assert not any(before.values())
    r = await http.get(EPH + f"/queues/{missing}/depth")
    assert r.status_code == 404 and r.json()["code"] == "ephemeral_queue_not_found"
    # reset and delete of an unknown queue answer 200 and create nothing
    r = await http.post(EPH + "/reset", json={"queue": missing})
    assert r.status_code == 200 and r.json() == {"queue": missing, "dropped": 0}
    r = await http.delete(EPH + f"/queue/{missing}")
    assert r.status_code == 200 and r.json() == {"queue": missing, "deleted": False,
                                                 "declared": False}
    r = await http.post(EPH + "/ack", json={"queue": missing, "acks": [{"id": "x"}]})
    assert r.status_code == 200 and r.json()["results"] == [{"id": "x", "outcome": "unknown"}]
    r = await http.post(EPH + "/push", json={"queue": missing, "messages": []})
    assert r.status_code == 201 and r.json() == {"pushed": 0}
    assert await _snapshot(db, missing) == before


async def test_limits_at_the_edge_are_accepted_and_clamped(http: httpx.AsyncClient) -> None:
    name = "é" * 256  # 512 bytes
    r = await http.post(EPH + "/push", json={"queue": name, "partition": "p/a?t#h%20 x",
                                             "messages": [{"payload": None}]})
    assert r.status_code == 201
    r = await http.get(EPH + "/pop", params={"queue": name, "batch": "0", "timeout": "-5",
                                             "wait": "true"})
    assert r.status_code == 200
    [m] = r.json()["messages"]
    assert m["payload"] is None and m["partition"] == "p/a?t#h%20 x"
    r = await http.get(EPH + f"/queues/{name}/depth")
    assert r.status_code == 200 and r.json()["queue"] == name
    r = await http.post(EPH + "/configure", json={"queue": name, "options": {
        "maxBytes": 1 << 40, "maxLength": 0, "leaseSeconds": 10 ** 9, "retryLimit": 5000,
        "windowBuffer": {"ms": 10 ** 7, "count": 10 ** 7}}})
    assert r.status_code == 201
    listed = {q["queue"]: q for q in (await http.get(EPH + "/queues")).json()["queues"]}
    assert listed[name]["options"] == {
        "maxBytes": 16 << 20, "maxLength": 10_000, "policy": "reject", "ttlSeconds": 0,
        "leaseSeconds": 86_400, "retryLimit": 1000,
        "windowBuffer": {"ms": 60_000, "count": 10_000}}
    r = await http.delete(EPH + "/queue/" + name.replace("é", "%C3%A9"))
    assert r.json() == {"queue": name, "deleted": True, "declared": True}


async def test_a_queue_name_with_a_slash_is_addressable(http: httpx.AsyncClient) -> None:
    name = "a/b:" + uuid.uuid4().hex[:6]
    await http.post(EPH + "/push", json={"queue": name, "messages": [{"payload": 1}]})
    r = await http.get(EPH + "/queues/a%2Fb" + name[3:] + "/depth")
    assert r.status_code == 200 and r.json()["pending"] == 1
    r = await http.delete(EPH + "/queue/a%2Fb" + name[3:])
    assert r.json()["deleted"] is True


async def test_hostile_ids_and_statuses_ack_unknown(http: httpx.AsyncClient,
                                                    db: asyncpg.Connection, seeded: str) -> None:
    before = await _snapshot(db, seeded)
    ids = ["e:1:p\u0000:3", "e:1:" + "p" * 600 + ":3", "e:ffffffffffffffffff:p:1",
           "e:1:p:99999999999999999999", "", "e::p:1", "\u0000"]
    r = await http.post(EPH + "/ack", json={"queue": seeded, "group": "g", "acks": [
        {"id": i, "status": "\u0000weird", "error": {"any": ["thing"]}} for i in ids]})
    assert r.status_code == 200, r.text
    assert [x["outcome"] for x in r.json()["results"]] == ["unknown"] * len(ids)
    after = await _snapshot(db, seeded)
    # an ack is a touch (§19.2), so only the queue's touched_at may move
    assert [row[:-1] for row in after.pop("eph_queue")] == [
        row[:-1] for row in before.pop("eph_queue")]
    assert after == before
