"""`dlq list|show|replay|purge`."""

from __future__ import annotations

import json
from typing import Any

import click

from broker.ctl import render
from broker.ctl.api import NOT_FOUND, USAGE, Api, CtlError, api_options, require_queue
from broker.ctl.queues import confirm

_PAGE = 1000  # the DLQ route's largest page


@click.group()
def dlq() -> None:
    """Dead letters: list, show, replay, purge."""


def _filters(command: Any) -> Any:
    command = click.option("--group", "-g", help="only this consumer group's")(command)
    return click.option("--queue", "-q", help="only this queue's")(command)


@dlq.command("list")
@_filters
@click.option("--limit", type=click.IntRange(1, _PAGE), default=50, show_default=True)
@api_options
def list_dlq(api: Api, queue: str | None, group: str | None, limit: int) -> None:
    """Dead letters, newest first."""
    answer = api.get("/api/v1/dlq", queue=queue, consumerGroup=group, limit=limit)
    if answer["total"] == 0 and queue is not None:
        require_queue(api, queue)
    if api.printed_as_json(answer):
        return
    render.table(None, ("id", "queue", "partition", "offset", "group", "retries", "failed at",
                        "error", "payload"),
                 [(m["id"], m["queue"], m["partition"], m["offset"], m["consumerGroup"],
                   m["retryCount"], m["failedAt"], _short(m["errorMessage"]),
                   _short(json.dumps(m["data"]))) for m in answer["messages"]],
                 empty="no dead letters")
    if answer["total"] > len(answer["messages"]):
        render.line(f"({len(answer['messages'])} of {answer['total']}; --limit shows more)")


def _short(text: str | None, width: int = 40) -> str | None:
    if text is None or len(text) <= width:
        return text
    return text[:width - 1] + "…"


@dlq.command("show")
@click.argument("dlq_id", metavar="ID")
@_filters
@api_options
def show(api: Api, dlq_id: str, queue: str | None, group: str | None) -> None:
    """One dead letter by its id, with its whole payload."""
    row = next((m for m in _rows(api, queue, group) if m["id"] == dlq_id), None)
    if row is None:
        if queue is not None:
            require_queue(api, queue)
        raise CtlError(f"no dead letter with id {dlq_id}", NOT_FOUND)
    if api.printed_as_json(row):
        return
    render.pairs(f"dead letter {row['id']}", [
        (key, row[key]) for key in ("queue", "partition", "offset", "consumerGroup",
                                    "transactionId", "messageId", "retryCount",
                                    "errorMessage", "createdAt", "failedAt", "producerSub",
                                    "traceId")])
    render.line(json.dumps(row["data"], indent=2, ensure_ascii=False))


def _rows(api: Api, queue: str | None, group: str | None) -> list[dict[str, Any]]:
    """Every dead letter matching the filters (page by page)."""
    rows: list[dict[str, Any]] = []
    while True:
        page = api.get("/api/v1/dlq", queue=queue, consumerGroup=group, limit=_PAGE,
                       offset=len(rows))
        rows += page["messages"]
        if not page["messages"] or len(rows) >= page["total"]:
            return rows


@dlq.command("replay")
@click.argument("ids", nargs=-1, metavar="[ID]...")
@click.option("--all", "replay_all", is_flag=True,
              help="replay every dead letter matching --queue/--group")
@_filters
@click.option("--to-queue", help="push the copies to this queue instead of their own")
@click.option("--to-partition", help="push the copies to this partition instead of their own")
@api_options
def replay(api: Api, ids: tuple[str, ...], replay_all: bool, queue: str | None,
           group: str | None, to_queue: str | None, to_partition: str | None) -> None:
    """Push dead letters again as new messages (each leaves the DLQ)."""
    if bool(ids) == replay_all:
        raise CtlError("name the dead letters: ID... or --all (with --queue/--group)", USAGE)
    targets = list(ids) if ids else [m["id"] for m in _rows(api, queue, group)]
    if not targets and queue is not None:
        require_queue(api, queue)
    body: dict[str, Any] = {}
    if to_queue is not None:
        body["queue"] = to_queue
    if to_partition is not None:
        body["partition"] = to_partition
    results = []
    with render.progress("replaying", len(targets), quiet=api.as_json) as bar:
        for dlq_id in targets:
            results.append(api.post(f"/api/v1/dlq/{dlq_id}/replay", body))
            bar.advance(bar.task_ids[0])
    if api.printed_as_json(results):
        return
    render.table(None, ("dead letter", "replayed to", "offset", "transactionId"),
                 [(r["dlqId"], f"{r['queue']}/{r['partition']}", r["replayedAs"]["offset"],
                   r["replayedAs"]["transaction_id"]) for r in results],
                 empty="nothing to replay")


@dlq.command("purge")
@click.option("--queue", "-q", required=True, help="the queue whose dead letters go")
@click.option("--group", "-g", help="only this consumer group's")
@click.option("--yes", "-y", is_flag=True, help="do not ask for confirmation")
@api_options
def purge(api: Api, queue: str, group: str | None, yes: bool) -> None:
    """Delete a queue's dead letters (of one group with --group)."""
    whose = f"queue {queue!r}" + (f", group {group!r}" if group else "")
    require_queue(api, queue)  # before asking: a typo is not "0 deleted"
    confirm(yes, f"Delete every dead letter of {whose}?")
    # One request that the broker runs in transactions of 5000 rows: give it time.
    with render.progress("purging", None, quiet=api.as_json):
        answer = api.call("DELETE", "/api/v1/dlq", params={"queue": queue,
                                                           "consumerGroup": group},
                          timeout=max(api.timeout, 600.0))
    if api.printed_as_json(answer):
        return
    render.line(f"{answer['deleted']} dead letter(s) of {whose} deleted")
