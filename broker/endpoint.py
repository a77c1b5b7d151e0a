"""One row of the route table, and the Starlette routes derived from the table.

A row says everything the edge needs about a route: path, method, handler, summary, the
Structs of its path parameters, query string and body, its answers per status, and its
access level (§9). The Starlette routes and the OpenAPI document are both built from the
rows, so they cannot disagree. The request pipeline is the same for every route:

0. admit the caller at the row's access level (`broker.auth.gate`), decide the tenant it
   acts in (`broker.tenancy`: an OPERATOR route refuses a request bound to a tenant), and
   take one token of that tenant's request rate (core/tenancy: 429 over it): a refusal
   (400/401/403/429) is answered before the body is decoded, and a row cannot be built
   without a level;
1. read the body (every route does, bounded by the body limit, so unread bytes never wedge
   a kept-alive connection), then decode path parameters, query string and body into their
   Structs (a route with a binary body, §7, decodes a body sent as
   `application/x-queen-push` with its own decoder instead): any problem is a 4xx naming
   the field, before anything touches the database;
2. call the handler with `request` plus `path`, `query` and `body` as the row declares, the
   caller's `identity` if the handler takes one, and its tenant as `tenant` (the name) or
   `tenancy` (broker.tenancy.Tenancy). Every row of the table but PUBLIC and OPERATOR ones
   takes it (`Endpoint.scoped`).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from broker.auth.access import Access
from broker.auth.errors import Forbidden
from broker.errors import error_response, refusal
from broker.state import state_of
from broker.tenancy import Tenancy, resolve
from broker.tls.peer import scope_identity
from broker.wire.binary import BINARY_MEDIA_TYPE, media_type
from broker.wire.common import ErrorBody
from broker.wire.decoding import decode_body, decode_strings
from broker.wire.http import json_response, read_body
from core.counters import COUNTERS
from core.errors import ClientError, Coded, Limited, QueenError
from core.settings import Settings

Handler = Callable[..., Awaitable[Response]]
TEXT = "text/plain"  # an answer that is not JSON (Prometheus exposition, the docs page)
HTML = "text/html"
# Decodes a binary body (`application/x-queen-push`, §7) within the settings' limits.
BinaryDecoder = Callable[[bytes, Settings], Any]
# Routes counted by kind in the metrics (queen_cluster_<kind>_requests_total, and latency
# histograms for push, pop and ack); every request counts in queen_cluster_requests_total.
REQUEST_KINDS = {
    "/api/v1/push": "push",
    "/api/v1/pop/queue/{queue}": "pop",
    "/api/v1/pop/queue/{queue}/partition/{partition}": "pop",
    "/api/v1/pop": "pop",
    "/api/v1/ack": "ack",
    "/api/v1/ack/batch": "ack",
    "/api/v1/transaction": "transaction",
}


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str  # Starlette syntax; `{name:path}` takes a segment that may contain `/`
    handler: Handler
    summary: str
    # status -> Struct type, None (no body), a media type (a str: the answer is text or
    # bytes of that type), or a tuple of those when the answer comes in several types
    responses: Mapping[int, Any]
    path_params: type | None = None
    query: type | None = None
    body: type | None = None
    # The body's alternative, sent as `application/x-queen-push` (§7); its docstring says
    # what it is in the OpenAPI document.
    binary_body: BinaryDecoder | None = None
    # A route whose body refusals have codes of their own (extensions §14.4, §15.2), or that
    # decodes its JSON body a faster way than field by field (push), decodes its JSON body
    # with this instead of into `body`, which then only documents it.
    decode: BinaryDecoder | None = None
    # A GET that changes state (pop) answers HEAD with 405 instead of running.
    changes_state: bool = False
    # The body of this route's 4xx answers when the protocol fixes one (§4.4, §4.7).
    client_error: Callable[[str], Any] | None = None
    # Who may call it when auth is on (§9). Required: a row without a level cannot be built.
    access: Access = field(kw_only=True)
    takes_identity: bool = field(init=False, default=False)
    takes_tenant: bool = field(init=False, default=False)  # the tenant's name, as `tenant`
    takes_tenancy: bool = field(init=False, default=False)  # all of it, as `tenancy`

    def __post_init__(self) -> None:
        if not isinstance(self.access, Access):
            raise TypeError(f"{self.method} {self.path} has no access level")
        wanted = {"request"} | {name for name, kind in (
            ("path", self.path_params), ("query", self.query), ("body", self.body))
            if kind is not None}
        given = set(inspect.signature(self.handler).parameters)
        object.__setattr__(self, "takes_identity", "identity" in given)
        object.__setattr__(self, "takes_tenant", "tenant" in given)
        object.__setattr__(self, "takes_tenancy", "tenancy" in given)
        if given - {"identity", "tenant", "tenancy"} != wanted:
            raise TypeError(f"{self.handler.__name__} takes {sorted(given)}, but the table "
                            f"declares {sorted(wanted)} for {self.method} {self.path}")

    @property
    def scoped(self) -> bool:
        """Whether the handler is given the request's tenant. Every row of the table but
        PUBLIC and OPERATOR ones is (tests/unit/test_access_table.py checks it), so no
        route can forget to scope what it touches by tenant."""
        return self.takes_tenant or self.takes_tenancy

    @property
    def open_path(self) -> str:
        """The path in OpenAPI syntax (no Starlette convertors)."""
        return self.path.replace(":path}", "}")

    async def serve(self, request: Request) -> Response:
        """Answer the request (see the module docstring), counting it whatever the outcome."""
        started = time.perf_counter()
        try:
            return await self._serve(request)
        finally:
            COUNTERS.request(REQUEST_KINDS.get(self.path), time.perf_counter() - started)

    async def _serve(self, request: Request) -> Response:
        state = state_of(request)
        try:
            identity = await state.gate.admit(
                request.scope["path"], request.headers.get("authorization"), self.access,
                scope_identity(request.scope))
            tenancy = self._tenancy(request, identity)
        except QueenError as exc:
            return await refusal(request, exc)
        try:
            raw = await read_body(request, state.settings.max_body_bytes)
            args: dict[str, Any] = {"identity": identity} if self.takes_identity else {}
            if self.takes_tenant:
                args["tenant"] = tenancy.tenant
            if self.takes_tenancy:
                args["tenancy"] = tenancy
            if self.path_params is not None:
                args["path"] = decode_strings(request.path_params, self.path_params)
            if self.query is not None:
                args["query"] = decode_strings(request.query_params, self.query)
            if self.binary_body is not None and media_type(
                    request.headers.get("content-type", "")) == BINARY_MEDIA_TYPE:
                args["body"] = self.binary_body(raw, state.settings)
            elif self.decode is not None:
                args["body"] = self.decode(raw, state.settings)
            elif self.body is not None:
                args["body"] = decode_body(raw, self.body)
            return await self.handler(request, **args)
        except ClientError as exc:
            if self.client_error is None or isinstance(exc, Limited):
                raise  # a quota's refusal has one shape on every route (broker/errors.py)
            answer = error_response(exc)
            if isinstance(exc, Coded):
                # A coded refusal (a transaction's `kv` rider, extensions §17) is the route's
                # failure with the code as `error`, plus `reason` and `detail`.
                body = {**msgspec.to_builtins(self.client_error(exc.code)),
                        "reason": exc.reason, "detail": exc.message}
            else:
                body = self.client_error(exc.message)
            return json_response(body, answer.status_code,
                                 headers={k: v for k, v in answer.headers.items()
                                          if k in ("connection", "retry-after")})


    def _tenancy(self, request: Request, identity: Any) -> Tenancy:
        """The request's tenant (broker/tenancy.py), checked against the row's level and
        charged one token of the tenant's request rate."""
        state = state_of(request)
        if self.access is Access.PUBLIC and not (self.takes_tenant or self.takes_tenancy):
            return Tenancy("")  # a page or a probe: nothing of any tenant's is touched
        settings = state.settings
        client = request.scope.get("client")
        tenancy = resolve(identity, request.headers.get(settings.tenancy.header),
                          client[0] if client else None, settings=settings.tenancy,
                          auth_on=settings.auth.enabled)
        if self.access is Access.OPERATOR and tenancy.bound:
            raise Forbidden("this route is the deployment operator's; the request is bound "
                            "to a tenant")
        if self.access not in (Access.PUBLIC, Access.OPERATOR):
            state.broker.admit_request(tenancy.tenant)
        return tenancy


