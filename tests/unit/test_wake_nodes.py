"""Which node carries a queue's wake-up notifications (core/engine/wake_nodes.py)."""

from __future__ import annotations

import asyncio
import time

import pytest

from core.engine import wake_link, wake_nodes
from core.engine.listener import WakeupHub
from core.engine.wake_link import NodeUnreachable, WakeLink
from core.engine.wake_nodes import WakeNodes


def _link(dsn: str) -> WakeLink:
    return WakeLink(dsn, {}, {}, on_connected=lambda: None)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _nodes(listed: dict[int, str], clock: Clock | None = None) -> WakeNodes:
    async def source() -> dict[int, str]:
        return dict(listed)
    return WakeNodes(_link("home"), _link, source, clock=clock or Clock())


async def test_one_postgresql_has_one_node() -> None:
    nodes = WakeNodes(_link("home"), _link)
    await nodes.read()
    assert {nodes.target(q).dsn for q in range(10)} == {"home"}
    assert [link.dsn for link in nodes.links] == ["home"]


async def test_the_workers_listed_at_start_share_the_queues_at_once() -> None:
    nodes = _nodes({1: "w1", 2: "w2"})
    await nodes.read()
    assert {nodes.target(q).dsn for q in range(10)} == {"w1", "w2"}
    assert nodes.target(7) is nodes.target(7)  # a queue stays on its node
    assert [link.dsn for link in nodes.links] == ["home", "w1", "w2"]


async def test_a_worker_found_later_is_listened_to_at_once_and_told_only_after_settling(
        ) -> None:
    listed = {1: "w1"}
    clock = Clock()
    nodes = _nodes(listed, clock)
    await nodes.read()
    listed[2] = "w2"
    await nodes.read()
    assert nodes.changed.is_set()  # the hub starts listening there now
    assert "w2" in [link.dsn for link in nodes.links]
    assert {nodes.target(q).dsn for q in range(10)} == {"w1"}
    clock.now += wake_nodes.SETTLE_SECONDS - 1
    assert {nodes.target(q).dsn for q in range(10)} == {"w1"}
    clock.now += 2
    assert {nodes.target(q).dsn for q in range(10)} == {"w1", "w2"}


async def test_with_no_settled_worker_the_coordinator_carries_them() -> None:
    listed: dict[int, str] = {}
    nodes = _nodes(listed)
    await nodes.read()
    listed[3] = "w3"
    await nodes.read()
    assert nodes.target(5).dsn == "home"


async def test_a_worker_gone_from_the_list_is_dropped_and_a_failed_read_changes_nothing(
        ) -> None:
    listed = {1: "w1", 2: "w2"}
    failing = False

    async def source() -> dict[int, str]:
        if failing:
            raise OSError("coordinator away")
        return dict(listed)
    nodes = WakeNodes(_link("home"), _link, source)
    await nodes.read()
    del listed[2]
    await nodes.read()
    assert {nodes.target(q).dsn for q in range(10)} == {"w1"}
    failing = True
    await nodes.read()
    assert [link.dsn for link in nodes.links] == ["home", "w1"]


async def test_a_stop_does_not_wait_for_a_node_that_does_not_answer() -> None:
    """A worker that accepts connections and never answers (frozen, partitioned): the hub's
    LISTEN sessions there are still connecting when the process stops, and the stop does
    not wait for their connect timeout (60 s here)."""
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(3600)
    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    dsn = f"postgresql://queen@127.0.0.1:{port}/queen"

    async def source() -> dict[int, str]:
        return {1: dsn}
    try:
        hub = WakeupHub(dsn, {"timeout": 60}, nodes=source)
        listening = asyncio.create_task(hub.listen_forever())
        await asyncio.sleep(0.5)
        assert not hub.listening
        hub.close()
        await asyncio.wait_for(listening, 5)
    finally:
        server.close()


async def test_a_worker_whose_send_failed_hands_its_queues_to_the_others_for_a_while(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A send that fails (here: nothing listens on the worker's port) moves that worker's
    queues to the other nodes, the others' queues staying where they were; it takes them back
    once AVOID_SECONDS have passed (a node this process does not listen on) or, for one it
    listens on, once its LISTEN session has also answered since."""
    refused = "postgresql://queen@127.0.0.1:1/queen"
    nodes = _nodes({1: "w1", 2: refused})
    await nodes.read()
    before = {q: nodes.target(q).dsn for q in range(10)}
    assert set(before.values()) == {"w1", refused}
    broken = nodes.target(next(q for q, dsn in before.items() if dsn == refused))
    with pytest.raises(NodeUnreachable):
        await broken.send(["c"], ["p"])
    assert {q: nodes.target(q).dsn for q in range(10)} == {
        q: "w1" if dsn == refused else dsn for q, dsn in before.items()}

    monkeypatch.setattr(wake_link, "AVOID_SECONDS", 0.0)
    assert {q: nodes.target(q).dsn for q in range(10)} == before  # tried again

    listening = WakeLink(refused, {}, {"c": lambda payload: None}, on_connected=lambda: None)
    with pytest.raises(NodeUnreachable):
        await listening.send(["c"], ["p"])
    assert not listening.sendable()  # not heard alive since
    listening._alive_at = time.monotonic()
    assert listening.sendable()


async def test_with_every_node_failing_a_queue_stays_on_its_own() -> None:
    refused = "postgresql://queen@127.0.0.1:1/queen"
    nodes = WakeNodes(_link(refused), _link)
    await nodes.read()
    with pytest.raises(NodeUnreachable):
        await nodes.home.send(["c"], ["p"])
    assert nodes.target(3) is nodes.home
