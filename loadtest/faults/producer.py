"""A ledger producer process: `python -m loadtest.faults.producer '<json config>'`.

Pushes uniquely numbered messages (transactionId `<producer>-<seq>`, checksummed payload)
over the queue's partitions, one request at a time, and re-sends a request with the same
transactionIds and payloads until every item is answered `queued` or `duplicate` (after a
timeout, a broken connection, a 5xx, a 429 or a per-item `failed`). Now and then it re-sends
an acknowledged message on purpose:

- `dup_same`: same transactionId, same partition, same payload: must be `duplicate`;
- `dup_payload`: same transactionId and partition, another payload: `duplicate`, and the
  first payload must stay the stored one;
- `dup_other`: same transactionId to another partition: a new message there (`queued`).

Every attempt is a `push` record; the checker works out the rest.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadtest.faults import payloads
from loadtest.faults.client import LedgerProcess, ProcessConfig, backoff

ACKNOWLEDGED = ("queued", "duplicate")
FIRST_WRITES = ("new", "dup_other")


@dataclass(frozen=True, slots=True)
class ProducerConfig(ProcessConfig):
    partitions: list[str]
    rate: float            # pushes per second
    max_items: int         # items per push: 1..max_items
    dup_prob: float        # share of pushes that are deliberate re-sends
    give_up_seconds: float = 120.0
    count: int = 0         # stop after this many pushes (0 = until the stop file appears)


# partition, transactionId, payload, kind
Item = tuple[str, str, dict[str, Any], str]


class Producer(LedgerProcess):
    def __init__(self, cfg: ProducerConfig) -> None:
        super().__init__(cfg, "producer")
        self.cfg = cfg
        self.seq = 0
        self.acknowledged: list[Item] = []
        self.attempted: set[tuple[str, str]] = set()

    def _pad(self) -> str:
        return self.rng.randbytes(self.rng.randint(0, 150)).hex()

    def _next_items(self) -> list[Item]:
        cfg = self.cfg
        if self.acknowledged and self.rng.random() < cfg.dup_prob:
            partition, txid, payload, _ = self.rng.choice(self.acknowledged)
            kind = self.rng.choice(("dup_same", "dup_payload", "dup_other"))
            if kind == "dup_same":
                return [(partition, txid, payload, kind)]
            if kind == "dup_payload":
                changed = payloads.make(payload["p"], payload["s"], 1, self._pad())
                return [(partition, txid, changed, kind)]
            others = [p for p in cfg.partitions if (p, txid) not in self.attempted]
            if others:
                return [(self.rng.choice(others), txid, payload, kind)]
        items = []
        for _ in range(self.rng.randint(1, cfg.max_items)):
            items.append((self.rng.choice(cfg.partitions), payloads.txid(cfg.name, self.seq),
                          payloads.make(cfg.name, self.seq, 0, self._pad()), "new"))
            self.seq += 1
        return items

    async def push_until_acknowledged(self, items: list[Item]) -> None:
        pending = list(items)
        started = time.monotonic()
        attempt = 0
        while pending:
            body = {"items": [{"queue": self.cfg.queue, "partition": p, "transactionId": t,
                               "payload": pl} for p, t, pl, _ in pending]}
            out = await self.caller.call("POST", "/api/v1/push", body)
            rec = out.record()
            rec["items"] = [[p, t, pl["v"], kind] for p, t, pl, kind in pending]
            rec["att"] = attempt
            answers = out.body if out.status == 201 and isinstance(out.body, list) else None
            if answers is not None and len(answers) == len(pending):
                rec["ans"] = [[a.get("status"), a.get("message_id")] for a in answers]
                self.journal.write("push", **rec)
                for item, a in zip(pending, answers):
                    if a.get("status") in ACKNOWLEDGED and item[3] in FIRST_WRITES:
                        self.acknowledged.append(item)
                pending = [it for it, a in zip(pending, answers)
                           if a.get("status") not in ACKNOWLEDGED]
            else:
                if out.body is not None:
                    rec["body"] = str(out.body)[:200]
                self.journal.write("push", **rec)
                if not out.failed:  # a 4xx for a valid request: a bug, recorded, not retried
                    return
            if pending:
                if time.monotonic() - started > self.cfg.give_up_seconds:
                    self.journal.write("abandon", items=[[p, t] for p, t, _, _ in pending])
                    return
                await backoff(attempt)
                attempt += 1

    async def run(self) -> None:
        stop = Path(self.cfg.stop_file)
        interval = 1.0 / self.cfg.rate
        next_at = time.monotonic()
        pushes = 0
        try:
            while not stop.exists() and not (self.cfg.count and pushes >= self.cfg.count):
                pushes += 1
                items = self._next_items()
                for p, t, _, kind in items:
                    if kind in FIRST_WRITES:
                        self.attempted.add((p, t))
                await self.push_until_acknowledged(items)
                next_at += interval
                delay = next_at - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                else:
                    next_at = time.monotonic()
        finally:
            self.journal.write("producer_done", seq=self.seq)
            self.journal.close()
            await self.caller.close()


def main() -> int:
    cfg = ProducerConfig(**json.loads(sys.argv[1]))
    asyncio.run(Producer(cfg).run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
