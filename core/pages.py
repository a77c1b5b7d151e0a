"""A page of a listing in key order (keyset paging: `after` a key, at most `limit` rows), as
the KV namespaces and the timers' routes answer it (`rows`, `truncated`, `nextAfter`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class KeyPage(Generic[R]):
    rows: list[R]
    truncated: bool
    next_after: str | None  # the key the next page starts after; None: this is the last


def key_page(rows: list[R], limit: int, key: Callable[[R], str]) -> KeyPage[R]:
    """The page of `rows` read with `limit + 1`: the extra row only says that more follow, so
    a full last page is not followed by an empty one."""
    truncated = len(rows) > limit
    rows = rows[:limit]
    return KeyPage(rows, truncated, key(rows[-1]) if truncated and rows else None)
