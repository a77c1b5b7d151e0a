"""The ledger on a Patroni pair, CI-sized: kill -9 of the primary's postmaster under load
(`python -m loadtest faults --database ha` runs every HA fault; docs/deploying/high-availability.md).

Needs the `ha` extra (Patroni with its Raft store); skipped, saying so, without it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from loadtest.faults.base import RunConfig
from loadtest.faults.report import table
from loadtest.faults.run import Run

# Looked up, not imported: importing pysyncobj replaces socket.inet_pton/inet_ntop for the
# whole process with a Windows shim that breaks psutil (every later fault test failed so).
pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("patroni", "pysyncobj")),
    reason="the ha extra is not installed (pip install -e '.[ha]')")


@pytest.mark.timeout(600)
async def test_the_ledger_survives_a_killed_primary_losing_nothing(tmp_path: Path) -> None:
    result = await Run(RunConfig(
        database="ha", faults=("ha_pg_kill",), producers=2, consumers=2, rate=10.0,
        warmup=2.0, gap=2.0, fast_disk=True, dlq=False, out_dir=tmp_path, seed=9)).execute()
    report = table(result)
    print(report)
    # 503s after the measured heal are tolerated here, and only here: the heal of
    # `ha_pg_kill` is the killed postmaster answering again, and Patroni may still be
    # settling the pair after it (one CI-sized run in six answered 9 pushes 503 after the
    # heal, nothing lost). `python -m loadtest faults --database ha` still requires 0.
    assert set(result["failed_figures"]) <= {"other_5xx_outside_faults"}, report
    assert result["figures"]["http_500"] == 0, report
    (fault,) = result["faults"]
    assert fault["fault"] == "ha_pg_kill" and fault["survived"], fault
    assert fault["first_queued_s"] is not None, fault  # a push committed after the kill
    counts = result["figures"]["counts"]
    assert counts["deliveries"] >= 50 and counts["stored"] >= 30, counts  # work was done
