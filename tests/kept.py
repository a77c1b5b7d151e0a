"""Session-long things the fixtures of tests/conftest.py make, one of each per deployment."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class Kept:
    """What the session fixtures made for each deployment, kept for the whole session.

    `deployment` is a session-scoped parameter, and pytest holds one instance of a
    parametrized session fixture at a time: each module marked `citus` switches it to
    `citus` and the next module back to `postgres`, and every switch used to tear down and
    make again the database, the brokers and the Kafka listener of the deployment left (a
    fresh database migrated, brokers started: seconds per module, twice). The fixtures now
    take what they made before from here, so each deployment has one database, one of each
    broker and one listener per test process, as a suite without Citus modules always had.
    What is kept on a server is stopped before that server (`close`, from the server's
    fixture), whatever comes last."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, str], Any] = {}
        self.stacks: dict[str, contextlib.ExitStack] = {}

    def get(self, deployment: str, name: str, make: Callable[[], T]) -> T:
        """What `make()` answered the first time `name` was asked for on `deployment`."""
        key = (deployment, name)
        if key not in self.values:
            self.values[key] = make()
        return self.values[key]  # type: ignore[no-any-return]

    def enter(self, deployment: str, name: str,
              make: Callable[[], contextlib.AbstractContextManager[T]]) -> T:
        """`get` for a context manager: entered once, left by `close(deployment)`."""
        stack = self.stacks.setdefault(deployment, contextlib.ExitStack())
        return self.get(deployment, name, lambda: stack.enter_context(make()))

    def close(self, deployment: str) -> None:
        """Leave what was entered for `deployment` (last first) and forget its values."""
        self.values = {k: v for k, v in self.values.items() if k[0] != deployment}
        stack = self.stacks.pop(deployment, None)
        if stack is not None:
            stack.close()
