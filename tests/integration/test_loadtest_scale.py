"""The partition-scale cell (`python -m loadtest scale`) at a tiny size against the session
broker: every phase runs and checks its answers; no speed is asserted."""

from __future__ import annotations

import argparse
import uuid

from loadtest import scale
from tests.support import BrokerProcess


def _args(**over: object) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    scale.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["scale", "--drain-seconds", "1", "--poll-seconds", "0.5",
                              "--quiet-seconds", "0.2", "--idle-seconds", "1",
                              "--idle-consumers", "5", "--idle-timeout-ms", "500",
                              "--no-vacuum"])
    for k, v in over.items():
        setattr(args, k, v)
    return args


async def test_scale_phases_at_a_tiny_size(broker: BrokerProcess, database_url: str) -> None:
    figures = await scale.measure_count(broker.url, database_url, "-", None, None, 30,
                                        _args(), queue=f"scale-smoke-{uuid.uuid4().hex[:8]}")
    assert figures["seed"]["messages"] == 30
    for width, d in figures["drain"].items():
        assert d["width"] == int(width) and d["delivered"] > 0, d
        assert d["gate_ok"] and d["duplicates"] == 0 and d["errors"] == 0, d
    caught_up = figures["caught_up"]
    assert caught_up["polls"] > 0 and caught_up["not_204"] == 0 and caught_up["errors"] == 0
    assert caught_up["p50_ms"] is not None
    idle = figures["idle"]
    assert idle["answers"] >= 5 and idle["delivered"] == 0 and idle["errors"] == 0
    # The report: ratios against the smallest count, before/after, the verdict.
    result = {"run_id": "smoke", "argv": ["scale"], "workers": 2, "cpus": 2,
              "load_average": {"start": [0, 0, 0], "end": [0, 0, 0]},
              "sides": {s: {"root": "-", "figures": {"10": figures, "20": figures}}
                        for s in ("before", "after")},
              "sides_order": ["before", "after"]}
    scale.conclude(result)
    assert result["verdict"] == "ok"
    ratios = result["sides"]["after"]["ratios_to_smallest"]
    assert ratios["caught-up poll p50 ms"]["20"] == 1.0
    assert result["after_over_before"]["drain width 1 msg/s"]["10"] == 1.0
    assert "caught-up poll p50 ms" in scale.render(result)
