"""Upgrade equals fresh: a database that released code created, migrated by this code, has
exactly the catalog (tables, columns, indexes, constraints, types, function definitions) of a
database this code creates. Also from the older versions of the numbered chain that databases
may still be at. See schema/README.md for the two layers this checks."""

from __future__ import annotations

import asyncpg
import pytest

from core.storage.migrations import apply_schema, function_files
from tests.catalog import catalog_of
from tests.citus_cluster import TestCluster
from tests.released import RELEASES, create_released_database
from tests.support import create_database


@pytest.fixture(scope="module")
async def fresh_catalog(pg_server_url: str) -> list[str]:
    return await catalog_of(await create_database(pg_server_url))


async def _migrate(url: str) -> list[str]:
    """Apply this code's schema; answer the function files it applied."""
    conn = await asyncpg.connect(url)
    try:
        return (await apply_schema(conn)).functions
    finally:
        await conn.close()


def _differences(upgraded: list[str], fresh: list[str]) -> dict[str, list[str]]:
    return {"only after the upgrade": sorted(set(upgraded) - set(fresh)),
            "only in a fresh database": sorted(set(fresh) - set(upgraded))}


@pytest.mark.parametrize("release", sorted(RELEASES))
async def test_a_released_database_migrated_by_this_code_equals_a_fresh_one(
        pg_server_url: str, fresh_catalog: list[str], release: str) -> None:
    url = await create_released_database(pg_server_url, RELEASES[release])
    # The released code recorded no function file: every one is applied once.
    assert await _migrate(url) == [path.name for path in function_files()]
    upgraded = await catalog_of(url)
    assert _differences(upgraded, fresh_catalog) == _differences([], [])
    assert upgraded == fresh_catalog  # the same lines, and each as often
    assert await _migrate(url) == []  # and then nothing is applied again


@pytest.mark.parametrize("version", [1, 5, 20, 24, 27, 81, 90])
async def test_a_database_at_an_older_version_of_the_numbered_chain_upgrades_to_the_fresh_one(
        pg_server_url: str, fresh_catalog: list[str], version: int) -> None:
    """Versions whose functions later migrations dropped or re-typed: the drops are in the
    migrations, so nothing of an older definition survives the upgrade."""
    url = await create_released_database(pg_server_url, RELEASES["numbered-chain-v95"],
                                         up_to=version)
    await _migrate(url)
    assert _differences(await catalog_of(url), fresh_catalog) == _differences([], [])


async def _placement(url: str) -> list[str]:
    """Where Citus keeps each table of the schema, and which functions it delegates."""
    conn = await asyncpg.connect(url)
    try:
        tables = await conn.fetch(
            "SELECT table_name::text || ' ' || citus_table_type || ' '"
            "       || coalesce(distribution_column, '') || ' ' || shard_count"
            "  FROM citus_tables ORDER BY 1")
        functions = await conn.fetch(
            "SELECT o.objid::regprocedure::text || ' arg=' || o.distribution_argument_index"
            "  FROM pg_dist_object o WHERE o.classid = 'pg_proc'::regclass"
            "   AND o.distribution_argument_index IS NOT NULL ORDER BY 1")
    finally:
        await conn.close()
    return [r[0] for r in tables] + [r[0] for r in functions]


@pytest.mark.parametrize("release", ["numbered-chain-v97", "tenants-v140"])
async def test_a_released_database_on_citus_migrated_by_this_code_equals_a_fresh_one(
        citus_cluster: TestCluster, release: str) -> None:
    """On a Citus cluster the released code's schema is plain tables of the coordinator;
    this code migrates it and puts every table and function in its place, as on a database
    it creates itself (tests/citus_cluster.py; skipped without QUEEN_CITUS_BIN)."""
    fresh_url = await citus_cluster.database()
    fresh = citus_cluster.cluster.coordinator.dsn(fresh_url.rsplit("/", 1)[1])
    empty = await citus_cluster.database(migrate=False)
    old = citus_cluster.cluster.coordinator.dsn(empty.rsplit("/", 1)[1])
    await create_released_database("", RELEASES[release], url=old)
    await _migrate(old)
    assert _differences(await catalog_of(old), await catalog_of(fresh)) == _differences([], [])
    assert await _placement(old) == await _placement(fresh)
    assert await _migrate(old) == []
