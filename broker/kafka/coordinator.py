"""The classic group protocol's coordinator: membership and rebalances, in memory.

A group goes Empty -> PreparingRebalance (members (re)join) -> CompletingRebalance (the
leader got every member's subscription and computes the assignment, as in Kafka the client
does) -> Stable (SyncGroup handed each member its assignment) -> PreparingRebalance again
when a member joins, leaves or stops heartbeating. Only membership lives here; what a group
has consumed is its cursors in PostgreSQL (core/kafka), which survive this process.

A rebalance completes once every member known before it has joined again, or when the
longest rebalance timeout of the members passes (those that did not rejoin are dropped). A
group's first rebalance waits `initial_delay` for more members, as Kafka's
group.initial.rebalance.delay.ms does, so members starting together share one generation.

Static membership (KIP-345): a member that names a group instance id keeps its place across
a restart. Joining again under that id with no member id replaces the old member (which is
fenced: its next request answers FENCED_INSTANCE_ID) and, in a stable group whose protocol
stays the same, takes over its assignment without a rebalance, so one consumer's restart
does not stop the others. A static member leaves only by its session running out (or an
explicit LeaveGroup naming it), not by closing its connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from dataclasses import dataclass, field

from broker.kafka import errors

EMPTY, PREPARING, COMPLETING, STABLE, DEAD = (
    "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")
_SESSION_CHECK_SECONDS = 0.5


@dataclass(eq=False)
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout: float  # seconds
    rebalance_timeout: float
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    instance_id: str | None = None  # its group instance id, when static
    assignment: bytes = b""
    last_seen: float = field(default_factory=time.monotonic)
    joining: asyncio.Future[JoinResult] | None = None
    syncing: asyncio.Future[tuple[int, bytes]] | None = None


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: int
    generation: int = -1
    protocol: str | None = None
    leader: str = ""
    member_id: str = ""
    # For the leader: every member's id, group instance id and metadata.
    members: tuple[tuple[str, str | None, bytes], ...] = ()


@dataclass(eq=False)
class Group:
    name: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)  # ids handed out, not joined yet
    instances: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    rebalance: asyncio.TimerHandle | None = None
    first: bool = True

    def described_protocol_type(self) -> str:
        return self.protocol_type or ""


class Coordinator:
    def __init__(self, *, initial_delay: float = 0.5) -> None:
        self.groups: dict[str, Group] = {}
        self._initial_delay = initial_delay
        self._ids = itertools.count(1)

    def group(self, name: str) -> Group:
        group = self.groups.get(name)
        if group is None:
            group = self.groups[name] = Group(name)
        return group

    # --- JoinGroup ---------------------------------------------------------------------

    async def join(self, name: str, *, member_id: str, client_id: str, client_host: str,
                   session_timeout: float, rebalance_timeout: float, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_id: bool,
                   instance_id: str | None = None) -> JoinResult:
        group = self.group(name)
        if not protocols or (group.members and protocol_type != group.protocol_type):
            return JoinResult(errors.INCONSISTENT_GROUP_PROTOCOL)
        if group.members and not self._common_protocol(group, protocols):
            return JoinResult(errors.INCONSISTENT_GROUP_PROTOCOL)
        if instance_id is not None and member_id != "":
            code = self._check_instance(group, member_id, instance_id)
            if code != errors.NONE:
                return JoinResult(code, member_id=member_id)
        if member_id == "":
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if instance_id is not None and instance_id in group.instances:
                return await self._replace_static(group, instance_id, member_id, client_id,
                                                  client_host, session_timeout,
                                                  rebalance_timeout, protocols)
            # KIP-394: the client joins again with this id (a static member needs not: its
            # instance id already says who it is).
            if require_known_id and instance_id is None:
                group.pending.add(member_id)
                return JoinResult(errors.MEMBER_ID_REQUIRED, member_id=member_id)
        elif member_id not in group.members and member_id not in group.pending:
            return JoinResult(errors.UNKNOWN_MEMBER_ID, member_id=member_id)
        group.pending.discard(member_id)
        member = group.members.get(member_id)
        if member is None:
            member = group.members[member_id] = Member(
                member_id, client_id, client_host, session_timeout, rebalance_timeout,
                protocol_type, protocols, instance_id)
            if instance_id is not None:
                group.instances[instance_id] = member_id
        else:
            member.protocols = protocols
            member.session_timeout, member.rebalance_timeout = session_timeout, rebalance_timeout
            if member.joining is not None and not member.joining.done():
                member.joining.set_result(JoinResult(errors.UNKNOWN_MEMBER_ID))
        member.last_seen = time.monotonic()
        group.protocol_type = protocol_type
        return await self._rebalance_with(group, member)

    async def _replace_static(self, group: Group, instance_id: str, member_id: str,
                              client_id: str, client_host: str, session_timeout: float,
                              rebalance_timeout: float,
                              protocols: list[tuple[str, bytes]]) -> JoinResult:
        """A static member joins again (e.g. restarted): it takes the old member's place
        under a new member id, and the old id is fenced. A stable or completing group whose
        protocol this member still offers with the same metadata goes on in its generation
        (no rebalance); otherwise the group rebalances with the member in it."""
        old = group.members.pop(group.instances[instance_id])
        if old.joining is not None and not old.joining.done():
            old.joining.set_result(JoinResult(errors.FENCED_INSTANCE_ID))
        if old.syncing is not None and not old.syncing.done():
            old.syncing.set_result((errors.FENCED_INSTANCE_ID, b""))
        member = group.members[member_id] = Member(
            member_id, client_id, client_host, session_timeout, rebalance_timeout,
            old.protocol_type, protocols, instance_id, assignment=old.assignment)
        group.instances[instance_id] = member_id
        if group.leader == old.member_id:
            group.leader = member_id
        same = (group.protocol is not None
                and dict(protocols).get(group.protocol) == dict(old.protocols).get(group.protocol))
        if group.state in (STABLE, COMPLETING) and same:
            leader = member_id == group.leader
            return JoinResult(errors.NONE, group.generation, group.protocol, group.leader or "",
                              member_id, self._everyone(group) if leader else ())
        return await self._rebalance_with(group, member)

    async def _rebalance_with(self, group: Group, member: Member) -> JoinResult:
        """The member waits in a rebalance (started now, unless one is under way) for the
        generation it ends with."""
        member.joining = asyncio.get_running_loop().create_future()
        self._prepare(group)
        self._maybe_complete_join(group)
        return await member.joining

    @staticmethod
    def _everyone(group: Group) -> tuple[tuple[str, str | None, bytes], ...]:
        assert group.protocol is not None
        return tuple((m.member_id, m.instance_id, dict(m.protocols)[group.protocol])
                     for m in group.members.values())

    @staticmethod
    def _check_instance(group: Group, member_id: str, instance_id: str) -> int:
        """A request naming a group instance id must come from the member that holds it:
        one that another member replaced is fenced."""
        holder = group.instances.get(instance_id)
        if holder is None:
            return errors.UNKNOWN_MEMBER_ID
        return errors.NONE if holder == member_id else errors.FENCED_INSTANCE_ID

    def _common_protocol(self, group: Group, protocols: list[tuple[str, bytes]]) -> bool:
        names = {p for p, _ in protocols}
        return all(names & {p for p, _ in m.protocols} for m in group.members.values())

    def _prepare(self, group: Group) -> None:
        """Start a rebalance (if none is under way)."""
        if group.state == PREPARING:
            return
        for member in group.members.values():  # a pending sync learns of the rebalance
            if member.syncing is not None and not member.syncing.done():
                member.syncing.set_result((errors.REBALANCE_IN_PROGRESS, b""))
        group.state = PREPARING
        delay = max((m.rebalance_timeout for m in group.members.values()), default=0.0)
        if group.first:
            delay = min(delay, self._initial_delay)
        loop = asyncio.get_running_loop()
        group.rebalance = loop.call_later(delay, self._rebalance_timed_out, group)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state != PREPARING or group.first:
            return
        if all(m.joining is not None and not m.joining.done()
               for m in group.members.values()):
            self._complete_join(group)

    def _rebalance_timed_out(self, group: Group) -> None:
        group.first = False
        for member_id, member in list(group.members.items()):
            if member.joining is None or member.joining.done():
                self._drop(group, member_id)  # did not rejoin in time
        self._complete_join(group)

    @staticmethod
    def _drop(group: Group, member_id: str) -> Member:
        """Take a member out of the group, with its instance id (a static member's)."""
        member = group.members.pop(member_id)
        if member.instance_id is not None:
            group.instances.pop(member.instance_id, None)
        return member

    def _complete_join(self, group: Group) -> None:
        if group.rebalance is not None:
            group.rebalance.cancel()
            group.rebalance = None
        group.first = False
        if not group.members:
            group.state, group.generation = EMPTY, group.generation + 1
            group.leader = group.protocol = None
            return
        group.generation += 1
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        leader = group.members[group.leader]
        group.protocol = next(p for p, _ in leader.protocols if all(
            p in {q for q, _ in m.protocols} for m in group.members.values()))
        group.state = COMPLETING
        everyone = self._everyone(group)
        for member in group.members.values():
            member.assignment = b""
            member.last_seen = time.monotonic()
            result = JoinResult(errors.NONE, group.generation, group.protocol, group.leader,
                                member.member_id,
                                everyone if member.member_id == group.leader else ())
            if member.joining is not None and not member.joining.done():
                member.joining.set_result(result)

    # --- SyncGroup, Heartbeat, LeaveGroup ------------------------------------------------

    def _check(self, group: Group | None, member_id: str, generation: int,
               instance_id: str | None = None) -> int:
        if group is not None and instance_id is not None:
            code = self._check_instance(group, member_id, instance_id)
            if code != errors.NONE:
                return code
        if group is None or member_id not in group.members:
            return errors.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return errors.ILLEGAL_GENERATION
        return errors.NONE

    async def sync(self, name: str, *, member_id: str, generation: int,
                   assignments: dict[str, bytes],
                   instance_id: str | None = None) -> tuple[int, bytes]:
        group = self.groups.get(name)
        code = self._check(group, member_id, generation, instance_id)
        if code != errors.NONE:
            return code, b""
        assert group is not None
        member = group.members[member_id]
        member.last_seen = time.monotonic()
        if group.state == PREPARING:
            return errors.REBALANCE_IN_PROGRESS, b""
        if group.state == STABLE:
            return errors.NONE, member.assignment
        member.syncing = asyncio.get_running_loop().create_future()
        if member_id == group.leader:
            for other in group.members.values():
                other.assignment = assignments.get(other.member_id, b"")
            group.state = STABLE
            for other in group.members.values():
                if other.syncing is not None and not other.syncing.done():
                    other.syncing.set_result((errors.NONE, other.assignment))
        return await member.syncing

    def heartbeat(self, name: str, *, member_id: str, generation: int,
                  instance_id: str | None = None) -> int:
        group = self.groups.get(name)
        code = self._check(group, member_id, generation, instance_id)
        if code != errors.NONE:
            return code
        assert group is not None
        group.members[member_id].last_seen = time.monotonic()
        return errors.REBALANCE_IN_PROGRESS if group.state == PREPARING else errors.NONE

    def leave(self, name: str, member_id: str, instance_id: str | None = None) -> int:
        """A member leaves; a static one may be named by its instance id alone (member id
        empty), as an operator's tool does."""
        group = self.groups.get(name)
        if group is not None and instance_id is not None:
            holder = group.instances.get(instance_id)
            if holder is None:
                return errors.UNKNOWN_MEMBER_ID
            if member_id not in ("", holder):
                return errors.FENCED_INSTANCE_ID
            member_id = holder
        if group is None or member_id not in group.members:
            return errors.UNKNOWN_MEMBER_ID
        self._remove(group, member_id)
        return errors.NONE

    def _remove(self, group: Group, member_id: str) -> None:
        member = self._drop(group, member_id)
        if member.joining is not None and not member.joining.done():
            member.joining.set_result(JoinResult(errors.UNKNOWN_MEMBER_ID))
        if member.syncing is not None and not member.syncing.done():
            member.syncing.set_result((errors.UNKNOWN_MEMBER_ID, b""))
        if group.leader == member_id:
            group.leader = None
        if not group.members and group.state != PREPARING:
            group.state, group.generation = EMPTY, group.generation + 1
            group.protocol = None
            return
        self._prepare(group)
        self._maybe_complete_join(group)

    def validate_commit(self, name: str, member_id: str, generation: int,
                        instance_id: str | None = None) -> int:
        """OffsetCommit's membership rule: a commit outside any generation (generation -1,
        no member: a consumer that assigns its own partitions) is taken while the group
        has no members; a member commits in its current generation."""
        group = self.groups.get(name)
        if generation < 0 and member_id == "":
            return errors.NONE if group is None or not group.members else \
                errors.UNKNOWN_MEMBER_ID
        code = self._check(group, member_id, generation, instance_id)
        if code == errors.NONE and group is not None and group.state == PREPARING:
            return errors.REBALANCE_IN_PROGRESS
        return code

    def reset(self) -> None:
        """This listener stopped coordinating: every member learns it at its next request
        (NOT_COORDINATOR), and those waiting now."""
        for group in self.groups.values():
            if group.rebalance is not None:
                group.rebalance.cancel()
            for member in group.members.values():
                if member.joining is not None and not member.joining.done():
                    member.joining.set_result(JoinResult(errors.NOT_COORDINATOR))
                if member.syncing is not None and not member.syncing.done():
                    member.syncing.set_result((errors.NOT_COORDINATOR, b""))
        self.groups.clear()

    def has_members(self, name: str) -> bool:
        group = self.groups.get(name)
        return group is not None and bool(group.members)

    def forget(self, name: str) -> None:
        self.groups.pop(name, None)

    # --- session expiry ----------------------------------------------------------------

    def expire(self, now: float) -> None:
        """Drop members whose session ran out, and groups left with nobody (what a group
        consumed is in its cursors, not here)."""
        for group in list(self.groups.values()):
            for member_id, member in list(group.members.items()):
                waiting = member.joining is not None and not member.joining.done()
                if not waiting and now - member.last_seen > member.session_timeout:
                    self._remove(group, member_id)
            if group.state == EMPTY and not group.members and not group.pending:
                del self.groups[group.name]

    async def expire_forever(self) -> None:
        while True:
            await asyncio.sleep(_SESSION_CHECK_SECONDS)
            with contextlib.suppress(Exception):
                self.expire(time.monotonic())
