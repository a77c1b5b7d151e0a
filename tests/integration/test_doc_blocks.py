"""Every shell, Python and JavaScript block of README.md and of every page under docs/ runs,
page by page and in order, against one real broker the test starts on a fresh database: a
block fails the test when it exits non-zero (any command in a shell block; curl answers >= 400
count, as `--fail-with-body`), does not finish in time, or prints on stdout something other
than what the `text output` block after it shows (tests/doc_blocks.py). One broker for all
pages keeps the suite short; pages name their own queues, so they do not depend on each other.

JavaScript blocks run as ES modules with the `node` on PATH (Node's own fetch, no package):
without one they are left out, and a test of their own skips saying so (.ci/run installs
Debian's nodejs).

Blocks address the broker as the pages do (`localhost:6632`, `127.0.0.1:6632`, or the
operator commands' default URL), and its Kafka listener as `localhost:9092`; the test points
them at its own broker's and listener's ports.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.doc_blocks import Block, blocks, expected_outputs, output_mismatch
from tests.kafka.listener import KafkaListener
from tests.support import ROOT, BrokerProcess, create_database

README = ROOT / "README.md"
DOCS = ROOT / "docs"
BLOCK_TIMEOUT = 120.0  # seconds: generous for a shared machine; a hung example still fails
# Strict shell: the first failing command fails the block; curl fails on HTTP errors.
SHELL_PRELUDE = ("set -euo pipefail\n"
                 'curl() { command curl --fail-with-body --max-time 60 "$@"; }\n')
_ADDRESS = re.compile(r"\b(?:localhost|127\.0\.0\.1):6632\b")
_KAFKA_ADDRESS = re.compile(r"\b(?:localhost|127\.0\.0\.1):9092\b")
NODE = shutil.which("node")
NODE_MAJOR_NEEDED = 18  # the first with fetch, top-level await in ES modules being older

pytestmark = pytest.mark.timeout(1800)


def pages() -> list[Path]:
    """The README, then every docs page in path order."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.fixture(scope="module")
async def docs_broker(pg_server_url: str) -> AsyncIterator[BrokerProcess]:
    """A broker (and reaper) of its own on a fresh database: the pages' queues and switches
    touch no other test."""
    with BrokerProcess(await create_database(pg_server_url), workers=2, reaper=True) as proc:
        yield proc


@pytest.fixture(scope="module")
def docs_kafka(docs_broker: BrokerProcess) -> Iterator[KafkaListener]:
    """A Kafka listener on the docs broker's database, for the Kafka guide's blocks."""
    with KafkaListener(docs_broker.database_url) as listener:
        yield listener


def test_every_block_of_the_readme_and_the_docs_has_a_decision() -> None:
    found_all: list[Block] = []
    problems_all: list[str] = []
    for page in pages():
        found, problems = blocks(page.read_text(), _name(page))
        found_all += found
        problems_all += problems
    assert not problems_all, "\n".join(problems_all)
    assert any(b.decision == "shell" for b in found_all)
    assert any(b.decision == "python" for b in found_all)


def _javascript_blocks() -> list[str]:
    return [f"{_name(page)} line {block.line}" for page in pages()
            for block in blocks(page.read_text(), _name(page))[0]
            if block.decision == "javascript"]


def test_a_node_is_there_to_run_the_javascript_blocks() -> None:
    """The run test leaves the js blocks out when there is no `node`: this one says so."""
    assert _javascript_blocks(), "no page has a js block any more: drop this test"
    if NODE is None:
        pytest.skip(f"node is not on PATH, so {len(_javascript_blocks())} js block(s) did not "
                    f"run: {', '.join(_javascript_blocks())}")
    version = subprocess.run([NODE, "--version"], capture_output=True, text=True, check=True,
                             timeout=30).stdout.strip()
    assert int(version.lstrip("v").split(".")[0]) >= NODE_MAJOR_NEEDED, (
        f"node {version} is older than {NODE_MAJOR_NEEDED}: the js blocks need its fetch")


def test_every_shell_python_and_js_block_of_the_readme_and_the_docs_runs(
        docs_broker: BrokerProcess, docs_kafka: KafkaListener, tmp_path: Path) -> None:
    env = {**os.environ, "QUEEN_URL": docs_broker.url,
           "PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                    os.environ.get("PATH", "")])}
    env.pop("QUEEN_TOKEN", None)
    for page in pages():
        found, problems = blocks(page.read_text(), _name(page))
        assert not problems, "\n".join(problems)
        outputs = expected_outputs(found)
        for block in found:
            if block.decision == "javascript" and NODE is None:
                continue  # test_a_node_is_there_to_run_the_javascript_blocks skips, naming it
            if block.runs:
                printed = _run(_name(page), block, docs_broker.port, docs_kafka.port, env,
                               tmp_path)
                if block.line in outputs:
                    _check_output(_name(page), block, outputs[block.line], printed)


def _check_output(page: str, block: Block, output: Block, printed: str) -> None:
    mismatch = output_mismatch(output.code, printed)
    if mismatch:
        pytest.fail(f"{page} line {block.line} ({block.info}) printed what its output block "
                    f"(line {output.line}) does not show: {mismatch}\n--- shown ---\n"
                    f"{output.code}--- printed ---\n{printed}")


def _run(page: str, block: Block, port: int, kafka_port: int, env: dict[str, str],
         workdir: Path) -> str:
    """Run one block; answer its stdout."""
    code = _ADDRESS.sub(f"127.0.0.1:{port}", block.code)
    code = _KAFKA_ADDRESS.sub(f"127.0.0.1:{kafka_port}", code)
    where = f"{page} line {block.line} ({block.info})"
    if block.decision == "shell":
        argv = ["bash", "-c", SHELL_PRELUDE + code]
    elif block.decision == "javascript":
        # .mjs: an ES module, so a block may `import` and `await` at its top level.
        script = workdir / f"{page.replace('/', '_')}_line_{block.line}.mjs"
        script.write_text(code)
        argv = [NODE or "node", str(script)]
    else:
        script = workdir / f"{page.replace('/', '_')}_line_{block.line}.py"
        script.write_text(code)
        argv = [sys.executable, str(script)]
    try:
        done = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True,
                              timeout=BLOCK_TIMEOUT, stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{where} did not finish in {BLOCK_TIMEOUT:.0f} s:\n{code}\n"
                    f"--- output ---\n{_text(exc.stdout)}{_text(exc.stderr)}")
    if done.returncode != 0:
        pytest.fail(f"{where} exited with {done.returncode}:\n{code}\n--- stdout ---\n"
                    f"{done.stdout}\n--- stderr ---\n{done.stderr}")
    return done.stdout


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")
