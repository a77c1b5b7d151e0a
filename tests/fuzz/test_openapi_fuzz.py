"""Schemathesis against the broker's own `/openapi.json`, CI-sized.

A broker of its own on a fresh database (the fuzzer deletes groups and queues by whatever
names it makes up) is fuzzed with valid and invalid data (`--mode all`) for a bounded time.
Every check runs except `positive_data_acceptance`: some rules cannot be said in a schema
(a discovery pop needs `namespace` or `task`; a seek needs `toEnd` or a `timestamp`; option
ranges live in `core.options`), so a schema-valid request may rightly get a 400. A 5xx, a
response that breaks its schema, a status or content type the document does not list, or
invalid data accepted all fail the test.

The longer run of the README uses the same hooks and configuration:
    python -m tests.fuzz.run --max-time 600
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fuzz.run import fuzz_command
from tests.support import BrokerProcess, create_database

CI_SECONDS = 60


@pytest.fixture(scope="module")
async def fuzz_database(pg_server_url: str) -> str:
    return await create_database(pg_server_url)


@pytest.fixture(scope="module")
def fuzz_broker(fuzz_database: str) -> Iterator[BrokerProcess]:
    with BrokerProcess(fuzz_database, workers=2) as proc:
        yield proc


@pytest.mark.timeout(CI_SECONDS * 4)
def test_schemathesis_finds_no_server_error_and_no_schema_violation(
        fuzz_broker: BrokerProcess, tmp_path: Path) -> None:
    tally = tmp_path / "tally.json"
    command, env = fuzz_command(fuzz_broker.url, tally, max_time=CI_SECONDS, seed=20261202,
                                max_examples=5)
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=CI_SECONDS * 3, check=False)
    report = done.stdout[-6000:] + done.stderr[-3000:]
    counts = json.loads(tally.read_text())
    print(f"schemathesis: {counts}")  # the figures, in the test log with -s or -rA
    assert done.returncode == 0, report
    assert counts.get("5xx", 0) == 0, report
    assert counts["requests"] > 100, counts  # about 1700 on an idle 2-core machine
    assert counts.get("2xx", 0) > 100 and counts.get("4xx", 0) > 100, counts
