"""What the database holds at the end of a run, read straight from the tables.

The checker compares the operation log with this, not with anything the broker says about
itself: stored messages (segments unpacked here), cursors and leases, dead letters.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from core import segments


@dataclass(frozen=True, slots=True)
class Stored:
    partition_id: str
    partition: str
    offset: int
    message_id: str
    transaction_id: str
    payload: Any


@dataclass(slots=True)
class Snapshot:
    stored: dict[str, list[Stored]] = field(default_factory=dict)          # per queue
    last_offsets: dict[str, dict[str, int]] = field(default_factory=dict)  # queue -> pid -> last
    # queue -> (pid, group) -> {committed, lease_live, worker_id}
    cursors: dict[str, dict[tuple[str, str], dict[str, Any]]] = field(default_factory=dict)
    dlq: dict[str, list[dict[str, Any]]] = field(default_factory=dict)     # per queue

    def dump(self) -> dict[str, Any]:
        """Everything, for re-checking a run later (`load` reads it back)."""
        return {"stored": {q: [dataclasses.astuple(s) for s in v]
                           for q, v in self.stored.items()},
                "last_offsets": self.last_offsets,
                "cursors": {q: [[p, g, c] for (p, g), c in v.items()]
                            for q, v in self.cursors.items()},
                "dlq": self.dlq}

    @classmethod
    def load(cls, data: dict[str, Any]) -> Snapshot:
        return cls({q: [Stored(*s) for s in v] for q, v in data["stored"].items()},
                   data["last_offsets"],
                   {q: {(p, g): c for p, g, c in v} for q, v in data["cursors"].items()},
                   data["dlq"])

    def to_json(self) -> dict[str, Any]:
        return {
            "stored": {q: len(v) for q, v in self.stored.items()},
            "last_offsets": self.last_offsets,
            "cursors": {q: {f"{p}/{g}": c for (p, g), c in v.items()}
                        for q, v in self.cursors.items()},
            "dlq": {q: len(v) for q, v in self.dlq.items()},
        }


async def take(dsn: str, queues: list[str]) -> Snapshot:
    conn = await asyncpg.connect(dsn, timeout=10, command_timeout=60)  # never wait for good
    try:
        snap = Snapshot()
        for queue in queues:
            parts = await conn.fetch(
                "SELECT p.id, p.name, p.last_offset FROM queen.log_partitions p"
                " JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1", queue)
            names = {r["id"]: r["name"] for r in parts}
            snap.last_offsets[queue] = {str(r["id"]): r["last_offset"] for r in parts}
            stored: list[Stored] = []
            for row in await conn.fetch(
                    "SELECT partition_id, base_offset, blob FROM queen.log_segments"
                    " WHERE partition_id = ANY($1::bigint[])"
                    " ORDER BY partition_id, base_offset", list(names)):
                for i, frame in enumerate(segments.unpack(row["blob"])):
                    stored.append(Stored(
                        str(row["partition_id"]), names[row["partition_id"]],
                        row["base_offset"] + i, str(frame.message_id), frame.transaction_id,
                        json.loads(frame.payload)))
            snap.stored[queue] = stored
            snap.cursors[queue] = {
                (str(r["partition_id"]), r["consumer_group"]): {
                    "committed": r["committed"], "lease_live": r["lease_live"],
                    "worker_id": r["worker_id"]}
                for r in await conn.fetch(
                    "SELECT partition_id, consumer_group, committed, worker_id,"
                    " (worker_id IS NOT NULL AND lease_expires_at > now()) AS lease_live"
                    " FROM queen.log_consumers WHERE partition_id = ANY($1::bigint[])",
                    list(names))}
            snap.dlq[queue] = [
                {"partition_id": str(r["partition_id"]), "group": r["consumer_group"],
                 "offset": r["msg_offset"], "transaction_id": r["transaction_id"],
                 "message_id": str(message_id), "retry_count": r["retry_count"],
                 "error": r["error_message"], "payload": json.loads(payload)}
                for r in await conn.fetch(
                    "SELECT d.*, s.blob AS segment_blob FROM queen.log_dlq d"
                    " LEFT JOIN queen.log_dlq_segments s ON s.partition_id = d.partition_id"
                    " AND s.base_offset = d.segment_base"
                    " WHERE d.partition_id = ANY($1::bigint[])", list(names))
                for message_id, payload in [_dead_message(r)]]
        return snap
    finally:
        await conn.close()


async def drained(dsn: str, queues: list[str], groups: list[str]) -> bool:
    """Every group's cursor is at its partition's last offset, with no live lease."""
    conn = await asyncpg.connect(dsn, timeout=5, command_timeout=10)
    try:
        behind = await conn.fetchval(
            """SELECT count(*) FROM queen.log_partitions p
                 JOIN queen.queues q ON q.id = p.queue_id
                 CROSS JOIN unnest($2::text[]) AS g(name)
                 LEFT JOIN queen.log_consumers c
                        ON c.partition_id = p.id AND c.consumer_group = g.name
                WHERE q.name = ANY($1::text[]) AND p.last_offset >= 0
                  AND (c.committed IS NULL OR c.committed < p.last_offset
                       OR (c.worker_id IS NOT NULL AND c.lease_expires_at > now()))""",
            queues, groups)
        return int(behind) == 0
    finally:
        await conn.close()


def _dead_message(row: asyncpg.Record) -> tuple[object, bytes]:
    """A dead letter's message id and payload: from its own columns (rows written before
    version 23), or from the preserved copy of its segment (frame at offset - base)."""
    if row["segment_base"] is None:
        return row["message_id"], bytes(row["payload"])
    frame = segments.unpack(row["segment_blob"])[row["msg_offset"] - row["segment_base"]]
    return frame.message_id, frame.payload
