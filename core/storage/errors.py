"""The one place where driver errors become core errors.

Every statement runs through `statements.Statement`, and every connection is acquired by
`database.Database`; both translate what the driver raises with `translate`, so nothing
above the storage package sees an asyncpg exception: `StorageUnavailable` (the database
cannot be reached: 503 and retry) or `StorageError` (anything else it answered).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import asyncpg

from core.counters import COUNTERS
from core.errors import (
    CapacityExceeded,
    QueenError,
    StorageDeadlock,
    StorageError,
    StorageReadOnly,
    StorageUnavailable,
)

# SQLSTATE classes that mean "the server is not there for us right now".
_UNAVAILABLE_CLASSES = ("08", "53", "57")
_STATEMENT_TIMEOUT = "57014"
_DEADLOCK = "40P01"
# queen.append: a flush would exceed the queue's maxSize (schema/functions/20_append.sql)
_CAPACITY = "QN011"
# "cannot execute ... in a read-only transaction": a standby (or a server being demoted)
# answered; after a failover the primary is elsewhere.
_READ_ONLY = "25006"

# Each backend of a Citus node keeps a connection to each other node cached across
# transactions. After a worker is restarted, the others' connections to it are dead, and
# the first statement that uses one may fail with this message (seen when it is the first
# placement a reference table write reaches: tests/integration/test_citus.py), raised by
# src/backend/distributed/transaction/remote_transaction.c before anything commits: before
# the remote commits of a one-phase commit and before the local commit of a two-phase one,
# so the statement's transaction rolled back on every node. Citus closes the failed
# connection as that transaction ends and opens a new one at the next use: the same
# statement sent again succeeds if the worker is up.
_LOST_WORKER = ("XX000", "failure on connection marked as essential")

# Errors `storage_errors` converts; anything else (our own bugs) passes through untouched.
# InternalClientError is included because the pool raises it when it resets (on release) a
# connection whose server died in the middle of a statement ("cannot switch to state 15;
# another operation is in progress"): during a database crash that is an outage, not a bug.
DRIVER_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError,
                 OSError, asyncio.TimeoutError, ConnectionError)


def lost_worker(exc: BaseException | None) -> bool:
    """Whether `exc` (or the driver error a core error was raised from) is Citus' failure of
    a cached connection to a worker (`_LOST_WORKER`): no change was made, and the statement
    may be sent again."""
    if isinstance(exc, QueenError):
        exc = exc.__cause__
    if not isinstance(exc, asyncpg.PostgresError):
        return False
    state, prefix = _LOST_WORKER
    message = getattr(exc, "message", None) or str(exc)
    return getattr(exc, "sqlstate", None) == state and message.startswith(prefix)


def translate(exc: BaseException) -> QueenError:
    """Map a driver or network error to StorageUnavailable / StorageError."""
    if isinstance(exc, QueenError):
        return exc
    if isinstance(exc, asyncpg.PostgresError):
        state = getattr(exc, "sqlstate", "") or ""
        if state[:2] in _UNAVAILABLE_CLASSES and state != _STATEMENT_TIMEOUT:
            return StorageUnavailable()
        if state == _CAPACITY:
            return CapacityExceeded(getattr(exc, "message", None) or str(exc))
        if state == _READ_ONLY:
            return StorageReadOnly()
        if state == _DEADLOCK:
            return StorageDeadlock(f"database error {state}: {exc}")
        return StorageError(f"database error {state}: {exc}")
    if isinstance(exc, (OSError, asyncpg.InterfaceError, asyncpg.InternalClientError,
                        asyncio.TimeoutError, ConnectionError)):
        return StorageUnavailable()
    return StorageError(f"database failure: {exc!r}")


@contextlib.contextmanager
def storage_errors() -> Iterator[None]:
    try:
        yield
    except DRIVER_ERRORS as exc:
        error = translate(exc)
        if not isinstance(error, CapacityExceeded):  # a refusal, not a database failure
            COUNTERS.add("db_errors")
        raise error from exc
