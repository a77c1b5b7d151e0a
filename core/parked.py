"""The one shape of the registries of parked waiters (the wake-up hub's lines,
core/engine/listener.py; the ephemeral pops', core/ephemeral/waiters.py): slot -> line ->
the line's waiters in arrival order (a dict used as an ordered set)."""

from __future__ import annotations

from typing import TypeVar

Slot = TypeVar("Slot")
Line = TypeVar("Line")
Waiter = TypeVar("Waiter")


def leave(registry: dict[Slot, dict[Line, dict[Waiter, None]]], slot: Slot, line: Line,
          waiter: Waiter) -> None:
    """Take `waiter` out of its line, and drop the line and the slot it leaves empty, so a
    registry holds only what someone waits on."""
    lines = registry.get(slot)
    if lines is None:
        return
    waiters = lines.get(line)
    if waiters is not None:
        waiters.pop(waiter, None)
        if not waiters:
            del lines[line]
    if not lines:
        del registry[slot]
