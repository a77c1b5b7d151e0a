"""`status` and `queues list|show|create|delete`."""

from __future__ import annotations

import sys
from typing import Any

import click

from broker.ctl import render
from broker.ctl.api import (
    FORBIDDEN,
    USAGE,
    Api,
    CtlError,
    api_options,
    queue_not_found,
    require_queue,
    segment,
)

# Queue options `queues create` takes as flags: (flag, wire name, type, help).
_OPTION_FLAGS: tuple[tuple[str, str, Any, str], ...] = (
    ("--lease-time", "leaseTime", click.IntRange(min=1), "seconds a pop's lease lasts"),
    ("--retry-limit", "retryLimit", click.IntRange(min=0),
     "failed acks a message may have before it is dead-lettered"),
    ("--retention-seconds", "retentionSeconds", click.IntRange(min=0),
     "delete messages older than this (0: keep)"),
    ("--dedup-window-seconds", "dedupWindowSeconds", click.IntRange(min=0),
     "how long a transactionId is remembered"),
    ("--max-size", "maxSize", click.IntRange(min=0), "most messages the queue holds (0: any)"),
    ("--delayed-processing", "delayedProcessing", click.IntRange(min=0),
     "seconds a message waits before it can be popped"),
)


@click.command()
@api_options
def status(api: Api) -> None:
    """The broker's health, totals and maintenance switches."""
    health = api.get("/health")
    figures = api.get("/api/v1/status")
    try:
        switches = api.get("/api/v1/system/maintenance")
    except CtlError as exc:
        if exc.exit_code != FORBIDDEN:
            raise
        switches = None  # the switches are ADMIN with auth on; the rest is READ_ONLY
    if api.printed_as_json({"url": api.url, "health": health, "status": figures,
                            "maintenance": switches}):
        return
    messages = figures["messages"]
    render.pairs(None, [
        ("broker", f"{api.url} (version {health.get('version')})"),
        ("health", f"{health.get('status')}, database {health.get('database')}"),
        ("queues", figures["queues"]), ("partitions", figures["partitions"]),
        ("messages", (f"{messages['total']} retained, {messages['pending']} pending, "
                     f"{messages['processing']} processing")),
        ("dead letters", figures["deadLetters"]),
        ("consumer groups", figures["consumerGroups"]),
        ("active leases", figures["activeLeases"]),
        ("maintenance", _switches(switches) if switches else "(an admin token shows it)"),
    ])


def _switches(answer: dict[str, Any]) -> str:
    push = "on" if answer["maintenanceMode"] else "off"
    pop = "on" if answer["popMaintenanceMode"] else "off"
    return (f"push {push}, pop {pop}, {answer['bufferedMessages']} messages in the "
            "push spool")


@click.group()
def queues() -> None:
    """List, show, create and delete queues."""


@queues.command("list")
@click.option("--search", help="only names containing this text (case-insensitive)")
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True)
@api_options
def list_queues(api: Api, search: str | None, limit: int) -> None:
    """Every queue with its partitions and message counts."""
    answer = api.get("/api/v1/resources/queues", search=search, limit=limit)
    if api.printed_as_json(answer):
        return
    render.table(None, ("queue", "namespace", "task", "partitions", "messages", "pending",
                        "processing", "created"),
                 [(q["name"], q["namespace"] or "-", q["task"] or "-", q["partitions"],
                   q["messages"]["total"], q["messages"]["pending"],
                   q["messages"]["processing"], q["createdAt"]) for q in answer["queues"]],
                 empty="no queues")
    if answer["total"] > len(answer["queues"]):
        render.line(f"({len(answer['queues'])} of {answer['total']}; --limit shows more)")


