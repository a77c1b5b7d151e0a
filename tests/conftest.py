"""Shared fixtures: one PostgreSQL per session, one migrated database, one broker (2 workers).

Set DATABASE_URL or PG_* to run against an existing server instead of the embedded one.
Tests isolate themselves by using unique queue names (the `queue_name` fixture).

A module marked `citus` (`pytestmark = pytest.mark.citus`) runs each of its tests twice:
`[postgres]` as above, and `[citus]` with `database_url` (so `db`, `core_db`, `broker`,
`http`) on a Citus cluster of a coordinator and two workers (tests/citus_cluster.py),
skipped with the reason when QUEEN_CITUS_BIN is not set. The `[citus]` variants of a module
marked `citus("long")` (the broad storage, pop, ack, transaction and Kafka modules: about
two minutes on 2 cores) run only with QUEEN_CITUS_VARIANTS=all, so that the suite stays
short; `QUEEN_CITUS_VARIANTS=all python -m pytest -m citus` runs every Citus variant.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from core.embedded import stop_process
from core.settings import Settings
from core.storage.database import Database
from tests.citus_cluster import SKIP_REASON, TestCluster, citus_bin
from tests.kept import Kept
from tests.served import Served
from tests.support import (
    ANSWER_BUDGET,
    BrokerProcess,
    create_database,
    external_database_url,
    start_embedded,
)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests of a module marked `citus` run on one PostgreSQL and on a Citus cluster."""
    marker = metafunc.definition.get_closest_marker("citus")
    if "deployment" in metafunc.fixturenames and marker is not None:
        skip = pytest.mark.skipif(citus_bin() is None, reason=SKIP_REASON)
        if "long" in marker.args and os.environ.get("QUEEN_CITUS_VARIANTS") != "all":
            skip = pytest.mark.skip(reason=LONG_VARIANT_REASON)
        citus = pytest.param("citus", marks=skip)
        metafunc.parametrize("deployment", ["postgres", citus], indirect=True, scope="session")


# The modules that took 25 s or more in CI (two workers), longest first: they start first.
# pytest-xdist hands whole files (`--dist loadfile`) to whichever worker is free; by default
# it orders them by their number of tests, so these (a few tests each) came last, and the
# suite ended with one worker still in a long fault run while the other had finished
# (`--no-loadscope-reorder` in pyproject.toml keeps this order instead).
START_FIRST = (
    "tests/faults/test_ha_freeze.py",
    "tests/integration/test_doc_blocks.py",
    "tests/faults/test_ledger_under_faults.py",
    "tests/fuzz/test_openapi_fuzz.py",
    "tests/faults/test_failover.py",
    "tests/integration/test_citus.py",
    "tests/integration/test_official_client_consume.py",
    "tests/integration/test_pop_after_answer.py",
    "tests/integration/test_ack_whole_delivery.py",
    "tests/faults/test_model.py",
    "tests/faults/test_ha_smoke.py",
    "tests/integration/test_supervision.py",
    "tests/integration/test_loadtest_smoke.py",
    "tests/kafka/test_groups.py",
    "tests/unit/test_probes.py",
)


@pytest.hookimpl(trylast=True)  # after pytest's own reordering by fixture parameter
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The START_FIRST modules first; a stable sort, so each module keeps its order."""
    rank = {path: i for i, path in enumerate(START_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


LONG_VARIANT_REASON = ("a long module's Citus variant: QUEEN_CITUS_VARIANTS=all runs it "
                       "(QUEEN_CITUS_VARIANTS=all python -m pytest -m citus runs them all)")


@pytest.fixture(scope="session")
def kept() -> Iterator[Kept]:
    store = Kept()
    try:
        yield store
    finally:
        for deployment in list(store.stacks):  # an external server's: nothing stops it
            store.close(deployment)


@pytest.fixture(scope="session")
def deployment(request: pytest.FixtureRequest) -> str:
    """`postgres` (one server), or `citus` in the second run of a module marked `citus`."""
    return str(getattr(request, "param", "postgres"))


@pytest.fixture(scope="session")
def citus_cluster(kept: Kept) -> Iterator[TestCluster]:
    """This test process's Citus cluster (started at its first use)."""
    bin_dir = citus_bin()
    if bin_dir is None:
        pytest.skip(SKIP_REASON)
    cluster = TestCluster(bin_dir)
    try:
        yield cluster.start()
    finally:
        try:
            kept.close("citus")  # its brokers and listener first
        finally:
            cluster.close()


@pytest.fixture(scope="session")
def pg_server_url(tmp_path_factory: pytest.TempPathFactory, kept: Kept) -> Iterator[str]:
    external = external_database_url()
    if external:
        yield external
        return
    import signal

    pg, proc = start_embedded(Path(tmp_path_factory.mktemp("pg")))
    try:
        yield pg.dsn
    finally:
        try:
            kept.close("postgres")  # its brokers and listener first
        finally:
            stop_process(proc, signal.SIGINT)


@pytest.fixture(scope="session")
async def database_url(request: pytest.FixtureRequest, deployment: str, kept: Kept) -> str:
    key = (deployment, "database_url")
    if key not in kept.values:
        if deployment == "citus":
            cluster: TestCluster = request.getfixturevalue("citus_cluster")
            kept.values[key] = await cluster.database()
        else:
            kept.values[key] = await create_database(request.getfixturevalue("pg_server_url"))
    return str(kept.values[key])


@pytest.fixture(scope="session")
def broker(database_url: str, deployment: str, kept: Kept) -> BrokerProcess:
    return kept.enter(deployment, "broker",
                      lambda: BrokerProcess(database_url, workers=2, reaper=False))


@pytest.fixture(scope="session")
def auth_broker(database_url: str, deployment: str, kept: Kept) -> BrokerProcess:
    """A broker with auth on (HS256, issuer and audience checked; tests.tokens.AUTH_ENV)."""
    from tests.tokens import AUTH_ENV

    return kept.enter(deployment, "auth_broker", lambda: BrokerProcess(
        database_url, workers=2, reaper=False, env=AUTH_ENV))


@pytest.fixture(scope="session")
def budget_broker(database_url: str, deployment: str, kept: Kept) -> BrokerProcess:
    """A broker whose answers keep within ANSWER_BUDGET (1 MiB): pops and listing pages."""
    budget = str(ANSWER_BUDGET)
    return kept.enter(deployment, "budget_broker", lambda: BrokerProcess(
        database_url, workers=1, env={
            "QUEEN_POP_MAX_BYTES": budget, "QUEEN_LIST_MAX_BYTES": budget}))


@pytest.fixture
async def budget_client(budget_broker: BrokerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=budget_broker.url, timeout=60) as client:
        yield client


@pytest.fixture
async def http(broker: BrokerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=broker.url, timeout=30) as client:
        yield client


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(database_url)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def core_db(database_url: str) -> AsyncIterator[Database]:
    """The core's own database handle on the test database (for reaper steps, pops)."""
    db = await Database.open(Settings(db_pool_size=4), database_url, migrate=False)
    try:
        yield db
    finally:
        await db.close()


@pytest.fixture
def queue_name() -> str:
    return "q-" + uuid.uuid4().hex[:12]


@pytest.fixture
async def own_database(pg_server_url: str) -> str:
    """A fresh migrated database for one test (modules that share one define their own)."""
    return await create_database(pg_server_url)


@pytest.fixture
def served(own_database: str, tmp_path: Path) -> Iterator[Served]:
    """`queen-broker serve` (two web workers, the reaper) on the test's own database."""
    with Served(tmp_path / "serve.log", env={"DATABASE_URL": own_database}) as s:
        yield s
