"""Pages of listings.

* In key order (keyset paging: `after` a key, at most `limit` rows), as the KV namespaces and
  the timers' routes answer it (`rows`, `truncated`, `nextAfter`).
* By position (`offset`), where a byte budget (QUEEN_LIST_MAX_BYTES) may end the page before
  the rows it would hold (`truncated`, `nextOffset`), as the DLQ, message and trace listings
  answer it: a page's stored payloads may be 16 MiB each."""

from __future__ import annotations

from collections.abc import Callable, Iterable
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


@dataclass(frozen=True, slots=True)
class OffsetPage(Generic[R]):
    rows: list[R]
    total: int  # the rows of every page
    truncated: bool  # the byte budget ended the page before the rows it had room for
    next_offset: int  # where the next page starts: the page's offset + its rows


def offset_page(rows: list[R], total: int, offset: int, room: int) -> OffsetPage[R]:
    """The page of `rows` at `offset`; `room`: the rows it would hold without its budget."""
    return OffsetPage(rows, total, len(rows) < room, offset + len(rows))


def within_bytes(items: Iterable[R], size: Callable[[R], int], max_bytes: int) -> list[R]:
    """The leading items whose sizes add up to at most `max_bytes`, the first kept whatever
    its size (a page never answers nothing while rows remain). `items` is read no further
    than the first item left out."""
    kept: list[R] = []
    held = 0
    for item in items:
        held += size(item)
        if kept and held > max_bytes:
            break
        kept.append(item)
    return kept

