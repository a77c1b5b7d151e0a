"""Typed access to environment variables, naming the culprit when a value is unusable."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

T = TypeVar("T")


class SettingsError(ValueError):
    """A setting in the environment has a value the broker cannot use."""


class EnvReader:
    """Typed access to environment variables that names the culprit on failure."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = env

    def text(self, name: str, default: str) -> str:
        return self._env.get(name, default)

    def integer(self, name: str, default: int, *, low: int | None = None,
                high: int | None = None) -> int:
        return self._parse(name, default, int, "an integer", low, high)

    def number(self, name: str, default: float, *, low: float | None = None) -> float:
        return self._parse(name, default, float, "a number", low, None)

    def choice(self, name: str, default: str, allowed: tuple[str, ...]) -> str:
        value = self._env.get(name, default).strip().lower()
        if value not in allowed:
            raise SettingsError(f"{name}={self._env.get(name)!r}: expected one of {allowed}")
        return value

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
