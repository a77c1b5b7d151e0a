"""`lag` (per group and partition) and `groups list|seek`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import click

from broker.ctl import render
from broker.ctl.api import NOT_FOUND, USAGE, Api, CtlError, api_options, require_queue, segment


@click.command()
@click.option("--group", "-g", help="only this consumer group")
@click.option("--queue", "-q", help="only this queue")
@click.option("--lagging", is_flag=True,
              help="only partitions with messages the group has not committed")
@api_options
def lag(api: Api, group: str | None, queue: str | None, lagging: bool) -> None:
    """Each consumer group's position per queue and partition: committed offset, messages
    behind, time behind, lease."""
    rows = lag_rows(api, group=group, queue=queue)
    if not rows:
        _check_names(api, group=group, queue=queue)
    if lagging:
        rows = [r for r in rows if r["offsetLag"] > 0]
    if api.printed_as_json(rows):
        return
    render.table(None, ("group", "queue", "partition", "committed", "lag (messages)",
                        "lag (s)", "lease", "last consumed"),
                 [(r["group"], r["queue"], r["partition"], r["committedOffset"],
                   r["offsetLag"], r["timeLagSeconds"], "active" if r["leaseActive"] else "-",
                   r["lastConsumedAt"]) for r in rows],
                 empty="no lagging partitions" if lagging else "no consumer groups")


def lag_rows(api: Api, *, group: str | None, queue: str | None) -> list[dict[str, Any]]:
    """One row per (group, queue, partition), from the groups' detail (§6.1)."""
    if group is not None:
        names = [group]
    else:
        names = sorted({g["name"] for g in api.get("/api/v1/consumer-groups")
                        if queue is None or g["queueName"] == queue})
    rows = []
    for name in names:
        detail = api.get(f"/api/v1/consumer-groups/{segment(name)}")
        for queue_name, entry in sorted(detail.items()):
            if queue is not None and queue_name != queue:
                continue
            for part in entry["partitions"]:
                rows.append({"group": name, "queue": queue_name, **part})
    return rows


def _check_names(api: Api, *, group: str | None, queue: str | None) -> None:
    """Exit 4 for a queue or group the operator named that the broker does not have: an
    empty table would read as "nothing lags"."""
    if queue is not None:
        require_queue(api, queue)
    if group is not None and not api.get(f"/api/v1/consumer-groups/{segment(group)}"):
        raise CtlError(f"consumer group {group!r} not found", NOT_FOUND)


@click.group()
def groups() -> None:
    """List consumer groups and move their cursors."""


@groups.command("list")
@api_options
def list_groups(api: Api) -> None:
    """Every (group, queue) with its state and lag."""
    answer = api.get("/api/v1/consumer-groups")
    if api.printed_as_json(answer):
        return
    render.table(None, ("group", "queue", "state", "partitions lagging", "lag (messages)",
                        "max lag (s)", "subscription"),
                 [(g["name"], g["queueName"], g["state"], g["partitionsWithLag"],
                   g["offsetLag"], g["maxTimeLag"], g["subscriptionMode"]) for g in answer],
                 empty="no consumer groups")


@groups.command("seek")
@click.argument("group")
@click.argument("queue")
@click.option("--to-end", is_flag=True, help="skip everything written so far")
@click.option("--to", "to_time", metavar="TIME",
              help="redeliver from this instant (ISO-8601, e.g. 2026-12-03T09:00:00Z)")
@click.option("--partition", "-p", help="only this partition")
@api_options
def seek(api: Api, group: str, queue: str, to_end: bool, to_time: str | None,
         partition: str | None) -> None:
    """Move GROUP's cursors on QUEUE to the end or to a time."""
    if to_end == (to_time is not None):
        raise CtlError("say where to: --to-end or --to TIME (one of them)", USAGE)
    body: dict[str, Any] = {"toEnd": True} if to_end else {"timestamp": _instant(to_time)}
    path = f"/api/v1/consumer-groups/{segment(group)}/queues/{segment(queue)}"
    if partition is not None:
        path += f"/partitions/{segment(partition)}"
    answer = api.post(path + "/seek", body)
    if api.printed_as_json(answer):
        return
    where = "the end" if to_end else body["timestamp"]
    if partition is None:
        render.line(f"group {group} on {queue}: {answer['partitionsUpdated']} partition(s) "
                    f"moved to {where}")
    else:
        render.line(f"group {group} on {queue}/{partition}: moved to {where} (cursor at "
                    f"{render.cell(answer['cursorMovedTo'])})")


def _instant(text: str | None) -> str:
    """ISO-8601 as given, checked here so a typo is a usage error, not a broker 400."""
    assert text is not None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise CtlError(f"--to {text!r}: expected an ISO-8601 time such as "
                       "2026-12-03T09:00:00Z", USAGE) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
