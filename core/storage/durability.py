"""A commit PostgreSQL kept locally but could not confirm as replicated: treated as in doubt.

With synchronous replication (`synchronous_standby_names`, as Patroni's synchronous mode sets
it) a commit waits until a standby has it before it is answered. When that wait is cancelled
(the statement timeout expires while no standby answers, or an operator cancels the backend),
PostgreSQL keeps the commit, which is already written locally, answers it as a success, and
says what happened only in a WARNING ("canceling wait for synchronous replication ...: the
transaction has already committed locally, but might not have been replicated to the
standby"). Answering `queued` on that would promise what the operator asked synchronous
replication for and did not get: if the primary dies now, the promoted standby lacks it.

So a write watched here that draws that warning raises `StorageUnavailable`, as when the
connection is lost during a commit: the push is answered 503 or taken by the push spool, and
its retry with the same transactionId meets the stored copy as a duplicate.

The warning carries no SQLSTATE of its own (the generic 01000), so it is recognised by its
text as well, which PostgreSQL translates when `lc_messages` is not English: on such a server
the watch sees nothing and the commit is answered as PostgreSQL answered it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from asyncpg.pool import PoolConnectionProxy

from core.errors import StorageUnavailable
from core.storage.statements import Conn

_GENERIC_WARNING = "01000"
_SYNC_WAIT_CANCELLED = "wait for synchronous replication"


def _cancelled_sync_wait(message: Any) -> bool:
    return (getattr(message, "sqlstate", None) == _GENERIC_WARNING
            and _SYNC_WAIT_CANCELLED in (getattr(message, "message", "") or ""))


@contextlib.asynccontextmanager
async def replicated(conn: Conn | PoolConnectionProxy[Any]) -> AsyncIterator[None]:
    """Run the block's statements on `conn`; raise `StorageUnavailable` after it if a commit
    among them was kept without its synchronous standby.

    asyncpg hands a notice to its listeners with `call_soon` as it reads it, before the
    statement's own answer wakes its caller, so the block's last statement has been heard
    by the time the block ends."""
    in_doubt: list[bool] = []

    def hear(_conn: object, message: Any) -> None:
        if _cancelled_sync_wait(message):
            in_doubt.append(True)

    conn.add_log_listener(hear)
    try:
        yield
    finally:
        conn.remove_log_listener(hear)
    if in_doubt:
        raise StorageUnavailable()
