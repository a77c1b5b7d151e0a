"""Driver errors become core errors at the database boundary."""

from __future__ import annotations

import asyncpg
import pytest

from core.errors import StorageError, StorageUnavailable
from core.storage.errors import storage_errors, translate


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
