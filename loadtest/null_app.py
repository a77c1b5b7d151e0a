"""L-HTTP, the transport ceiling: hypercorn + starlette with null handlers.

The push handler decodes its body into the broker's own fast-path Struct
(`broker.wire.push.PlainPushBody`, without the checks that follow it) and answers constant
verdicts, one per item; the pop handler answers a pre-built batch of 100 messages (valid
for the load generator's consumer, so the same client code measures both); the ack handler
decodes its body the same way (`broker.wire.ack.PlainAckBatch`) and answers constant
successes. Run it with the broker's worker count:
`hypercorn --worker-class uvloop --workers N loadtest.null_app:app`.
"""

from __future__ import annotations

import time

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from broker.wire.ack import PlainAckBatch
from broker.wire.push import PlainPushBody, PlainPushItem
from loadtest.corpus import build_corpus, payload

_PUSH = msgspec.json.Decoder(PlainPushBody)
_ACK = msgspec.json.Decoder(PlainAckBatch)
_JSON = {"content-type": "application/json"}
_ACK_ITEM = b'{"index":0,"transactionId":"x","success":true,"error":null,"leaseReleased":true,"dlq":false}'


def _verdict(i: int, item: PlainPushItem) -> bytes:
    return (b'{"index":%d,"transaction_id":"%s","message_id":"00000000-0000-7000-8000-000000000000",'
            b'"status":"queued","queueName":"%s","partition_id":"1","trace_id":null}'
            % (i, (item.transactionId or "").encode(), item.queue.encode()))


async def push(request: Request) -> Response:
    body = _PUSH.decode(await request.body())
    return Response(b"[" + b",".join(_verdict(i, it) for i, it in enumerate(body.items)) + b"]",
                    201, headers=_JSON)


def _prebuilt_pop() -> bytes:
    corpus = build_corpus()
    msgs = []
    for s in range(100):
        # A fixed send time in the past: the null pop's end-to-end figure means nothing.
        msgs.append(b'{"id":"00000000-0000-7000-8000-%012d","transactionId":"p999999-%d",'
                    b'"traceId":null,"data":%s,"producerSub":null,"createdAt":"2026-01-01T00:00:00.000Z",'
                    b'"partitionId":"1","partition":"p0","leaseId":"null-lease","consumerGroup":"g"}'
                    % (s, s, payload(corpus, 999999, s, time.time())))
    return (b'{"success":true,"queue":"null","partition":"p0","partitionId":"1",'
            b'"leaseId":"null-lease","consumerGroup":"g","messages":[' + b",".join(msgs)
            + b'],"partitionsClaimed":1}')


_POP_BODY = _prebuilt_pop()


async def pop(request: Request) -> Response:
    return Response(_POP_BODY, 200, headers=_JSON)


async def ack(request: Request) -> Response:
    body = _ACK.decode(await request.body())
    return Response(b"[" + b",".join(_ACK_ITEM for _ in body.acknowledgments) + b"]", 200,
                    headers=_JSON)


async def health(request: Request) -> Response:
    return Response(b'{"status":"healthy"}', 200, headers=_JSON)


app = Starlette(routes=[
    Route("/api/v1/push", push, methods=["POST"]),
    Route("/api/v1/pop/queue/{queue}", pop, methods=["GET"]),
    Route("/api/v1/ack/batch", ack, methods=["POST"]),
    Route("/health", health, methods=["GET"]),
])
