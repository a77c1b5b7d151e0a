"""The classic group protocol's coordinator (broker/kafka/coordinator.py), in memory."""

from __future__ import annotations

import asyncio
import time

from broker.kafka import errors
from broker.kafka.coordinator import COMPLETING, EMPTY, STABLE, Coordinator, JoinResult


async def _join(c: Coordinator, member: str = "", *, session: float = 10.0,
                protocols: list[tuple[str, bytes]] | None = None) -> JoinResult:
    return await c.join("g", member_id=member, client_id="c", client_host="h",
                        session_timeout=session, rebalance_timeout=2.0,
                        protocol_type="consumer",
                        protocols=protocols or [("range", member.encode() or b"m")],
                        require_known_id=False)


async def test_members_joining_together_share_a_generation_and_their_assignments() -> None:
    c = Coordinator(initial_delay=0.05)
    a, b = await asyncio.gather(_join(c), _join(c))
    assert a.error == b.error == errors.NONE
    assert a.generation == b.generation == 1 and a.protocol == "range"
    leader, follower = (a, b) if a.member_id == a.leader else (b, a)
    assert len(leader.members) == 2 and follower.members == ()
    assert c.groups["g"].state == COMPLETING
    got = await asyncio.gather(
        c.sync("g", member_id=follower.member_id, generation=1, assignments={}),
        c.sync("g", member_id=leader.member_id, generation=1,
               assignments={leader.member_id: b"L", follower.member_id: b"F"}))
    assert got == [(errors.NONE, b"F"), (errors.NONE, b"L")]
    assert c.groups["g"].state == STABLE
    assert c.heartbeat("g", member_id=follower.member_id, generation=0) == \
        errors.ILLEGAL_GENERATION
    assert c.heartbeat("g", member_id="nobody", generation=1) == errors.UNKNOWN_MEMBER_ID


async def test_a_new_member_starts_a_rebalance_the_others_learn_by_heartbeat() -> None:
    c = Coordinator(initial_delay=0.05)
    first = await _join(c)
    await c.sync("g", member_id=first.member_id, generation=1,
                 assignments={first.member_id: b"all"})
    joining = asyncio.create_task(_join(c))
    await asyncio.sleep(0.01)
    assert c.heartbeat("g", member_id=first.member_id, generation=1) == \
        errors.REBALANCE_IN_PROGRESS
    assert c.validate_commit("g", first.member_id, 1) == errors.REBALANCE_IN_PROGRESS
    again = await _join(c, first.member_id)  # the old member rejoins: the rebalance completes
    new = await joining
    assert again.generation == new.generation == 2
    assert again.leader == first.member_id  # the leader keeps its place


async def test_a_silent_member_is_dropped_and_the_rest_rebalance() -> None:
    c = Coordinator(initial_delay=0.05)
    a, b = await asyncio.gather(_join(c, session=1.0), _join(c, session=1.0))
    group = c.groups["g"]
    group.members[b.member_id].last_seen = time.monotonic() - 5  # b went silent
    c.expire(time.monotonic())
    assert b.member_id not in group.members
    rejoined = await _join(c, a.member_id)
    assert rejoined.error == errors.NONE and rejoined.generation == 2
    assert [m for m, _, _ in rejoined.members] == [a.member_id]


async def test_leaving_empties_the_group_which_is_then_forgotten() -> None:
    c = Coordinator(initial_delay=0.05)
    only = await _join(c)
    assert c.leave("g", only.member_id) == errors.NONE
    assert c.groups["g"].state == EMPTY
    assert c.validate_commit("g", "", -1) == errors.NONE  # a commit outside any generation
    c.expire(time.monotonic())
    assert "g" not in c.groups


async def test_member_id_required_then_join_with_it() -> None:
    c = Coordinator(initial_delay=0.05)
    first = await c.join("g", member_id="", client_id="c", client_host="h",
                         session_timeout=10, rebalance_timeout=1, protocol_type="consumer",
                         protocols=[("range", b"")], require_known_id=True)
    assert first.error == errors.MEMBER_ID_REQUIRED and first.member_id
    second = await _join(c, first.member_id)
    assert second.error == errors.NONE and second.member_id == first.member_id
    assert (await _join(c, "made-up")).error == errors.UNKNOWN_MEMBER_ID


async def test_inconsistent_protocols_are_refused() -> None:
    c = Coordinator(initial_delay=0.05)
    await _join(c, protocols=[("range", b"")])
    late = await _join(c, protocols=[("sticky", b"")])
    assert late.error == errors.INCONSISTENT_GROUP_PROTOCOL


async def test_a_coordinator_that_steps_down_releases_its_waiting_members() -> None:
    c = Coordinator(initial_delay=10)  # the first rebalance would wait 10 s
    waiting = asyncio.create_task(_join(c))
    await asyncio.sleep(0.01)
    c.reset()
    assert (await asyncio.wait_for(waiting, 1)).error == errors.NOT_COORDINATOR
    assert c.groups == {}


