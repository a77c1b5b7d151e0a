"""The named workloads (W1–W4, docs/benchmarks/index.md) as lists of cells, with their knobs."""

from __future__ import annotations

import argparse
from dataclasses import replace

from loadtest.runner import Shape
from loadtest.wire import WIRES


def add_knobs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--duration", type=float, help="seconds of load per cell")
    p.add_argument("--connections", type=int, help="producer connections")
    p.add_argument("--batch", type=int, nargs="+", help="messages per push request")
    p.add_argument("--partitions", type=int, nargs="+", help="partitions of the queue")
    p.add_argument("--groups", type=int, nargs="+", help="consumer groups (W3)")
    p.add_argument("--consumers", type=int, help="consumers per group")
    p.add_argument("--pop-batch", type=int, help="pop batch size")
    p.add_argument("--pop-partitions", type=int, help="`partitions` of each pop")
    p.add_argument("--message-bytes", type=int, help="approximate payload size")
    p.add_argument("--seed", type=int, help="corpus and partition-choice seed")
    p.add_argument("--rate", type=float, help="offered msg/s (0 = closed loop)")
    p.add_argument("--steps", type=float, nargs="+", help="W2: offered rates to step through")
    p.add_argument("--step-seconds", type=float, help="W2: seconds per step")
    p.add_argument("--producer-procs", type=int, help="producer processes")
    p.add_argument("--consumer-procs", type=int, help="consumer processes")
    p.add_argument("--ack", choices=("all", "last"), help="ack every message or the last")
    p.add_argument("--wire", nargs="+", choices=WIRES, default=["json"],
                   help="wire modes to run each cell in (binary: binary pushes; frames: "
                        "framed pushes and framed pops); compared with json in the same run")


def _common(args: argparse.Namespace, shape: Shape) -> Shape:
    over = {k: getattr(args, a) for k, a in (
        ("duration", "duration"), ("connections", "connections"), ("pop_batch", "pop_batch"),
        ("pop_partitions", "pop_partitions"), ("message_bytes", "message_bytes"),
        ("seed", "seed"), ("rate", "rate"), ("step_seconds", "step_seconds"),
        ("producer_procs", "producer_procs"), ("consumer_procs", "consumer_procs"),
        ("ack", "ack"), ("consumers_per_group", "consumers"))
        if getattr(args, a, None) is not None}
    if getattr(args, "steps", None):
        over["steps"] = tuple(args.steps)
    return replace(shape, **over)


def cells(name: str, args: argparse.Namespace, run_id: str) -> list[tuple[str, Shape]]:
    """(label, shape) for every cell of a workload, knobs applied, once per wire mode (a
    mode other than json is named in the label)."""
    out = []
    for label, shape in _cells(name, args, run_id):
        for wire in getattr(args, "wire", None) or ["json"]:
            if wire == "json":
                out.append((label, shape))
            else:
                out.append((f"{label} wire={wire}",
                            replace(shape, wire=wire, queue=f"{shape.queue}-{wire}")))
    return out


def _cells(name: str, args: argparse.Namespace, run_id: str) -> list[tuple[str, Shape]]:
    q = f"{name.lower()}-{run_id}"
    if name == "W1":
        return [(f"W1 batch={b} partitions={p}", _common(args, Shape(
                    queue=f"{q}-b{b}-p{p}", duration=20, connections=32, batch=b, partitions=p)))
                for p in (args.partitions or [100]) for b in (args.batch or [10, 100])]
    if name == "W2":
        base = Shape(queue=q, duration=20, connections=32, batch=10, partitions=100,
                     groups=("g1",), consumers_per_group=16, pop_batch=100, pop_partitions=4,
                     steps=(1000, 2000, 3000, 4000, 5000, 6000, 8000, 10000, 12000, 16000),
                     step_seconds=6)
        b = (args.batch or [10])[0]
        p = (args.partitions or [100])[0]
        shape = _common(args, replace(base, batch=b, partitions=p))
        # The same pipe drained by the official client's own consume() loop.
        return [("W2 balanced", shape),
                ("W2 official consume()", replace(shape, consumer="official",
                                                  queue=f"{q}-official"))]
    if name == "W3":
        out = []
        for g in args.groups or [1, 4, 16]:
            out.append((f"W3 groups={g}", _common(args, Shape(
                queue=f"{q}-g{g}", duration=20, connections=16, batch=10, partitions=100,
                groups=tuple(f"g{i}" for i in range(g)), consumers_per_group=4,
                pop_batch=100, pop_partitions=4, rate=args.rate or 0.0, consumer_procs=2))))
        return out
    if name == "W4":
        return [(f"W4 partitions={p}", _common(args, Shape(
                    queue=f"{q}-p{p}", duration=20, connections=64, batch=1, partitions=p,
                    groups=("g1",), consumers_per_group=8, pop_batch=100, pop_partitions=8)))
                for p in (args.partitions or [100, 10_000, 100_000])]
    raise ValueError(f"unknown workload {name}")
