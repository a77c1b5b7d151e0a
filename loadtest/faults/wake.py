"""Cross-broker wake-ups: a long poll parked on one `serve` and a push to the other.

Each trial parks a waiting pop (timeout 5 s) on one instance, pushes one message through
the other instance half a second later, and measures the pop's answer from the push being
sent (`lat`, as loadtest/probes/wakeup.py does) and from the push being answered
(`lat_ack`: the message was committed by then; this leaves out a push that was itself
slow). A *missed*
wake-up is a pop that answered 204 more than a second after the push was acknowledged: it
stayed parked past a commit that both the notification and the re-check backoff (at most
1 s) should have shown it. Trials alternate direction; a trial where either side is down
is skipped, and a pop ended by its own broker's shutdown (204 before the push was
acknowledged) is not a miss.
"""

from __future__ import annotations

import asyncio
import statistics
from typing import Any

from loadtest.faults.base import Harness
from loadtest.faults.client import Caller

WAKE_QUEUE = "wake"
POLL_MS = 5000


async def wake_loop(run: Harness) -> None:
    callers = [Caller([i.url], token=run.token) for i in run.instances]
    n = 0
    try:
        while not run.closing:
            await asyncio.sleep(1.0)
            parked, pusher = n % 2, (n + 1) % 2
            n += 1
            if any(i.exited() for i in run.instances):
                continue
            # A partition per trial: nothing left over from an earlier trial can answer it.
            pop = asyncio.create_task(callers[parked].call(
                "GET", f"/api/v1/pop/queue/{WAKE_QUEUE}/partition/t{n}?batch=10&wait=true"
                f"&timeout={POLL_MS}&consumerGroup=w", deadline=POLL_MS / 1000 + 5))
            await asyncio.sleep(0.5)
            push = await callers[pusher].call("POST", "/api/v1/push", {"items": [
                {"queue": WAKE_QUEUE, "partition": f"t{n}", "payload": n}]})
            got = await pop
            rec: dict[str, Any] = {"parked_on": run.instances[parked].name,
                                   "pushed_to": run.instances[pusher].name,
                                   "push_st": push.status, "push_t0": push.t0,
                                   "push_t1": push.t1, **got.record()}
            if got.status == 200 and isinstance(got.body, dict):
                rec["lat"] = round(got.t1 - push.t0, 4)
                rec["lat_ack"] = round(max(0.0, got.t1 - push.t1), 4)
                lease = got.body.get("leaseId")
                await callers[parked].call("POST", "/api/v1/ack/batch", {
                    "consumerGroup": "w", "acknowledgments": [
                        {"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                         "leaseId": lease, "status": "completed"}
                        for m in got.body.get("messages", [])]})
            run.journal.write("wake", **rec)
    finally:
        for c in callers:
            await c.close()


def wake_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts, and latency percentiles over every trial and over the trials that met no
    fault window (a pop sent to an instance that is still starting waits for it to serve,
    which is not a wake-up delay)."""
    from loadtest.faults.checker import windows

    spans = windows(records)
    trials = [r for r in records if r["k"] == "wake"]
    missed = [r for r in trials if r.get("st") == 204 and r.get("push_st") == 201
              and r["t1"] - r["push_t1"] > 1.0]
    out: dict[str, Any] = {"trials": len(trials),
                           "woken": sum(1 for r in trials if "lat" in r),
                           "missed": len(missed)}
    quiet = [r for r in trials if not any(r["t0"] <= hi and r["t1"] >= lo
                                          for lo, hi, _ in spans)]
    for label, chosen in (("", trials), ("outside_faults_", quiet)):
        for key, name in (("lat", "from_push_sent"), ("lat_ack", "from_push_answered")):
            lats = sorted(r[key] for r in chosen if key in r)
            if lats:
                out[f"{label}{name}_p50_ms"] = round(statistics.median(lats) * 1000, 1)
                out[f"{label}{name}_p99_ms"] = round(
                    lats[min(len(lats) - 1, int(len(lats) * 0.99))] * 1000, 1)
                out[f"{label}{name}_max_ms"] = round(lats[-1] * 1000, 1)
    out["outside_faults_woken"] = sum(1 for r in quiet if "lat" in r)
    return out
