"""Typed access to environment variables, naming the culprit when a value is unusable, and
the declaration of a setting read from one.

A setting is declared once, on its dataclass field (`Heading.setting`): the variable's name,
its default, its bounds or choices, what it means and under which heading of the
configuration reference it stands. `read_fields` reads every declared field of a settings
class; the reference is generated from the same declarations (docsgen/configuration.py).

`EnvironmentRecord` is an empty environment that notes what is read from it: the settings
built from one say which variables exist, with the default and bounds each was read with,
so a variable the code reads (declared or read by hand) cannot be missing from the reference.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

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


# The meaning of each variable, by heading of the configuration reference:
# `{heading: {name: meaning}}`.
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


_DECLARED = "queen_setting"  # the key of a declared field's metadata


@dataclasses.dataclass(frozen=True)
class Declared:
    """How a declared setting is read: its variable, the bounds or choices a value must keep,
    an older name read when the variable is not set, and a last check of the value (given
    the variable's name; it may refuse the value, or settle it). `shown` is the reference's
    default where the value read with is not the whole story."""

    name: str
    heading: str
    meaning: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    older: str | None = None
    check: Callable[[str, Any], Any] | None = None
    shown: str | None = None

    @property
    def described(self) -> str | Described:
        return self.meaning if self.shown is None else Described(self.meaning, self.shown)

    def read(self, reader: EnvReader, default: object) -> object:
        if self.older is not None:
            default = self._read(reader, self.older, default)
        value = self._read(reader, self.name, default)
        return value if self.check is None else self.check(self.name, value)

    def _read(self, reader: EnvReader, name: str, default: object) -> object:
        # The default's type says how the text is read (bool is no setting's type).
        if isinstance(default, int):
            return reader.integer(name, default, low=_whole(self.low), high=_whole(self.high))
        if isinstance(default, float):
            return reader.number(name, default, low=self.low)
        if isinstance(default, Path):
            return Path(reader.text(name, str(default)))
        if not isinstance(default, str):
            raise TypeError(f"{name}: no reading for a default of {type(default).__name__}")
        if self.choices:
            return reader.choice(name, default, self.choices)
        return reader.text(name, default)


def _whole(bound: float | None) -> int | None:
    return None if bound is None else int(bound)


class Heading:
    """A heading of the configuration reference, with the variables listed under it that
    their own code reads (`elsewhere`: a listen address, a database URL, a key ...)."""

    def __init__(self, title: str, elsewhere: Mapping[str, str | Described] | None = None
                 ) -> None:
        self.title = title
        self.elsewhere = dict(elsewhere or {})

    def setting(self, default: T, name: str, meaning: str, *, low: float | None = None,
                high: float | None = None, choices: tuple[str, ...] = (),
                older: str | None = None, check: Callable[[str, T], T] | None = None,
                shown: str | None = None) -> T:
        """A dataclass field read from the variable `name` (`default` when unset or empty,
        and its type says how the text is read); `meaning` is its line in the reference."""
        declared = Declared(name, self.title, meaning, low, high, choices, older, check,
                            shown)
        field: T = dataclasses.field(default=default, metadata={_DECLARED: declared})
        return field


def declarations(cls: type) -> list[tuple[str, Declared]]:
    """(field name, declaration) of every declared field of a settings dataclass, in field
    order."""
    return [(f.name, f.metadata[_DECLARED]) for f in dataclasses.fields(cls)
            if _DECLARED in f.metadata]


def read_fields(cls: type, env: Mapping[str, str],
                by_hand: Mapping[str, Callable[[], object]]) -> dict[str, Any]:
    """Keyword arguments of `cls` as the environment sets them, read in field order (the
    first bad value is the one reported): a declared field from its variable, a field of
    `by_hand` by its reader, any other field left to its default."""
    reader = EnvReader(env)
    out: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if field.name in by_hand:
            out[field.name] = by_hand[field.name]()
        elif _DECLARED in field.metadata:
            out[field.name] = field.metadata[_DECLARED].read(reader, getattr(cls, field.name))
    return out
