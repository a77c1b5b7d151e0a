"""The HTTP side of the operator commands: one client per invocation, and the exit codes a
script can branch on.

Exit codes (documented in docs/operating/cli.md, "Exit status"):
0 done; 1 the broker refused the request (a 4xx other than those below, or a 200 that says
it failed); 2 usage error (click's own, a --url that is not an http(s) URL); 3 the broker
could not be reached, did not answer in time, or answered 5xx; 4 not found (404: an unknown
queue, dead letter, group...; also a queue or group the operator named that the broker does
not have, where the route itself answers "nothing", as a pop of an unknown queue does);
5 authentication or permission refused (401/403).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import quote

import click
import httpx

OK, REFUSED, USAGE, UNREACHABLE, NOT_FOUND, FORBIDDEN = 0, 1, 2, 3, 4, 5
DEFAULT_URL = "http://127.0.0.1:6632"

F = TypeVar("F", bound=Callable[..., Any])
_PEM_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


class CtlError(click.ClickException):
    """A failure with the exit code that classifies it; click prints `Error: <message>`."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        # click (8.5) declares exit_code a class variable; main() reads it from the instance,
        # so an instance attribute is what classifies this failure.
        setattr(self, "exit_code", exit_code)  # noqa: B010


@dataclasses.dataclass
class Api:
    """The broker at `url`, with a bearer token when one is given; over https, trusting the
    CAs of `cacert` (default: the usual public ones) and showing the client certificate
    `cert` (with its key in `key`, or in `cert` too) to a broker that asks for one."""

    url: str
    token: str | None
    timeout: float
    as_json: bool
    cacert: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    # The tenant to act for (the tenant header: an admin token without a tenant claim may
    # name one, docs/security/tenants.md); None: the token's tenant, or the default tenant.
    tenant: str | None = None
    tenant_header: str = "x-queen-tenant"

    def __post_init__(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        if self.tenant:
            headers[self.tenant_header] = self.tenant
        self._client = httpx.Client(base_url=self.url.rstrip("/"), headers=headers,
                                    timeout=self.timeout, verify=self._verify())

    def _verify(self) -> ssl.SSLContext | bool:
        if self.cacert is None and self.cert is None:
            return True  # httpx's own default
        try:
            context = (ssl.create_default_context(cafile=self.cacert) if self.cacert is not None
                       else httpx.create_ssl_context())
        except (ssl.SSLError, OSError) as exc:
            raise CtlError(f"--cacert {self.cacert}: {exc}", USAGE) from None
        try:
            if self.cert is not None:
                context.load_cert_chain(self.cert, self.key)
        except (ssl.SSLError, OSError) as exc:
            raise CtlError(f"--cert {self.cert} / --key {self.key}: {exc}", USAGE) from None
        return context

    def close(self) -> None:
        self._client.close()

    def printed_as_json(self, answer: Any) -> bool:
        """With --json, print `answer` as JSON (the command's whole output) and say so; the
        command renders it for a person otherwise."""
        if self.as_json:
            print_json(answer)
        return self.as_json

    def get(self, path: str, **params: Any) -> Any:
        return self.call("GET", path, params=params)

    def post(self, path: str, body: Any = None, **params: Any) -> Any:
        return self.call("POST", path, body=body if body is not None else {}, params=params)

    def delete(self, path: str, **params: Any) -> Any:
        return self.call("DELETE", path, params=params)

    def call(self, method: str, path: str, *, body: Any = None,
             params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        """The decoded JSON answer (None for 204); any failure raises CtlError."""
        query = {k: _query_value(v) for k, v in (params or {}).items() if v is not None}
        try:
            answer = self._client.request(
                method, path, params=query, json=body,
                timeout=timeout if timeout is not None else self.timeout)
        except httpx.TimeoutException:
            raise CtlError(f"{self.url} did not answer {method} {path} within "
                           f"{timeout or self.timeout:g} s", UNREACHABLE) from None
        except httpx.HTTPError as exc:
            raise CtlError(f"cannot reach the broker at {self.url}: {exc}", UNREACHABLE) from None
        if answer.status_code == 204:
            return None
        if answer.status_code >= 400:
            raise CtlError(f"{method} {path}: {answer.status_code} {_reason(answer)}",
                           _code_for(answer.status_code))
        try:
            return answer.json()
        except ValueError:
            raise CtlError(f"{method} {path}: the answer is not JSON (is {self.url} a "
                           "queen broker?)", UNREACHABLE) from None


def require_queue(api: Api, name: str) -> Any:
    """The queue's detail; exit 4 `queue 'NAME' not found` when the broker has no such queue.
    Routes that filter by queue answer an unknown one with nothing (a pop's 204, an empty
    list), which would read as "nothing to do" when the name was a typo."""
    try:
        return api.get(f"/api/v1/resources/queues/{segment(name)}")
    except CtlError as exc:
        if exc.exit_code == NOT_FOUND:
            raise queue_not_found(name) from None
        raise


def queue_not_found(name: str, then: str = "") -> CtlError:
    return CtlError(f"queue {name!r} not found{then}", NOT_FOUND)


def segment(name: str) -> str:
    """A name as one path segment (the broker decodes each segment once)."""
    return quote(name, safe="")


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _reason(answer: httpx.Response) -> str:
    try:
        body = answer.json()
    except ValueError:
        return answer.text.strip()[:200] or answer.reason_phrase
    if isinstance(body, dict):
        return str(body.get("error") or body.get("message") or body)
    return str(body)


def _code_for(status: int) -> int:
    if status in (401, 403):
        return FORBIDDEN
    if status == 404:
        return NOT_FOUND
    if status >= 500:
        return UNREACHABLE
    return REFUSED


def _base_url(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """An http(s) URL with a host, or a usage error (exit 2): a malformed URL is the
    caller's mistake, not a broker that cannot be reached."""
    try:
        url = httpx.URL(value)
    except (httpx.InvalidURL, TypeError):
        url = None
    if url is None or url.scheme not in ("http", "https") or not url.host:
        raise click.BadParameter(f"{value!r} is not an http(s) URL (e.g. {DEFAULT_URL})",
                                 ctx=ctx, param=param)
    return value


def api_options(command: F) -> F:
    """--url, --token, --json and --timeout on an operator command; it receives `api`."""

    @click.option("--url", envvar="QUEEN_URL", default=DEFAULT_URL, show_default=True,
                  callback=_base_url, help="the broker's base URL (env QUEEN_URL)")
    @click.option("--token", envvar="QUEEN_TOKEN", default=None,
                  help="bearer token when the broker has auth on (env QUEEN_TOKEN)")
    @click.option("--json", "as_json", is_flag=True, help="print the answer as JSON")
    @click.option("--timeout", type=click.FloatRange(min=0.1), default=30.0, show_default=True,
                  help="seconds to wait for each answer")
    @click.option("--cacert", envvar="QUEEN_CACERT", type=_PEM_FILE,
                  help="PEM CA certificate(s) an https broker's certificate must chain to "
                       "(env QUEEN_CACERT; default: the usual public CAs)")
    @click.option("--cert", envvar="QUEEN_CLIENT_CERT", type=_PEM_FILE,
                  help="PEM client certificate for a broker that asks for one (mutual TLS; "
                       "env QUEEN_CLIENT_CERT)")
    @click.option("--key", envvar="QUEEN_CLIENT_KEY", type=_PEM_FILE,
                  help="PEM private key of --cert, when not in the same file "
                       "(env QUEEN_CLIENT_KEY)")
    @click.option("--tenant", envvar="QUEEN_TENANT", default=None,
                  help="act for this tenant: sent as the tenant header, which an admin token "
                       "without a tenant claim may use (env QUEEN_TENANT)")
    @click.option("--tenant-header", envvar="QUEEN_TENANT_HEADER", default="x-queen-tenant",
                  show_default=True, help="the broker's QUEEN_TENANT_HEADER")
    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        # Each of these options is the field of `Api` with its name.
        given = {field.name: kwargs.pop(field.name) for field in dataclasses.fields(Api)}
        if given["key"] is not None and given["cert"] is None:
            raise click.UsageError("--key needs --cert")
        api = Api(**given)
        try:
            return command(*args, api=api, **kwargs)
        finally:
            api.close()

    return cast(F, wrapper)


def print_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))
