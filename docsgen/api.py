"""The HTTP API reference, rendered from the broker's own OpenAPI document.

`broker.openapi.build_document` derives the document from the route table
(`broker/table.py`), so every route, its access level, parameters, bodies and answers
appear here as the broker declares them; nothing is written by hand.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from broker.auth.access import Access, Role, grants
from broker.openapi import build_document
from broker.table import ENDPOINTS
from docsgen import escape

API_PAGE = "reference/http-api.md"
SCHEMAS_PAGE = "reference/http-schemas.md"
Schema = dict[str, Any]
# Routes are grouped by the first segment after /api/v1 (or /streams/v1), in table order.
_GROUP_TITLES = {
    "push": "Messages", "pop": "Messages", "ack": "Messages", "transaction": "Messages",
    "lease": "Messages", "configure": "Queues", "fetch": "Offset reads",
    "partitions": "Offset reads", "dlq": "Dead letters and messages",
    "messages": "Dead letters and messages", "traces": "Traces",
    "consumer-groups": "Consumer groups", "resources": "Queues",
    "status": "Status and analytics", "stats": "Status and analytics",
    "ephemeral": "Ephemeral queues", "kv": "KV store and locks", "locks": "KV store and locks",
    "timers": "Timers", "streams": "Streams", "system": "Maintenance switches",
}
_ROOT_GROUP = "Health, metrics and pages"


def document(version: str = "docs") -> dict[str, Any]:
    """The OpenAPI document the broker serves at /openapi.json (auth off)."""
    return build_document(ENDPOINTS, version)


def operation_anchor(method: str, path: str) -> str:
    """A stable anchor for one route: `get-api-v1-pop-queue-queue`."""
    return "-".join(part for part in re.split(r"[^a-z0-9]+", f"{method} {path}".lower()) if part)


def schema_anchor(name: str) -> str:
    return "schema-" + "-".join(p for p in re.split(r"[^a-z0-9]+", name.lower()) if p)


def short_name(name: str) -> str:
    """`broker.wire.push.PushItemIn` -> `PushItemIn (push)`: msgspec qualifies a name that two
    modules use (none do today: tests/unit/test_class_names.py keeps class names unique)."""
    if "." not in name:
        return name
    parts = name.split(".")
    return f"{parts[-1]} ({parts[-2]})"


def group_of(path: str) -> str:
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 3 and parts[1] == "v1":
        return _GROUP_TITLES.get(parts[2], parts[2].replace("-", " ").capitalize())
    return _ROOT_GROUP


def render_api(doc: dict[str, Any] | None = None) -> str:
    """The page listing every route: method and path, summary, access level, parameters,
    bodies and answers."""
    doc = doc or document()
    link = _linker(SCHEMAS_PAGE.rsplit("/", 1)[1])
    groups: dict[str, list[tuple[str, str, Schema]]] = {}
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            groups.setdefault(group_of(path), []).append((method.upper(), path, op))
    out = [
        "# HTTP API",
        "",
        ("Every route the broker serves, generated from its route table (`broker/table.py`) "
        "through the OpenAPI document it serves at `/openapi.json` "
        "([download it](openapi.json)). Bodies and answers link to their "
        "[schemas](http-schemas.md)."),
        "",
        "- Bodies are JSON unless a route says otherwise; a POST without a body counts as `{}`.",
        "- In a query string an empty value counts as absent.",
        ("- With authentication on, a route outside `JWT_SKIP_PATHS` also answers 401 without "
        "a valid token and, above PUBLIC, 403 when the token's roles do not pass its access "
        "level ([Security](../security/index.md))."),
        ("- Error answers are `{\"error\": text}` unless the route lists another body; the "
        "codes are in [Errors](errors.md)."),
        "",
    ]
    for title, routes in groups.items():
        out += [f"## {title}", ""]
        for method, path, op in routes:
            out += _operation(method, path, op, link)
    return "\n".join(out) + "\n"


def render_schemas(doc: dict[str, Any] | None = None) -> str:
    """The page of every body and answer schema, with their fields."""
    doc = doc or document()
    link = _linker("")
    schemas: dict[str, Schema] = doc["components"]["schemas"]
    out = ["# HTTP API schemas", "",
           ("The bodies and answers of the [HTTP API](http-api.md), generated from the msgspec "
           "structs the broker decodes and encodes them with (`broker/wire/`)."), ""]
    for name in sorted(schemas, key=lambda n: short_name(n).lower()):
        schema = schemas[name]
        out += [f"## {short_name(name)} {{ #{schema_anchor(name)} }}", ""]
        if schema.get("description"):
            out += [escape.text(schema["description"]), ""]
        properties = schema.get("properties")
        if schema.get("type") == "object" and properties:
            required = set(schema.get("required", ()))
            out += ["| field | type | required | default | meaning |", "|---|---|---|---|---|"]
            for field, prop in properties.items():
                out.append(f"| `{field}` | {kind(prop, link)} | "
                           f"{'yes' if field in required else ''} | {_default(prop)} | "
                           f"{escape.text(_description(prop))} |")
            out.append("")
        else:
            out += [f"Type: {kind(schema, link)}", ""]
    return "\n".join(out) + "\n"


def kind(schema: Schema, link: Callable[[str], str]) -> str:
    """A short Markdown rendering of a JSON Schema: its type, bounds and references."""
    if "$ref" in schema:
        return link(schema["$ref"].rsplit("/", 1)[1])
    if "anyOf" in schema:
        branches = [b for b in schema["anyOf"] if not _absent(b)]
        return " or ".join(dict.fromkeys(kind(b, link) for b in branches)) or "empty"
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    types = schema.get("type")
    if types is None:
        return "any JSON"
    if isinstance(types, list):
        return " or ".join(kind({**schema, "type": t}, link) for t in types)
    if types == "array":
        text = "array of " + kind(schema.get("items", {}), link)
        return text + _bounds(schema, "minItems", "maxItems", " items")
    if types == "object":
        extra = schema.get("additionalProperties")
        return "object of " + kind(extra, link) if isinstance(extra, dict) else "object"
    text = str(types)
    if schema.get("format"):
        text += f" ({schema['format']})"
    if types == "string":
        return text + _bounds(schema, "minLength", "maxLength", " characters")
    return text + _bounds(schema, "minimum", "maximum", "")


def routes_listed(page: str) -> set[tuple[str, str]]:
    """The (method, path) pairs whose headings `render_api` wrote on `page`."""
    return {(m, p) for m, p in re.findall(r"^### `(\w+) ([^`]+)`", page, re.MULTILINE)}


def _operation(method: str, path: str, op: Schema, link: Callable[[str], str]) -> list[str]:
    level = Access[op["x-access-level"]]
    out = [f"### `{method} {path}` {{ #{operation_anchor(method, path)} }}", "",
           escape.text(op.get("summary", "")), "",
           f"**Access:** {level.name} ({_roles(level)})", ""]
    parameters = op.get("parameters", [])
    if parameters:
        out += ["| parameter | in | type | default | meaning |", "|---|---|---|---|---|"]
        for p in parameters:
            name = f"`{p['name']}`" + (" (required)" if p.get("required") and
                                        p["in"] != "path" else "")
            schema = p.get("schema", {})
            out.append(f"| {name} | {p['in']} | {kind(schema, link)} | {_default(schema)} | "
                       f"{escape.text(_description(schema))} |")
        out.append("")
    body = op.get("requestBody")
    if body:
        out.append("**Body**" + ("" if body.get("required") else " (optional)") + ":")
        out.append("")
        for media, content in body["content"].items():
            schema = content.get("schema", {})
            text = (escape.text(schema["description"]) if schema.get("format") == "binary"
                    and schema.get("description") else kind(schema, link))
            out.append(f"- `{media}`: {text}")
        out.append("")
    out += ["| answer | body |", "|---|---|"]
    for status, answer in op.get("responses", {}).items():
        bodies = [f"`{media}` " + (kind(content.get("schema", {}), link)
                                   if media == "application/json" else "")
                  for media, content in answer.get("content", {}).items()]
        out.append(f"| {status} {escape.text(answer.get('description', ''))} | "
                   f"{'; '.join(b.strip() for b in bodies) or 'none'} |")
    return [*out, ""]


def _roles(level: Access) -> str:
    if level is Access.PUBLIC:
        return "any caller; no token on a skipped path"
    return ", ".join(f"`{r.value}`" for r in Role if grants([r], level))


def _linker(page: str) -> Callable[[str], str]:
    def link(name: str) -> str:
        return f"[{short_name(name)}]({page}#{schema_anchor(name)})"
    return link


def _absent(schema: Schema) -> bool:
    """The empty-string branch a query parameter carries for "absent"."""
    return schema == {"type": "string", "maxLength": 0}


def _bounds(schema: Schema, low: str, high: str, unit: str) -> str:
    lo, hi = schema.get(low), schema.get(high)
    if lo is None and hi is None:
        return ""
    if lo is not None and hi is not None:
        return f", {lo}..{hi}{unit}"
    return f", at least {lo}{unit}" if lo is not None else f", at most {hi}{unit}"


def _description(schema: Schema) -> str:
    if schema.get("description"):
        return str(schema["description"])
    for branch in schema.get("anyOf", ()):
        if isinstance(branch, dict) and (text := _description(branch)):
            return text
    return ""


def _default(schema: Schema) -> str:
    for candidate in (schema, *schema.get("anyOf", ())):
        if isinstance(candidate, dict) and candidate.get("default") is not None:
            return f"`{json.dumps(candidate['default'])}`"
    return ""


def every_route() -> Iterable[tuple[str, str]]:
    """(method, OpenAPI path) of every row of the route table."""
    return ((e.method, e.open_path) for e in ENDPOINTS)
