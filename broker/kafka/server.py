"""The Kafka listener's connections: frames in, one request at a time, answers out.

Each connection is served serially, as Kafka does: a request is read, answered, then the
next is read (clients that pipeline just wait in the socket). A frame longer than the
limit, a request that does not decode, an unknown API key or version: the connection is
closed with nothing more sent, and the reason logged; the process serves on. A handler's
unexpected error closes only its connection too. After a SaslHandshake v0 the next frame is
not a request but the bare PLAIN message (sasl.py). A connection that sends no request, or
reads none of its answer, for the idle time (QUEEN_KAFKA_IDLE_SECONDS) is closed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from broker.auth.gate import Gate
from broker.connection import drained
from broker.kafka import (
    consumer_protocol,
    errors,
    fetch,
    groups,
    produce,
    producers,
    protocol,
    sasl,
    topics,
)
from broker.kafka.protocol import Request, Unreadable
from broker.kafka.session import Session
from broker.tls.peer import client_identity
from core.errors import QueenError
from core.service import Broker

log = logging.getLogger("queen.kafka")

Handler = Callable[[Session, Request], Awaitable[dict[str, Any] | None]]
# A connection that sends nothing, or does not read its answer, for this long is closed
# (Kafka's connections.max.idle.ms; QUEEN_KAFKA_IDLE_SECONDS of the process).
IDLE_SECONDS = 600.0
# The rest of a frame whose length arrived must follow within this.
FRAME_SECONDS = 60.0


async def api_versions(session: Session, request: Request) -> dict[str, Any]:
    table = [{"api_key": k, "min_version": lo, "max_version": hi}
             for k, (lo, hi) in sorted(protocol.SUPPORTED.items())]
    if request.body is None:
        return {"error_code": errors.UNSUPPORTED_VERSION, "api_keys": table}
    return {"error_code": errors.NONE, "api_keys": table, "throttle_time": 0}


HANDLERS: dict[int, Handler] = {
    protocol.API_VERSIONS: api_versions,
    protocol.METADATA: topics.metadata,
    protocol.PRODUCE: produce.produce,
    protocol.FETCH: fetch.fetch,
    protocol.LIST_OFFSETS: fetch.list_offsets,
    protocol.INIT_PRODUCER_ID: producers.init_producer_id,
    protocol.CREATE_TOPICS: topics.create_topics,
    protocol.DELETE_TOPICS: topics.delete_topics,
    protocol.FIND_COORDINATOR: groups.find_coordinator,
    protocol.JOIN_GROUP: groups.join_group,
    protocol.SYNC_GROUP: groups.sync_group,
    protocol.HEARTBEAT: groups.heartbeat,
    protocol.LEAVE_GROUP: groups.leave_group,
    protocol.OFFSET_COMMIT: groups.offset_commit,
    protocol.OFFSET_FETCH: groups.offset_fetch,
    protocol.DESCRIBE_GROUPS: groups.describe_groups,
    protocol.LIST_GROUPS: groups.list_groups,
    protocol.DELETE_GROUPS: groups.delete_groups,
    protocol.SASL_HANDSHAKE: sasl.handshake,
    protocol.CONSUMER_GROUP_HEARTBEAT: consumer_protocol.heartbeat,
}
# What a connection may ask before it authenticated (auth on).
BEFORE_AUTH = {protocol.API_VERSIONS, protocol.SASL_HANDSHAKE, protocol.SASL_AUTHENTICATE}


class Listener:
    """Serves connections for one process's broker."""

    def __init__(self, broker: Broker, *, advertised: tuple[str, int] | None,
                 max_request_bytes: int, gate: Gate | None = None, node_id: int = 0,
                 idle_seconds: float = IDLE_SECONDS) -> None:
        self.broker = broker
        self.idle_seconds = idle_seconds
        self.node_id = node_id
        self.advertised = advertised
        self.max_request_bytes = max_request_bytes
        self.gate = gate  # auth on: SASL/PLAIN with our tokens
        self.authenticator = sasl.Authenticator(gate)
        self.handlers = {**HANDLERS,
                         protocol.SASL_AUTHENTICATE: self.authenticator.authenticate}
        self.connections: set[asyncio.Task[None]] = set()
        # Connections between two requests (waiting for the next frame's length), and
        # whether the process stops: then those close at once and the others after the
        # request they are answering.
        self.between_requests: set[asyncio.Task[None]] = set()
        self.stopping = False

    def close_idle(self) -> None:
        """The process stops: connections waiting for a request close now (a Kafka client
        reconnects elsewhere); one answering a request closes once it answered."""
        self.stopping = True
        for task in list(self.between_requests):
            task.cancel()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.connections.add(task)
        peer = writer.get_extra_info("peername")
        try:
            host, port = self.advertised or writer.get_extra_info("sockname")[:2]
            session = Session(self.broker, host, port, self.max_request_bytes, self.node_id,
                              peer=str(peer[0]) if peer else "",
                              auth_required=self.gate is not None,
                              certificate=client_identity(writer.get_extra_info("ssl_object")))
            await self._requests(session, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        except asyncio.CancelledError:
            pass  # the process stops: what was in flight had its grace
        except Unreadable as exc:
            log.info("closing Kafka connection from %s: %s", peer, exc)
        except Exception:
            log.exception("closing Kafka connection from %s after an error", peer)
        finally:
            self.connections.discard(task)
            writer.close()

    async def _requests(self, session: Session, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        while not self.stopping:
            self.between_requests.add(task)
            try:
                async with asyncio.timeout(self.idle_seconds):
                    head = await reader.readexactly(4)
            finally:
                self.between_requests.discard(task)
            size = protocol.frame_length(head)
            if size < 0 or size > self.max_request_bytes:
                raise Unreadable(f"a frame of {size} bytes (limit {self.max_request_bytes})")
            if not await self._request(session, reader, writer, size):
                return

    async def _request(self, session: Session, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter, size: int) -> bool:
        """Read a request of `size` bytes and answer it; False when the client went away.
        Apart from the loop so that the request and its answer (up to a Fetch's cap) are
        freed once answered, not held while the connection waits for the next request: a
        reset there also kept them, in the traceback of the error the reader keeps."""
        async with asyncio.timeout(FRAME_SECONDS):
            data = await reader.readexactly(size)
        if session.bare_sasl_next:
            await self._bare_sasl(session, data, writer)
            return True
        request = protocol.read_request(data)
        if not session.authenticated and request.api_key not in BEFORE_AUTH:
            raise Unreadable(f"API key {request.api_key} before authentication")
        if session.expires is not None and time.time() >= session.expires:
            raise Unreadable("the connection's token expired")
        try:
            answer = await self.answer(session, request)
        except sasl.SaslFailed as failed:
            await self._send(writer, [protocol.response_bytes(request, failed.answer)])
            raise Unreadable(str(failed)) from None
        return answer is None or await self._send(writer, answer)

    async def _bare_sasl(self, session: Session, message: bytes,
                         writer: asyncio.StreamWriter) -> None:
        """The PLAIN message after a SaslHandshake v0: an empty frame answers success; a
        refusal has no answer in this exchange, so the connection closes (as Kafka does)."""
        try:
            await self.authenticator.bare(session, message)
        except sasl.SaslFailed as failed:
            raise Unreadable(str(failed)) from None
        await self._send(writer, [protocol.frame(b"")])

    async def answer(self, session: Session, request: Request) -> list[bytes] | None:
        handler = self.handlers[request.api_key]
        if request.api_key not in BEFORE_AUTH:
            # The tenant's request rate (docs/security/tenants.md): a Kafka client is
            # slowed down to it, as Kafka quotas do, instead of being refused.
            await self.broker.throttle_request(session.tenant)
        try:
            values = await handler(session, request)
        except QueenError as exc:
            # The database is down, or the like: Kafka clients retry a closed connection.
            raise Unreadable(f"API key {request.api_key}: {exc.message}") from exc
        if values is None:
            return None
        if request.api_key == protocol.API_VERSIONS and request.body is None:
            from kio.schema.api_versions.v0.response import ApiVersionsResponse
            return protocol.encode_parts(ApiVersionsResponse, request.correlation_id,
                                         protocol.build(ApiVersionsResponse, values))
        return protocol.response_parts(request, values)


    async def _send(self, writer: asyncio.StreamWriter, parts: list[bytes]) -> bool:
        """Write an answer's parts; False, writing nothing, when the client already went away
        (a reset while it was answered: uvloop's transport refuses the write with
        RuntimeError); False too when it goes away while the answer is written, or reads
        none of it for the idle time (then the connection is aborted: otherwise a client
        that sends a Fetch and never reads held the answer and the connection for ever)."""
        if writer.is_closing():
            return False
        writer.writelines(parts)
        return await drained(writer, self.idle_seconds)

