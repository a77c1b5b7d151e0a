"""`POST /api/v1/partitions/changed` (§6.6): partitions written since an instant."""

from __future__ import annotations

from typing import Annotated, ClassVar

import msgspec
from msgspec import UNSET, Meta, UnsetType

from broker.wire.types import Name, Timestamp
from core.admin.changes import MAX_PAGE

MAX_ENTRIES = 1024  # as for fetch


class ChangedEntryIn(msgspec.Struct):
    queue: Name
    limit: Annotated[int, Meta(ge=1, le=MAX_PAGE)] = MAX_PAGE
    since: Timestamp | None = None
    # The page cursor this broker answered as `next` (a partition id in decimal text).
    after: Annotated[str, Meta(pattern=r"^[0-9]{1,18}$")] | None = None


class ChangedBody(msgspec.Struct):
    MESSAGES: ClassVar[dict[str, str]] = {"entries": "entries array is required"}

    entries: list[ChangedEntryIn]


class ChangedPartitionOut(msgspec.Struct):
    name: str
    id: str
    lastOffset: int
    logStart: int
    lastWriteAt: str | None


class ChangedEntryOut(msgspec.Struct):
    partitions: list[ChangedPartitionOut]
    next: str | UnsetType = UNSET
    error: str | UnsetType = UNSET


class ChangedAnswer(msgspec.Struct):
    safeTime: str
    entries: list[ChangedEntryOut]