def starlette_routes(endpoints: Sequence[Endpoint]) -> list[BaseRoute]:
    """One Starlette route per path, dispatching on the method, so a 405 lists every method
    the path has (`Allow`). HEAD is added for GETs that do not change state."""
    by_path: dict[str, dict[str, Endpoint]] = {}
    for endpoint in endpoints:
        methods = by_path.setdefault(endpoint.path, {})
        if endpoint.method in methods:
            raise ValueError(f"{endpoint.method} {endpoint.path} is in the table twice")
        methods[endpoint.method] = endpoint
        if endpoint.method == "GET" and not endpoint.changes_state:
            methods["HEAD"] = endpoint
    routes: list[BaseRoute] = []
    # A path ending in a `{name:path}` segment matches everything below it, so it goes after
    # the longer paths it would swallow (`/queues/{queue:path}/depth`).
    for path, methods in sorted(by_path.items(), key=lambda item: item[0].endswith(":path}")):
        route = Route(path, _dispatcher(methods), methods=list(methods))
        # Starlette adds HEAD to every GET route; a state-changing GET must not run for it.
        assert route.methods is not None
        route.methods &= set(methods)
        routes.append(route)
    return routes


class _Dispatcher:
    """A path's rows by method; its bound `dispatch` is the Starlette endpoint (a method, so
    Starlette calls it with a Request)."""

    def __init__(self, methods: dict[str, Endpoint]) -> None:
        self.endpoints = methods

    async def dispatch(self, request: Request) -> Response:
        return await self.endpoints[request.method].serve(request)


def _dispatcher(methods: dict[str, Endpoint]) -> Callable[[Request], Awaitable[Response]]:
    return _Dispatcher(methods).dispatch


def endpoints_of(route: BaseRoute) -> Mapping[str, Endpoint] | None:
    """The table rows a Starlette route serves, by method; None for a route that does not
    come from the table (there should be none)."""
    handler = getattr(route, "endpoint", None)
    owner = getattr(handler, "__self__", None)
    return owner.endpoints if isinstance(owner, _Dispatcher) else None


def default_error_statuses(endpoint: Endpoint) -> dict[int, Any]:
    """The error answers every route can give besides its own."""
    # 431 comes from the HTTP server itself (hypercorn/h11) for a request line or headers
    # over 16 KiB, e.g. a path with a very long transactionId; it has no body.
    return {400: ErrorBody, 408: ErrorBody, 413: ErrorBody, 431: None, 503: ErrorBody}