async def _join_static(c: Coordinator, instance: str, member: str = "") -> JoinResult:
    return await c.join("g", member_id=member, client_id="c", client_host="h",
                        session_timeout=10, rebalance_timeout=2.0, protocol_type="consumer",
                        protocols=[("range", instance.encode())], require_known_id=True,
                        instance_id=instance)


async def test_a_static_member_rejoining_takes_its_place_without_a_rebalance() -> None:
    c = Coordinator(initial_delay=0.05)
    a, b = await asyncio.gather(_join_static(c, "a"), _join_static(c, "b"))
    assert a.error == b.error == errors.NONE  # no MEMBER_ID_REQUIRED round for static members
    leader = a if a.member_id == a.leader else b
    assert sorted(i for _, i, _ in leader.members) == ["a", "b"]
    assignments = {a.member_id: b"A", b.member_id: b"B"}
    await asyncio.gather(*(c.sync("g", member_id=m.member_id, generation=1,
                                  assignments=assignments, instance_id=i)
                           for m, i in ((a, "a"), (b, "b"))))
    # "b" restarts: a new member id, the same generation and assignment, "a" undisturbed.
    again = await _join_static(c, "b")
    assert again.error == errors.NONE and again.member_id != b.member_id
    assert again.generation == 1
    assert await c.sync("g", member_id=again.member_id, generation=1, assignments={},
                        instance_id="b") == (errors.NONE, b"B")
    assert c.heartbeat("g", member_id=a.member_id, generation=1, instance_id="a") == errors.NONE
    assert c.groups["g"].state == STABLE
    # The replaced member is fenced, whatever it sends.
    assert c.heartbeat("g", member_id=b.member_id, generation=1, instance_id="b") == \
        errors.FENCED_INSTANCE_ID
    assert c.validate_commit("g", b.member_id, 1, "b") == errors.FENCED_INSTANCE_ID
    assert (await _join_static(c, "b", b.member_id)).error == errors.FENCED_INSTANCE_ID
    assert c.leave("g", b.member_id, "b") == errors.FENCED_INSTANCE_ID
    # Leaving by instance id alone removes the member that holds it, and the group rebalances.
    assert c.leave("g", "", "b") == errors.NONE
    assert c.heartbeat("g", member_id=a.member_id, generation=1, instance_id="a") == \
        errors.REBALANCE_IN_PROGRESS
    assert c.heartbeat("g", member_id=again.member_id, generation=1, instance_id="b") == \
        errors.UNKNOWN_MEMBER_ID


async def test_a_static_member_whose_metadata_changed_rejoins_through_a_rebalance() -> None:
    c = Coordinator(initial_delay=0.05)
    first = await _join_static(c, "a")
    await c.sync("g", member_id=first.member_id, generation=1,
                 assignments={first.member_id: b"all"}, instance_id="a")
    changed = await c.join("g", member_id="", client_id="c", client_host="h",
                           session_timeout=10, rebalance_timeout=2.0, protocol_type="consumer",
                           protocols=[("range", b"other topics")], require_known_id=True,
                           instance_id="a")
    assert changed.error == errors.NONE and changed.generation == 2
    assert [(m, i) for m, i, _ in changed.members] == [(changed.member_id, "a")]


async def test_a_static_member_whose_session_ran_out_is_removed_with_its_instance_id() -> None:
    c = Coordinator(initial_delay=0.05)
    first = await _join_static(c, "a")
    c.groups["g"].members[first.member_id].last_seen = time.monotonic() - 60
    c.expire(time.monotonic())
    assert c.groups.get("g") is None or "a" not in c.groups["g"].instances
    fresh = await _join_static(c, "a")  # a new member, in a new generation
    assert fresh.error == errors.NONE and fresh.member_id != first.member_id


async def test_a_static_member_dropped_by_a_rebalance_timeout_can_join_again() -> None:
    """A member that does not rejoin within the rebalance timeout is dropped with its
    instance id: joining again under it later makes a new member, not a replacement of a
    member that is gone."""
    c = Coordinator(initial_delay=0.05)
    a, b = await asyncio.gather(_join_static(c, "a"), _join_static(c, "b"))
    joining = asyncio.create_task(_join(c))  # a third member starts a rebalance
    await asyncio.sleep(0.01)
    again = await _join_static(c, "a", a.member_id)  # "a" rejoins, "b" never does
    await joining
    assert again.error == errors.NONE and b.member_id not in c.groups["g"].members
    assert "b" not in c.groups["g"].instances
    back = await _join_static(c, "b")
    assert back.error == errors.NONE and back.member_id != b.member_id
