"""Shared-memory counters between the parent and its worker processes.

Each worker owns one slot (a row of doubles) and only ever writes its own slot, so no locks
are needed; the parent sums the rows for the live progress line. A small control row carries
the parent's instructions (offered rate, stop, drain target).
"""

from __future__ import annotations

import multiprocessing as mp
from multiprocessing.sharedctypes import SynchronizedArray
from typing import Any

FIELDS = ("pushed", "push_reqs", "push_errors", "uncertain", "delivered", "acked",
          "pops", "empty_pops", "errors", "push_p99", "pop_p99", "ack_p99", "e2e_p99")
_IDX = {name: i for i, name in enumerate(FIELDS)}
# Control row: offered msg/s in total (0 = as fast as possible), producers-stop, drain
# target (acknowledged pushes; -1 = not draining yet), step index.
CONTROL = ("rate", "stop", "drain_target", "step")
_CTL = {name: i for i, name in enumerate(CONTROL)}


class Board:
    def __init__(self, ctx: Any, slots: int, groups: int) -> None:
        self.slots = slots
        self.rows: SynchronizedArray[float] = ctx.Array("d", slots * len(FIELDS), lock=False)
        self.control: SynchronizedArray[float] = ctx.Array("d", len(CONTROL), lock=False)
        # Distinct messages delivered per group, summed over that group's consumers.
        self.group_delivered: SynchronizedArray[float] = ctx.Array("d", max(1, groups), lock=True)
        self.control[_CTL["drain_target"]] = -1

    def add(self, slot: int, name: str, n: float = 1) -> None:
        self.rows[slot * len(FIELDS) + _IDX[name]] += n

    def put(self, slot: int, name: str, value: float) -> None:
        self.rows[slot * len(FIELDS) + _IDX[name]] = value

    def mine(self, slot: int, name: str) -> float:
        return self.rows[slot * len(FIELDS) + _IDX[name]]

    def total(self, name: str) -> float:
        i = _IDX[name]
        return sum(self.rows[s * len(FIELDS) + i] for s in range(self.slots))

    def worst(self, name: str) -> float:
        i = _IDX[name]
        return max(self.rows[s * len(FIELDS) + i] for s in range(self.slots))

    def get(self, name: str) -> float:
        return self.control[_CTL[name]]

    def set(self, name: str, value: float) -> None:
        self.control[_CTL[name]] = value

    def add_group(self, group: int, n: int) -> None:
        with self.group_delivered.get_lock():
            self.group_delivered[group] += n


def context() -> Any:
    # spawn, not fork: the parent may hold an event loop and open sockets.
    return mp.get_context("spawn")
