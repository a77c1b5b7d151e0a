"""Shapes shared by several route families."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from msgspec import UnsetType

from broker.wire.types import Name

T = TypeVar("T")

# A dashboard answer whose keys the protocol leaves open (§6.3, §6.5).
FreeForm = dict[str, Any]


class ErrorBody(msgspec.Struct):
    """Every error answer: `{"error": text}` (wire-protocol §1)."""

    error: str


class QueuePath(msgspec.Struct):
    """A path naming a queue (pop, admin and status routes)."""

    queue: Name


class Pagination(msgspec.Struct):
    limit: int
    offset: int


def given(value: T | UnsetType) -> T | None:
    """An optional parameter's value, or None when it was absent."""
    return None if isinstance(value, UnsetType) else value
