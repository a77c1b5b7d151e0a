"""A pop reads only the candidates it reaches (schema/functions/30_pop.sql,
queen.pop_ready). The process hands a claim statement several candidates (at least eight:
another process may have taken some); the claim walks them in order and stops once it has
what it wanted. The candidates after that were answered with a verdict each, read from their
partition and cursor rows (two statements per candidate, most of a pop of one message's
cost in the database). They are answered `busy` now without being read, which the process
files as ready, as it always filed a `busy` candidate of a pop that got what it wanted.

Nor are they scanned before the claim (a statement each, to see whether the partition holds
messages and whether the group has a cursor there): on one queue, the statement scans as
many as could satisfy the pop, claims, and scans the rest only if that claim fell short."""

from __future__ import annotations

import os

import asyncpg
import httpx

CANDIDATES = 8


async def _one_message_in_each(client: httpx.AsyncClient, queue: str, count: int) -> list[int]:
    ids = []
    for n in range(count):
        r = await client.post("/api/v1/push", json={"items": [
            {"queue": queue, "partition": f"p{n}", "payload": {"n": n}}]})
        assert r.status_code == 201, r.text
        ids.append(int(r.json()[0]["partition_id"]))
    return ids


async def _claim(conn: asyncpg.Connection, queue: str, candidates: list[int], *,
                 batch: int, partitions: int) -> tuple[list[asyncpg.Record], int]:
    """The claim statement's rows, and the index scans of queen.log_partitions it made
    (counted inside its transaction, which is rolled back)."""
    rows, scans, _ = await _claim_and_cursors(conn, queue, candidates, batch=batch,
                                              partitions=partitions)
    return rows, scans


async def _claim_and_cursors(conn: asyncpg.Connection, queue: str, candidates: list[int], *,
                             batch: int, partitions: int,
                             ) -> tuple[list[asyncpg.Record], int, set[int]]:
    """`_claim`, and the candidates the group has a cursor on after the claim (read inside
    its transaction)."""
    scans = ("SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_xact_user_tables"
             " WHERE schemaname = 'queen' AND relname = 'log_partitions'")
    transaction = conn.transaction()
    await transaction.start()
    try:
        before = await conn.fetchval(scans)
        rows = await conn.fetch(
            "SELECT verdict, queue_id, partition_id FROM queen.pop_ready("
            "NULL, '', $1, NULL, NULL, NULL, 'reach', true, 'all', NULL, false,"
            " $2, $3, false, 0, 300, 'lease-1', $4::bigint[], false, 1)",
            queue, batch, partitions, candidates)
        read = await conn.fetchval(scans) - before
        cursors = {r["partition_id"] for r in await conn.fetch(
            "SELECT partition_id FROM queen.log_consumers"
            " WHERE consumer_group = 'reach' AND partition_id = ANY($1::bigint[])",
            candidates)}
        return rows, read, cursors
    finally:
        await transaction.rollback()


async def _candidates_with_cursors(http: httpx.AsyncClient, queue: str,
                                   count: int = CANDIDATES) -> list[int]:
    """`count` partitions of one message each, where the group already has its cursors
    (a group's first pop creates them all, reading each row)."""
    await _one_message_in_each(http, queue, count)
    r = await http.get(f"/api/v1/pop/queue/{queue}", params={
        "consumerGroup": "reach", "batch": "100", "partitions": str(count),
        "wait": "false", "autoAck": "true"})
    assert r.status_code == 200 and len(r.json()["messages"]) == count, r.text
    return await _one_message_in_each(http, queue, count)


async def _verdicts(database_url: str, queue: str, candidates: list[int], *, batch: int,
                    partitions: int) -> list[str]:
    """Each candidate's verdict in one claim over them all (rolled back)."""
    conn = await asyncpg.connect(database_url)
    try:
        rows, _ = await _claim(conn, queue, candidates, batch=batch, partitions=partitions)
    finally:
        await conn.close()
    verdicts = {r["partition_id"]: r["verdict"] for r in rows if r["partition_id"]}
    return [verdicts[c] for c in candidates]


def _took_the_first_alone(rows: list[asyncpg.Record], candidates: list[int]) -> None:
    """The claim took the first candidate and answered the others `busy`, each filed in the
    queue's lane (its queue id given)."""
    verdicts = {r["partition_id"]: r["verdict"] for r in rows if r["partition_id"]}
    assert verdicts[candidates[0]] == "took", rows
    assert [verdicts[c] for c in candidates[1:]] == ["busy"] * (len(candidates) - 1), rows
    queue_ids = {r["queue_id"] for r in rows}
    assert len(queue_ids) == 1 and None not in queue_ids, rows


async def _lease(http: httpx.AsyncClient, queue: str, partition: str) -> None:
    """Another pop of the group leases the partition's message."""
    r = await http.get(f"/api/v1/pop/queue/{queue}/partition/{partition}",
                       params={"consumerGroup": "reach", "batch": "1", "wait": "false"})
    assert r.status_code == 200, r.text


async def test_a_pop_of_one_reads_none_of_the_candidates_it_did_not_reach(
        http: httpx.AsyncClient, database_url: str) -> None:
    queue = "reach-" + os.urandom(4).hex()
    candidates = await _candidates_with_cursors(http, queue)
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("SET stats_fetch_consistency = none")
        # The same claim given the first candidate alone: what reading the partition it
        # takes and answering it costs (the plan may read a row more than once).
        _, alone = await _claim(conn, queue, candidates[:1], batch=1, partitions=1)
        rows, read = await _claim(conn, queue, candidates, batch=1, partitions=1)
    finally:
        await conn.close()
    _took_the_first_alone(rows, candidates)
    # Each other candidate's row is read once, to see whether it holds messages. Before:
    # twice (and a verdict read of its cursor), 14 more than the claim of the first alone.
    assert read - alone <= CANDIDATES - 1, (read, alone)


