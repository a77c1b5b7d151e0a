"""How acks reach queen.ack (core/storage/reads.py, core/storage/joined.py): their text
columns go as one text each (`ack_joined`), or as arrays when a value holds the separator;
both give the same answers.
Run against the statement itself, with values no wire route would let through."""

from __future__ import annotations

import asyncpg
import httpx

from core.storage import reads
from core.storage.database import Database
from core.storage.joined import joined as joined_text
from tests.support import pop_json, push_items

UNRESOLVABLE = "unresolvable: transaction not in the ack window"


async def _ack(core_db: Database, items: reads.AckInputs) -> list[reads.AckRow]:
    async with core_db.session() as conn:
        return await reads.ack(conn, route=None, items=items, scan_missing=True)


def test_a_column_is_joined_unless_a_value_holds_a_separator() -> None:
    assert joined_text(["a", "", "b"]) == "\x1fa\x1f\x1fb"
    assert joined_text([""]) == "\x1f"  # one empty value stays one value
    assert joined_text(["L", None]) == "\x1fL\x1f\x1e"
    assert joined_text(["a\x1fb"]) is None
    assert joined_text(["\x1e"]) is None  # would read as null


async def test_acks_answer_alike_joined_or_as_arrays(http: httpx.AsyncClient, db: asyncpg.Connection,
                                                     core_db: Database, queue_name: str) -> None:
    await push_items(http, queue_name, ["a", "b", "c"])
    popped = await pop_json(http, queue_name, batch=3)
    assert popped is not None
    messages = popped["messages"]
    pid = int(messages[0]["partitionId"])
    lease = messages[0]["leaseId"]
    # An unknown id with a separator in it: the arrays carry it; the others as usual.
    txids = ["never\x1fpushed", "", messages[0]["transactionId"]]
    items = reads.AckInputs(["__QUEUE_MODE__"] * 3, [pid] * 3, txids, ["completed"] * 3,
                            [lease, None, lease], None, [""] * 3)
    assert joined_text(txids) is None
    rows = [r for r in await _ack(core_db, items) if r.outcome != "wake"]
    assert [(r.idx, r.outcome) for r in sorted(rows, key=lambda r: r.idx or 0)] == [
        (1, "refused"), (2, "refused"), (3, "ok")]
    assert all(r.error and r.error.startswith(UNRESOLVABLE) for r in rows if r.idx != 3)
    # The same kind of call joined: the second message, and an empty id alone.
    joined = reads.AckInputs(["__QUEUE_MODE__"] * 2, [pid] * 2,
                             [messages[1]["transactionId"], ""], ["completed"] * 2, None, None,
                             [""] * 2)
    assert joined_text(joined.transaction_ids) is not None
    rows = [r for r in await _ack(core_db, joined) if r.outcome != "wake"]
    assert sorted((r.idx, r.outcome) for r in rows) == [(1, "ok"), (2, "refused")]
    committed = await db.fetchval(
        "SELECT committed FROM queen.log_consumers WHERE partition_id = $1", pid)
    assert committed == 1  # offsets 0 and 1 committed
