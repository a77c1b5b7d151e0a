"""The broker's own per-message steps on its hot paths, in process, without the database or
the HTTP stack: `python -m loadtest probe step_cost [--root ../before]`.

What `probe path_cost` measures whole (a request through the ASGI app and its database) is
too coarse on a shared machine for a cut of a microsecond per message: its chunks spread by
±20 % from round to round. This probe times the steps such cuts change, one at a time, on
inputs of the soak shape's sizes (corpus payloads, pushes of 100 over one partition, pops
and ack batches of 500):

* `push decode`: a push body to its items (broker/wire/push.py);
* `push items`: the items to the core's, their message ids minted (broker/routes/push.py);
* `push answer`: the answer's JSON from 100 queued outcomes;
* `push outcomes`: the core's push of those items to one partition, the coalescer answering
  at once (core/engine/push.py: grouping, submission, an outcome per item);
* `push flush`: what a flush of them does besides its statement: the segment packed
  (zstd included), the statement's parameters, the verdicts from its answer
  (core/engine/writes.py `prepare` and `written`, as a stream cycle calls them);
* `ack items`: an ack batch body to the core's items (`to_group_acks`, or what the route
  did before it: `to_ack_item` and a `GroupAck` per item);
* `pop answer`: the JSON pop answer's `messages` of a 500-message delivery from 4 claims of
  5 segments each, decompression included (broker/wire/pop_json.py).

A process of its own (run from the checkout measured: this one, or `--root`'s) times each
step by its process CPU time (`time.process_time`, so time spent waiting for a core on a
loaded machine is not counted), the minimum over `--repeats` repeats of `--calls` calls,
per message. With `--root` the checkouts alternate (reversed every other round) and the
report gives each step's this ÷ other, round by round.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loadtest import launch
from loadtest.probes.rounds import Rounds, arguments, in_turn

STEPS = ("push decode", "push items", "push answer", "push outcomes", "push flush",
         "ack items", "pop answer")


def _timed(step: Callable[[], object], *, calls: int, repeats: int, messages: int) -> float:
    """µs of CPU per message: the fastest of `repeats` runs of `calls` calls."""
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        for _ in range(calls):
            step()
        best = min(best, time.process_time() - started)
    return best / calls / messages * 1e6


def _push_steps(calls: int, repeats: int) -> dict[str, float]:
    from datetime import UTC, datetime

    from broker.routes.push import answer, to_push_items
    from broker.wire.http import json_response
    from broker.wire.push import decode_json_push
    from core.engine.writes import Verdict
    from core.types import PushOutcome
    from loadtest.corpus import build_corpus, payload

    corpus = build_corpus()
    body = b'{"items":[' + b",".join(
        b'{"queue":"q","partition":"p1","transactionId":"t%d","payload":%s}'
        % (k, payload(corpus, 1, k, 1.0)) for k in range(100)) + b"]}"
    items = decode_json_push(body)
    made = to_push_items(items, None, "")
    at = datetime(2026, 12, 6, tzinfo=UTC)
    outcomes = [PushOutcome(item, Verdict("queued", item.message.message_id, 17, k, at), None)
                for k, item in enumerate(made)]
    return {
        **_core_push_steps(made, calls, repeats),
        "push decode": _timed(lambda: decode_json_push(body), calls=calls, repeats=repeats,
                              messages=100),
        "push items": _timed(lambda: to_push_items(items, None, ""), calls=calls,
                             repeats=repeats, messages=100),
        "push answer": _timed(lambda: json_response(answer(outcomes), 201), calls=calls,
                              repeats=repeats, messages=100),
    }


def _core_push_steps(items: Any, calls: int, repeats: int) -> dict[str, float]:
    import asyncio
    from datetime import UTC, datetime
    from types import SimpleNamespace

    from core import options
    from core.engine.directory import PartitionName
    from core.engine.push import Pusher
    from core.engine.writes import NewMessage, Verdict, prepare, written
    from core.storage.writes import append_arguments

    at = datetime(2026, 12, 6, tzinfo=UTC)
    messages = [item.message for item in items]
    verdicts = [Verdict("queued", m.message_id, 17, k, at) for k, m in enumerate(messages)]
    db = SimpleNamespace(shards=SimpleNamespace(distributed=False))
    pusher = Pusher(db, max_flush_messages=1000, max_pending_messages=10_000,  # type: ignore[arg-type]
                    max_partitions_per_flush=64, max_concurrent_flushes=4,
                    max_flush_bytes=64 << 20, on_appended=lambda _: None,
                    answer_within_s=10.0)

    async def submit(key: PartitionName, items: list[NewMessage], *, size: int = 0
                     ) -> list[Verdict]:
        return verdicts  # the coalescer's answer, at once

    pusher.coalescer.submit = submit  # type: ignore[method-assign]
    loop = asyncio.new_event_loop()
    name = PartitionName("q", "p1", "")

    def flush() -> object:
        work, targets = prepare([(name, messages)])
        append_arguments(targets, options.DEFAULTS_JSON)
        return written(work, queue_ids=[1], partition_ids=[17], bases=[0], times=[at])

    try:
        return {
            "push outcomes": _timed(lambda: loop.run_until_complete(pusher.push(items)),
                                    calls=calls, repeats=repeats, messages=100),
            "push flush": _timed(flush, calls=calls, repeats=repeats, messages=100),
        }
    finally:
        loop.close()


def _ack_steps(calls: int, repeats: int) -> dict[str, float]:
    import uuid

    import msgspec

    from broker.routes import ack as route
    from broker.wire.ack import decode_ack_batch
    from core.types import GroupAck

    lease = str(uuid.UUID(int=7))
    raw = msgspec.json.encode({"consumerGroup": "g", "acknowledgments": [
        {"transactionId": str(uuid.UUID(int=k)), "partitionId": "17", "status": "completed",
         "leaseId": lease} for k in range(500)]})
    build: Callable[[Any], object]
    if hasattr(route, "to_group_acks"):
        def build(body: Any) -> object:
            return route.to_group_acks(body.acknowledgments, "g", "")
    else:  # the route before to_group_acks
        def build(body: Any) -> object:
            groups = [i.consumerGroup or "g" for i in body.acknowledgments]
            items = [route.to_ack_item(i) for i in body.acknowledgments]
            return [GroupAck(g, i, "") for g, i in zip(groups, items)]
    return {"ack items": _timed(lambda: build(decode_ack_batch(raw)), calls=calls,
                                repeats=repeats, messages=500)}


def _pop_steps(calls: int, repeats: int) -> dict[str, float]:
    from datetime import UTC, datetime

    from broker.wire.pop_json import messages_array
    from core import segments
    from core.engine.pop import Claim, PopResult, StoredSegment
    from core.ids import LeaseId, PartitionId, QueueId, uuid7
    from core.segments import Frame
    from loadtest.corpus import build_corpus, payload

    corpus = build_corpus()
    at = datetime(2026, 12, 6, 12, 0, 0, 123456, tzinfo=UTC)
    lease = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
    result = PopResult(LeaseId(lease))
    for c in range(4):
        claim = Claim(QueueId(1), "q", PartitionId(100 + c), f"p{c}", 0, 124, 0)
        for s in range(5):
            frames = [Frame(uuid7(), f"{uuid7()}", payload(corpus, 1, 25 * s + i, 1.0))
                      for i in range(25)]
            claim.segments.append(StoredSegment(25 * s, at, segments.pack(frames),
                                                25 * s + 24))
        result.claims.append(claim)
    return {"pop answer": _timed(lambda: messages_array(result, lease_id=lease, group="g"),
                                 calls=calls, repeats=repeats, messages=500)}


def _worker(argv: list[str]) -> int:
    """The measuring process (run from the checkout measured): prints its figures."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, required=True)
    parser.add_argument("--repeats", type=int, required=True)
    args = parser.parse_args(argv)
    figures = {**_push_steps(args.calls, args.repeats), **_ack_steps(args.calls, args.repeats),
               **_pop_steps(max(1, args.calls // 5), args.repeats)}
    print(json.dumps(figures))
    return 0


def _run_in(root: Path, args: argparse.Namespace) -> dict[str, float]:
    # Imported here, in the process that compares: the worker runs with another checkout's
    # loadtest first on its path, which may not have it.
    from loadtest.probes.rounds import figures_from_checkout

    return figures_from_checkout(root, __file__, ["--calls", str(args.calls),
                                                  "--repeats", str(args.repeats)],
                                 timeout=600)


def main(argv: list[str] | None = None) -> int:
    p = arguments("step_cost", __doc__ or "", rounds=6, connections=None, fast_database=False)
    p.add_argument("--root", type=Path, help="another checkout, measured in the same run")
    p.add_argument("--calls", type=int, default=20, help="calls per timed repeat")
    p.add_argument("--repeats", type=int, default=15)
    args = p.parse_args(argv)
    sides = [("this", launch.ROOT)] + ([("other", args.root.resolve())] if args.root else [])
    rounds = Rounds("step_cost", args)
    for r in range(args.rounds):
        for side, root in in_turn(sides, r):
            for step, value in _run_in(root, args).items():
                rounds.add(f"{side} {step} µs/msg", value)
        rounds.end_round()
    rounds.against_checkout(args.root, STEPS)
    return rounds.finish()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        sys.exit(_worker(sys.argv[2:]))
    sys.exit(main())
