"""Schemathesis against the broker's own `/openapi.json`, CI-sized.

A broker of its own on a fresh database (the fuzzer deletes groups and queues by whatever
names it makes up) is fuzzed with valid and invalid data (`--mode all`) for a bounded time.
Every check runs except `positive_data_acceptance`: some rules cannot be said in a schema
(a discovery pop needs `namespace` or `task`; a seek needs `toEnd` or a `timestamp`; option
ranges live in `core.engine.options`), so a schema-valid request may rightly get a 400. A 5xx, a
response that breaks its schema, a status or content type the document does not list, or
invalid data accepted all fail the test.

The same runs against a broker with auth on: with an admin token (every check again, plus
schemathesis' `ignored_auth`: each operation that declares a bearer scheme must refuse the
request without the token), and with no token at all, where every operation behind a token
must answer 401 and nothing else gets through (404/405 come from the router for paths and
methods no route has, before anything runs).

The longer run (docs/architecture/reliability.md) uses the same hooks and configuration:
    python -m tests.fuzz.run --max-time 600 [--token <admin token>]
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fuzz.run import fuzz_command
from tests.support import BrokerProcess, create_database
from tests.tokens import AUTH_ENV, AUTH_SECRET, Signer

# CI-sized budgets (the long run is a command of its own); each run also takes a few seconds
# beyond its budget (schemathesis' start, its reading of the document).
CI_SECONDS = 25
AUTH_SECONDS = 14  # each of the two auth-on runs
# Served without a token (JWT_SKIP_PATHS' default, `/` being the dashboard page): left out of
# the no-token run.
SKIPPED = r"^/(|health|metrics|metrics/prometheus|openapi\.json|docs)$"


@pytest.fixture(scope="module")
async def fuzz_database(pg_server_url: str) -> str:
    return await create_database(pg_server_url)


@pytest.fixture(scope="module")
def fuzz_broker(fuzz_database: str) -> Iterator[BrokerProcess]:
    with BrokerProcess(fuzz_database, workers=2) as proc:
        yield proc


@pytest.fixture(scope="module")
async def auth_fuzz_database(pg_server_url: str) -> str:
    return await create_database(pg_server_url)


@pytest.fixture(scope="module")
def auth_fuzz_broker(auth_fuzz_database: str) -> Iterator[BrokerProcess]:
    with BrokerProcess(auth_fuzz_database, workers=2, env=AUTH_ENV) as proc:
        yield proc


def fuzz(url: str, tmp_path: Path, seconds: int, **options: object) -> tuple[
        dict[str, int], str, int]:
    """Run schemathesis for `seconds`; answer its tally, the end of its report, its status."""
    tally = tmp_path / "tally.json"
    command, env = fuzz_command(url, tally, max_time=seconds, seed=20261202, max_examples=5,
                                **options)  # type: ignore[arg-type]
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=seconds * 3 + 60, check=False)
    report = done.stdout[-6000:] + done.stderr[-3000:]
    counts: dict[str, int] = json.loads(tally.read_text())
    print(f"schemathesis: {counts}")  # the figures, in the test log with -s or -rA
    return counts, report, done.returncode


@pytest.mark.timeout(CI_SECONDS * 4 + 60)
def test_schemathesis_finds_no_server_error_and_no_schema_violation(
        fuzz_broker: BrokerProcess, tmp_path: Path) -> None:
    counts, report, status = fuzz(fuzz_broker.url, tmp_path, CI_SECONDS)
    assert status == 0, report
    assert counts.get("5xx", 0) == 0, report
    # Floors that say the run reached both sides of the API and that a loaded machine still
    # clears: 343 requests in 25 s on an idle 2-core machine (192 2xx, 151 4xx); 97 2xx in
    # 20 s on a loaded one.
    assert counts["requests"] > 100, counts
    assert counts.get("2xx", 0) >= 50 and counts.get("4xx", 0) >= 50, counts


@pytest.mark.timeout(AUTH_SECONDS * 4 + 60)
def test_with_auth_on_and_an_admin_token_the_same_holds(
        auth_fuzz_broker: BrokerProcess, tmp_path: Path) -> None:
    token = Signer(AUTH_SECRET, "HS256").token("fuzzer", role="admin",
                                               exp=int(time.time()) + 3600)
    counts, report, status = fuzz(auth_fuzz_broker.url, tmp_path, AUTH_SECONDS, token=token)
    assert status == 0, report
    assert counts.get("5xx", 0) == 0, report
    # About 600 requests in 20 s on an idle machine, ~70 on a loaded one (85 in 12 s): enough
    # got through the gate (2xx) and enough were refused as invalid (4xx) to say the run
    # exercised the API.
    assert counts.get("2xx", 0) > 20 and counts.get("4xx", 0) > 10, counts
    assert counts.get("403", 0) == 0, counts  # an admin passes every level
    # The only 401s are schemathesis' `ignored_auth` probes, sent without the token.
    assert counts.get("401", 0) < counts["requests"] / 10, counts


@pytest.mark.timeout(AUTH_SECONDS * 4 + 60)
def test_with_auth_on_and_no_token_nothing_gets_past_the_gate(
        auth_fuzz_broker: BrokerProcess, tmp_path: Path) -> None:
    counts, report, status = fuzz(auth_fuzz_broker.url, tmp_path, AUTH_SECONDS,
                                  extra=("--exclude-path-regex", SKIPPED))
    assert status == 0, report
    assert counts.get("401", 0) > 20, counts  # several hundred on an idle machine
    # Per method and status: OPTIONS is a CORS preflight (204, before auth, runs nothing).
    answers = {key for key in counts if " " in key}
    assert {a for a in answers if not a.startswith("OPTIONS ")} <= {
        f"{method} {code}" for method in ("GET", "HEAD", "POST", "DELETE", "PUT", "PATCH",
                                          "TRACE", "QUERY") for code in (401, 404, 405, 431)
    }, counts
    assert {a for a in answers if a.startswith("OPTIONS ")} <= {"OPTIONS 204"}, counts


KV_SECONDS = 12
KV_ROUTES = r"^/api/v1/(kv|locks|transaction|resources/kv-namespaces)"


@pytest.mark.timeout(KV_SECONDS * 4 + 60)
def test_the_kv_lock_and_transaction_routes_alone_with_free_form_values(
        fuzz_broker: BrokerProcess, tmp_path: Path) -> None:
    """The routes whose bodies carry free-form JSON values (extensions §14, §15, §17), with
    more examples each than the whole-API run gives them: never a 5xx, never a schema
    violation. (A run of all 40 examples, about 2,000 requests and two minutes, is what
    found whitespace accepted as a path DELETE's body.)"""
    counts, report, status = fuzz(fuzz_broker.url, tmp_path, KV_SECONDS,
                                  extra=("--include-path-regex", KV_ROUTES,
                                         "--max-examples", "40"))
    assert status == 0, report
    assert counts.get("5xx", 0) == 0, report
    # Floors that a loaded machine still clears: a full run beside other tests sent 206
    # requests in 15 s, 18 answered 2xx and 188 4xx (the earlier floor of 20 2xx failed it).
    assert counts.get("2xx", 0) >= 5 and counts.get("4xx", 0) >= 20, counts