async def test_a_pop_that_walks_every_candidate_still_says_why_each_gave_nothing(
        http: httpx.AsyncClient, database_url: str) -> None:
    """A claim that did not get what it wanted reached them all: each still has its
    verdict from its rows (a leased one says so, with when its lease ends)."""
    queue = "reach-" + os.urandom(4).hex()
    candidates = await _one_message_in_each(http, queue, 3)
    await _lease(http, queue, "p1")
    assert await _verdicts(database_url, queue, candidates, batch=10, partitions=3) == [
        "took", "leased", "took"]


async def test_a_pop_of_one_scans_only_the_candidate_it_takes(
        http: httpx.AsyncClient, database_url: str) -> None:
    """The seven candidates after the one it takes are not scanned either: the claim over
    eight reads queen.log_partitions exactly as often as the claim over the first alone
    (before: once more per other candidate, 7 more)."""
    queue = "reach-" + os.urandom(4).hex()
    candidates = await _candidates_with_cursors(http, queue)
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("SET stats_fetch_consistency = none")
        # Once first: planning its statements may read index pages, once per connection.
        await _claim(conn, queue, candidates, batch=1, partitions=4)
        _, alone = await _claim(conn, queue, candidates[:1], batch=1, partitions=4)
        rows, read = await _claim(conn, queue, candidates, batch=1, partitions=4)
    finally:
        await conn.close()
    _took_the_first_alone(rows, candidates)
    assert read == alone, (read, alone)


async def test_a_claim_that_fell_short_goes_on_with_the_candidates_it_had_not_scanned(
        http: httpx.AsyncClient, database_url: str) -> None:
    """The first candidate is leased by another pop: the statement scans on, takes the
    second, and answers the first `leased` (read) and the rest `busy` (unread)."""
    queue = "reach-" + os.urandom(4).hex()
    candidates = await _candidates_with_cursors(http, queue, 4)
    await _lease(http, queue, "p0")
    assert await _verdicts(database_url, queue, candidates, batch=1, partitions=1) == [
        "leased", "took", "busy", "busy"]


async def test_a_claim_that_took_something_creates_no_cursor_after_it(
        http: httpx.AsyncClient, database_url: str) -> None:
    """Cursors are created before the pop locks any (two pops creating them in opposite
    orders could otherwise deadlock, as could a pop and a seek): a candidate without the
    group's cursor met after a claim that took a partition is left out of the statement,
    answered `busy` (looked at again soon), and the next claim that has it creates it."""
    queue = "reach-" + os.urandom(4).hex()
    candidates = await _one_message_in_each(http, queue, 3)
    for name in ("p0", "p1"):  # the group's cursors on p0 and p1, not on p2
        r = await http.get(f"/api/v1/pop/queue/{queue}/partition/{name}", params={
            "consumerGroup": "reach", "batch": "1", "wait": "false", "autoAck": "true"})
        assert r.status_code == 200, r.text
    await _one_message_in_each(http, queue, 2)
    r = await http.get(f"/api/v1/pop/queue/{queue}/partition/p1",
                       params={"consumerGroup": "reach", "batch": "1", "wait": "false"})
    assert r.status_code == 200, r.text  # p1 is leased now
    conn = await asyncpg.connect(database_url)
    try:
        # Two wanted: the first scan stops at p0 and p1, the claim takes p0 only.
        rows, _, cursors = await _claim_and_cursors(conn, queue, candidates, batch=2,
                                                    partitions=2)
        later, _, created = await _claim_and_cursors(conn, queue, candidates[2:], batch=2,
                                                     partitions=2)
    finally:
        await conn.close()
    verdicts = {r["partition_id"]: r["verdict"] for r in rows if r["partition_id"]}
    assert [verdicts[c] for c in candidates] == ["took", "leased", "busy"], rows
    assert candidates[2] not in cursors
    assert [(r["partition_id"], r["verdict"]) for r in later if r["partition_id"]] == [
        (candidates[2], "took")], later
    assert candidates[2] in created


async def test_a_claim_on_one_postgresql_holds_no_placement(
        http: httpx.AsyncClient, database_url: str) -> None:
    """queen.hold_placement (Citus's shard-move guard, a no-op without Citus) was called for
    each partition the claim reached or created a cursor on, a statement each; the claim now
    asks once whether Citus is there, and calls it only then."""
    queue = "reach-" + os.urandom(4).hex()
    candidates = await _one_message_in_each(http, queue, 4)
    conn = await asyncpg.connect(database_url)
    try:
        transaction = conn.transaction()
        await transaction.start()
        try:
            await conn.execute("SET LOCAL track_functions = 'pl'")
            rows = await conn.fetch(  # a first contact: it creates the four cursors
                "SELECT verdict, partition_id FROM queen.pop_ready("
                "NULL, '', $1, NULL, NULL, NULL, 'reach', true, 'all', NULL, false,"
                " 4, 4, false, 0, 300, 'lease-1', $2::bigint[], false, 1)",
                queue, candidates)
            calls = await conn.fetchval(
                "SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions"
                " WHERE schemaname = 'queen' AND funcname = 'hold_placement'")
        finally:
            await transaction.rollback()
    finally:
        await conn.close()
    assert sorted(r["partition_id"] for r in rows if r["verdict"] == "took") == candidates
    assert calls == 0  # before: 8 (four cursors created, four partitions claimed)
