"""The core service as one object: its side tasks, its death, its drain.

`Broker.open` runs the wake-up loops as side tasks; one that dies must stop its owner (in
a web worker: the process exits with status 1, and its supervisor starts a new one), never
leave a broker serving without wake-ups. `stop_waiting` answers parked long polls at once.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from core.engine.listener import WakeupHub
from core.engine.pop import PopRequest
from core.service import Broker
from core.settings import Settings
from tests.support import ROOT, wait_for


async def test_a_side_task_that_dies_cancels_the_owner_with_its_error(
        database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async def dies(self: WakeupHub) -> None:
        await asyncio.sleep(0.2)
        raise RuntimeError("the notifier broke")

    monkeypatch.setattr(WakeupHub, "announce_forever", dies)
    started = time.monotonic()
    with pytest.raises(BaseExceptionGroup) as caught:
        async with Broker.open(Settings(db_pool_size=2), dsn=database_url, migrate=False):
            await asyncio.sleep(30)  # cancelled long before
    assert time.monotonic() - started < 10
    assert caught.group_contains(RuntimeError, match="the notifier broke")


async def test_stop_waiting_answers_a_parked_long_poll_at_once(
        database_url: str, queue_name: str) -> None:
    async with Broker.open(Settings(db_pool_size=2), dsn=database_url,
                           migrate=False) as broker:
        await broker.configure(queue=queue_name, namespace=None, task=None, given={},
                               replace=False)
        parked = asyncio.create_task(broker.pop(PopRequest(group="g", batch=1,
                                                           queue=queue_name),
                                                wait=True, timeout_ms=30_000))
        await asyncio.sleep(0.3)
        assert not parked.done()
        started = time.monotonic()
        broker.stop_waiting()
        result = await asyncio.wait_for(parked, 5)
        assert result.claims == [] and time.monotonic() - started < 2
        # ... and a new long poll does not park at all.
        result = await asyncio.wait_for(broker.pop(
            PopRequest(group="g", batch=1, queue=queue_name), wait=True, timeout_ms=30_000), 5)
        assert result.claims == []


_FAILING_WORKER = textwrap.dedent("""
    import asyncio, sys
    from core.engine.listener import WakeupHub

    async def dies(self):
        await asyncio.sleep(2.0)
        raise RuntimeError("injected: the wake-up notifier died")

    WakeupHub.announce_forever = dies
    from broker.worker import main
    sys.exit(main(["--fd", sys.argv[1]]))
""")


def _spawn_failing_worker(fd: int, database_url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DATABASE_URL": database_url, "LOG_LEVEL": "info"}
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-c", _FAILING_WORKER, str(fd)], cwd=ROOT,
                                env=env, pass_fds=(fd,), stdout=out, stderr=subprocess.STDOUT)


async def test_a_worker_whose_core_fails_exits_with_status_1(database_url: str,
                                                             tmp_path: Path) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.set_inheritable(True)
    port = sock.getsockname()[1]
    log = tmp_path / "worker.log"
    proc = _spawn_failing_worker(sock.fileno(), database_url, log)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
            async def serving() -> bool:
                try:
                    return (await http.get("/health")).status_code == 200
                except httpx.TransportError:
                    return False

            await wait_for(serving, timeout=20)  # it serves until its core fails
        assert await asyncio.to_thread(proc.wait, 30) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
        sock.close()
    output = log.read_text()
    assert "the broker's core stopped" in output
    assert "injected: the wake-up notifier died" in output
