"""Producer and consumer loops for peers, shaped exactly like the broker's HTTP workers.

A peer supplies a `Client` (open, push a batch, take up to N messages, ack them); these loops
add what the broker's workers do: offered-rate pacing, (producer, sequence) bitmaps for the
gate, latency histograms, and the shared board for the live line and the drain.
"""

from __future__ import annotations

import asyncio
import importlib
import time
from collections.abc import Sequence
from typing import Any, Protocol

import msgspec

from loadtest.board import Board
from loadtest.consumer import ConsumerSpec
from loadtest.corpus import Envelope, build_corpus, payload, transaction_id
from loadtest.gate import Bitmaps
from loadtest.producer import ProducerSpec
from loadtest.stats import Histogram

_ENVELOPE = msgspec.json.Decoder(Envelope)


class Client(Protocol):
    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def push(self, items: Sequence[tuple[str, bytes]]) -> bool: ...
    async def take(self, limit: int, wait_s: float) -> tuple[list[bytes], Any]: ...
    async def ack(self, handle: Any) -> None: ...


def _client(spec_url: str, kind: str, role: str) -> Client:
    module = importlib.import_module(f"loadtest.peers.{kind}")
    return module.make_client(spec_url, role)  # type: ignore[no-any-return]


def run_producer(kind: str, spec: ProducerSpec, board: Board, results: Any) -> None:
    import uvloop

    results.put(("producer", spec.slot, uvloop.run(_produce(kind, spec, board))))


def run_consumer(kind: str, spec: ConsumerSpec, board: Board, results: Any) -> None:
    import uvloop

    results.put(("consumer", spec.slot, uvloop.run(_consume(kind, spec, board))))


async def _produce(kind: str, spec: ProducerSpec, board: Board) -> dict[str, Any]:
    corpus = build_corpus(seed=spec.seed, message_bytes=spec.message_bytes)
    acked, hist = Bitmaps(), Histogram()
    deadline = time.monotonic() + spec.duration

    async def one(producer: int) -> None:
        client = _client(spec.url, kind, "producer")
        await client.open()
        seq, next_at = 0, time.monotonic()
        try:
            while time.monotonic() < deadline and not board.get("stop"):
                rate = board.get("rate")
                if rate > 0:
                    now = time.monotonic()
                    next_at = max(next_at + spec.batch * spec.total_connections / rate, now - 1)
                    if next_at > now:
                        await asyncio.sleep(next_at - now)
                sent = time.time()
                items = [(transaction_id(producer, seq + k), payload(corpus, producer, seq + k, sent))
                         for k in range(spec.batch)]
                start = time.perf_counter()
                try:
                    ok = await client.push(items)
                except Exception:  # noqa: BLE001 - a peer's driver errors are data here
                    ok = False
                if ok:
                    hist.add((time.perf_counter() - start) * 1000)
                    for k in range(spec.batch):
                        acked.mark(producer, seq + k)
                    board.add(spec.slot, "pushed", spec.batch)
                    board.add(spec.slot, "push_reqs")
                else:
                    board.add(spec.slot, "uncertain", spec.batch)
                seq += spec.batch
        finally:
            await client.close()

    await asyncio.gather(*(one(spec.first_producer + i) for i in range(spec.connections)))
    return {"acked": {p: bytes(b) for p, b in acked.maps.items()}, "push_hist": hist.counts,
            "uncertain": int(board.mine(spec.slot, "uncertain"))}


async def _consume(kind: str, spec: ConsumerSpec, board: Board) -> dict[str, Any]:
    delivered = {gi: Bitmaps() for gi in set(spec.group_index)}
    hists = {k: Histogram() for k in ("pop", "ack", "e2e")}
    steps: dict[int, Histogram] = {}
    deadline = time.monotonic() + spec.hard_deadline_s

    async def one(gi: int) -> None:
        client = _client(spec.url, kind, "consumer")
        await client.open()
        try:
            while time.monotonic() < deadline:
                start = time.perf_counter()
                bodies, handle = await client.take(spec.batch, spec.wait_ms / 1000)
                board.add(spec.slot, "pops")
                if not bodies:
                    board.add(spec.slot, "empty_pops")
                    target = board.get("drain_target")
                    if target >= 0 and board.group_delivered[gi] >= target:
                        return
                    continue
                hists["pop"].add((time.perf_counter() - start) * 1000)
                now, fresh = time.time(), 0
                step_hist = steps.setdefault(int(board.get("step")), Histogram())
                for body in bodies:
                    env = _ENVELOPE.decode(body)
                    bits = delivered[gi].maps.get(env.p)
                    if bits is None or env.s >= len(bits) or not bits[env.s]:
                        fresh += 1
                    delivered[gi].mark(env.p, env.s)
                    hists["e2e"].add((now - env.t) * 1000)
                    step_hist.add((now - env.t) * 1000)
                board.add(spec.slot, "delivered", len(bodies))
                board.add_group(gi, fresh)
                t0 = time.perf_counter()
                await client.ack(handle)
                hists["ack"].add((time.perf_counter() - t0) * 1000)
                board.add(spec.slot, "acked", len(bodies))
        finally:
            await client.close()

    await asyncio.gather(*(one(gi) for gi in spec.group_index))
    return {"delivered": {gi: {p: bytes(b) for p, b in bm.maps.items()}
                          for gi, bm in delivered.items()},
            "hists": {k: h.counts for k, h in hists.items()},
            "e2e_by_step": {k: h.counts for k, h in steps.items()}}
