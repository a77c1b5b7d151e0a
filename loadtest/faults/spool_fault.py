"""The maintenance fault: push maintenance on while the ledger producers push, a
check producer of the harness pushing keyed messages that are answered `buffered`, kill -9 of
a web worker in the middle of it, maintenance off, kill -9 of the worker draining the spool
(when it is caught in the act), heal.

Survived when the instance became whole by itself and every check message answered
`buffered` is stored exactly once, in the order it was answered (figures `spool_lost`,
`spool_duplicates`, `spool_order` in the fault record). The ledger producers meanwhile see
`buffered`, which they do not count as acknowledged: they re-send until `queued` or
`duplicate`, so the ledger's own figures stay exact.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from typing import Any

import httpx
import psutil  # type: ignore[import-untyped]

from core.engine.spool import DRAIN_LOCK
from loadtest.faults.base import Healer
from loadtest.faults.servers import ServeInstance

SPOOL_QUEUE = "spool-check"
MAINTENANCE = "/api/v1/system/maintenance"
CHECK_MESSAGES = 40  # per fault; the worker is killed after the first third


async def maintenance_kill(injector: Healer, inst: ServeInstance) -> dict[str, Any]:
    run = injector.run
    rec: dict[str, Any] = {"injected_at": time.time()}
    prefix = f"m{int(rec['injected_at'] * 1000)}"
    answered: list[str] = []
    try:
        await _switch(inst.url, True)
        await asyncio.sleep(0.3)  # every worker has heard of it (NOTIFY)
        roles = await asyncio.to_thread(inst.roles)
        victim = injector.rng.choice(roles.web)
        rec["pid"] = victim
        await _push_checks(inst.url, prefix, answered, CHECK_MESSAGES // 3)
        os.kill(victim, signal.SIGKILL)
        await _push_checks(inst.url, prefix, answered, CHECK_MESSAGES)
        rec["check_buffered"] = len(answered)
    finally:
        await _switch(inst.url, False)
    rec["maintenance_off_at"] = time.time()
    drainer = await _catch_drainer(inst)
    if drainer is not None:
        rec["drainer_pid"] = drainer
        with contextlib.suppress(ProcessLookupError):
            os.kill(drainer, signal.SIGKILL)
    healed = await injector.heal(inst, rec["maintenance_off_at"],
                                 lambda r: victim not in r.web and drainer not in r.web)
    rec["spool_drain_s"] = await _drained(inst.url, run.cfg.heal_timeout)
    stored = await _stored(inst.url, prefix)
    rec["spool_lost"] = len(set(answered) - set(stored))
    rec["spool_duplicates"] = len(stored) - len(set(stored))
    rec["spool_order"] = int([t for t in stored if t in set(answered)] != answered)
    clean = not (rec["spool_lost"] or rec["spool_duplicates"] or rec["spool_order"])
    return await injector.settle(rec, inst, healed,
                                 healed is not None and clean and rec["spool_drain_s"] is not None)


async def _switch(url: str, on: bool) -> None:
    """Set push maintenance, retrying while the answering worker is being replaced."""
    deadline = time.monotonic() + 30
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if (await client.post(MAINTENANCE, json={"enabled": on})).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"could not turn push maintenance {'on' if on else 'off'}")
            await asyncio.sleep(0.2)


async def _push_checks(url: str, prefix: str, answered: list[str], upto: int) -> None:
    """Sequential keyed pushes over fresh connections (spread over the workers), each sent
    again with its transactionId until answered; records the ones answered `buffered`."""
    async with httpx.AsyncClient(base_url=url, timeout=10,
                                 limits=httpx.Limits(max_keepalive_connections=0)) as client:
        deadline = time.monotonic() + 30
        while len(answered) < upto and time.monotonic() < deadline:
            txid = f"{prefix}-{len(answered)}"
            try:
                r = await client.post("/api/v1/push", json={"items": [
                    {"queue": SPOOL_QUEUE, "transactionId": txid, "payload": txid}]})
            except httpx.HTTPError:
                await asyncio.sleep(0.05)
                continue
            if r.status_code == 201 and r.json()[0]["status"] == "buffered":
                answered.append(txid)
            else:
                await asyncio.sleep(0.05)


async def _catch_drainer(inst: ServeInstance) -> int | None:
    """The web worker holding the spool's drain lock, if one is seen within 5 s and before
    the spool is empty: once nothing is buffered, no drainer is left to catch in the act
    (the drain of the check messages usually ends before one is seen, and waiting out the
    5 s then was a third of the fault's time)."""
    deadline = time.monotonic() + 5
    next_look = time.monotonic()
    async with httpx.AsyncClient(base_url=inst.url, timeout=2) as client:
        while time.monotonic() < deadline:
            roles = await asyncio.to_thread(inst.roles)
            for pid in roles.web:
                with contextlib.suppress(psutil.Error):
                    if any(f.path.endswith(DRAIN_LOCK)
                           for f in psutil.Process(pid).open_files()):
                        return int(pid)
            if time.monotonic() >= next_look:  # not every turn: the turns catch drainers
                next_look = time.monotonic() + 0.1
                with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                    if (await client.get(MAINTENANCE)).json()["bufferedMessages"] == 0:
                        return None
            await asyncio.sleep(0.01)
    return None


async def _drained(url: str, timeout: float) -> float | None:
    started = time.monotonic()
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        while time.monotonic() - started < timeout:
            with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                if (await client.get(MAINTENANCE)).json()["bufferedMessages"] == 0:
                    return round(time.monotonic() - started, 2)
            await asyncio.sleep(0.2)
    return None


async def _stored(url: str, prefix: str) -> list[str]:
    """The check queue's stored transactionIds of this fault, in offset order (read by
    offset through /api/v1/fetch, page by page)."""
    out: list[str] = []
    offset = 0
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        while True:
            r = await client.post("/api/v1/fetch", json={"entries": [
                {"queue": SPOOL_QUEUE, "partition": "Default", "offset": offset}]})
            r.raise_for_status()
            records = r.json()["entries"][0]["records"]
            if not records:
                return [t for t in out if t.startswith(prefix + "-")]
            out += [rec["transactionId"] for rec in records]
            offset = records[-1]["offset"] + 1
