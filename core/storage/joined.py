"""Text columns sent as one text each: asyncpg encodes an array argument element by element
(0.3 to 0.5 µs each), so a column of hundreds of values costs the driver more than the
rest of its statement. A statement that takes a column this way splits it again with
`(string_to_array(:x::text, E'\\x1f'))[2:]` (schema/queries/pop.sql `ack_joined`,
write.sql `append_partitions_joined`)."""

from __future__ import annotations

from collections.abc import Sequence

SEPARATOR, NULL = "\x1f", "\x1e"


def joined(column: Sequence[str | None]) -> str | None:
    """Each value preceded by U+001F (U+001E for a null), or None when a value holds either
    character and would not survive the split: the caller then sends the array."""
    nulls = column.count(None) if None in column else 0
    values = [NULL if v is None else v for v in column] if nulls else column
    text = SEPARATOR + SEPARATOR.join(values)  # type: ignore[arg-type]
    if text.count(SEPARATOR) != len(column) or text.count(NULL) != nulls:
        return None
    return text
