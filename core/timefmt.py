"""The broker's one wire timestamp format, and parsing of client-given timestamps."""

from __future__ import annotations

from datetime import UTC, datetime

from core.errors import BadRequest


def iso(ts: datetime) -> str:
    """ISO-8601 UTC with microseconds and a trailing Z."""
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def iso_or_none(ts: datetime | None) -> str | None:
    """`iso`, with None (JSON null) for a time that is not there."""
    return None if ts is None else iso(ts)


def parse_iso(text: str, what: str) -> datetime:
    """A client-given ISO-8601 timestamp, in UTC; naive values are taken as UTC.

    The instant must exist in UTC within Python's range (years 1-9999): `0001-01-01T00:00
    +14:00` parses, but the driver cannot send it (it is in year 0 in UTC)."""
    try:
        ts = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
        return (ts if ts.tzinfo else ts.replace(tzinfo=UTC)).astimezone(UTC)
    except (ValueError, AttributeError, OverflowError):
        raise BadRequest(f"{what} must be an ISO-8601 timestamp") from None