@queues.command("show")
@click.argument("name")
@api_options
def show_queue(api: Api, name: str) -> None:
    """A queue's totals, partitions and options."""
    detail = require_queue(api, name)
    if api.printed_as_json(detail):
        return
    totals = detail["totals"]
    render.pairs(f"queue {detail['name']}", [
        ("namespace / task", f"{detail['namespace'] or '-'} / {detail['task'] or '-'}"),
        ("created", detail["createdAt"]),
        ("messages", (f"{totals['total']} retained, {totals['pending']} pending, "
                     f"{totals['processing']} processing, {totals['deadLetter']} dead letters")),
        ("segments", (f"{detail['segments']['segments']} holding "
                     f"{detail['segments']['messages']} messages")),
    ])
    render.table("partitions", ("partition", "id", "log start", "last offset", "messages",
                                "pending", "oldest", "newest"),
                 [(p["name"], p["id"], p["logStart"], p["lastOffset"], p["stats"]["total"],
                   p["stats"]["pending"], p["oldestMessage"], p["newestMessage"])
                  for p in detail["partitions"]])
    render.table("options", ("option", "value"), sorted(detail["options"].items()))


def _option_flags(command: Any) -> Any:
    for flag, _, kind, text in reversed(_OPTION_FLAGS):
        command = click.option(flag, type=kind, help=text)(command)
    return command


@queues.command("create")
@click.argument("name")
@click.option("--namespace", help="namespace the queue belongs to")
@click.option("--task", help="task the queue belongs to")
@click.option("--dlq/--no-dlq", "dead_letter", default=None,
              help="dead-letter messages past their retry limit (broker default: on)")
@click.option("--encrypted", is_flag=True, default=None,
              help="store its messages encrypted (needs QUEEN_ENCRYPTION_KEY on the broker)")
@click.option("--option", "-o", "extra", multiple=True, metavar="NAME=VALUE",
              help="any other option by its API name, e.g. -o ttl=600 (repeatable)")
@_option_flags
@api_options
def create_queue(api: Api, name: str, namespace: str | None, task: str | None,
                 dead_letter: bool | None, encrypted: bool | None, extra: tuple[str, ...],
                 **flags: Any) -> None:
    """Create a queue, or change the options of an existing one (those given; the others
    keep their values)."""
    options: dict[str, Any] = {}
    for flag, wire, _, _ in _OPTION_FLAGS:
        value = flags[flag.lstrip("-").replace("-", "_")]
        if value is not None:
            options[wire] = value
    if dead_letter is not None:
        options["deadLetterQueue"] = options["dlqAfterMaxRetries"] = dead_letter
    if encrypted:
        options["encryptionEnabled"] = True
    for item in extra:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise CtlError(f"--option {item!r}: expected NAME=VALUE", USAGE)
        options[key] = _option_value(raw)
    body: dict[str, Any] = {"queue": name, "options": options}
    if namespace is not None:
        body["namespace"] = namespace
    if task is not None:
        body["task"] = task
    answer = api.post("/api/v1/configure", body)
    if api.printed_as_json(answer):
        return
    render.line(f"queue {answer['queue']} configured (id {answer['queueId']})")
    render.table(None, ("option", "value"), sorted(answer["options"].items()))


def _option_value(raw: str) -> Any:
    lowered = raw.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(raw)
    except ValueError:
        pass
    try:
        return float(raw)
    except ValueError:
        return raw


@queues.command("delete")
@click.argument("name")
@click.option("--yes", "-y", is_flag=True, help="do not ask for confirmation")
@api_options
def delete_queue(api: Api, name: str, yes: bool) -> None:
    """Delete a queue with its partitions, messages, cursors and dead letters."""
    confirm(yes, f"Delete queue {name!r} and everything it holds?")
    answer = api.delete(f"/api/v1/resources/queues/{segment(name)}")
    if not answer.get("existed", True):
        raise queue_not_found(name, "; nothing deleted")
    if api.printed_as_json(answer):
        return
    render.line(f"queue {name} deleted")


def confirm(yes: bool, question: str) -> None:
    """Ask on a terminal; without one, refuse unless --yes was given (a script must say so)."""
    if yes:
        return
    # sys.stdin, not click.get_text_stream (deprecated in click 8.5, an error under
    # `filterwarnings = error`); None when the process was started without a stdin.
    if sys.stdin is None or not sys.stdin.isatty():
        raise CtlError(f"{question.rstrip('?')}: refused without --yes (no terminal to ask "
                       "on)", USAGE)
    if not click.confirm(question, default=False):
        raise CtlError("cancelled", USAGE)
