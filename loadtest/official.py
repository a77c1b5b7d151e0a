"""Consumer worker process driving the official client's own `consume()` (queen-mq 2.6).

The same contract as `loadtest.consumer` (deliveries per group in bitmaps, end-to-end
latency, drain detection), but the pops, the JSON decoding and the acks are the client's:
`queen.queue(q).group(g).batch(n).partitions(p).concurrency(c).consume(handler)`, acking
each handled batch with `/ack/batch` as the client does by default. The cell measures the
official client against the load tool's lean consumer on the same broker and shape.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from loadtest.board import Board
from loadtest.consumer import ConsumerSpec, Tracking, record, report


def run(spec: ConsumerSpec, board: Board, results: Any) -> None:
    import contextlib
    import io

    import uvloop

    # The client prints its shutdown to stdout, over the run's progress line.
    with contextlib.redirect_stdout(io.StringIO()):
        out = uvloop.run(_main(spec, board))
    results.put(("consumer", spec.slot, out))


async def _main(spec: ConsumerSpec, board: Board) -> dict[str, Any]:
    from queen import Queen

    t = Tracking.of(spec)
    deadline = time.monotonic() + spec.hard_deadline_s
    stop = asyncio.Event()
    per_group: dict[tuple[str, int], int] = {}
    for name, gi in zip(spec.groups, spec.group_index):
        per_group[(name, gi)] = per_group.get((name, gi), 0) + 1

    async with Queen(spec.url, framed_pop=spec.frames) as queen:
        async def consume(group: str, gi: int, workers: int) -> None:
            async def handle(batch: Any) -> None:
                messages = batch if isinstance(batch, list) else [batch]
                record(board, spec.slot, gi, t.delivered[gi], t.hists, t.windows, t.steps,
                       [(m["transactionId"], int(m["data"]["p"]), int(m["data"]["s"]),
                         float(m["data"]["t"])) for m in messages])
                # The client acks after the handler returns; counted here, as it is sent.
                board.add(spec.slot, "acked", len(messages))

            await (queen.queue(spec.queue).group(group).batch(spec.batch)
                   .partitions(spec.partitions).concurrency(workers).wait(True)
                   .timeout_millis(spec.wait_ms).consume(handle, signal=stop))

        async def watch() -> None:
            """Stop the consume loops at the deadline or once every group has drained."""
            while time.monotonic() < deadline:
                target = board.get("drain_target")
                if target >= 0 and all(board.group_delivered[gi] >= target
                                       for _, gi in per_group):
                    break
                await asyncio.sleep(0.2)
            stop.set()

        watcher = asyncio.create_task(watch())
        reporter = asyncio.create_task(report(board, spec.slot, t.windows))
        await asyncio.gather(*(consume(g, gi, n) for (g, gi), n in per_group.items()))
        watcher.cancel()
        reporter.cancel()
    return t.result()
