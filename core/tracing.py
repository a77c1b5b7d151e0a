"""Trace context through push, pop and ack (W3C Trace Context), and spans exported with
OpenTelemetry when TRACING_EXPORTER is set (docs/operating/metrics.md, "Trace context and OpenTelemetry").

Propagation needs no tracer. A message's trace id is the trace id its frame stores (the
wire's `traceId`: the 16 bytes of a W3C trace id are a UUID's); its span id is the last 8
bytes of its message id ("the message span"). So:

- push: a message takes the trace of its item's `traceparent`, else its item's `traceId`,
  else the request's `traceparent` header; the header of a binary push stamps its frames;
- pop: each JSON message with a trace carries `traceparent: 00-<trace id>-<message span
  id>-01`, so a consumer's span continues the trace as a child of the message span; a
  framed pop carries the trace id and the message id, from which a client forms the same;
- ack: an item's `traceparent` (or the request's header) says which traces the ack settles.

With a tracer (TRACING_EXPORTER=otlp or console, the `otel` extra installed) the broker
also records spans, following OpenTelemetry's messaging conventions:

- `send <queue>` (server) for a push request, child of the request's header; for each
  message a `create <queue>` (producer) span whose id IS the message span, child of the
  item's own context or of the send span. A message with no context takes the send span's
  trace, so with tracing on every pushed message can be followed;
- `receive <queue>` (server) for a pop request, child of its header, linked to the message
  span of each message delivered;
- `settle` (server) for an ack request, child of its header (or of the one context its
  items share), linked to the items' contexts.

Without a tracer nothing here runs beyond reading the one header (`Tracing.off()`).
Invalid `traceparent` headers are ignored, as the W3C recommendation says (the trace
restarts); an invalid `traceparent` field in a body is the client's error (400).
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.env import SettingsError

if TYPE_CHECKING:
    from core.settings import Settings

# version-traceid-parentid-flags; a later version may append fields after a dash
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16
MAX_LINKS = 128  # links per span: a pop of 10,000 messages does not make a 10,000-link span
SYSTEM = "queen"  # messaging.system


@dataclass(frozen=True, slots=True)
class TraceParent:
    """A W3C trace context: a trace id (as a UUID) and the id of the span it comes from."""

    trace_id: uuid.UUID
    span_id: bytes  # 8 bytes
    sampled: bool = True

    def header(self) -> str:
        return (f"00-{self.trace_id.hex}-{self.span_id.hex()}-"
                f"{'01' if self.sampled else '00'}")


def parse(text: str) -> TraceParent:
    """A `traceparent` value; ValueError saying what is wrong with it."""
    found = _TRACEPARENT.fullmatch(text.strip())
    if found is None:
        raise ValueError("must be a W3C traceparent: 00-<32 hex digits>-<16 hex digits>-"
                         "<2 hex digits>, lowercase")
    version, trace, span, flags, rest = found.groups()
    if version == "ff" or (version == "00" and rest):
        raise ValueError(f"has an invalid version for its length ({version})")
    if trace == _ZERO_TRACE or span == _ZERO_SPAN:
        raise ValueError("has an all-zero trace id or parent id")
    return TraceParent(uuid.UUID(hex=trace), bytes.fromhex(span), bool(int(flags, 16) & 1))


def from_header(text: str | None) -> TraceParent | None:
    """The request's `traceparent` header; None when absent or invalid (ignored)."""
    if not text:
        return None
    try:
        return parse(text)
    except ValueError:
        return None


def message_span_id(message_id: uuid.UUID) -> bytes:
    """The message span's id: the last 8 bytes of the message id (never all zero in a
    UUIDv7 or v4: its variant bits are set)."""
    return message_id.bytes[8:]


def of_message(trace_id: uuid.UUID, message_id: uuid.UUID) -> TraceParent:
    """The context a pop hands on with a message of that trace."""
    return TraceParent(trace_id, message_span_id(message_id))


# The span id the next span gets (the message span of a create span); see _SpanIds.
_NEXT_SPAN_ID: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "queen_next_span_id", default=None)


