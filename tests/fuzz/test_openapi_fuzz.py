"""Schemathesis against the broker's own `/openapi.json`, CI-sized.

A broker of its own on a fresh database (the fuzzer deletes groups and queues by whatever
names it makes up) is fuzzed with valid and invalid data (`--mode all`). Every check runs
except `positive_data_acceptance`: some rules cannot be said in a schema (a discovery pop
needs `namespace` or `task`; a seek needs `toEnd` or a `timestamp`; option ranges live in
`core.options`), so a schema-valid request may rightly get a 400. A 5xx, a response
that breaks its schema, a status or content type the document does not list, or invalid data
accepted all fail the test.

The whole-API run is against a broker with auth on and an admin token, which passes every
level: the same handlers as with auth off, the gate in front of them, and schemathesis'
`ignored_auth` check (each operation that declares a bearer scheme must refuse the request
without the token). Without a token, every documented operation is called once per method,
so that nothing gets through the gate (307/404/405 come from the router for paths and
methods no route has, before anything runs). The free-form KV, lock and transaction routes
get more examples each, with auth off.

Each run is bounded by its number of examples per operation and a fixed seed, never by a
time budget: what it does, and so its verdict, does not depend on how fast the machine is.
Every documented operation must have been exercised. The time limits only catch a hang.
(Building the data strategies is schemathesis' main cost, 0.3 to 0.7 s per operation on a
busy 2-core machine whatever the number of examples, so the whole-API run uses two examples
per operation and its fuzzing phase alone.)

The longer run (docs/architecture/reliability.md) uses the same hooks and configuration:
    python -m tests.fuzz.run --max-time 600 [--token <admin token>]
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fuzz.run import fuzz_command
from tests.support import BrokerProcess, create_database
from tests.tokens import AUTH_ENV, AUTH_SECRET, Signer

SEED = 20261202
# A guard against a hang only: a whole-API run takes 40 to 90 s on a busy 2-core machine.
HANG_SECONDS = 900
# Served without a token (JWT_SKIP_PATHS' default, `/` being the dashboard page).
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


def fuzz(url: str, tmp_path: Path, examples: int, **options: object) -> tuple[
        dict[str, int], str, int]:
    """Run schemathesis with `examples` per operation; answer its tally, the end of its
    report, its status."""
    tally = tmp_path / "tally.json"
    command, env = fuzz_command(url, tally, seed=SEED, max_examples=examples,
                                **options)  # type: ignore[arg-type]
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=HANG_SECONDS - 60, check=False)
    report = done.stdout[-6000:] + done.stderr[-3000:]
    counts: dict[str, int] = json.loads(tally.read_text())
    print(f"schemathesis: {counts}")  # the figures, in the test log with -s or -rA
    return counts, report, done.returncode


def operations(url: str, matching: str = "") -> set[str]:
    """`METHOD /path/{template}` of every operation the broker documents (matching a regex),
    but the document itself, which schemathesis reads and does not fuzz."""
    document = httpx.get(url + "/openapi.json", timeout=30).json()
    return {f"{method.upper()} {path}" for path, item in document["paths"].items()
            for method in item if re.search(matching, path) and path != "/openapi.json"}


def unexercised(counts: dict[str, int], documented: set[str]) -> set[str]:
    return {op for op in documented if counts.get(f"op:{op}", 0) == 0}


@pytest.mark.timeout(HANG_SECONDS)
def test_schemathesis_finds_no_server_error_and_no_schema_violation(
        auth_fuzz_broker: BrokerProcess, tmp_path: Path) -> None:
    """The whole API once, two examples per operation (valid and invalid), on the broker
    with auth on and an admin token (which passes every level): the handlers, the gate in
    front of them, and schemathesis' `ignored_auth` probe of each operation without it."""
    token = Signer(AUTH_SECRET, "HS256").token("fuzzer", role="admin",
                                               exp=int(time.time()) + 3600)
    counts, report, status = fuzz(auth_fuzz_broker.url, tmp_path, 2, token=token,
                                  extra=("--phases", "fuzzing"))
    assert status == 0, report
    assert counts.get("5xx", 0) == 0, report
    assert unexercised(counts, operations(auth_fuzz_broker.url)) == set(), counts
    # Both sides of the API (seed 20261202: about 150 requests, three in four 2xx).
    assert counts.get("2xx", 0) >= 40 and counts.get("4xx", 0) >= 10, counts
    assert counts.get("403", 0) == 0, counts  # an admin passes every level
    # The only 401s are schemathesis' `ignored_auth` probes, sent without the token.
    assert counts.get("401", 0) <= counts["requests"] / 2, counts


def _filled(template: str) -> str:
    return re.sub(r"\{[^}]+\}", "1", template)


def test_with_auth_on_and_no_token_nothing_gets_past_the_gate(
        auth_fuzz_broker: BrokerProcess) -> None:
    """Every documented path with each method HTTP knows, as documented and with a trailing
    slash, without a token: each documented operation answers 401; anything else is a 401
    or the router's 404/405 (before anything runs), and a CORS preflight (OPTIONS) is a 204
    that runs nothing. Deterministic and exhaustive, where a fuzz run without a token
    reached only the operations it had time for."""
    documented = operations(auth_fuzz_broker.url)
    wrong: list[tuple[str, str, int]] = []
    calls = 0
    with httpx.Client(base_url=auth_fuzz_broker.url, timeout=30) as client:
        for path in sorted({op.split(" ", 1)[1] for op in documented}):
            if re.match(SKIPPED, path):
                continue
            for method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS",
                           "TRACE"):
                body: Any = {} if method in ("POST", "PUT", "PATCH") else None
                for target in (_filled(path), _filled(path) + "/"):
                    status = client.request(method, target, json=body).status_code
                    calls += 1
                    if f"{method} {path}" in documented and target == _filled(path):
                        allowed = {401}
                    elif method == "OPTIONS":
                        allowed = {204, 307, 401, 404, 405}
                    else:  # 307: the router's redirect of a trailing slash, nothing run
                        allowed = {307, 401, 404, 405}
                    if status not in allowed:
                        wrong.append((method, target, status))
    assert wrong == [], wrong
    assert calls > 8 * 2 * 50  # every documented path was tried


KV_ROUTES = r"^/api/v1/(kv|locks|transaction|resources/kv-namespaces)"


@pytest.mark.timeout(HANG_SECONDS)
def test_the_kv_lock_and_transaction_routes_alone_with_free_form_values(
        fuzz_broker: BrokerProcess, tmp_path: Path) -> None:
    """The routes whose bodies carry free-form JSON values (extensions §14, §15, §17), with
    more examples each than the whole-API run gives them: never a 5xx, never a schema
    violation. (A run of 40 examples each, about 2,000 requests, is what found whitespace
    accepted as a path DELETE's body.)"""
    counts, report, status = fuzz(fuzz_broker.url, tmp_path, 8,
                                  extra=("--include-path-regex", KV_ROUTES,
                                         "--phases", "examples,fuzzing"))
    assert status == 0, report
    assert counts.get("5xx", 0) == 0, report
    assert unexercised(counts, operations(fuzz_broker.url, KV_ROUTES)) == set(), counts
    assert counts.get("2xx", 0) >= 5 and counts.get("4xx", 0) >= 20, counts
