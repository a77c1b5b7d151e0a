"""The one-feature cost probes, beside the workload harness of loadtest/: each measures what
one feature costs against what it is compared with, the variants alternating in the same
run, and reports through `loadtest.probes.rounds` (same-run ratios, JSON and text under
loadtest/results/).

    python -m loadtest probe NAME [options]        (options: python -m loadtest probe NAME --help)
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

PROBES = {
    "auth_cost": "JWT auth (HS256, EdDSA, fresh tokens) against auth off: push throughput",
    "encryption_cost": "an encrypted queue against a plain one: push and pop, same broker",
    "encryption_layout": "AES-GCM per segment against per message, in process",
    "conflation_cost": "the pop autopilot against batch 100; conflation against plain",
    "streams_cost": "the stream runner against pop/push/ack by hand; maxSize on against off",
    "kv_bench": "KV ops through the broker against bare asyncpg; lock cycles",
    "timers_bench": "timer schedules against bare asyncpg; fire lag",
    "wire_compare": "JSON against the binary formats, push and pop",
    "walprobe": "WAL and table bytes per pushed message",
    "path_cost": "broker CPU per message of push, pop and ack without HTTP (against --root)",
    "step_cost": "the broker's per-message steps of push, pop and ack, CPU time in process",
    "append_cost": "PostgreSQL's CPU per message of queen.append_partitions alone (against --root)",
    "sync_cost": "a synchronous standby against the primary alone (Patroni pair, ha extra)",
    "supervision": "the serve/web supervisor against hypercorn's runner; a killed worker",
    "ephemeral": "ephemeral queues against durable ones: throughput, round trip, bounds",
    "wakeup": "long-poll wake-up latency across worker processes (a running broker)",
    "lag_cost": "the lag statements on a wide queue (optionally against another revision's)",
    "tenant_fairness": "a quiet tenant's latency beside a tenant pushing over its rate limit",
    "http_stack": "hypercorn, starlette and the null app alone: server CPU per request",
    "large_messages": "pops of large messages: broker CPU per pop, worker RSS (against --root)",
}


def run(name: str, argv: Sequence[str]) -> int:
    """Run one probe with its own options."""
    module = importlib.import_module(f"loadtest.probes.{name}")
    status: int = module.main(list(argv))
    return status
