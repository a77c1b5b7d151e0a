"""HTTP calls of the workload processes: timed, logged, failing over between brokers.

Each call records when it was sent (`t0`), when its answer came (`t1`), its status, or the
error (`timeout`: no answer in time; `transport`: the connection broke or was refused). The
client waits well past the broker's deadline (`DEADLINE_SLACK`), so a late answer is seen as
late rather than cut off. After a transport error or a 5xx the next call goes to the next
broker URL, as the official client does with several URLs.

The underlying keep-alive connection (`loadtest.httpc`) reconnects and sends a request once
more when its connection turns out to be closed; the official client retries network
errors too. So a worker killed under a connection usually shows as a slower answer, not as
a transport error, and a push may reach the broker twice (deduplication makes that safe,
and the checker would count a stored duplicate).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadtest.faults.journal import Journal
from loadtest.httpc import Connection, HttpError

# Deadlines of docs/architecture/reliability.md: a long poll answers by its timeout + 5 s, anything else in 10 s.
DEADLINE = 10.0
LONG_POLL_GRACE = 5.0
DEADLINE_SLACK = 10.0


def bearer(token: str | None) -> dict[str, str]:
    """The Authorization header of a token (none without one)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


@dataclass(slots=True)
class Outcome:
    t0: float
    t1: float
    url: str
    deadline: float
    status: int | None = None
    body: Any = None
    error: str | None = None

    def record(self) -> dict[str, Any]:
        out = {"t0": round(self.t0, 4), "t1": round(self.t1, 4), "dl": self.deadline,
               "url": self.url, "st": self.status}
        if self.error:
            out["err"] = self.error
        return out

    @property
    def server_error(self) -> bool:
        return self.status is not None and self.status >= 500

    @property
    def failed(self) -> bool:
        """Worth another try: no answer, a broken connection, 5xx or 429."""
        return self.status is None or self.status >= 500 or self.status == 429


class Caller:
    """Keep-alive connections to one or more brokers; the current one is used until it fails."""

    def __init__(self, urls: list[str], start: int = 0, token: str | None = None) -> None:
        """`token`: a JWT sent as a bearer token with every call (a run with auth on)."""
        self.urls = urls
        self.index = start % len(urls)
        self._conns = {u: Connection(u, bearer(token)) for u in urls}

    async def close(self) -> None:
        for conn in self._conns.values():
            await conn.close()

    async def call(self, method: str, path: str, body: Any = None, *,
                   deadline: float = DEADLINE) -> Outcome:
        url = self.urls[self.index]
        conn = self._conns[url]
        data = None if body is None else json.dumps(body).encode()
        t0 = time.time()
        try:
            answer = await conn.request(method, path, data, timeout=deadline + DEADLINE_SLACK)
        except TimeoutError:
            self._fail_over()
            return Outcome(t0, time.time(), url, deadline, error="timeout")
        except (HttpError, OSError) as exc:
            self._fail_over()
            return Outcome(t0, time.time(), url, deadline, error=f"transport: {exc}"[:120])
        out = Outcome(t0, time.time(), url, deadline, answer.status)
        if answer.body:
            try:
                out.body = json.loads(answer.body)
            except ValueError:
                out.body = answer.body[:200].decode(errors="replace")
        if out.server_error:
            self._fail_over()
        return out

    def _fail_over(self) -> None:
        self.index = (self.index + 1) % len(self.urls)


async def backoff(attempt: int) -> None:
    await asyncio.sleep(min(1.0, 0.1 * 2 ** attempt))


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessConfig:
    """What every ledger process (producer, consumer) is told: its name, the brokers, its
    queue, the run directory its journal goes to, its seed (a run repeats), the file whose
    appearance stops it, and the JWT of a run with auth on."""

    name: str
    urls: list[str]
    queue: str
    run_dir: str
    seed: int
    stop_file: str
    token: str | None = None


class LedgerProcess:
    """What every ledger process works with: a random generator seeded from its config, its
    journal (`<role>-<name>.jsonl` in the run directory) and its caller of the brokers."""

    def __init__(self, cfg: ProcessConfig, role: str) -> None:
        self.rng = random.Random(cfg.seed)
        self.journal = Journal(Path(cfg.run_dir) / f"{role}-{cfg.name}.jsonl")
        self.caller = Caller(cfg.urls, start=cfg.seed, token=cfg.token)
