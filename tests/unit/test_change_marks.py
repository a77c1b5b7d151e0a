"""The wake-up hub's change marks (core/engine/listener.py), on which a parked long poll decides to
skip a re-check (core/engine/reads/quiet.py): a mark changes iff something was announced for the
queues it covers, or every waiter was woken; none is given while not listening."""

from __future__ import annotations

from core.engine.listener import WakeupHub


def _hub() -> WakeupHub:
    hub = WakeupHub("postgresql://unused", {})
    hub.listening = True
    return hub


def test_a_mark_changes_only_with_its_queues() -> None:
    hub = _hub()
    mine, everything = hub.change_mark(frozenset({1, 2})), hub.change_mark(None)
    hub.wake(3, 1, [30])  # another queue
    assert hub.change_mark(frozenset({1, 2})) == mine
    assert hub.change_mark(None) != everything  # a discovery pop waits on every queue
    hub.wake(2, 1, [20])
    assert hub.change_mark(frozenset({1, 2})) != mine


def test_waking_everyone_changes_every_mark() -> None:
    hub = _hub()
    mine = hub.change_mark(frozenset({1}))
    hub.wake_everyone()  # e.g. the LISTEN connection came back: notifications were missed
    assert hub.change_mark(frozenset({1})) != mine


def test_no_mark_while_not_listening() -> None:
    hub = _hub()
    hub.listening = False
    assert hub.change_mark(frozenset({1})) is None
