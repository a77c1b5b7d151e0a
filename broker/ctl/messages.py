"""`push` and `pop`: quick experiments from a shell."""

from __future__ import annotations

import json
from typing import Any, TextIO

import click

from broker.ctl import render
from broker.ctl.api import REFUSED, USAGE, Api, CtlError, api_options, require_queue, segment

_CHUNK = 1000  # messages per push request


def _payload(text: str) -> Any:
    """JSON when it parses, else the text as a JSON string (so `push q hello` works)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


@click.command()
@click.argument("queue")
@click.argument("payloads", nargs=-1, metavar="[PAYLOAD]...")
@click.option("--partition", "-p", default="Default", show_default=True)
@click.option("--file", "-f", "source", type=click.File("r"),
              help="read payloads from this file, one JSON document per line ('-': stdin)")
@click.option("--count", "-n", type=click.IntRange(min=1), default=1, show_default=True,
              help="push each payload this many times")
@click.option("--transaction-id", help="the message's transactionId (one payload only; "
                                       "a repeat within the dedup window is a duplicate)")
@api_options
def push(api: Api, queue: str, payloads: tuple[str, ...], partition: str,
         source: TextIO | None, count: int, transaction_id: str | None) -> None:
    """Push messages to QUEUE. Each PAYLOAD is JSON (or plain text, sent as a string)."""
    documents = [_payload(p) for p in payloads]
    if source is not None:
        documents += [_payload(line) for line in source.read().splitlines() if line.strip()]
    if not documents:
        raise CtlError("nothing to push: give PAYLOAD arguments or --file", USAGE)
    if transaction_id is not None and (len(documents) != 1 or count != 1):
        raise CtlError("--transaction-id names one message: give one payload and no --count",
                       USAGE)
    items = [{"queue": queue, "partition": partition, "payload": doc}
             for doc in documents for _ in range(count)]
    if transaction_id is not None:
        items[0]["transactionId"] = transaction_id
    results: list[dict[str, Any]] = []
    with render.progress("pushing", len(items), quiet=api.as_json) as bar:
        for start in range(0, len(items), _CHUNK):
            chunk = items[start:start + _CHUNK]
            results += api.post("/api/v1/push", {"items": chunk})
            bar.advance(bar.task_ids[0], len(chunk))
    failed = [r for r in results if r.get("status") == "failed"]
    if not api.printed_as_json(results):
        tally: dict[str, int] = {}
        for r in results:
            tally[r["status"]] = tally.get(r["status"], 0) + 1
        render.line(f"{len(results)} message(s) to {queue}/{partition}: "
                    + ", ".join(f"{n} {status}" for status, n in sorted(tally.items())))
        if len(results) == 1:
            render.line(f"transactionId {results[0]['transactionId']}")
        for r in failed[:5]:
            render.line(f"failed: {r.get('error')}")
    if failed:
        raise SystemExit(REFUSED)


@click.command()
@click.argument("queue")
@click.option("--partition", "-p", help="only this partition")
@click.option("--group", "-g", help="consumer group (default: the queue mode's)")
@click.option("--batch", "-b", type=click.IntRange(1, 10_000), default=1, show_default=True)
@click.option("--wait", "wait_seconds", type=click.IntRange(0, 3600), default=0,
              help="seconds to wait for a message (long poll); 0: answer at once")
@click.option("--no-ack", is_flag=True,
              help="leave the messages leased (redelivered when the lease ends)")
@click.option("--fail", "failure", metavar="REASON",
              help="acknowledge them as failed with this reason (retried, then "
                   "dead-lettered)")
@api_options
def pop(api: Api, queue: str, partition: str | None, group: str | None, batch: int,
        wait_seconds: int, no_ack: bool, failure: str | None) -> None:
    """Pop messages from QUEUE, print them and acknowledge them (completed, unless
    --fail or --no-ack)."""
    if no_ack and failure is not None:
        raise CtlError("--no-ack and --fail exclude each other", USAGE)
    path = f"/api/v1/pop/queue/{segment(queue)}"
    if partition is not None:
        path += f"/partition/{segment(partition)}"
    params = {"batch": batch, "consumerGroup": group, "wait": wait_seconds > 0,
              "timeout": wait_seconds * 1000 if wait_seconds else None}
    answer = api.call("GET", path, params=params, timeout=api.timeout + wait_seconds)
    messages = (answer or {}).get("messages") or []
    if not messages:
        require_queue(api, queue)  # the broker answers a pop of an unknown queue with 204
    acks: list[dict[str, Any]] = []
    if messages and not no_ack:
        status = "failed" if failure is not None else "completed"
        acks = api.post("/api/v1/ack/batch", {
            "consumerGroup": group,
            "acknowledgments": [{"transactionId": m["transactionId"],
                                 "partitionId": m["partitionId"], "leaseId": m["leaseId"],
                                 "status": status, "error": failure} for m in messages]})
    if not api.printed_as_json({"messages": messages, "acks": acks}):
        render.table(None, ("partition", "transactionId", "payload"),
                     [(m["partition"], m["transactionId"], json.dumps(m["data"]))
                      for m in messages], empty="no messages")
        if acks:
            render.line(_ack_summary(acks, failed=failure is not None))
        elif messages:
            render.line(f"left leased (lease {messages[0]['leaseId']})")
    if any(not a.get("success") for a in acks):
        raise SystemExit(REFUSED)


def _ack_summary(acks: list[dict[str, Any]], *, failed: bool) -> str:
    done = sum(1 for a in acks if a.get("success"))
    text = f"acknowledged {done} of {len(acks)} as {'failed' if failed else 'completed'}"
    if not failed:
        return text
    # A failure commits nothing: the message is retried (or dead-lettered past its retry
    # limit), and the later messages of its partition are delivered again.
    dead = sum(1 for a in acks if a.get("dlq"))
    return f"{text}: {dead} dead-lettered, {done - dead} to be delivered again"
