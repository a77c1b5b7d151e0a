"""The edge's pure logic: the name rule, error wording, body reading, the route table."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import Response

from broker.auth.access import Access
from broker.endpoint import Endpoint
from broker.wire.decoding import decode_body, decode_strings
from broker.wire.http import BodyIncomplete, BodyTimeout, read_body
from broker.wire.pop import PopQuery
from broker.wire.push import PushBody
from broker.wire.types import check_name
from core.errors import BadRequest


@pytest.mark.parametrize("name", ["a", "a b", "ü名前", "..x", ".x", "x.", "null", "a;b=c&d",
                                  "'; DROP TABLE x; --", "é" * 127, "x" * 255])
def test_names_the_rule_accepts(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize(("name", "reason"), [
    ("", "must not be empty"), (".", "must not be '.'"), ("..", "must not be '..'"),
    ("a/b", "must not contain '/'"), ("a\\b", "must not contain '\\\\'"),
    ("a?", "must not contain '?'"), ("#", "must not contain '#'"),
    ("%41", "must not contain '%'"), ("a\x00", "contains control characters"),
    ("\x7f", "contains control characters"), ("\x85", "contains control characters"),
    ("\x9f", "contains control characters"), ("x" * 256, "is longer than 255 bytes"),
    ("é" * 128, "is longer than 255 bytes"),
])
def test_names_the_rule_refuses(name: str, reason: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(reason) + "$"):
        check_name(name)


@pytest.mark.parametrize(("body", "error"), [
    (b'{"items": [{"queue": 5}]}', "items[0].queue must be a string"),
    (b'{"items": [{}]}', "items[0].queue is required"),
    (b'{"items": [{"queue": null}]}', "items[0].queue is required"),
    (b'{"items": 3}', "items array is required"),
    (b"{}", "items array is required"),
    (b"[]", "bad body: Expected `object`, got `array`"),
    (b'{"items": [{"queue": "q", "traceId": "x"}]}', "items[0].traceId must be a UUID"),
    (b'{"items": [{"queue": "q", "payload": "\xff"}]}', "bad body: invalid UTF-8 at byte 38"),
    (b'{"items": [', "bad body: Input data was truncated"),
])
def test_body_errors_name_the_field(body: bytes, error: str) -> None:
    with pytest.raises(BadRequest) as caught:
        decode_body(body, PushBody)
    assert caught.value.message == error


@pytest.mark.parametrize(("query", "error"), [
    ({"batch": "0"}, "batch must be between 1 and 10000"),
    ({"batch": "x"}, "batch must be an integer"),
    ({"wait": "maybe"}, "wait must be true or false"),
    ({"timeout": "null"}, "timeout must be an integer"),
    ({"consumerGroup": "g/1"}, "consumerGroup must not contain '/'"),
    ({"subscriptionFrom": "soon"}, "subscriptionFrom must be an ISO-8601 timestamp or now"),
])
def test_query_errors_name_the_parameter(query: dict[str, str], error: str) -> None:
    with pytest.raises(BadRequest) as caught:
        decode_strings(query, PopQuery)
    assert caught.value.message == error


def test_empty_query_values_count_as_absent_and_null_is_a_name() -> None:
    parsed = decode_strings({"batch": "", "consumerGroup": "null"}, PopQuery)
    assert not parsed.batch and parsed.consumerGroup == "null"


def _request(messages: list[dict[str, Any]], *, hang: bool = False) -> Request:
    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        if hang:
            await asyncio.sleep(3600)
        return {"type": "http.disconnect"}
    scope = {"type": "http", "method": "POST", "path": "/", "headers": [], "query_string": b""}
    return Request(scope, receive)


async def test_read_body_answers_a_body_that_stops_coming_with_a_timeout() -> None:
    request = _request([{"type": "http.request", "body": b"{", "more_body": True}], hang=True)
    with pytest.raises(BodyTimeout):
        await read_body(request, 1000, timeout=0.05)


async def test_read_body_turns_a_vanished_client_into_a_client_error() -> None:
    request = _request([{"type": "http.request", "body": b"{", "more_body": True}])
    with pytest.raises(BodyIncomplete, match="ended after 1 bytes"):
        await read_body(request, 1000)


async def _handler(request: Request, body: PushBody) -> Response:
    return Response()


def test_a_table_row_must_match_its_handler_signature() -> None:
    Endpoint("POST", "/x", _handler, "ok", {200: None}, body=PushBody, access=Access.ADMIN)
    with pytest.raises(TypeError, match="declares"):
        Endpoint("POST", "/x", _handler, "no body declared", {200: None},
                 access=Access.ADMIN)
    with pytest.raises(TypeError, match="declares"):
        Endpoint("POST", "/x", _handler, "a query it does not take", {200: None},
                 body=PushBody, query=PopQuery, access=Access.ADMIN)


def test_a_table_row_without_an_access_level_cannot_be_built() -> None:
    with pytest.raises(TypeError, match="access"):
        Endpoint("POST", "/x", _handler, "no level", {200: None}, body=PushBody)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="has no access level"):
        Endpoint("POST", "/x", _handler, "not a level", {200: None}, body=PushBody,
                 access="admin")  # type: ignore[arg-type]
