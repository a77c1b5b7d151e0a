"""Supervision documents (extensions §21.1): the official client's `consume()` with
`.supervision(...)` publishes its status through two KV puts, which must apply."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from typing import Any

import pytest
from queen import Queen

from tests.support import BrokerProcess


async def test_consume_with_supervision_publishes_head_and_chunk(
        broker: BrokerProcess, queue_name: str, caplog: pytest.LogCaptureFixture) -> None:
    group = "app-" + uuid.uuid4().hex[:8]
    async with Queen(broker.url) as client:
        await client.queue(queue_name).push([{"data": {"i": i}} for i in range(3)])
        seen: list[Any] = []

        async def handler(message: dict[str, Any]) -> None:
            seen.append(message["data"])

        await asyncio.wait_for(client.queue(queue_name).batch(1).limit(3).timeout_millis(200)
                               .supervision({"group": group}).consume(handler), 60)
        assert len(seen) == 3
        rows = await client.kv.list_all("queen-supervisor", f"{group}/")
    keys = sorted(r["key"] for r in rows)
    assert len(keys) == 2 and keys[0].endswith("/chunk/0000") and keys[1].endswith("/head")
    chunk, head = (r["value"] for r in sorted(rows, key=lambda r: r["key"]))
    assert head["format"] == "queen.supervisor.remote-status/v1"
    assert head["write"] == chunk["write"] and head["chunks"] == 1
    document = json.loads(base64.b64decode(chunk["data"]))
    assert len(base64.b64decode(chunk["data"])) == head["bytes"]
    assert document["schema"] == "queen.consumer.status/v1"
    assert document["state"] == "stopped"  # the last publication, at stop
    assert document["pool_status"][0]["completed"] == 3
    assert all(r["expiresAt"] is not None for r in rows)  # ttlSeconds 60
    assert "Status publication failed" not in caplog.text
