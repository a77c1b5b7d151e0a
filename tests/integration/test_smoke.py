"""A first end-to-end check: push, dedup and fetch through the real HTTP stack."""

import httpx


async def test_push_then_fetch_round_trips_payloads(http: httpx.AsyncClient, queue_name: str) -> None:
    payloads = [None, {}, "text", [1, 2, {"a": "é"}], {"nested": {"x": [True, None, 1.5]}}]
    items = [{"queue": queue_name, "payload": p, "transactionId": f"t{i}"}
             for i, p in enumerate(payloads)]
    r = await http.post("/api/v1/push", json={"items": items})
    assert r.status_code == 201
    assert [e["status"] for e in r.json()] == ["queued"] * len(payloads)
    r = await http.post("/api/v1/fetch", json={"entries": [{"queue": queue_name, "offset": 0}]})
    entry = r.json()["entries"][0]
    assert [rec["payload"] for rec in entry["records"]] == payloads
    assert [rec["offset"] for rec in entry["records"]] == list(range(len(payloads)))
    assert entry["highWatermark"] == len(payloads)
