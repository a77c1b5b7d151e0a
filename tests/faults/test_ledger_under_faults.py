"""The ledger under faults, CI-sized (the long runs are `python -m loadtest faults`).

Each run starts `serve` the way users do, runs producers, two consumer groups and the DLQ
variant, injects every fault of its schedule once, heals, drains and checks (see
loadtest/faults/checker.py for the figures). A fault the broker does not survive by itself
(the harness has to restart something from outside) fails the run, as do a lost message, a
500, or a request left unanswered past its deadline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loadtest.faults.base import SINGLE_BROKER_FAULTS, RunConfig
from loadtest.faults.report import table
from loadtest.faults.run import Run


def _small(**overrides: Any) -> RunConfig:
    # A fault starts once the previous one has healed (a probe push acknowledged after it);
    # the gap only lets the workload run between them.
    base: dict[str, Any] = {"producers": 2, "consumers": 2, "rate": 10.0, "warmup": 2.0,
                            "gap": 1.0, "heal_timeout": 20.0, "fast_disk": True}
    return RunConfig(**{**base, **overrides})


def _assert_passed(result: dict[str, Any]) -> None:
    report = table(result)
    print(report)
    assert result["failed_figures"] == [], report
    counts = result["figures"]["counts"]
    assert counts["deliveries"] >= 300 and counts["stored"] >= 200, counts  # work was done


@pytest.mark.timeout(900)
async def test_serve_on_its_embedded_database_survives_every_fault_losing_nothing(
        tmp_path: Path) -> None:
    result = await Run(_small(database="embedded", faults=SINGLE_BROKER_FAULTS,
                              out_dir=tmp_path, seed=7)).execute()
    assert [f["fault"] for f in result["faults"]] == list(SINGLE_BROKER_FAULTS)
    _assert_passed(result)


@pytest.mark.timeout(900)
async def test_two_serve_instances_over_one_external_database_survive_kills_auth_on(
        tmp_path: Path) -> None:
    # With JWT auth on (every client sends a token): the fault suite runs with auth on as
    # well as off, at no extra cost in CI.
    result = await Run(_small(database="external", brokers=2,
                              faults=("supervisor_kill", "pg_kill"), out_dir=tmp_path,
                              seed=8, auth=True)).execute()
    assert result["config"]["auth"] is True
    kill = result["faults"][0]
    assert kill["fault"] == "supervisor_kill" and kill["survived"], kill
    wake = result["wake"]
    assert wake["woken"] >= 3 and wake["missed"] == 0, wake  # cross-broker wake-ups
    _assert_passed(result)
