"""Shapes shared by several route families."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

from broker.wire.types import Name, Timestamp
from core.errors import BadRequest

T = TypeVar("T")
MAX_AFTER_LIMIT = 1000

# A dashboard answer whose keys the protocol leaves open (§6.3, §6.5).
FreeForm = dict[str, Any]


class ErrorBody(msgspec.Struct):
    """Every error answer: `{"error": text}` (wire-protocol §1)."""

    error: str


class RefusalBody(ErrorBody):
    """A refusal of the extension routes: `error` (the code), `reason`, `detail`."""

    reason: str | UnsetType = UNSET
    detail: str | UnsetType = UNSET


class QueuePath(msgspec.Struct):
    """A path naming a queue (pop, admin and status routes)."""

    queue: Name


class WindowQuery(msgspec.Struct):
    """A query bounded by a time window, `from` and `to` (ISO-8601, both optional): what
    each route's window bounds its own docs say (analytics series, queue creation, a DLQ
    row's failure, a message's creation)."""

    from_: Timestamp | UnsetType = msgspec.field(default=UNSET, name="from")
    to: Timestamp | UnsetType = UNSET

    @property
    def start(self) -> datetime | None:
        """`from` as an instant; None when not given (the window is open there)."""
        return self.from_.instant if self.from_ else None

    @property
    def end(self) -> datetime | None:
        """`to` as an instant; None when not given."""
        return self.to.instant if self.to else None

    def closed(self, span: timedelta) -> tuple[datetime, datetime]:
        """The window as two instants: `to`, or now; `from`, or `span` before the end. A
        `from` after `to` is refused."""
        end = self.end or datetime.now(UTC)
        start = self.start or end - span
        if start > end:
            raise BadRequest("from must not be later than to")
        return start, end


class Operations(msgspec.Struct, Generic[T]):
    """The body of a batch of ops (KV §14.3, locks §15.2, timers §16.2):
    `{"operations": [...]}`, or the bare array of ops. Those routes decode their bodies into
    plain JSON values and check them op by op; this only documents them (OpenAPI)."""

    operations: list[T]


class AfterQuery(msgspec.Struct):
    """A listing in key order, resumed after the key `after` (exclusive), `limit` rows at a
    time: the dashboard's listings of KV namespaces and of queues with pending timers."""

    after: str = ""
    limit: int = 100

    @property
    def clamped_limit(self) -> int:
        """`limit` within 1..1000: a listing clamps it, it never refuses it."""
        return min(max(self.limit, 1), MAX_AFTER_LIMIT)


class Pagination(msgspec.Struct):
    limit: int
    offset: int


def given(value: T | UnsetType) -> T | None:
    """An optional parameter's value, or None when it was absent."""
    return None if isinstance(value, UnsetType) else value
