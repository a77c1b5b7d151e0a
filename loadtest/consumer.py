"""Consumer worker process: long-poll pops and one ack/batch per popped batch.

Each task belongs to one consumer group. Deliveries are recorded per group in bitmaps (the
gate) and per message as end-to-end latency (send time in the payload to receipt here; both
clocks are this machine's). A task stops at the hard deadline, or, once the parent has set a
drain target, when its group has seen that many distinct messages and a pop comes back empty.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import msgspec

from loadtest.board import Board
from loadtest.corpus import Envelope
from loadtest.gate import Bitmaps
from loadtest.httpc import Connection, HttpError
from loadtest.stats import Histogram, RecentP99
from loadtest.wire import framed_messages


@dataclass(frozen=True, slots=True)
class ConsumerSpec:
    url: str
    queue: str
    groups: tuple[str, ...]       # group name per task of this process
    group_index: tuple[int, ...]  # index of each task's group in the run's group list
    batch: int
    partitions: int               # `partitions` query parameter of the pop
    wait_ms: int
    hard_deadline_s: float        # from start; the drain gives up here
    slot: int
    ack: str = "all"              # all = one item per message (as the official client)
    frames: bool = False          # ask for framed pops (loadtest.wire)


class _Msg(msgspec.Struct):
    transactionId: str
    partitionId: str
    leaseId: str
    data: Envelope


class _Pop(msgspec.Struct):
    messages: list[_Msg] | None = None


_POP = msgspec.json.Decoder(_Pop)
_ENVELOPE = msgspec.json.Decoder(Envelope)


def popped_messages(answer: bytes, framed: bool) -> list[_Msg]:
    """The messages of a pop answer, JSON or framed."""
    if not framed:
        return _POP.decode(answer).messages or []
    return [_Msg(txid, pid, lease, _ENVELOPE.decode(payload))
            for txid, pid, lease, payload in framed_messages(answer)]


class _AckItem(msgspec.Struct):
    success: bool
    error: str | None = None


_ACKS = msgspec.json.Decoder(list[_AckItem])


def run(spec: ConsumerSpec, board: Board, results: Any) -> None:
    import uvloop

    out = uvloop.run(_main(spec, board))
    results.put(("consumer", spec.slot, out))


@dataclass(slots=True)
class Tracking:
    """What a consumer process records: deliveries per group (the gate), latencies."""

    delivered: dict[int, Bitmaps]
    hists: dict[str, Histogram]
    windows: dict[str, RecentP99]
    steps: dict[int, Histogram]  # end-to-end latency per offered-rate step

    @classmethod
    def of(cls, spec: ConsumerSpec) -> Tracking:
        return cls({g: Bitmaps() for g in set(spec.group_index)},
                   {k: Histogram() for k in ("pop", "ack", "e2e")},
                   {k: RecentP99() for k in ("pop", "ack", "e2e")}, {})

    def result(self) -> dict[str, Any]:
        return {"delivered": {gi: {p: bytes(b) for p, b in bm.maps.items()}
                              for gi, bm in self.delivered.items()},
                "hists": {k: h.counts for k, h in self.hists.items()},
                "e2e_by_step": {k: h.counts for k, h in self.steps.items()}}


async def _main(spec: ConsumerSpec, board: Board) -> dict[str, Any]:
    t = Tracking.of(spec)
    deadline = time.monotonic() + spec.hard_deadline_s
    tasks = [asyncio.create_task(_loop(spec, board, name, gi, t.delivered[gi], t.hists,
                                       t.windows, t.steps, deadline))
             for name, gi in zip(spec.groups, spec.group_index)]
    reporter = asyncio.create_task(report(board, spec.slot, t.windows))
    await asyncio.gather(*tasks)
    reporter.cancel()
    return t.result()


async def report(board: Board, slot: int, windows: dict[str, RecentP99]) -> None:
    """Publish this process's p99s to the board once a second."""
    while True:
        await asyncio.sleep(1.0)
        for k in ("pop", "ack", "e2e"):
            board.put(slot, f"{k}_p99", windows[k].take_p99())


