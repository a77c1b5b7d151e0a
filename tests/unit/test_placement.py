"""Which pool a routed call takes on Citus (core/storage/placement.py): the pool of the node
that says it is the group holding the route's shard; the spread pool (None here) for a call
without a route, a shard on a node not named, or a node that did not answer."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from core.storage.placement import NodePools
from core.storage.shards import ShardMap

RANGES = [(-(2**31), -1), (0, 2**31 - 1)]  # two shards


class FakeConn:
    def __init__(self, group: int) -> None:
        self.group = group

    async def fetchval(self, *args: Any, **kwargs: Any) -> int:
        return self.group  # the only statement asked: the node's group


class FakePool:
    def __init__(self, dsn: str, group: int) -> None:
        self.dsn, self.group = dsn, group

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[FakeConn]:
        yield FakeConn(self.group)

    def terminate(self) -> None:
        pass


def nodes_answering(groups: dict[str, int], shards: ShardMap) -> NodePools:
    async def open_pool(dsn: str) -> Any:
        if dsn not in groups:
            raise OSError("connection refused")
        return FakePool(dsn, groups[dsn])

    return NodePools(("w1", "w2", "w3"), shards, open_pool)


async def test_a_route_takes_the_pool_of_the_node_holding_its_shard() -> None:
    shards = ShardMap.from_ranges(RANGES, [12, 11])  # shard 0 on group 12, shard 1 on 11
    nodes = nodes_answering({"w1": 11, "w2": 12, "w3": 13}, shards)
    await nodes.find_nodes()
    first, second = shards.routes
    assert nodes.pool_for(first).dsn == "w2"  # type: ignore[union-attr]
    assert nodes.pool_for(second).dsn == "w1"  # type: ignore[union-attr]
    assert nodes.pool_for(None) is None


async def test_a_moved_shard_is_followed_once_the_map_is_read_again() -> None:
    shards = ShardMap.from_ranges(RANGES, [12, 11])
    nodes = nodes_answering({"w1": 11, "w2": 12, "w3": 13}, shards)
    await nodes.find_nodes()
    shards.update(ShardMap.from_ranges(RANGES, [13, 11]))  # shard 0 moved to group 13
    assert nodes.pool_for(shards.routes[0]).dsn == "w3"  # type: ignore[union-attr]


async def test_what_no_named_node_holds_goes_anywhere_till_its_node_answers() -> None:
    shards = ShardMap.from_ranges(RANGES, [12, None])  # shard 1 with no active placement
    groups = {"w1": 11}  # w2 (group 12) is down
    nodes = nodes_answering(groups, shards)
    await nodes.find_nodes()
    assert nodes.pool_for(shards.routes[0]) is None
    assert nodes.pool_for(shards.routes[1]) is None
    groups["w2"] = 12  # back: found at the next refresh
    await nodes.find_nodes()
    assert nodes.pool_for(shards.routes[0]).dsn == "w2"  # type: ignore[union-attr]
