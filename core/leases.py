"""Lease extension by lease id (the worker id shared by every partition of one pop)."""

from __future__ import annotations

from datetime import datetime

from core.db import Database


async def extend_lease(db: Database, lease_id: str, seconds: int) -> list[datetime]:
    """Push the expiry of every live lease of `lease_id` to at least now + seconds; answer
    the new expiries (empty when nothing was live: expired leases are not revived)."""
    rows = await db.fetch("extend_lease", lease_id, float(seconds))
    return [r["lease_expires_at"] for r in rows]
