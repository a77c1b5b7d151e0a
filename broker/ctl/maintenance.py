"""`maintenance [push|pop on|off]`."""

from __future__ import annotations

import click

from broker.ctl import render
from broker.ctl.api import USAGE, Api, CtlError, api_options

_PATHS = {"push": "/api/v1/system/maintenance", "pop": "/api/v1/system/maintenance/pop"}


@click.command()
@click.argument("which", required=False, type=click.Choice(sorted(_PATHS)))
@click.argument("state", required=False, type=click.Choice(["on", "off"]))
@api_options
def maintenance(api: Api, which: str | None, state: str | None) -> None:
    """Show the maintenance switches, or turn push or pop maintenance on or off
    (`maintenance push on`, `maintenance pop off`).

    Push maintenance sends every push to the broker's disk spool (written to the database
    when it ends); pop maintenance makes pops answer with nothing. A switch holds for every
    broker on the database."""
    if which is None:
        answer = api.get(_PATHS["push"])
    elif state is None:
        raise CtlError(f"maintenance {which}: say on or off", USAGE)
    else:
        answer = api.post(_PATHS[which], {"enabled": state == "on"})
    if api.printed_as_json(answer):
        return
    render.pairs(None, [
        ("push maintenance", "on" if answer["maintenanceMode"] else "off"),
        ("pop maintenance", "on" if answer["popMaintenanceMode"] else "off"),
        ("spooled messages", answer["bufferedMessages"]),
        ("spool healthy", answer["bufferHealthy"]),
    ])