@dataclass(slots=True)
class PushTrace:
    """The spans of one push request: `trace_ids[i]` is the trace item i is stored under."""

    trace_ids: list[uuid.UUID | None]
    spans: list[Any] = field(default_factory=list)  # send span first, then create spans

    def end(self, statuses: Sequence[str]) -> None:
        """End the spans; `statuses[i]`: what became of item i (queued, duplicate, ...)."""
        if not self.spans:
            return
        send, creates = self.spans[0], self.spans[1:]
        for span, status in zip(creates, statuses):
            span.set_attribute("queen.push.status", status)
            span.end()
        send.set_attribute("queen.push.queued", sum(s == "queued" for s in statuses))
        send.end()


class Tracing:
    """The broker's tracer, or none (`Tracing.off()`): then every method answers at once."""

    def __init__(self, tracer: Any = None, provider: Any = None) -> None:
        self._tracer = tracer
        self._provider = provider

    @classmethod
    def off(cls) -> Tracing:
        return cls()

    @property
    def enabled(self) -> bool:
        return self._tracer is not None

    @classmethod
    def for_exporter(cls, exporter: Any, *, sample_ratio: float = 1.0,
                     batch: bool = False) -> Tracing:
        """A tracer exporting to `exporter` (tests: the SDK's InMemorySpanExporter)."""
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
            from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
            from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
        except ImportError:
            raise SettingsError("tracing needs OpenTelemetry: pip install "
                                "'queen-broker[otel]'") from None

        class _SpanIds(RandomIdGenerator):
            """Random ids, except the one a create span must have (its message span)."""

            def generate_span_id(self) -> int:
                chosen = _NEXT_SPAN_ID.get()
                return chosen if chosen is not None else int(super().generate_span_id())

        provider = TracerProvider(
            resource=Resource.create({"service.name": "queen-broker"}),
            sampler=ParentBased(TraceIdRatioBased(sample_ratio)), id_generator=_SpanIds())
        processor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
        provider.add_span_processor(processor)
        return cls(provider.get_tracer("queen-broker"), provider)

    @classmethod
    def from_settings(cls, settings: Settings) -> Tracing:
        kind = settings.tracing_exporter
        if kind == "none":
            return cls.off()
        try:
            if kind == "console":
                from opentelemetry.sdk.trace.export import ConsoleSpanExporter

                exporter: Any = ConsoleSpanExporter()
            else:  # otlp: endpoint and headers from the OTEL_EXPORTER_OTLP_* variables
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                    OTLPSpanExporter,
                )

                exporter = OTLPSpanExporter()
        except ImportError:
            raise SettingsError(f"TRACING_EXPORTER={kind} needs OpenTelemetry: pip install "
                                "'queen-broker[otel]'") from None
        return cls.for_exporter(exporter, sample_ratio=settings.tracing_sample_ratio,
                                batch=True)

    def shutdown(self) -> None:
        """Export what is buffered and stop (the process is stopping)."""
        if self._provider is not None:
            self._provider.shutdown()

    # --- spans ----------------------------------------------------------------------------

    def _context(self, parent: TraceParent | None) -> Any:
        from opentelemetry import trace

        if parent is None:
            return None
        return trace.set_span_in_context(trace.NonRecordingSpan(_span_context(parent)))

    def push(self, header: TraceParent | None,
             items: Sequence[tuple[uuid.UUID, str, uuid.UUID | None, TraceParent | None]]
             ) -> PushTrace:
        """Start a push request's spans. `items`: per message its id, its queue, the trace
        id its item named (`traceId`) and its item's `traceparent`. Answers the trace each
        is stored under (without a tracer: its own, else the header's, else none)."""
        if self._tracer is None:
            fallback = header.trace_id if header else None
            return PushTrace([own.trace_id if own else named or fallback
                              for _, _, named, own in items])
        from opentelemetry import trace

        queues = sorted({queue for _, queue, _, _ in items})
        queue = queues[0] if len(queues) == 1 else "(several queues)"
        send = self._tracer.start_span(
            f"send {queue}", context=self._context(header), kind=trace.SpanKind.SERVER,
            attributes={"messaging.system": SYSTEM, "messaging.operation.type": "send",
                        "messaging.destination.name": queue,
                        "messaging.batch.message_count": len(items)})
        send_ctx = trace.set_span_in_context(send)
        send_trace = uuid.UUID(int=send.get_span_context().trace_id)
        traced = PushTrace([], [send])
        for message_id, item_queue, named, own in items:
            if own is None and named is not None:  # a trace id alone: no span to hang under
                traced.trace_ids.append(named)
                traced.spans.append(_NoSpan())
                continue
            token = _NEXT_SPAN_ID.set(int.from_bytes(message_span_id(message_id), "big"))
            try:
                span = self._tracer.start_span(
                    f"create {item_queue}",
                    context=self._context(own) if own is not None else send_ctx,
                    kind=trace.SpanKind.PRODUCER,
                    attributes={"messaging.system": SYSTEM,
                                "messaging.operation.type": "create",
                                "messaging.destination.name": item_queue,
                                "messaging.message.id": str(message_id)})
            finally:
                _NEXT_SPAN_ID.reset(token)
            traced.trace_ids.append(own.trace_id if own is not None else send_trace)
            traced.spans.append(span)
        return traced

    @contextlib.contextmanager
    def receive(self, queue: str | None, group: str, header: TraceParent | None
                ) -> Iterator[Any]:
        """A pop request's span (None without a tracer); `delivered` links its messages."""
        if self._tracer is None:
            yield None
            return
        from opentelemetry import trace

        name = f"receive {queue}" if queue else "receive"
        with self._tracer.start_as_current_span(
                name, context=self._context(header), kind=trace.SpanKind.SERVER,
                attributes={"messaging.system": SYSTEM, "messaging.operation.type": "receive",
                            "messaging.consumer.group.name": group,
                            **({"messaging.destination.name": queue} if queue else {})},
                end_on_exit=True) as span:
            yield span

    def delivered(self, span: Any, contexts: Sequence[TraceParent]) -> None:
        """Link a receive span to the message spans it delivered (at most MAX_LINKS)."""
        if span is None:
            return
        span.set_attribute("messaging.batch.message_count", len(contexts))
        for context in contexts[:MAX_LINKS]:
            span.add_link(_span_context(context))

    @contextlib.contextmanager
    def settle(self, group: str, header: TraceParent | None,
               contexts: Sequence[TraceParent]) -> Iterator[Any]:
        """An ack request's span, linked to the contexts its items carried."""
        if self._tracer is None:
            yield None
            return
        from opentelemetry import trace

        distinct = list(dict.fromkeys(contexts))
        parent = header if header is not None else (distinct[0] if len(distinct) == 1 else None)
        links = [trace.Link(_span_context(c)) for c in distinct[:MAX_LINKS] if c != parent]
        with self._tracer.start_as_current_span(
                "settle", context=self._context(parent), kind=trace.SpanKind.SERVER,
                links=links,
                attributes={"messaging.system": SYSTEM, "messaging.operation.type": "settle",
                            "messaging.consumer.group.name": group},
                end_on_exit=True) as span:
            yield span


def check_available(settings: Settings) -> None:
    """Raise SettingsError at start-up when TRACING_EXPORTER names an exporter whose packages
    are missing, rather than in every web worker as it starts."""
    if settings.tracing_exporter != "none":
        Tracing.from_settings(settings).shutdown()


class _NoSpan:
    """Stands in for the create span of a message that gets none."""

    def set_attribute(self, key: str, value: object) -> None:
        pass

    def end(self) -> None:
        pass


def _span_context(parent: TraceParent) -> Any:
    from opentelemetry import trace

    return trace.SpanContext(
        trace_id=parent.trace_id.int, span_id=int.from_bytes(parent.span_id, "big"),
        is_remote=True,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED if parent.sampled else 0))
