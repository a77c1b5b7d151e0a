"""Trace context through push, pop and ack (core/tracing.py, docs/operating/metrics.md).

With spans recorded (the app in this process, OpenTelemetry's in-memory exporter): a
producer's trace goes on through the broker's send and create spans, the consumer gets the
create span as the parent it continues from, and the ack settles in the same trace. Without
a tracer (a real broker process, TRACING_EXPORTER unset): the trace id still travels with
the message, and bad input is refused or ignored as the W3C recommendation says.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from broker.app import create_app
from core.settings import Settings
from core.tracing import Tracing
from tests.support import TEST_SPOOL_DIR, BrokerProcess

PRODUCER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PRODUCER_SPAN = "00f067aa0ba902b7"
PRODUCER = f"00-{PRODUCER_TRACE}-{PRODUCER_SPAN}-01"


@pytest.fixture
async def traced(own_database: str) -> AsyncIterator[tuple[httpx.AsyncClient,
                                                           InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    settings = Settings.from_env({"DATABASE_URL": own_database,
                                  "FILE_BUFFER_DIR": TEST_SPOOL_DIR})
    app = create_app(settings, tracing=Tracing.for_exporter(exporter))
    async with (app.router.lifespan_context(app),
                httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                  base_url="http://broker", timeout=30) as http):
        yield http, exporter


def _hex(value: int, width: int) -> str:
    return f"{value:0{width}x}"


def _spans(exporter: InMemorySpanExporter, name: str) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


async def test_a_producers_trace_goes_through_push_pop_and_ack(
        traced: tuple[httpx.AsyncClient, InMemorySpanExporter]) -> None:
    http, exporter = traced
    queue = "tr-" + uuid.uuid4().hex[:8]
    r = await http.post("/api/v1/push", headers={"traceparent": PRODUCER},
                        json={"items": [{"queue": queue, "payload": {"n": 1}}]})
    assert r.status_code == 201, r.text
    [pushed] = r.json()
    message_id = uuid.UUID(pushed["messageId"])
    assert pushed["trace_id"] == str(uuid.UUID(PRODUCER_TRACE))

    consumer = f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01"
    r = await http.get(f"/api/v1/pop/queue/{queue}", params={"wait": "false"},
                       headers={"traceparent": consumer})
    [message] = r.json()["messages"]
    message_span = message_id.bytes[8:].hex()
    assert message["traceparent"] == f"00-{PRODUCER_TRACE}-{message_span}-01"
    assert message["traceId"] == str(uuid.UUID(PRODUCER_TRACE))

    r = await http.post("/api/v1/ack", json={
        "transactionId": message["transactionId"], "partitionId": message["partitionId"],
        "leaseId": message["leaseId"], "status": "completed",
        "traceparent": message["traceparent"]})
    assert r.json()[0]["success"], r.text

    [send] = _spans(exporter, f"send {queue}")
    [create] = _spans(exporter, f"create {queue}")
    [receive] = _spans(exporter, f"receive {queue}")
    [settle] = _spans(exporter, "settle")
    # send: a server span in the producer's trace, child of the producer's span
    assert send.kind == SpanKind.SERVER
    assert _hex(send.context.trace_id, 32) == PRODUCER_TRACE
    assert _hex(send.parent.span_id, 16) == PRODUCER_SPAN and send.parent.is_remote
    assert send.attributes["queen.push.queued"] == 1
    # create: the message span, child of send; its id is the one pop hands on
    assert create.kind == SpanKind.PRODUCER
    assert _hex(create.context.span_id, 16) == message_span
    assert create.parent.span_id == send.context.span_id
    assert create.attributes["messaging.message.id"] == str(message_id)
    assert create.attributes["queen.push.status"] == "queued"
    # receive: in the consumer's own trace, linked to the message span
    assert _hex(receive.context.trace_id, 32) == consumer.split("-")[1]
    assert [(_hex(link.context.trace_id, 32), _hex(link.context.span_id, 16))
            for link in receive.links] == [(PRODUCER_TRACE, message_span)]
    assert receive.attributes["messaging.batch.message_count"] == 1
    # settle: in the producer's trace again, child of the message span it acked
    assert _hex(settle.context.trace_id, 32) == PRODUCER_TRACE
    assert _hex(settle.parent.span_id, 16) == message_span


async def test_with_tracing_on_a_message_without_context_starts_a_trace(
        traced: tuple[httpx.AsyncClient, InMemorySpanExporter]) -> None:
    http, exporter = traced
    queue = "tr-" + uuid.uuid4().hex[:8]
    own = f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01"
    r = await http.post("/api/v1/push", json={"items": [
        {"queue": queue, "payload": 1},
        {"queue": queue, "payload": 2, "traceparent": own}]})
    first, second = r.json()
    [send] = _spans(exporter, f"send {queue}")
    assert send.parent is None  # no header: a new trace, begun here
    trace = uuid.UUID(int=send.context.trace_id)
    assert first["trace_id"] == str(trace)
    assert second["trace_id"] == str(uuid.UUID(own.split("-")[1]))  # an item's own wins
    creates = {s.attributes["messaging.message.id"]: s for s in _spans(
        exporter, f"create {queue}")}
    assert creates[first["messageId"]].parent.span_id == send.context.span_id
    assert _hex(creates[second["messageId"]].parent.span_id, 16) == own.split("-")[2]


async def test_an_invalid_traceparent_field_is_refused_and_a_header_ignored(
        traced: tuple[httpx.AsyncClient, InMemorySpanExporter]) -> None:
    http, exporter = traced
    queue = "tr-" + uuid.uuid4().hex[:8]
    for bad in ("00-" + "0" * 32 + "-00f067aa0ba902b7-01", "garbage",
                f"ff-{PRODUCER_TRACE}-{PRODUCER_SPAN}-01", PRODUCER.upper()):
        r = await http.post("/api/v1/push", json={"items": [
            {"queue": queue, "payload": 1, "traceparent": bad}]})
        assert r.status_code == 400, (bad, r.text)
        assert "items[0].traceparent" in r.json()["error"], r.text
    r = await http.post("/api/v1/push", headers={"traceparent": "not-a-traceparent"},
                        json={"items": [{"queue": queue, "payload": 1}]})
    assert r.status_code == 201
    [send] = _spans(exporter, f"send {queue}")
    assert send.parent is None  # the trace restarts here


async def test_without_a_tracer_the_trace_still_travels_with_the_message(
        broker: BrokerProcess, http: httpx.AsyncClient) -> None:
    queue = "tr-" + uuid.uuid4().hex[:8]
    r = await http.post("/api/v1/push", headers={"traceparent": PRODUCER},
                        json={"items": [{"queue": queue, "payload": i} for i in range(2)]
                              + [{"queue": queue, "payload": 9,
                                  "traceId": "0e5c4c4e-97b0-4c4a-9a0f-3a54c9c0a7d1"}]})
    assert [p["trace_id"] for p in r.json()] == [str(uuid.UUID(PRODUCER_TRACE))] * 2 + [
        "0e5c4c4e-97b0-4c4a-9a0f-3a54c9c0a7d1"]  # an item's traceId wins over the header
    r = await http.get(f"/api/v1/pop/queue/{queue}", params={"wait": "false", "batch": 3})
    messages = r.json()["messages"]
    assert [m["traceparent"] for m in messages] == [
        f"00-{uuid.UUID(m['traceId']).hex}-{uuid.UUID(m['id']).bytes[8:].hex()}-01"
        for m in messages]
    assert messages[0]["traceparent"].split("-")[1] == PRODUCER_TRACE
    # A message without a trace has no traceparent at all.
    await http.post("/api/v1/push", json={"items": [{"queue": queue, "payload": "x"}]})
    r = await http.get(f"/api/v1/pop/queue/{queue}", params={
        "wait": "false", "consumerGroup": "later", "subscriptionMode": "all", "batch": 10})
    plain = [m for m in r.json()["messages"] if m["traceId"] is None]
    assert len(plain) == 1 and "traceparent" not in plain[0]


async def test_a_binary_push_takes_the_header_trace_into_its_frames(
        broker: BrokerProcess, http: httpx.AsyncClient) -> None:
    """Plain and framed QPB1 bodies carry no trace: the header's is stamped on their stored
    frames (a client-built frame is framed again to carry it)."""
    from queen.http.push_binary import PushBatch, encode_push_binary, encode_push_frames

    queue = "tr-" + uuid.uuid4().hex[:8]
    for body in (encode_push_binary([PushBatch(queue, "", [b"1"], ["p1"])]),
                 encode_push_frames([PushBatch(queue, "Default", [b"2", b"3"], ["f1", "f2"])])):
        r = await http.post("/api/v1/push", content=body, headers={
            "Content-Type": "application/x-queen-push", "traceparent": PRODUCER})
        assert r.status_code == 201, r.text
    r = await http.get(f"/api/v1/pop/queue/{queue}", params={"wait": "false", "batch": 10})
    messages = r.json()["messages"]
    assert [m["transactionId"] for m in messages] == ["p1", "f1", "f2"]
    assert {m["traceId"] for m in messages} == {str(uuid.UUID(PRODUCER_TRACE))}