async def _loop(spec: ConsumerSpec, board: Board, group: str, gi: int, delivered: Bitmaps,
                hists: dict[str, Histogram], windows: dict[str, RecentP99],
                steps: dict[int, Histogram], deadline: float) -> None:
    conn = Connection(spec.url)
    path = (f"/api/v1/pop/queue/{quote(spec.queue, safe='')}?batch={spec.batch}"
            f"&partitions={spec.partitions}&wait=true&timeout={spec.wait_ms}"
            f"&consumerGroup={quote(group, safe='')}" + ("&frames=true" if spec.frames else ""))
    try:
        while time.monotonic() < deadline:
            start = time.perf_counter()
            try:
                answer = await conn.request("GET", path, timeout=spec.wait_ms / 1000 + 10)
            except (TimeoutError, HttpError):
                board.add(spec.slot, "errors")
                await asyncio.sleep(0.2)
                continue
            board.add(spec.slot, "pops")
            if answer.status != 200:
                if answer.status != 204:
                    board.add(spec.slot, "errors")
                    await asyncio.sleep(0.2)
                board.add(spec.slot, "empty_pops")
                target = board.get("drain_target")
                if target >= 0 and board.group_delivered[gi] >= target:
                    return
                continue
            ms = (time.perf_counter() - start) * 1000
            hists["pop"].add(ms)
            windows["pop"].add(ms)
            messages = popped_messages(answer.body, spec.frames)
            record(board, spec.slot, gi, delivered, hists, windows, steps,
                   [(m.transactionId, m.data.p, m.data.s, m.data.t) for m in messages])
            await _ack(conn, spec, board, group, messages, hists, windows)
    finally:
        await conn.close()


def record(board: Board, slot: int, gi: int, delivered: Bitmaps, hists: dict[str, Histogram],
           windows: dict[str, RecentP99], steps: dict[int, Histogram],
           deliveries: list[tuple[str, int, int, float]]) -> None:
    """Count one popped batch: (transactionId, producer, sequence, send time) per message
    into the group's bitmap (the gate), the end-to-end latency and the board."""
    now = time.time()
    fresh = 0
    step_hist = steps.setdefault(int(board.get("step")), Histogram())
    for txid, producer, seq, sent_at in deliveries:
        if txid != f"p{producer}-{seq}":
            board.add(slot, "errors")  # payload does not match its key
            continue
        before = delivered.maps.get(producer)
        if before is None or seq >= len(before) or not before[seq]:
            fresh += 1
        delivered.mark(producer, seq)
        e2e = (now - sent_at) * 1000
        hists["e2e"].add(e2e)
        windows["e2e"].add(e2e)
        step_hist.add(e2e)
    board.add(slot, "delivered", len(deliveries))
    board.add_group(gi, fresh)


async def _ack(conn: Connection, spec: ConsumerSpec, board: Board, group: str,
               messages: list[_Msg], hists: dict[str, Histogram],
               windows: dict[str, RecentP99]) -> None:
    if spec.ack == "last":  # an ack is an offset commit: the last message per partition
        last: dict[str, _Msg] = {m.partitionId: m for m in messages}
        chosen = list(last.values())
    else:
        chosen = messages
    body = msgspec.json.encode({
        "acknowledgments": [{"transactionId": m.transactionId, "partitionId": m.partitionId,
                             "status": "completed", "leaseId": m.leaseId} for m in chosen],
        "consumerGroup": group})
    start = time.perf_counter()
    try:
        answer = await conn.request("POST", "/api/v1/ack/batch", body, timeout=30)
    except (TimeoutError, HttpError):
        board.add(spec.slot, "errors")
        return
    ms = (time.perf_counter() - start) * 1000
    hists["ack"].add(ms)
    windows["ack"].add(ms)
    if answer.status != 200 or not all(a.success for a in _ACKS.decode(answer.body)):
        board.add(spec.slot, "errors")
        return
    board.add(spec.slot, "acked", len(messages))
