"""The OpenAPI 3.1 document, derived from the route table, and a small page showing it.

Schemas come from the same msgspec Structs the edge decodes with
(`msgspec.json.schema_components`, JSON Schema 2020-12, which OpenAPI 3.1 uses as is), so
the document cannot drift from what the broker accepts and answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

import msgspec
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from broker.auth.access import Access
from broker.wire.common import ErrorBody
from broker.wire.types import schema_hook
from core.auth_settings import AuthSettings

if TYPE_CHECKING:
    from broker.endpoint import Endpoint

TITLE = "queen-broker"
_REF = "#/components/schemas/{name}"


def build_document(endpoints: Sequence[Endpoint], version: str,
                   auth: AuthSettings | None = None) -> dict[str, Any]:
    """The document; with auth on, operations that need a token say so (`security`) and
    list their 401 (and 403 below PUBLIC). Every operation names its `x-access-level`."""
    from broker.endpoint import default_error_statuses
    from broker.wire.binary import BINARY_MEDIA_TYPE

    def auth_statuses(e: Endpoint) -> dict[int, Any]:
        if not needs_token(e):
            return {}
        return {401: ErrorBody, **({} if e.access is Access.PUBLIC else {403: ErrorBody})}

    def needs_token(e: Endpoint) -> bool:
        return auth is not None and auth.enabled and not auth.skips(e.open_path)

    kinds: list[Any] = []  # every type that needs a schema, in a fixed order
    for e in endpoints:
        for kind in (e.path_params, e.query, e.body, *_alternatives(e.responses.values()),
                     *default_error_statuses(e).values(), *auth_statuses(e).values()):
            if kind is not None and not isinstance(kind, str) and kind not in kinds:
                kinds.append(kind)
    schemas, components = msgspec.json.schema_components(
        kinds, schema_hook=schema_hook, ref_template=_REF)
    schema_of = dict(zip(map(_key, kinds), schemas))

    paths: dict[str, dict[str, Any]] = {}
    for e in endpoints:
        operation: dict[str, Any] = {"operationId": e.handler.__name__, "summary": e.summary,
                                     "x-access-level": e.access.name,
                                     "security": [{"bearerAuth": []}] if needs_token(e) else []}
        parameters = [*_parameters(e.path_params, "path", components),
                      *_parameters(e.query, "query", components)]
        if parameters:
            operation["parameters"] = parameters
        if e.body is not None:
            body_schema = schema_of[_key(e.body)]
            # An absent body counts as `{}` (wire-protocol §1): it is required when one of
            # its fields is.
            required = bool(components[_named(body_schema)].get("required"))
            if getattr(e.body, "NULLABLE", False):  # `null` is a valid body too (ext §14.7)
                body_schema = {"anyOf": [body_schema, {"type": "null"}]}
            operation["requestBody"] = {
                "required": required,
                "content": {"application/json": {"schema": body_schema}}}
            if e.binary_body is not None:
                doc = " ".join((e.binary_body.__doc__ or "").split())
                operation["requestBody"]["content"][BINARY_MEDIA_TYPE] = {"schema": {
                    "type": "string", "format": "binary", "description": doc}}
        responses: dict[str, Any] = {}
        statuses = {**default_error_statuses(e), **auth_statuses(e), **e.responses}
        for status, kind in sorted(statuses.items()):
            answer: dict[str, Any] = {"description": HTTPStatus(status).phrase}
            content: dict[str, Any] = {}
            for one in _alternatives([kind]):
                if isinstance(one, str):
                    content[one] = {"schema": _media_schema(one)}
                elif one is not None:
                    content["application/json"] = {"schema": schema_of[_key(one)]}
            if content:
                answer["content"] = content
            responses[str(status)] = answer
        operation["responses"] = responses
        paths.setdefault(e.open_path, {})[e.method.lower()] = operation
    # Path and query Structs become parameters; they are not bodies of their own.
    for e in endpoints:
        for kind in (e.path_params, e.query):
            if kind is not None:
                components.pop(kind.__name__, None)
    return {
        "openapi": "3.1.0",
        "info": {"title": TITLE, "version": version,
                 "description": "A partitioned message broker on PostgreSQL speaking the "
                                "Queen MQ HTTP API."},
        "paths": paths,
        "components": {"schemas": components, "securitySchemes": {
            "bearerAuth": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}}},
    }


def _key(kind: Any) -> str:
    return repr(kind)


def _named(schema: dict[str, Any]) -> str:
    """The component a `$ref` schema names (a generic Struct's is not its `__name__`:
    `Operations[KvOpIn]` is `Operations_KvOpIn_`)."""
    return str(schema["$ref"]).rsplit("/", 1)[-1]


def _alternatives(kinds: Any) -> list[Any]:
    """Answer kinds with the tuples (one answer in several media types) spread out."""
    return [one for kind in kinds for one in (kind if isinstance(kind, tuple) else (kind,))]


def _media_schema(media_type: str) -> dict[str, Any]:
    if media_type.startswith("text/"):
        return {"type": "string"}
    return {"type": "string", "format": "binary"}


def _parameters(kind: type | None, where: str,
                components: dict[str, Any]) -> list[dict[str, Any]]:
    if kind is None:
        return []
    schema = components[kind.__name__]
    required = set(schema.get("required", ()))
    out = []
    for name, prop in schema.get("properties", {}).items():
        value = _without_null(prop)
        if where == "query":
            # An empty query value counts as absent (the old parameters' defaults apply).
            value = {"anyOf": [value, {"type": "string", "maxLength": 0}]}
        out.append({"name": name, "in": where,
                    "required": where == "path" or name in required, "schema": value})
    return out


def _without_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A query or path parameter is text: absent is how it says null."""
    out = {k: v for k, v in schema.items() if not (k == "default" and v is None)}
    branches = [b for b in out.get("anyOf", ()) if b != {"type": "null"}]
    if "anyOf" in out:
        if len(branches) == 1:
            rest = {k: v for k, v in out.items() if k != "anyOf"}
            return {**branches[0], **rest}
        out["anyOf"] = branches
    return out


