"""A ledger consumer process: `python -m loadtest.faults.consumer '<json config>'`.

Long-polls a leased batch for its group (batch 1..10, partitions 1..3), checks every
payload's checksum, then rolls a seeded die for what to do with the batch:

| move        | what the consumer does                                             |
|-------------|--------------------------------------------------------------------|
| `all`       | ack every message `completed` with the leaseId                     |
| `prefix`    | ack the first messages only; the lease runs out on the rest        |
| `skip`      | no ack: the lease runs out                                         |
| `late`      | wait past the lease time, then ack with the expired leaseId        |
| `die`       | ack a prefix, then exit on the spot (the harness starts another)   |
| `twice`     | ack everything, then again without leaseId (must be a no-op)       |
| `retry`     | ack everything with status `retry`: redelivered at once            |
| `foreign`   | ack with a leaseId nobody holds (must be refused), then ack for real |

After the harness creates the drain file every batch is acked whole (`all`). Each pop and
each ack is one record; an `ack_send` record goes out before the ack, so a consumer killed
mid-ack still shows that the ack may have been applied.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from loadtest.faults import payloads
from loadtest.faults.client import LONG_POLL_GRACE, LedgerProcess, ProcessConfig, backoff

MOVES = {"all": 48, "prefix": 10, "skip": 8, "late": 5, "die": 4, "twice": 10,
         "retry": 7, "foreign": 8}


@dataclass(frozen=True, slots=True)
class ConsumerConfig(ProcessConfig):
    group: str
    lease_seconds: float
    drain_file: str
    poll_timeout_ms: int = 2000
    max_batch: int = 10
    max_partitions: int = 3


class Consumer(LedgerProcess):
    def __init__(self, cfg: ConsumerConfig) -> None:
        super().__init__(cfg, "consumer")
        self.cfg = cfg
        self._moves = list(MOVES)
        self._weights = list(MOVES.values())

    async def pop(self) -> list[dict[str, Any]] | None:
        cfg = self.cfg
        query = (f"batch={self.rng.randint(1, cfg.max_batch)}"
                 f"&partitions={self.rng.randint(1, cfg.max_partitions)}"
                 f"&wait=true&timeout={cfg.poll_timeout_ms}"
                 f"&consumerGroup={quote(cfg.group)}")
        out = await self.caller.call("GET", f"/api/v1/pop/queue/{quote(cfg.queue)}?{query}",
                                     deadline=cfg.poll_timeout_ms / 1000 + LONG_POLL_GRACE)
        rec = out.record()
        rec.update(c=cfg.name, g=cfg.group)
        messages = None
        if out.status == 200 and isinstance(out.body, dict):
            messages = out.body.get("messages") or []
            rec["lease"] = out.body.get("leaseId")
            rec["msgs"] = [[m["partitionId"], m["id"], m["transactionId"],
                            payloads.intact(m.get("data"))] for m in messages]
        elif out.body is not None and out.status != 204:
            rec["body"] = str(out.body)[:200]
        self.journal.write("pop", **rec)
        if out.failed:
            await backoff(1)
        return messages

    async def ack(self, messages: list[dict[str, Any]], *, move: str, status: str = "completed",
                  lease: str | None, pop_lease: str,
                  statuses: list[str] | None = None) -> bool:
        """One batch ack (`statuses` per message, else `status` for all); answers whether
        every item was accepted."""
        cfg = self.cfg
        each = statuses or [status] * len(messages)
        items = [[m["partitionId"], m["transactionId"], m["id"], st]
                 for m, st in zip(messages, each)]
        acks = [{"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                 "status": st, **({"leaseId": lease} if lease is not None else {}),
                 **({"error": f"harness: {st}"} if st != "completed" else {})}
                for m, st in zip(messages, each)]
        for attempt in range(3):
            self.journal.write("ack_send", c=cfg.name, g=cfg.group, pl=pop_lease, lease=lease,
                               items=items, t0=round(time.time(), 4))
            out = await self.caller.call("POST", "/api/v1/ack/batch", {
                "consumerGroup": cfg.group, "acknowledgments": acks})
            rec = out.record()
            rec.update(c=cfg.name, g=cfg.group, pl=pop_lease, lease=lease, mode=move,
                       items=items, att=attempt)
            answers = out.body if out.status == 200 and isinstance(out.body, list) else None
            if answers is not None and len(answers) == len(items):
                rec["ans"] = [[a.get("success"), bool(a.get("noop")), a.get("leaseReleased"),
                               a.get("error"), bool(a.get("dlq"))] for a in answers]
                self.journal.write("ack", **rec)
                return all(a.get("success") for a in answers)
            if out.body is not None:
                rec["body"] = str(out.body)[:200]
            self.journal.write("ack", **rec)
            if not out.failed:
                return False
            await backoff(attempt)
        return False

    async def handle(self, messages: list[dict[str, Any]], lease: str) -> None:
        drain = Path(self.cfg.drain_file).exists()
        move = "all" if drain else self.rng.choices(self._moves, self._weights)[0]
        await asyncio.sleep(self.rng.uniform(0, 0.05))  # "processing"
        if move == "all":
            await self.ack(messages, move=move, lease=lease, pop_lease=lease)
        elif move in ("prefix", "die"):
            cut = self.rng.randint(0, len(messages) - 1)
            if cut:
                await self.ack(messages[:cut], move=move, lease=lease, pop_lease=lease)
            if move == "die":
                self.journal.write("die", c=self.cfg.name)
                self.journal.close()
                os._exit(3)
        elif move == "late":
            await asyncio.sleep(self.cfg.lease_seconds + 0.5)
            await self.ack(messages, move=move, lease=lease, pop_lease=lease)
        elif move == "twice":
            if await self.ack(messages, move=move, lease=lease, pop_lease=lease):
                await self.ack(messages, move="twice2", lease=None, pop_lease=lease)
        elif move == "retry":
            await self.ack(messages, move=move, status="retry", lease=lease, pop_lease=lease)
        elif move == "foreign":
            await self.ack(messages, move=move, lease=str(uuid.uuid4()), pop_lease=lease)
            await self.ack(messages, move="all", lease=lease, pop_lease=lease)
        # "skip": nothing

    async def run(self) -> None:
        stop = Path(self.cfg.stop_file)
        try:
            while not stop.exists():
                messages = await self.pop()
                if messages:
                    lease = messages[0]["leaseId"]
                    await self.handle(messages, lease)
        finally:
            self.journal.close()
            await self.caller.close()

    @classmethod
    def main(cls) -> int:
        """The process entry point: the config is the JSON of argv[1]."""
        asyncio.run(cls(ConsumerConfig(**json.loads(sys.argv[1]))).run())
        return 0


if __name__ == "__main__":
    sys.exit(Consumer.main())
