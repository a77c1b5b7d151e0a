"""One cell: producers and consumers in their own processes against one URL.

The parent only watches: once a second it reads the shared board, prints the progress line,
samples CPU of the process trees, and (in stepped mode) raises the offered rate. After the
measured window the producers stop, the parent tells the consumers how many messages were
acknowledged, the consumers drain, and the gate compares what each group got with what was
acknowledged.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from loadtest.board import Board, context
from loadtest.consumer import ConsumerSpec
from loadtest.consumer import run as run_consumer
from loadtest.gate import Bitmaps, GateResult, check
from loadtest.procs import TreeSampler
from loadtest.producer import ProducerSpec
from loadtest.producer import run as run_producer
from loadtest.stats import Histogram


@dataclass(frozen=True, slots=True)
class Shape:
    """The traffic of one cell."""

    queue: str
    duration: float = 10.0
    connections: int = 32
    batch: int = 10
    partitions: int = 100
    groups: tuple[str, ...] = ()
    consumers_per_group: int = 0
    pop_batch: int = 100
    pop_partitions: int = 4
    wait_ms: int = 1000
    message_bytes: int = 1024
    seed: int = 42
    rate: float = 0.0                 # offered msg/s; 0 = closed loop, as fast as answered
    steps: tuple[float, ...] = ()     # stepped offered rates (W2); each lasts step_seconds
    step_seconds: float = 10.0
    producer_procs: int = 2
    consumer_procs: int = 2
    drain_seconds: float = 60.0
    ack: str = "all"
    max_messages: int = 0
    consumer_grace: float = 5.0       # consumers outlive producers+drain by this much
    wire: str = "json"                # json | binary | frames (loadtest.wire)
    consumer: str = "raw"             # raw: the lean load consumer; official: queen-mq consume()
    # Consumers start once the producers are done (a backlog drained by full pops), and the
    # CPU of the two phases is reported apart (CellOutcome.phase_cpu).
    phased: bool = False


@dataclass(slots=True)
class CellOutcome:
    pushed: Bitmaps
    delivered: list[Bitmaps]
    uncertain: int
    hists: dict[str, Histogram]
    e2e_by_step: dict[int, Histogram]
    series: list[dict[str, float]]
    cpu: dict[str, float]
    rss: dict[str, int]
    measured_seconds: float
    worker_rss: int = 0  # peak RSS of the largest single broker web worker
    step_log: list[dict[str, float]] = field(default_factory=list)
    gates: list[GateResult] = field(default_factory=list)
    # A phased cell's CPU seconds per role: {"push": {...}, "consume": {...}}
    phase_cpu: dict[str, dict[str, float]] = field(default_factory=dict)
    # Load processes that gave no result (a producer that died, a consumer that did not
    # finish its drain): the gate cannot vouch for what they did, so the cell fails.
    lost_processes: int = 0


def _split(total: int, parts: int) -> list[int]:
    parts = max(1, min(parts, total)) if total else 0
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def run_cell(url: str, shape: Shape, roots: dict[str, int | None], label: str, *,
             producer_fn: Callable[..., None] = run_producer,
             consumer_fn: Callable[..., None] = run_consumer) -> CellOutcome:
    """Run one cell; the worker functions default to the HTTP ones (peers pass their own)."""
    ctx = context()
    prod_split = _split(shape.connections, shape.producer_procs)
    tasks = [(g, gi) for gi, g in enumerate(shape.groups) for _ in range(shape.consumers_per_group)]
    cons_split = _split(len(tasks), shape.consumer_procs)
    board = Board(ctx, len(prod_split) + len(cons_split), len(shape.groups))
    board.set("rate", shape.steps[0] if shape.steps else shape.rate)
    results = ctx.Queue()
    duration = shape.duration if not shape.steps else shape.step_seconds * len(shape.steps)
    procs = []
    slot = 0
    offset = 0
    if shape.consumer == "official":
        from loadtest import official

        consumer_fn = official.run
    for n in cons_split:
        mine = tasks[offset:offset + n]
        offset += n
        spec = ConsumerSpec(url, shape.queue, tuple(g for g, _ in mine),
                            tuple(gi for _, gi in mine), shape.pop_batch, shape.pop_partitions,
                            shape.wait_ms, duration + shape.drain_seconds + shape.consumer_grace, slot,
                            shape.ack, shape.wire == "frames")
        procs.append(ctx.Process(target=consumer_fn, args=(spec, board, results), daemon=True))
        slot += 1
    first = 0
    for n in prod_split:
        spec_p = ProducerSpec(url, shape.queue, first, n, shape.batch, shape.partitions,
                              shape.connections, duration, shape.seed, shape.message_bytes, slot,
                              shape.max_messages, shape.wire)
        procs.append(ctx.Process(target=producer_fn, args=(spec_p, board, results), daemon=True))
        first += n
        slot += 1
    import os
    sampler = TreeSampler({**roots, "generator": os.getpid()})
    consumers = procs[:len(cons_split)]
    for p in procs[len(cons_split):] if shape.phased else procs:
        p.start()
    sampler.sample()
    start = time.monotonic()
    series: list[dict[str, float]] = []
    step_log: list[dict[str, float]] = []
    last = {"pushed": 0.0, "delivered": 0.0, "push_reqs": 0.0}
    step = 0
    step_start_lag = step_start_pushed = 0.0
    produced: dict[int, Any] = {}
    consumed: dict[int, Any] = {}
    n_prod = len(prod_split)
    while len(produced) < n_prod:
        _collect(results, produced, consumed, timeout=1.0)
        now = time.monotonic() - start
        sampler.sample()
        point = _point(board, now, last, len(shape.groups))
        series.append(point)
        _progress(label, point)
        if shape.steps and now >= (step + 1) * shape.step_seconds and not board.get("stop"):
            growth = point["lag"] - step_start_lag
            achieved = (point["pushed"] - step_start_pushed) / shape.step_seconds
            step_log.append({"step": step, "offered": shape.steps[step], "lag_growth": growth,
                             "achieved": achieved, "lag": point["lag"],
                             "e2e_p99_live": point["e2e_p99"]})
            step_start_lag, step_start_pushed = point["lag"], point["pushed"]
            # Saturated: the backlog grew by more than a second of offered load, or the
            # live end-to-end p99 passed 1 s. Stop offering more; the drain follows.
            # Producers that cannot reach the offered rate mean the push path is saturated.
            # Step 0 doubles as the warm-up and never stops the ramp.
            saturated = (growth > shape.steps[step] or point["e2e_p99"] > 1000
                         or achieved < 0.9 * shape.steps[step])
            if (step > 0 and saturated) or step + 1 >= len(shape.steps):
                board.set("stop", 1)
            else:
                step += 1
                board.set("step", step)
                board.set("rate", shape.steps[step])
        if now > duration + 60:
            board.set("stop", 1)
        if not any(p.is_alive() for p in procs[len(cons_split):]):
            _collect(results, produced, consumed, timeout=1.0)
            if len(produced) < n_prod:
                sys.stderr.write(f"\n{label}: a producer process died without a result\n")
                break
    measured = time.monotonic() - start
    pushed = Bitmaps()
    uncertain = 0
    hists = {k: Histogram() for k in ("push", "pop", "ack", "e2e")}
    for out in produced.values():
        pushed.merge(Bitmaps({int(p): bytearray(b) for p, b in out["acked"].items()}))
        uncertain += out["uncertain"]
        hists["push"].merge(Histogram(out["push_hist"], sum(out["push_hist"])))
    board.set("drain_target", pushed.count())
    phase_cpu: dict[str, dict[str, float]] = {}
    if shape.phased:
        sampler.sample()
        phase_cpu["push"] = sampler.cpu_seconds()
        for p in consumers:
            p.start()

    def drain_tick() -> None:
        sampler.sample()
        point = _point(board, time.monotonic() - start, last, len(shape.groups))
        series.append(point)
        _progress(label + " drain", point)

    await_consumers(results, produced, consumed, consumers,
                    deadline=time.monotonic() + shape.drain_seconds + 15 if shape.phased
                    else start + duration + shape.drain_seconds + 15, tick=drain_tick)
    if shape.phased:
        sampler.sample()
        total = sampler.cpu_seconds()
        phase_cpu["consume"] = {k: round(v - phase_cpu["push"].get(k, 0.0), 2)
                                for k, v in total.items()}
    sys.stderr.write("\n")
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.terminate()
    delivered = [Bitmaps() for _ in shape.groups]
    e2e_by_step: dict[int, Histogram] = {}
    for out in consumed.values():
        for gi, maps in out["delivered"].items():
            delivered[int(gi)].merge(Bitmaps({int(p): bytearray(b) for p, b in maps.items()}))
        for k, counts in out["hists"].items():
            hists[k].merge(Histogram(counts, sum(counts)))
        for st, counts in out["e2e_by_step"].items():
            e2e_by_step.setdefault(int(st), Histogram()).merge(Histogram(counts, sum(counts)))
    gates = [check(g, pushed, delivered[gi], uncertain) for gi, g in enumerate(shape.groups)]
    if len(consumed) < len(cons_split):
        sys.stderr.write(f"{label}: {len(cons_split) - len(consumed)} consumer processes "
                         "did not finish the drain\n")
    return CellOutcome(pushed, delivered, uncertain, hists, e2e_by_step, series,
                       sampler.cpu_seconds(), dict(sampler.peak_rss), measured,
                       sampler.peak_worker_rss, step_log, gates, phase_cpu,
                       lost_processes=(n_prod - len(produced))
                       + (len(cons_split) - len(consumed)))


def await_consumers(results: Any, produced: dict[int, Any], consumed: dict[int, Any],
                    consumers: Sequence[Any], *, deadline: float,
                    tick: Callable[[], None]) -> None:
    """Read the consumers' results until each has reported, all have exited, or the
    deadline passed; `tick` runs after each second of waiting."""
    while len(consumed) < len(consumers) and time.monotonic() < deadline:
        # A consumer puts its result just before it exits: checking that one is alive
        # before reading the queue would drop the result of one that finished meanwhile.
        alive = any(p.is_alive() for p in consumers)
        _collect(results, produced, consumed, timeout=1.0)
        if not alive:
            return
        tick()


def _collect(results: Any, produced: dict[int, Any], consumed: dict[int, Any],
             timeout: float) -> None:
    import queue as _queue

    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        try:
            kind, slot, out = results.get(timeout=left)
        except _queue.Empty:
            return
        (produced if kind == "producer" else consumed)[slot] = out


def _point(board: Board, t: float, last: dict[str, float], groups: int = 1) -> dict[str, float]:
    totals = {k: board.total(k) for k in ("pushed", "delivered", "push_reqs", "errors",
                                          "push_errors")}
    point = {"t": round(t, 2),
             "push_rate": totals["pushed"] - last["pushed"],
             "req_rate": totals["push_reqs"] - last["push_reqs"],
             "deliver_rate": totals["delivered"] - last["delivered"],
             "pushed": totals["pushed"], "delivered": totals["delivered"],
             "lag": max(0.0, totals["pushed"] * max(1, groups) - board.total("acked")),
             "push_p99": board.worst("push_p99"), "e2e_p99": board.worst("e2e_p99"),
             "errors": totals["errors"] + totals["push_errors"], "rate": board.get("rate"),
             # pops answered, and those that answered nothing (204): the wasted ones
             "pops": board.total("pops"), "empty_pops": board.total("empty_pops")}
    for k in last:
        last[k] = totals[k]
    return point


def _progress(label: str, p: dict[str, float]) -> None:
    sys.stderr.write(
        f"\r{label} t={p['t']:5.1f}s push {p['push_rate']:8.0f} msg/s ({p['req_rate']:6.0f} req/s)"
        f" p99 {p['push_p99']:6.1f} ms | deliver {p['deliver_rate']:8.0f} msg/s"
        f" e2e p99 {p['e2e_p99']:7.1f} ms | lag {p['lag']:8.0f} err {p['errors']:.0f}   ")
    sys.stderr.flush()
