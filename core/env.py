"""Typed access to environment variables, naming the culprit when a value is unusable.

`EnvironmentRecord` is an empty environment that notes what is read from it: the settings
built from one say which variables exist, with the default and bounds each was read with.
The configuration reference is generated from that record (docsgen/configuration.py), so a
variable the code reads cannot be missing from it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar

T = TypeVar("T")


class SettingsError(ValueError):
    """A setting in the environment has a value the broker cannot use."""


@dataclasses.dataclass
class VariableRead:
    """How one variable was read: its default (None: read without one) and bounds."""

    name: str
    default: object = None
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Described:
    """What a variable means, for the configuration reference; `default` is shown instead of
    the value the code reads with when that value is not the whole story (a default decided
    at start, or a variable read without one)."""

    meaning: str
    default: str | None = None


# The meaning of each variable of a module, grouped by topic: `{topic: {name: meaning}}`.
Catalogue = dict[str, dict[str, "str | Described"]]


class EnvironmentRecord(Mapping[str, str]):
    """An environment with no variables that keeps, in first-read order, every variable a
    reader asked for."""

    def __init__(self) -> None:
        self.reads: dict[str, VariableRead] = {}

    def note(self, read: VariableRead) -> None:
        known = self.reads.setdefault(read.name, read)
        if known.default is None:  # a typed read tells more than a bare lookup before it
            self.reads[read.name] = read

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        self.note(VariableRead(key, None if default == "" else default))
        return default

    def __getitem__(self, key: str) -> str:
        self.note(VariableRead(key))
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.note(VariableRead(key))
        return False

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


class EnvReader:
    """Typed access to environment variables that names the culprit on failure."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = env
        self._record = env if isinstance(env, EnvironmentRecord) else None

    def text(self, name: str, default: str) -> str:
        self._note(name, default)
        return self._env.get(name, default)

    def integer(self, name: str, default: int, *, low: int | None = None,
                high: int | None = None) -> int:
        self._note(name, default, low, high)
        return self._parse(name, default, int, "an integer", low, high)

    def number(self, name: str, default: float, *, low: float | None = None) -> float:
        self._note(name, default, low)
        return self._parse(name, default, float, "a number", low, None)

    def choice(self, name: str, default: str, allowed: tuple[str, ...]) -> str:
        self._note(name, default, choices=allowed)
        value = self._env.get(name, default).strip().lower()
        if value not in allowed:
            raise SettingsError(f"{name}={self._env.get(name)!r}: expected one of {allowed}")
        return value

    def _note(self, name: str, default: object, low: float | None = None,
              high: float | None = None, choices: tuple[str, ...] = ()) -> None:
        if self._record is not None:
            self._record.note(VariableRead(name, default, low, high, choices))

    def _parse(self, name: str, default: T, parse: Callable[[str], T], kind: str,
               low: float | None, high: float | None) -> T:
        raw = self._env.get(name)
        if raw is None or raw.strip() == "":
            return default
        try:
            value = parse(raw.strip())
        except ValueError:
            raise SettingsError(f"{name}={raw!r}: expected {kind}") from None
        if low is not None and value < low:  # type: ignore[operator]
            raise SettingsError(f"{name}={raw!r}: must be at least {low}")
        if high is not None and value > high:  # type: ignore[operator]
            raise SettingsError(f"{name}={raw!r}: must be at most {high}")
        return value
