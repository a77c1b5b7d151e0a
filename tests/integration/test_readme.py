"""Every shell and Python block of README.md runs, in order, against a real broker the test
starts on a fresh database: a block fails the test when it exits non-zero (any command in a
shell block; curl answers >= 400 count, as `--fail-with-body`) or does not finish in time.

Blocks address the broker as the README does (`localhost:6632`, `127.0.0.1:6632`, or the
operator commands' default URL); the test points them at its own broker's port.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.readme_blocks import Block, blocks
from tests.support import ROOT, BrokerProcess, create_database

README = ROOT / "README.md"
BLOCK_TIMEOUT = 120.0  # seconds: generous for a shared machine; a hung example still fails
# Strict shell: the first failing command fails the block; curl fails on HTTP errors.
SHELL_PRELUDE = ("set -euo pipefail\n"
                 'curl() { command curl --fail-with-body --max-time 60 "$@"; }\n')
_README_ADDRESS = re.compile(r"\b(?:localhost|127\.0\.0\.1):6632\b")

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
async def readme_broker(pg_server_url: str) -> AsyncIterator[BrokerProcess]:
    """A broker (and reaper) of its own on a fresh database: the README's queues and
    switches touch no other test."""
    with BrokerProcess(await create_database(pg_server_url), workers=2, reaper=True) as proc:
        yield proc


def test_every_block_of_the_readme_has_a_decision() -> None:
    found, problems = blocks(README.read_text())
    assert not problems, "\n".join(problems)
    assert any(b.decision == "shell" for b in found)
    assert any(b.decision == "python" for b in found)


def test_every_shell_and_python_block_of_the_readme_runs(readme_broker: BrokerProcess,
                                                         tmp_path: Path) -> None:
    found, problems = blocks(README.read_text())
    assert not problems, "\n".join(problems)
    runnable = [b for b in found if b.decision in ("shell", "python")]
    env = {**os.environ, "QUEEN_URL": readme_broker.url,
           "PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                    os.environ.get("PATH", "")])}
    env.pop("QUEEN_TOKEN", None)
    for block in runnable:
        _run(block, readme_broker.port, env, tmp_path)


def _run(block: Block, port: int, env: dict[str, str], workdir: Path) -> None:
    code = _README_ADDRESS.sub(f"127.0.0.1:{port}", block.code)
    if block.decision == "shell":
        argv = ["bash", "-c", SHELL_PRELUDE + code]
    else:
        script = workdir / f"readme_line_{block.line}.py"
        script.write_text(code)
        argv = [sys.executable, str(script)]
    try:
        done = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True,
                              timeout=BLOCK_TIMEOUT, stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"README.md line {block.line} ({block.info}) did not finish in "
                    f"{BLOCK_TIMEOUT:.0f} s:\n{code}\n--- output ---\n{_text(exc.stdout)}"
                    f"{_text(exc.stderr)}")
    if done.returncode != 0:
        pytest.fail(f"README.md line {block.line} ({block.info}) exited with "
                    f"{done.returncode}:\n{code}\n--- stdout ---\n{done.stdout}\n"
                    f"--- stderr ---\n{done.stderr}")


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")
