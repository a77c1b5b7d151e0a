"""The KV routes (wire-protocol-extensions §14): `POST /api/v1/kv`, the path routes
`GET/PUT/DELETE /api/v1/kv/{ns}/{key…}`, and the operators' namespace listing."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from broker.state import broker_of
from broker.wire.common import AfterQuery
from broker.wire.http import json_response
from broker.wire.kv import KvDeleteBody, KvPath, KvPutBody, NamespaceOut, NamespacePage
from core.errors import Refused
from core.kv.service import KvAnswer

_PATH_FIELDS = ("op", "ns", "namespace", "key")


def _answer(answer: KvAnswer) -> Response:
    if answer.failure is not None:
        return json_response(answer.failure)
    return json_response({"results": answer.results})


async def kv_batch(request: Request, body: Any, tenant: str) -> Response:
    return _answer(await broker_of(request).kv.call(body, tenant=tenant))


def _no_query(request: Request) -> None:
    if request.url.query:
        raise Refused("kv_bad_request", "kv_no_query_string",
                      "the KV path routes take no query parameters")


async def _single(request: Request, op: dict[str, Any], tenant: str) -> Response:
    answer = await broker_of(request).kv.call([op], tenant=tenant)
    if answer.failure is not None:
        return json_response(answer.failure)
    [element] = answer.results
    headers = {"ETag": f'"{element["version"]}"'} if element.get("found") else None
    return json_response(element, headers=headers)


def _fields(body: Any, allowed: tuple[str, ...]) -> dict[str, Any]:
    """The body's fields the route takes: those of the Struct that documents its body
    (`KvPutBody`, `KvDeleteBody`), so the document and the route name the same ones."""
    if not isinstance(body, dict):
        raise Refused("kv_bad_request", "kv_bad_body", "the body must be a JSON object")
    for field in _PATH_FIELDS:
        if field in body:
            raise Refused("kv_bad_request", "kv_field_in_path",
                          f"{field} is given by the path, not the body")
    return {k: v for k, v in body.items() if k in allowed}


async def kv_get(request: Request, path: KvPath, tenant: str) -> Response:
    _no_query(request)
    return await _single(request, {"op": "get", "ns": path.ns, "key": path.key}, tenant)


async def kv_put(request: Request, path: KvPath, body: Any, tenant: str) -> Response:
    _no_query(request)
    fields = _fields(body, KvPutBody.__struct_fields__)
    return await _single(request, {**fields, "op": "put", "ns": path.ns, "key": path.key},
                         tenant)


async def kv_delete(request: Request, path: KvPath, body: Any, tenant: str) -> Response:
    _no_query(request)
    fields = {} if body is None else _fields(body, KvDeleteBody.__struct_fields__)
    return await _single(request, {**fields, "op": "delete", "ns": path.ns, "key": path.key},
                         tenant)


async def kv_namespaces(request: Request, query: AfterQuery, tenant: str) -> Response:
    if "\x00" in query.after:
        raise Refused("kv_bad_request", "kv_bad_request", "after must not contain NUL")
    page = await broker_of(request).kv.namespaces(after=query.after, limit=query.clamped_limit,
                                                  tenant=tenant)
    return json_response(NamespacePage(
        [NamespaceOut(r.ns, r.keys, r.bytes, r.expiring) for r in page.rows], page.truncated,
        page.next_after))


async def locks(request: Request, body: Any, tenant: str) -> Response:
    return json_response({"results": await broker_of(request).kv.locks(body, tenant=tenant)})
