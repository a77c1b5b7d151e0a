"""Lease extension by lease id (the worker id shared by every partition of one pop)."""

from __future__ import annotations

from datetime import datetime

from core.storage import reads as sql
from core.storage.database import Database


async def extend_lease(db: Database, lease_id: str, seconds: int) -> list[datetime]:
    """Push the expiry of every live lease of `lease_id` to at least now + seconds; answer
    the new expiries (empty when nothing was live: expired leases are not revived)."""
    async with db.session() as conn:
        return await sql.extend_lease(conn, lease_id=lease_id, seconds=float(seconds))
