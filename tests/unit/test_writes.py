"""Pure helpers of the write path."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from core import segments
from core.engine.directory import PartitionName
from core.engine.writes import NewMessage, Verdict, append, first_occurrences


def _items(*txids: str) -> list[NewMessage]:
    return [NewMessage(uuid.uuid4(), t, b"null") for t in txids]


def test_first_occurrences_points_every_repeat_at_the_first_item_with_its_id() -> None:
    assert first_occurrences(_items("a", "b", "a", "c", "b", "a")) == [0, 1, 0, 3, 1, 0]


def test_first_occurrences_of_unique_ids_is_the_identity() -> None:
    assert first_occurrences(_items("x", "y", "z")) == [0, 1, 2]


def test_first_occurrences_compares_ids_exactly() -> None:
    assert first_occurrences(_items("A", "a", "a ", "A")) == [0, 1, 2, 0]


def test_first_occurrences_of_nothing_is_empty() -> None:
    assert first_occurrences([]) == []


class FakeAppendConn:
    """Plays `queen.append_partitions` (schema/functions/20_append.sql; plain queues only),
    with its transactionIds as an array or joined, and `segments_at` in memory, for one partition (queue id 1, partition id 1)."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.first_stored: dict[str, int] = {}  # txid -> its lowest offset
        self.log: list[tuple[int, str, bytes]] = []  # (offset, txid, payload)
        self.segments: list[tuple[int, datetime, bytes]] = []  # (base offset, stamp, blob)
        self.statements: list[list[str]] = []
        self.forms: list[str] = []  # how each append sent its transactionIds

    def add_log_listener(self, callback: Any) -> None:  # no server, no warnings
        pass

    def remove_log_listener(self, callback: Any) -> None:
        pass

    async def fetch(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        if "queen.append_partitions(" in sql:
            return [self._append(*args)]
        assert "log_segments" in sql  # segments_at: (offsets, partition id)
        offsets, _ = args
        return [s for s in self.segments
                if any(s[0] <= o < s[0] + len(segments.unpack(s[2])) for o in offsets)]

    def _append(self, route: int | None, tenants: list[str], ids: list[int],
                queues: list[str], partitions: list[str], namespaces: list[str],
                tasks: list[str], options: str, per_partition: list[int], frames: list[int],
                blobs: list[bytes], txids: list[str] | str, repeats: list[bool],
                encrypted: list[bool]) -> tuple[Any, ...]:
        self.forms.append("joined" if isinstance(txids, str) else "array")
        if isinstance(txids, str):  # append_partitions_joined: each id after U+001F
            txids = txids.split("\x1f")[1:]
        assert route is None and ids in ([0], [1]) and (queues, partitions) == (["q"], ["p"])
        assert per_partition == [len(blobs)] and encrypted == [False]
        assert tenants == [""]  # the default tenant
        self.statements.append(list(txids))
        stored = [f for blob in blobs for f in segments.unpack(blob)]
        assert [f.transaction_id for f in stored] == txids
        assert frames == [len(segments.unpack(b)) for b in blobs]
        if self.window > 0:
            dups = []
            for pos, t in enumerate(txids, 1):
                if t in self.first_stored:
                    dups.append((pos, self.first_stored[t]))
                elif t in txids[:pos - 1]:
                    assert repeats[0]
                    dups.append((pos, None))
            if dups:
                return (1, 1, None, None, [p for p, _ in dups], [o for _, o in dups], False)
        base = len(self.log)
        stamp = datetime.now(UTC)
        for blob in blobs:
            self.segments.append((len(self.log), stamp, blob))
            for frame in segments.unpack(blob):
                self.first_stored.setdefault(frame.transaction_id, len(self.log))
                self.log.append((len(self.log), frame.transaction_id, frame.payload))
        return (1, 1, base, stamp, None, None, False)


def _numbered(*txids: str) -> list[NewMessage]:
    return [NewMessage(uuid.uuid4(), t, b'"%s%d"' % (t.encode(), n)) for n, t in enumerate(txids)]


async def _append(conn: FakeAppendConn, items: list[NewMessage]) -> list[Verdict]:
    [appended] = await append(conn, [(PartitionName("q", "p"), items)])  # type: ignore[arg-type]
    return appended.verdicts


async def test_unique_ids_are_one_statement_with_offsets_in_item_order() -> None:
    conn = FakeAppendConn(window=3600)
    items = _numbered("a", "b", "c")
    verdicts = await _append(conn, items)
    assert [(v.status, v.offset, v.message_id) for v in verdicts] == [
        ("queued", n, m.message_id) for n, m in enumerate(items)]
    assert conn.statements == [["a", "b", "c"]]


async def test_with_dedup_on_repeats_are_duplicates_of_the_first_and_written_once() -> None:
    conn = FakeAppendConn(window=3600)
    items = _numbered("a", "a", "b", "b", "c", "c", "a", "d", "c")
    verdicts = await _append(conn, items)
    assert [v.status for v in verdicts] == [
        "queued", "duplicate", "queued", "duplicate", "queued", "duplicate", "duplicate",
        "queued", "duplicate"]
    for v, item in zip(verdicts, items):
        original = next(i for i in items if i.transaction_id == item.transaction_id)
        assert v.message_id == original.message_id
    assert [(o, t, p) for o, t, p in conn.log] == [
        (0, "a", b'"a0"'), (1, "b", b'"b2"'), (2, "c", b'"c4"'), (3, "d", b'"d7"')]
    assert len(conn.statements) <= 3


async def test_with_dedup_off_repeats_are_new_messages_in_item_order() -> None:
    conn = FakeAppendConn(window=0)
    items = _numbered("a", "a", "b", "a", "c", "b")
    verdicts = await _append(conn, items)
    assert [(v.status, v.offset) for v in verdicts] == [("queued", n) for n in range(6)]
    assert [t for _, t, _ in conn.log] == ["a", "a", "b", "a", "c", "b"]
    assert len(conn.statements) <= 3


async def test_a_thousand_repeats_cost_at_most_three_statements() -> None:
    for window, written in ((3600, 1), (0, 1000)):
        conn = FakeAppendConn(window=window)
        verdicts = await _append(conn, _numbered(*["same"] * 1000))
        assert len(conn.log) == written
        assert len(conn.statements) <= 3
        assert sum(v.status == "queued" for v in verdicts) == written


async def test_ids_already_stored_are_duplicates_and_the_rest_is_rewritten_without_them() -> None:
    conn = FakeAppendConn(window=3600)
    old = await _append(conn, _numbered("x"))
    verdicts = await _append(conn, _numbered("n1", "x", "n2", "x"))
    assert [v.status for v in verdicts] == ["queued", "duplicate", "queued", "duplicate"]
    assert verdicts[1].message_id == verdicts[3].message_id == old[0].message_id
    assert [(o, t) for o, t, _ in conn.log] == [(0, "x"), (1, "n1"), (2, "n2")]


@settings(max_examples=300, deadline=None)
@given(requests=st.lists(st.lists(st.sampled_from("abcd"), min_size=1, max_size=6),
                         min_size=1, max_size=6),
       window=st.sampled_from([0, 3600]),
       stored=st.lists(st.sampled_from("abcd"), max_size=3))
def test_merging_requests_into_one_flush_answers_what_they_get_one_after_another(
        requests: list[list[str]], window: int, stored: list[str]) -> None:
    """The coalescer's promise: a flush of several requests is invisible to each of them."""
    batches = [_numbered(*txids) for txids in requests]
    history = _numbered(*stored)

    async def run(merge: bool) -> tuple[list[tuple[str, uuid.UUID]], list[tuple[str, bytes]]]:
        conn = FakeAppendConn(window)
        if history:
            await _append(conn, history)
        if merge:
            verdicts = await _append(conn, [m for batch in batches for m in batch])
        else:
            verdicts = [v for batch in batches for v in await _append(conn, batch)]
        return ([(v.status, v.message_id) for v in verdicts],
                [(t, p) for _, t, p in conn.log])

    one_by_one = asyncio.run(run(merge=False))
    merged = asyncio.run(run(merge=True))
    assert merged == one_by_one
    verdicts, log = merged
    if window == 0:
        assert all(status == "queued" for status, _ in verdicts)
    else:  # every id is stored once, by its first write; repeats carry that message's id
        txids = [t for t, _ in log]
        assert len(txids) == len(set(txids))


def test_a_client_blob_is_its_own_segment_beside_the_messages_merged_with_it() -> None:
    from core.engine.writes import PackedFrames, segments_of

    frames = [segments.Frame(uuid.uuid4(), f"c{i}", b"1") for i in range(3)]
    blob = segments.pack(frames)
    packed = PackedFrames(blob, 3)
    client = [NewMessage(f.message_id, f.transaction_id, f.payload, packed=packed)
              for f in frames]
    plain = _items("p1", "p2")
    out = segments_of([plain[0], *client, plain[1]])
    assert [s.transaction_ids for s in out] == [["p1"], ["c0", "c1", "c2"], ["p2"]]
    assert out[1].blob == blob  # as it came
    assert [f.transaction_id for f in segments.unpack(out[0].blob)] == ["p1"]
    # Part of a blob (a duplicate taken out) is packed again, with its neighbours.
    out = segments_of([plain[0], client[0], client[2]])
    assert [s.transaction_ids for s in out] == [["p1", "c0", "c2"]]


async def test_transaction_ids_go_as_one_text_unless_one_holds_the_separator() -> None:
    conn = FakeAppendConn(window=3600)
    verdicts = await _append(conn, _numbered("a", "", "b"))
    assert [v.status for v in verdicts] == ["queued"] * 3
    # An id holding U+001F or U+001E would not survive the split: the array goes instead,
    # and deduplication sees the ids as they are.
    verdicts = await _append(conn, _numbered("x\x1fy", "a", "z\x1e"))
    assert [v.status for v in verdicts] == ["queued", "duplicate", "queued"]
    assert conn.forms[0] == "joined" and conn.forms[1:] == ["array"] * (len(conn.forms) - 1)
    assert conn.statements[0] == ["a", "", "b"]
    assert conn.statements[-1] == ["x\x1fy", "z\x1e"]


def test_a_large_flush_is_stored_as_segments_of_bounded_size_in_order() -> None:
    """A flush merges whatever pushes waited for the partition (up to 5000 messages), so large
    messages pushed together made one segment of any size: each pop of the partition, even of
    one message, then read and decompressed all of it (and PostgreSQL refuses a value over
    1 GB). Packed messages go into segments of about SEGMENT_TARGET_BYTES each; a message
    larger than that stands alone."""
    from core.engine.writes import segments_of

    big = segments.SEGMENT_TARGET_BYTES // 3 + 1
    sizes = [big, big, big, 10, big, 3 * segments.SEGMENT_TARGET_BYTES, 10, 10]
    messages = [NewMessage(uuid.uuid4(), f"t{i}", b'"' + b"x" * (n - 2) + b'"')
                for i, n in enumerate(sizes)]
    built = segments_of(messages)
    assert [t for s in built for t in s.transaction_ids] == [m.transaction_id for m in messages]
    stored = [segments.unpack(s.blob) for s in built]
    assert [f.payload for frames in stored for f in frames] == [m.payload for m in messages]
    for frames in stored:  # each within the target, or a single message
        assert (len(frames) == 1
                or sum(len(f.payload) for f in frames) <= segments.SEGMENT_TARGET_BYTES)
    assert [len(frames) for frames in stored] == [2, 3, 1, 2]  # [B, B] [B, 10, B] [3T] [10, 10]