async def serve_document(request: Request) -> Response:
    document: bytes = request.app.state.openapi
    return Response(document, media_type="application/json")


async def serve_page(request: Request) -> Response:
    return HTMLResponse(_PAGE)


# A self-contained page: no script or style is loaded from anywhere but this broker.
_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>queen-broker API</title>
<style>
body{font:15px/1.45 system-ui,sans-serif;margin:2em auto;max-width:60em;color:#222}
h2{font-size:1.05em;margin:1.6em 0 .3em}code,pre{font:13px ui-monospace,monospace}
.m{display:inline-block;min-width:4.5em;font-weight:bold}
details{margin:.2em 0 .2em 1em}pre{background:#f5f5f5;padding:.6em;overflow:auto}
</style></head>
<body><h1>queen-broker HTTP API</h1>
<p>Generated from <a href="openapi.json">openapi.json</a>.</p><div id="api">Loading…</div>
<script>
fetch("openapi.json").then(r => r.json()).then(doc => {
  const root = document.getElementById("api"); root.textContent = "";
  const el = (tag, text) => { const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text; return e; };
  const show = (title, value) => { const d = el("details"); d.append(el("summary", title));
    d.append(el("pre", JSON.stringify(value, null, 2))); return d; };
  for (const [path, ops] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(ops)) {
      const h = el("h2"); const m = el("span", method.toUpperCase()); m.className = "m";
      h.append(m, el("code", path)); root.append(h, el("div", op.summary));
      if (op.parameters) root.append(show("parameters", op.parameters));
      if (op.requestBody) root.append(show("request body", op.requestBody));
      root.append(show("responses", op.responses));
    }
  }
  root.append(show("schemas", doc.components.schemas));
});
</script></body></html>
"""
