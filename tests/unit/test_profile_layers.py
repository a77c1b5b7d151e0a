"""The load tool's profile: busy samples by layer (loadtest/profile.py), from py-spy's raw
collapsed stacks: the innermost frame that belongs to a known library decides."""

from __future__ import annotations

from pathlib import Path

from loadtest.profile import summarize_stacks

STACKS = """\
process 1:"python -m broker.worker";main (broker/worker.py:1);Connection._do_execute (asyncpg/connection.py:2069) 6
process 1:"python -m broker.worker";main (broker/worker.py:1);_handle (hypercorn/task_group.py:9);push (broker/routes/push.py:5);Pusher.push (core/engine/push.py:95) 3
process 1:"python -m broker.worker";main (broker/worker.py:1);H11Protocol.stream_send (hypercorn/protocol/h11.py:127) 1
process 1:"python -m broker.worker";select (selectors.py:1) 5
"""


def test_busy_samples_are_split_by_the_innermost_known_layer(tmp_path: Path) -> None:
    path = tmp_path / "x.stacks"
    path.write_text(STACKS)
    summary = summarize_stacks(path)
    assert summary["samples"] == 15 and summary["idle_share"] == round(5 / 15, 3)
    assert dict(summary["layers"]) == {"asyncpg (driver)": 0.6, "core/": 0.3,
                                       "hypercorn + h11 (HTTP/1.1)": 0.1}
