"""The configuration reference: every environment variable the broker reads.

Names, defaults and bounds come from reading an empty environment through the settings
(`core.settings.variables_read`); meanings and headings from the settings' declarations and
core/variables.py (`core.settings.meanings`); the operator commands' variables from their
click options. A variable read without a meaning stops the
build (KeyError), and tests/unit/test_variables.py says which.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from core.env import Described, VariableRead
from core.settings import meanings, variables_read
from docsgen import escape

PAGE = "reference/configuration.md"


def render_configuration() -> str:
    reads = variables_read()
    catalogue = meanings()
    unknown = sorted(set(reads) - {name for topic in catalogue.values() for name in topic})
    if unknown:
        raise KeyError(f"read without a meaning (declare it, or describe it in "
                       f"core/variables.py): {', '.join(unknown)}")
    out = [
        "# Configuration",
        "",
        ("The broker reads its settings from the environment once, when a process starts "
        "(`serve` passes them on to its web workers and reaper). A value it cannot use stops "
        "start-up with a message naming the variable (never printing a secret). Command-line "
        "options of `serve` and `web` (`--host`, `--port`, `--workers`, `--data-dir`) win "
        "over their variables."),
        "",
        ("This page is generated from the code: `core/settings.py`, where each setting is "
        "declared with its variable, default, bounds and meaning, and `core/variables.py`, "
        "which describes the variables read by code of their own."),
        "",
    ]
    for topic, variables in catalogue.items():
        out += [f"## {topic}", "", "| variable | default | meaning |", "|---|---|---|"]
        for name, described in variables.items():
            meaning = described.meaning if isinstance(described, Described) else described
            read = reads.get(name, VariableRead(name))
            out.append(f"| `{name}` | {_default(described, read)} | "
                       f"{escape.text(meaning)}{_bounds(read)} |")
        out.append("")
    out += ["## Operator commands", "",
            ("The commands that talk to a running broker (`status`, `queues`, `push`, `pop`, "
            "...) read these; see the [CLI reference](cli.md)."), "",
            "| variable | default | meaning |", "|---|---|---|"]
    for name, default, meaning in operator_variables():
        out.append(f"| `{name}` | {default} | {escape.text(meaning)} |")
    return "\n".join(out) + "\n"


def operator_variables() -> list[tuple[str, str, str]]:
    """(variable, default, help) of every click option of the CLI that reads one."""
    from broker.cli import main

    found: dict[str, tuple[str, str, str]] = {}
    context = click.Context(main)

    def walk(command: click.Command) -> None:
        for param in command.params:
            if isinstance(param, click.Option) and isinstance(param.envvar, str):
                default = param.default if param.default is not None else None
                found.setdefault(param.envvar, (param.envvar, _value(default),
                                                param.help or ""))
        if isinstance(command, click.Group):
            for name in command.list_commands(context):
                sub = command.get_command(context, name)
                if sub is not None:
                    walk(sub)

    walk(main)
    return list(found.values())


def _default(described: str | Described, read: VariableRead) -> str:
    if isinstance(described, Described) and described.default is not None:
        return described.default
    return _value(read.default)


def _value(value: Any) -> str:
    if value is None or value == "":
        return "unset"
    if isinstance(value, Path):
        value = str(value)
    return f"`{value}`"


def _bounds(read: VariableRead) -> str:
    if read.choices:
        return " One of " + ", ".join(f"`{c}`" for c in read.choices) + "."
    if read.low is not None and read.high is not None:
        return f" From {_number(read.low)} to {_number(read.high)}."
    if read.low is not None:
        return f" At least {_number(read.low)}."
    if read.high is not None:
        return f" At most {_number(read.high)}."
    return ""


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
