"""The timer routes (wire-protocol-extensions §16), and the operators' list of queues with
pending timers (the dashboard's).

The client percent-encodes the queue fully (`%2F` for `/`) and keeps `/` in the key, while
Starlette routes on the decoded path; so the queue and key are read from the raw path: the
first raw segment after `/api/v1/timers/` is the queue, the rest the key, each decoded once.
"""

from __future__ import annotations

import base64
from urllib.parse import unquote

from msgspec import UNSET
from starlette.requests import Request
from starlette.responses import Response

from broker.auth.gate import Identity
from broker.state import broker_of
from broker.wire.common import MAX_AFTER_LIMIT, AfterQuery
from broker.wire.http import json_response
from broker.wire.timers import (
    CancelQuery,
    TimerListOrCount,
    TimerListQuery,
    TimerPath,
    TimerQueueOut,
    TimerQueuePath,
    TimerQueues,
    TimerRowOut,
)
from core.errors import Refused
from core.names import check_name
from core.timefmt import iso
from core.timers.ops import BAD, MAX_KEY_BYTES
from core.timers.service import TimerRow

_PREFIX = b"/api/v1/timers/"
DEFAULT_LIMIT = 100


def address(request: Request) -> tuple[str, str | None]:
    """(queue, key or None) from the raw path."""
    raw: bytes = request.scope.get("raw_path") or request.scope["path"].encode()
    rest = raw[len(_PREFIX):] if raw.startswith(_PREFIX) else b""
    queue_raw, slash, key_raw = rest.partition(b"/")
    queue = unquote(queue_raw.decode("latin-1"), errors="replace")
    try:
        check_name(queue)
    except (ValueError, TypeError) as exc:
        raise Refused(BAD, "timers_bad_queue", f"queue {exc}") from None
    if not slash:
        return queue, None
    key = unquote(key_raw.decode("latin-1"), errors="replace")
    if len(key.encode()) > MAX_KEY_BYTES or "\x00" in key:
        raise Refused(BAD, "timers_bad_key", f"timerKey must be at most {MAX_KEY_BYTES} bytes "
                                             "without NUL")
    return queue, key


async def timers_call(request: Request, body: object, identity: Identity,
                      tenant: str) -> Response:
    results = await broker_of(request).timers.call(body, identity.sub, tenant=tenant)
    return json_response({"results": results})


async def cancel(request: Request, path: TimerPath, query: CancelQuery,
                 tenant: str) -> Response:
    queue, key = address(request)
    txn = None if query.txn is UNSET else query.txn
    return json_response(await broker_of(request).timers.cancel(queue, key or "", txn,
                                                                tenant=tenant))


def row_out(row: TimerRow) -> TimerRowOut:
    return TimerRowOut(
        found=True, queue=row.queue, timerKey=row.timer_key, partition=row.partition,
        deliverAt=iso(row.deliver_at), txn=row.txn, messageId=str(row.message_id),
        payload=UNSET if row.payload is None else base64.b64encode(row.payload).decode(),
        payloadZstd=row.payload_zstd, encrypted=row.encrypted, producerSub=row.producer_sub,
        attempts=row.attempts, lastError=row.last_error, claimed=row.claimed,
        createdAt=iso(row.created_at), updatedAt=iso(row.updated_at))


async def peek(request: Request, path: TimerPath, tenant: str) -> Response:
    queue, key = address(request)
    if key is None:  # `/timers/a%2Fb` decodes to two segments and lands here: a list
        return await _list_or_count(request, queue, _list_query(request), tenant)
    row = await broker_of(request).timers.peek(queue, key, tenant=tenant)
    if row is None:
        return json_response(TimerRowOut(found=False, queue=queue, timerKey=key))
    return json_response(row_out(row))


async def list_timers(request: Request, path: TimerQueuePath, query: TimerListQuery,
                      tenant: str) -> Response:
    queue, _ = address(request)
    return await _list_or_count(request, queue, query, tenant)


def _list_query(request: Request) -> TimerListQuery:
    params = request.query_params
    return TimerListQuery(**{name: params[name] for name in TimerListQuery.__struct_fields__
                             if name in params})


async def _list_or_count(request: Request, queue: str, query: TimerListQuery,
                         tenant: str) -> Response:
    timers = broker_of(request).timers
    mode = "list" if query.mode is UNSET else query.mode
    if mode == "count":
        if query.after is not UNSET or query.limit is not UNSET:
            raise Refused(BAD, "timers_bad_count", "mode=count takes only prefix")
        if query.prefix is UNSET:
            raise Refused(BAD, "timers_bad_prefix", "mode=count needs a prefix")
        count = await timers.count(queue, query.prefix, tenant=tenant)
        return json_response(TimerListOrCount(count=count))
    if mode != "list":
        raise Refused(BAD, "timers_bad_mode", f"mode must be list or count, not {mode[:32]!r}")
    after = "" if query.after is UNSET else query.after
    if "\x00" in after:
        raise Refused(BAD, "timers_bad_after", "after must not contain NUL")
    page = await timers.page(queue, after=after, limit=_limit(query.limit), tenant=tenant)
    return json_response(TimerListOrCount([row_out(r) for r in page.rows], page.truncated,
                                          page.next_after))


def _limit(given: str | object) -> int:
    if not isinstance(given, str):
        return DEFAULT_LIMIT
    try:
        value = int(given)
    except ValueError:
        raise Refused(BAD, "timers_bad_limit", "limit must be an integer") from None
    return min(max(value, 1), MAX_AFTER_LIMIT)  # clamped, never refused (§16.3)


async def timer_queues(request: Request, query: AfterQuery, tenant: str) -> Response:
    if "\x00" in query.after:
        raise Refused(BAD, "timers_bad_after", "after must not contain NUL")
    page = await broker_of(request).timers.queues(
        after=query.after, limit=query.clamped_limit, tenant=tenant)
    return json_response(TimerQueues(
        [TimerQueueOut(r.queue, r.pending, iso(r.next_due), r.failing) for r in page.rows],
        page.truncated, page.next_after))

