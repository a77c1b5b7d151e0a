"""`tenants [list]|show|set|clear`: the tenants and their quotas (docs/security/tenants.md).

These are the operator's routes (an admin token bound to no tenant). `set` changes only the
limits it names and keeps the others: it reads the stored quota and writes it back with the
changes (`PUT` replaces a whole quota); `none` makes a limit unlimited again.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import click

from broker.ctl import render
from broker.ctl.api import Api, api_options, segment
from core.tenancy.names import label, tenant_in_path

# The limits a quota sets, by wire name (its option is the name in kebab case), with what
# each limits.
_LIMITS = {
    "requestsPerSecond": "requests of any route per second",
    "requestBurst": "requests let through at once (default: twice the rate)",
    "messagesPerSecond": "messages written per second",
    "messageBurst": "messages let through at once (default: twice the rate)",
    "maxPayloadBytes": "bytes of one message's payload",
    "maxBatchSize": "messages in one push or transaction",
    "maxQueues": "queues",
    "maxPartitionsPerQueue": "partitions of one queue",
    "maxRetentionSeconds": "how long messages are kept",
    "maxParkedPops": "long polls waiting at once",
    "maxStoredBytes": "bytes stored (writes answer 403 at it)",
}
_RATES = ("requestsPerSecond", "messagesPerSecond")


def _path(name: str) -> str:
    """The tenant as a path segment (`_default` or '' name the default tenant)."""
    return segment(tenant_in_path("" if name == "_default" else name))


@click.group()
def tenants() -> None:
    """Tenants and their quotas: list, show, set, clear."""


@tenants.command("list")
@api_options
def list_tenants(api: Api) -> None:
    """Every tenant that names something or has a quota."""
    answer = api.get("/api/v1/tenants")
    if api.printed_as_json(answer):
        return
    render.table(None, ("tenant", "queues", "partitions", "stored bytes", "quota"),
                 [(label(t["tenant"]), t["queues"], t["partitions"], t["storedBytes"],
                   _summary(t["quota"])) for t in answer["tenants"]], empty="no tenants")
    render.line(f"rates are shared by {answer['processes']} broker process(es): each "
                "enforces its share")


def _on_tenant(name: str, *, limits: bool = False
               ) -> Callable[[Callable[..., None]], click.Command]:
    """A `tenants` subcommand acting on the tenant NAME, with the API options (and with
    `limits`, an option per limit of a quota)."""
    def command(run: Callable[..., None]) -> click.Command:
        run = api_options(run)
        return tenants.command(name)(click.argument("name")(_options(run) if limits else run))
    return command


@_on_tenant("show")
def show(api: Api, name: str) -> None:
    """One tenant with every limit of its quota (`_default`: the default tenant)."""
    answer = api.get(f"/api/v1/tenants/{_path(name)}")
    if api.printed_as_json(answer):
        return
    _pairs(answer)


def _option(wire: str) -> str:
    """A limit's option name: maxQueues is --max-queues."""
    return re.sub(r"(?<!^)(?=[A-Z])", "-", wire).lower()


def _options(command: Any) -> Any:
    for wire, meaning in reversed(_LIMITS.items()):
        command = click.option(f"--{_option(wire)}", wire, metavar="N|none",
                               help=f"{meaning}; none: unlimited")(command)
    return command


@_on_tenant("set", limits=True)
def set_quota(api: Api, name: str, **limits: str | None) -> None:
    """Change limits of a tenant's quota (the others stay as they are)."""
    given = {wire: _number(wire, value) for wire, value in limits.items() if value is not None}
    if not given:
        raise click.UsageError("name at least one limit to set (see --help)")
    current = api.get(f"/api/v1/tenants/{_path(name)}")["quota"] or {}
    answer = api.call("PUT", f"/api/v1/tenants/{_path(name)}/quota",
                      body={**current, **given})
    if api.printed_as_json(answer):
        return
    _pairs(answer)


@_on_tenant("clear")
def clear(api: Api, name: str) -> None:
    """Remove a tenant's quota: it is unlimited again."""
    answer = api.delete(f"/api/v1/tenants/{_path(name)}/quota")
    if api.printed_as_json(answer):
        return
    render.line(f"tenant {label(answer['tenant'])}: "
                + ("quota removed" if answer["cleared"] else "had no quota"))


def _number(wire: str, text: str) -> float | int | None:
    if text.strip().lower() in ("none", "unlimited"):
        return None
    try:
        return float(text) if wire in _RATES else int(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a number (or none)",
                                 param_hint=wire) from None


def _summary(quota: dict[str, Any] | None) -> str:
    if not quota:
        return "unlimited"
    return ", ".join(f"{wire}={value:g}" if isinstance(value, float) else f"{wire}={value}"
                     for wire, value in quota.items() if value is not None) or "unlimited"


# A burst left unset is twice its rate (core/tenancy/limiter.py), not unlimited.
_BURSTS = {"requestBurst": "requestsPerSecond", "messageBurst": "messagesPerSecond"}


def _shown(quota: dict[str, Any], wire: str) -> Any:
    value = quota.get(wire)
    if value is not None:
        return f"{value:g}" if isinstance(value, float) else value
    rate = quota.get(_BURSTS.get(wire, ""))
    return f"{2 * rate:g} (twice the rate)" if rate is not None else "unlimited"


def _pairs(tenant: dict[str, Any]) -> None:
    quota = tenant["quota"] or {}
    render.pairs(f"tenant {label(tenant['tenant'])}", [
        ("queues", tenant["queues"]), ("partitions", tenant["partitions"]),
        ("stored bytes", tenant["storedBytes"]),
        *((_option(wire), _shown(quota, wire)) for wire in _LIMITS)])
