"""The tests' Citus cluster: a coordinator and two workers (broker/citus.py), one per test
process that needs it, for the test modules marked `citus` (tests/conftest.py runs each of
their tests on one PostgreSQL and again on Citus).

Citus is found through QUEEN_CITUS_BIN, the bin directory of a PostgreSQL with Citus
installed (`.ci/run` installs it and sets the variable); without it the Citus variants are
skipped with `SKIP_REASON`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path

import asyncpg

from broker.citus import CitusCluster, find_bin_dir
from core.storage.migrations import apply_schema
from tests.support import FAST_SETTINGS

ENV = "QUEEN_CITUS_BIN"
SKIP_REASON = (f"{ENV} is not set: the Citus variant needs a PostgreSQL with Citus "
               "(.ci/run installs it and sets the variable; docs/deploying/citus.md)")
SHARDS = 8  # few shards: quick to create, and still spread over both workers
# The tests' speed settings, but commits written to the OS before they are answered (a test
# kills a worker's postmaster: fsync off loses nothing to that, an asynchronous commit
# would), no automatic recovery of two-phase commits: their records stay in
# pg_dist_transaction, where tests count them (tests/integration/test_citus.py), and no
# distributed deadlock detection: every node's daemon asks the others for their lock waits
# every second, which tests counting the connections a worker uses would count too (a
# deadlock within a node is still PostgreSQL's to find).
SETTINGS = {**FAST_SETTINGS, "synchronous_commit": "on", "citus.recover_2pc_interval": "-1",
            "citus.distributed_deadlock_detection_factor": "-1"}


def citus_bin() -> Path | None:
    """The bin directory QUEEN_CITUS_BIN names, if it holds a PostgreSQL with Citus."""
    if not os.environ.get(ENV, "").strip():
        return None
    return find_bin_dir()


class TestCluster:
    """A cluster in a temporary directory outside pytest's tree (the nodes run as another
    user when the tests run as root), removed with `close`."""

    __test__ = False  # not a test class, whatever its name

    def __init__(self, bin_dir: Path, *, workers: int = 2) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="queen-citus-"))
        self.cluster = CitusCluster.load_or_new(self.root, bin_dir=bin_dir, workers=workers,
                                           shards=SHARDS, settings=SETTINGS)

    def start(self) -> TestCluster:
        self.cluster.up()
        return self

    async def database(self, *, migrate: bool = True) -> str:
        """A new database on every node, made a cluster, with the schema applied (so
        distributed); answers the broker's DSN (every node, the coordinator first)."""
        name = "queen_test_" + uuid.uuid4().hex[:12]
        dsn = self.cluster.create_database(name)
        if migrate:
            conn = await asyncpg.connect(self.cluster.coordinator.dsn(name))
            try:
                await apply_schema(conn)
            finally:
                await conn.close()
        return dsn

    def close(self) -> None:
        try:
            self.cluster.down()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
