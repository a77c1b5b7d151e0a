"""The DLQ variant: a queue with a retry budget of 2 and messages that fail on purpose.

A message's kind follows from its transactionId (a CRC bucket), so producers need not say
and any consumer can tell:

| kind      | share | the consumer acks it                      | it must end          |
|-----------|-------|-------------------------------------------|----------------------|
| `normal`  | 55 %  | `completed`                               | completed, no DLQ row |
| `flaky`   | 20 %  | `failed` the first time, then `completed` | completed, no DLQ row |
| `poison`  | 15 %  | `failed`, every time                      | one DLQ row, retry count 2 |
| `dlq_now` | 10 %  | `dlq`                                     | one DLQ row          |

Consumers of one group run as tasks of one process (`python -m loadtest.faults.dlq
'<json>'`), so "failed once" is remembered across them; the producer is an ordinary ledger
producer without deliberate re-sends.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import zlib
from typing import Any

from loadtest.faults.consumer import Consumer, ConsumerConfig

RETRY_LIMIT = 2


def kind_of(transaction_id: str) -> str:
    bucket = zlib.crc32(transaction_id.encode()) % 20
    if bucket < 3:
        return "poison"
    if bucket < 5:
        return "dlq_now"
    if bucket < 9:
        return "flaky"
    return "normal"


class DlqConsumer(Consumer):
    def __init__(self, cfg: ConsumerConfig, failed_once: set[str]) -> None:
        super().__init__(cfg)
        self.failed_once = failed_once

    def status_for(self, message: dict[str, Any]) -> str:
        kind = kind_of(message["transactionId"])
        if kind == "poison":
            return "failed"
        if kind == "dlq_now":
            return "dlq"
        if kind == "flaky" and message["id"] not in self.failed_once:
            self.failed_once.add(message["id"])
            return "failed"
        return "completed"

    async def handle(self, messages: list[dict[str, Any]], lease: str) -> None:
        statuses = [self.status_for(m) for m in messages]
        await self.ack(messages, move="dlq", lease=lease, pop_lease=lease, statuses=statuses)


async def run_group(cfg: ConsumerConfig, tasks: int) -> None:
    failed_once: set[str] = set()
    consumers = [DlqConsumer(dataclasses.replace(cfg, name=f"{cfg.name}-{i}",
                                                 seed=cfg.seed + i), failed_once)
                 for i in range(tasks)]
    await asyncio.gather(*(c.run() for c in consumers))


def main() -> int:
    raw = json.loads(sys.argv[1])
    tasks = raw.pop("tasks", 2)
    asyncio.run(run_group(ConsumerConfig(**raw), tasks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
