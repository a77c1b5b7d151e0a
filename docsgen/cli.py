"""The CLI reference: one mkdocs-click section per `queen-broker` command.

`queen-broker` imports its operator commands only when one is run (broker/cli.py), so
mkdocs-click, which lists a group's registered commands, would miss them; this page names
every command `list_commands` knows, each from the module that defines it, and mkdocs-click
renders their options and help from the click objects at build time."""

from __future__ import annotations

import sys

import click

PAGE = "reference/cli.md"


def render_cli() -> str:
    from broker.cli import main

    context = click.Context(main, info_name="queen-broker")
    out = ["# CLI", "",
           ("`queen-broker --help` and `queen-broker COMMAND --help` print the same. `serve`, "
           "`web`, `postgres` and `migrate` run the broker and read the environment "
           "([configuration](configuration.md)); the other commands operate a running broker "
           "over its HTTP API and exit with the statuses listed in "
           "[The CLI](../operating/cli.md#exit-status)."), "",
           "::: mkdocs-click", "    :module: broker.cli", "    :command: main",
           "    :prog_name: queen-broker", "    :depth: 1", "    :style: plain", ""]
    for name in main.list_commands(context):
        command = main.get_command(context, name)
        # mkdocs-click renders the registered commands under `main` itself.
        if command is None or command.hidden or name in main.commands:
            continue
        module, attribute = _where(command)
        out += ["::: mkdocs-click", f"    :module: {module}", f"    :command: {attribute}",
                f"    :prog_name: queen-broker {name}", "    :depth: 2", "    :style: plain",
                "    :list_subcommands: true", ""]
    return "\n".join(out)


def commands() -> list[str]:
    """Every command `queen-broker` offers."""
    from broker.cli import main

    return main.list_commands(click.Context(main))


def _where(command: click.Command) -> tuple[str, str]:
    """The module and attribute name that hold a command object."""
    module = command.callback.__module__ if command.callback else "broker.cli"
    for attribute, value in vars(sys.modules[module]).items():
        if value is command:
            return module, attribute
    raise LookupError(f"command {command.name} is not a module attribute of {module}")
