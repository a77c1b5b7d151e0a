"""A spool directory the broker cannot use (here a file where it should be; out of
descriptors, a full disk or wrong permissions fail the same calls): pushes go to the database
as `busy()` documents, and the failure is logged when it starts, not ten times a second by
every worker for as long as it lasts."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from tests.support import BrokerProcess, pop_json, push_items

WATCH_SECONDS = 2.0  # 20 turns of each worker's drain loop (FILE_BUFFER_FLUSH_MS 100)


async def test_an_unusable_spool_is_logged_once_and_pushes_go_to_the_database(
        database_url: str, queue_name: str, tmp_path: Path) -> None:
    not_a_directory = tmp_path / "spool"
    not_a_directory.write_bytes(b"")
    log = tmp_path / "web.log"
    env = {"FILE_BUFFER_DIR": str(not_a_directory)}
    with BrokerProcess(database_url, workers=2, env=env, log_path=log) as broker:
        async with httpx.AsyncClient(base_url=broker.url, timeout=30) as http:
            sent = []
            for k in range(20):  # new connections: both workers take pushes
                async with httpx.AsyncClient(base_url=broker.url, timeout=30) as one:
                    sent += await push_items(one, queue_name, [{"k": k}], prefix=f"p{k}-")
            await asyncio.sleep(WATCH_SECONDS)
            body = await pop_json(http, queue_name, batch=100)
    assert body is not None
    assert sorted(m["transactionId"] for m in body["messages"]) == sorted(sent)
    lines = [line for line in log.read_text().splitlines() if "push spool" in line]
    # Per worker: `busy`, the drain loop and the count, once each (it was about 20 a second).
    assert 1 <= len(lines) <= 2 * 3, lines
