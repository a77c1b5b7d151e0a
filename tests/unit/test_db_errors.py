"""Driver errors become core errors at the database boundary; a statement Citus failed on
its dead connection to a restarted worker is sent again, once, when it was its own
transaction."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from core.errors import StorageError, StorageUnavailable
from core.storage.errors import lost_worker, storage_errors, translate
from core.storage.statements import Statement

LOST = "failure on connection marked as essential: 127.0.0.1:9702"


@pytest.mark.parametrize("exc", [
    ConnectionRefusedError(111, "refused"),
    FileNotFoundError(2, "no socket"),
    TimeoutError(),
    asyncpg.InterfaceError("connection is closed"),
    asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
    # Raised by the pool when it resets a connection whose server died mid-statement.
    asyncpg.InternalClientError("cannot switch to state 15; another operation (2) is in progress"),
    asyncpg.CannotConnectNowError("the database system is starting up"),
    asyncpg.AdminShutdownError("terminating connection due to administrator command"),
])
def test_outage_errors_become_storage_unavailable(exc: BaseException) -> None:
    assert isinstance(translate(exc), StorageUnavailable)
    with pytest.raises(StorageUnavailable) as info, storage_errors():
        raise exc
    assert info.value.__cause__ is exc


def test_statement_timeout_is_a_storage_error_not_an_outage() -> None:
    result = translate(asyncpg.QueryCanceledError("canceling statement due to statement timeout"))
    assert type(result) is StorageError


def test_our_own_bugs_pass_through_storage_errors_untouched() -> None:
    with pytest.raises(KeyError), storage_errors():
        raise KeyError("bug")


def test_the_log_of_a_503_names_what_the_database_said(
        caplog: pytest.LogCaptureFixture) -> None:
    from broker.errors import error_response

    with pytest.raises(StorageUnavailable) as info, storage_errors():
        raise asyncpg.TooManyConnectionsError("sorry, too many clients already")
    with caplog.at_level("WARNING", logger="broker.errors"):
        answer = error_response(info.value)
    assert answer.status_code == 503
    assert b"too many clients" not in answer.body  # the client's text stays the same
    assert "(sorry, too many clients already)" in caplog.text


def test_citus_failing_on_a_dead_worker_connection_is_told_apart() -> None:
    lost = asyncpg.InternalServerError(LOST)
    assert lost_worker(lost)
    with pytest.raises(StorageError) as info, storage_errors():
        raise lost
    assert lost_worker(info.value)  # through the core error it became: a 503, as before
    assert not lost_worker(asyncpg.InternalServerError("could not find shard 102008"))
    assert not lost_worker(asyncpg.ConnectionFailureError(
        "connection to the remote node postgres@127.0.0.1:9702 failed"))  # a worker down
    assert not lost_worker(StorageUnavailable())
    assert not lost_worker(None)


class FakeConn:
    """Answers `fetchval` with each of `answers` in turn (an exception is raised)."""

    def __init__(self, answers: list[Any], *, in_transaction: bool = False) -> None:
        self.answers = answers
        self.calls = 0
        self.in_transaction = in_transaction

    async def fetchval(self, sql: str, *args: Any) -> Any:
        answer = self.answers[self.calls]
        self.calls += 1
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def is_in_transaction(self) -> bool:
        return self.in_transaction


PING = Statement.registry["ping"]


async def test_a_statement_citus_failed_on_a_dead_worker_connection_is_sent_again() -> None:
    conn = FakeConn([asyncpg.InternalServerError(LOST), 1])
    assert await PING.value(conn) == 1  # type: ignore[arg-type]
    assert conn.calls == 2


async def test_it_is_sent_again_once() -> None:
    conn = FakeConn([asyncpg.InternalServerError(LOST), asyncpg.InternalServerError(LOST), 1])
    with pytest.raises(StorageError) as info:
        await PING.value(conn)  # type: ignore[arg-type]
    assert conn.calls == 2 and lost_worker(info.value)


async def test_a_statement_inside_a_transaction_or_failed_otherwise_is_not_sent_again() -> None:
    # the failure aborted the whole transaction: its earlier statements are undone too
    conn = FakeConn([asyncpg.InternalServerError(LOST), 1], in_transaction=True)
    with pytest.raises(StorageError):
        await PING.value(conn)  # type: ignore[arg-type]
    assert conn.calls == 1
    conn = FakeConn([asyncpg.InternalServerError("could not find shard 102008"), 1])
    with pytest.raises(StorageError):
        await PING.value(conn)  # type: ignore[arg-type]
    assert conn.calls == 1


class Pooled:
    terminated = False

    def terminate(self) -> None:
        self.terminated = True


@pytest.mark.parametrize("error, dropped", [
    (asyncpg.InternalServerError(LOST), True),  # at COMMIT, from the driver itself
    (StorageError(), False),
    (asyncpg.InternalServerError("could not find shard 102008"), False),
])
def test_a_connection_whose_block_failed_on_a_dead_worker_connection_is_dropped(
        error: Exception, dropped: bool) -> None:
    from core.storage.database import _dropped_after_lost_worker

    conn = Pooled()
    with pytest.raises(type(error)), _dropped_after_lost_worker(conn):
        raise error
    assert conn.terminated is dropped
    conn = Pooled()
    with pytest.raises(StorageError), _dropped_after_lost_worker(conn), storage_errors():
        raise asyncpg.InternalServerError(LOST)  # a statement's, as a core error
    assert conn.terminated
