"""The serving processes keep freed buffers: a request's large buffers are not new pages.

Each process runs in a subprocess of its own, so the test's process keeps glibc's defaults.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support import ROOT

# 100 times what building a JSON pop answer of 500 corpus messages does with memory: 500
# pieces of 1.2 KB made, joined into one 600 KB answer, then all of it freed.
_CHURN = """
import json, resource, sys
from broker.allocator import keep_freed_memory
tuned = keep_freed_memory() if sys.argv[1] == "tuned" else False
payload = bytes(range(200)) * 6
def answer():
    pieces = [b"%d" % n + payload for n in range(500)]
    return b"".join(pieces)
answer()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(100):
    answer()
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps({"tuned": tuned, "faults": faults}))
"""


def _churn(mode: str, **env: str) -> dict[str, int]:
    done = subprocess.run([sys.executable, "-c", _CHURN, mode], cwd=ROOT, env=env or None,
                          capture_output=True, text=True, check=True, timeout=60)
    figures: dict[str, int] = json.loads(done.stdout)
    return figures


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_a_large_answer_made_again_and_again_reuses_its_pages() -> None:
    untuned, tuned = _churn("default"), _churn("tuned")
    # Without: the pieces' pages go back to the kernel with them, and come again as faults
    # (about 300 an answer).
    assert untuned["faults"] > 100 * 100, untuned
    assert tuned["tuned"] and tuned["faults"] < 100, tuned


def test_glibc_variables_an_operator_set_are_kept() -> None:
    import os

    kept = _churn("tuned", **{**os.environ, "MALLOC_TRIM_THRESHOLD_": "1048576"})
    assert kept["tuned"] is False
