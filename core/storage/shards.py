"""Which shard of the distributed log each partition lives in, known in the process.

On Citus every table of a partition's rows is distributed on the partition's id, colocated
(schema/functions/90_distribution.sql): Citus hashes the id with PostgreSQL's hash of bigint and
the shard whose hash range holds the result holds all of that partition's rows. The broker
computes the same hash here, from the shards' ranges read once from the catalog, so it can
group a flush's partitions, a pop's candidates and an ack batch's items by shard without
asking, and send one call per shard. Each call carries a route, a number in its shard's
range (the smallest non-negative one), as its first argument: Citus runs the call on the
node of that shard (a delegated function), where every statement in it then reads and
writes that node's rows only.

A pop's leaseId names the shard its partitions are in (12 bits of the UUIDv7's random
part), so that an extension, which names only the leaseId, goes to that shard too
(schema/functions/35_leases.sql).

The map also knows the group (Citus's name for a node) holding each shard, so a routed call
is sent straight to that node (core/storage/placement.py): a call that reaches another node
is forwarded by Citus to the shard's, at that node's cost.

On one PostgreSQL there is one "shard": every partition is in shard 0 and no call carries a
route. A map that went stale only costs speed: a call sent to a node that no longer holds
its shard (moved by the rebalancer) is forwarded, one that reaches another shard's rows
(the ranges changed: a shard split) runs with a two-phase commit. `read` and `update`
take the catalog's current state (core/storage/placement.py does, periodically).
"""

from __future__ import annotations

import bisect
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from core.ids import LeaseId, uuid7
from core.storage import citus
from core.storage.statements import Conn

_M32 = 0xFFFF_FFFF
_LEASE_SHARD_BITS = 12  # the UUIDv7's rand_a
_LEASE_SHARD_SHIFT = 64

T = TypeVar("T")


def _rot(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & _M32


def _mix(x: int, y: int, k: int) -> int:
    """One line of lookup3's `final`: `x ^= y; x -= rot(y, k);`."""
    return ((x ^ y) - _rot(y, k)) & _M32


def hash_int8(value: int) -> int:
    """PostgreSQL's `hashint8` (src/backend/access/hash/hashfunc.c), as Citus reads it: a
    signed 32-bit integer."""
    half = (value >> 32) & _M32
    low = (value & _M32) ^ (half if value >= 0 else ~half & _M32)
    # hash_bytes_uint32 (src/common/hashfn.c): Bob Jenkins' lookup3 `final` mix
    a = b = c = (0x9E3779B9 + 4 + 3923095) & _M32
    a = (a + low) & _M32
    c = _mix(c, b, 14)
    a = _mix(a, c, 11)
    b = _mix(b, a, 25)
    c = _mix(c, b, 16)
    a = _mix(a, c, 4)
    b = _mix(b, a, 14)
    c = _mix(c, b, 24)
    return c - (1 << 32) if c >= 1 << 31 else c


@dataclass
class ShardMap:
    """The shards' hash ranges (their lower bounds, ascending) and one route per shard.
    Empty: one PostgreSQL, a single shard and no routes."""

    lows: list[int] = field(default_factory=list)
    routes: list[int] = field(default_factory=list)
    # per route, the group (node) holding its shard; absent: not known (any node serves)
    node_groups: dict[int, int] = field(default_factory=dict)

    @classmethod
    def from_ranges(cls, ranges: Sequence[tuple[int, int]],
                    node_groups: Sequence[int | None] = ()) -> ShardMap:
        """The map of shards with these (low, high) hash ranges, held by `node_groups`
        (one per range, in the same order; none: not known)."""
        held = dict(zip((low for low, _ in ranges), node_groups))
        lows = sorted(low for low, _ in ranges)
        shard_map = cls(lows, [])
        found: dict[int, int] = {}
        candidate = 0
        while len(found) < len(lows) and candidate < 10_000_000:
            found.setdefault(shard_map.shard_of(candidate), candidate)
            candidate += 1
        shard_map.routes = [found[i] for i in range(len(lows))]
        shard_map.node_groups = {route: group for route, low in zip(shard_map.routes, lows)
                                 if (group := held.get(low)) is not None}
        return shard_map

    @classmethod
    async def read(cls, conn: Conn) -> ShardMap:
        """The map of the database behind `conn` (an empty one unless the log is
        distributed)."""
        if await citus.version(conn) is None:
            return cls()
        ranges = await citus.shard_ranges(conn)
        return cls.from_ranges([(r.low, r.high) for r in ranges],
                               [r.node_group for r in ranges])

    def update(self, other: ShardMap) -> None:
        """Take `other`'s ranges and placements (the map is shared by the parts of a
        process)."""
        self.lows, self.routes, self.node_groups = other.lows, other.routes, other.node_groups

    def node_group_of(self, route: int) -> int | None:
        """The group (node) holding the shard of `route`, if known."""
        return self.node_groups.get(route)

    @property
    def distributed(self) -> bool:
        return bool(self.lows)

    @property
    def count(self) -> int:
        return max(len(self.lows), 1)

    def shard_of(self, partition_id: int) -> int:
        """The shard index of a partition (0 when not distributed)."""
        if not self.lows:
            return 0
        return max(bisect.bisect_right(self.lows, hash_int8(partition_id)) - 1, 0)

    def route(self, shard: int) -> int | None:
        """The route of a shard: None when not distributed."""
        return self.routes[shard] if self.routes else None

    def route_of(self, partition_id: int) -> int | None:
        return self.route(self.shard_of(partition_id)) if self.routes else None

    def by_shard(self, items: Iterable[T], partition_of: Callable[[T], int]) -> dict[int, list[T]]:
        """Items grouped by their partition's shard, each group in the items' order, the
        groups in the order their first items come."""
        groups: dict[int, list[T]] = {}
        for item in items:
            groups.setdefault(self.shard_of(partition_of(item)), []).append(item)
        return groups

    def lease_id(self, shard: int) -> LeaseId:
        """A new UUIDv7 lease id whose rand_a names `shard` (any shard when it cannot)."""
        value = uuid7().int
        if self.lows and shard < 1 << _LEASE_SHARD_BITS:
            mask = ((1 << _LEASE_SHARD_BITS) - 1) << _LEASE_SHARD_SHIFT
            value = (value & ~mask) | shard << _LEASE_SHARD_SHIFT
        return LeaseId(str(uuid.UUID(int=value)))

    def route_of_lease(self, lease_id: str) -> int | None:
        """The route of the shard a lease id names; None when not distributed or the text
        is no UUID. (A lease id minted elsewhere names some shard too: its extension then
        finds nothing there and the caller searches every shard.)"""
        if not self.lows:
            return None
        try:
            value = uuid.UUID(lease_id).int
        except ValueError:
            return None
        shard = value >> _LEASE_SHARD_SHIFT & ((1 << _LEASE_SHARD_BITS) - 1)
        return self.routes[shard] if shard < len(self.routes) else None
