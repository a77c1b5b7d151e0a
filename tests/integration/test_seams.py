"""The two seams the binary formats (wire-protocol §7) are built on.

- A pop's result carries the stored segments it read and the delivered span of each claim,
  so a framed answer (§7.4) can send stored blobs as they are.
- A push accepts the frames of a blob a client built and compressed (§7.2, framed variant):
  stored as it came, unless something forces a rebuild (a duplicate among its frames, a
  producerSub to stamp).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from core import segments
from core.engine.pop import PopRequest
from core.engine.push import PushItem
from core.engine.writes import NewMessage, PackedFrames
from core.service import Broker
from core.settings import Settings


@pytest.fixture
async def broker(database_url: str) -> AsyncIterator[Broker]:
    async with Broker.open(Settings(db_pool_size=2), dsn=database_url,
                           migrate=False) as opened:
        yield opened


def _client_blob(txids: list[str]) -> tuple[bytes, list[segments.Frame]]:
    """What a client's framed push carries: storage frames, zstd level 1, content size."""
    frames = [segments.Frame(uuid.uuid4(), t, b'{"t":"%s"}' % t.encode()) for t in txids]
    return segments.pack(frames), frames


def _packed_items(queue: str, blob: bytes, frames: list[segments.Frame],
                  producer_sub: str | None = None) -> list[PushItem]:
    packed = PackedFrames(blob, len(frames))
    return [PushItem(queue, "Default", NewMessage(f.message_id, f.transaction_id, f.payload,
                                                  producer_sub=producer_sub, packed=packed))
            for f in frames]


async def _stored_blobs(broker: Broker, queue: str) -> list[bytes]:
    result = await broker.pop(PopRequest(group="reader", batch=1000, queue=queue,
                                         auto_ack=True))
    return [s.blob for c in result.claims for s in c.segments]


async def test_a_pop_result_carries_the_stored_segments_and_each_delivered_span(
        broker: Broker, queue_name: str) -> None:
    blob, frames = _client_blob(["a", "b", "c"])
    await broker.push(_packed_items(queue_name, blob, frames))
    result = await broker.pop(PopRequest(group="g", batch=2, queue=queue_name))
    [claim] = result.claims
    assert (claim.start, claim.end, claim.count, claim.retry_count) == (0, 1, 2, 0)
    [segment] = claim.segments
    assert segment.base_offset == 0 and segment.blob == blob  # all three frames, as stored
    assert [f.transaction_id for f in segments.unpack(segment.blob)] == ["a", "b", "c"]
    assert [m.frame.transaction_id for m in result.messages()] == ["a", "b"]  # the span


async def test_a_client_built_blob_is_stored_as_it_came(
        broker: Broker, queue_name: str) -> None:
    blob, frames = _client_blob(["x1", "x2", "x3", "x4"])
    outcomes = await broker.push(_packed_items(queue_name, blob, frames))
    assert [(o.verdict.status, o.verdict.message_id, o.verdict.offset)
            for o in outcomes if o.verdict] == [
        ("queued", f.message_id, n) for n, f in enumerate(frames)]
    assert await _stored_blobs(broker, queue_name) == [blob]


async def test_a_duplicate_among_the_frames_forces_a_rebuild_without_it(
        broker: Broker, queue_name: str) -> None:
    first = await broker.push(_packed_items(queue_name, *_client_blob(["d1"])))
    assert first[0].verdict is not None
    blob, frames = _client_blob(["n1", "d1", "n2"])
    outcomes = await broker.push(_packed_items(queue_name, blob, frames))
    assert [o.verdict.status for o in outcomes if o.verdict] == ["queued", "duplicate",
                                                                   "queued"]
    assert outcomes[1].verdict and outcomes[1].verdict.message_id == first[0].verdict.message_id
    stored = await _stored_blobs(broker, queue_name)
    assert blob not in stored
    assert [f.transaction_id for b in stored for f in segments.unpack(b)] == ["d1", "n1", "n2"]


async def test_a_producer_sub_to_stamp_forces_a_rebuild_that_carries_it(
        broker: Broker, queue_name: str) -> None:
    blob, frames = _client_blob(["s1", "s2"])
    await broker.push(_packed_items(queue_name, blob, frames, producer_sub="alice"))
    [stored] = await _stored_blobs(broker, queue_name)
    assert stored != blob
    assert [(f.transaction_id, f.producer_sub) for f in segments.unpack(stored)] == [
        ("s1", "alice"), ("s2", "alice")]


async def test_a_producer_sub_flows_to_the_pop_the_dead_letter_and_the_message_detail(
        broker: Broker, queue_name: str) -> None:
    """What the edge stamps from a token (wire-protocol §9) is stored in the frame and read
    back everywhere a message is shown."""
    from core.admin.dlq import DlqFilter
    from core.engine.ack import AckItem, GroupAck
    from core.ids import PartitionId

    [pushed] = await broker.push([PushItem(queue_name, "Default", NewMessage(
        uuid.uuid4(), "signed-1", b'{"x":1}', producer_sub="svc-billing"))])
    assert pushed.verdict is not None
    popped = await broker.pop(PopRequest(group="g", batch=1, queue=queue_name))
    [message] = popped.messages()
    assert message.frame.producer_sub == "svc-billing"
    result = await broker.ack_batch([GroupAck("g", AckItem(
        "signed-1", str(message.partition_id), "dlq", popped.lease_id, "poison"))])
    assert result.outcomes[0].dlq
    [letter] = (await broker.dlq.list_rows(DlqFilter(queue=queue_name), limit=5, offset=0)).rows
    assert (letter.producer_sub, letter.payload) == ("svc-billing", b'{"x":1}')
    view = await broker.messages.get(PartitionId(message.partition_id), "signed-1")
    assert view is not None and view.producer_sub == "svc-billing"
    assert view.status == "dead_letter"
