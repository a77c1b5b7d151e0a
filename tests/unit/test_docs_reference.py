"""The generated reference pages (docsgen/) cover what the code declares: every route of
the route table with its access level, every schema, every queue option, every command,
every refusal code."""

from __future__ import annotations

import copy
import re

from broker.table import ENDPOINTS
from core.options import DEFAULTS
from docsgen import api, cli, errors, queue_options


def test_the_api_reference_lists_every_route_with_its_access_level() -> None:
    page = api.render_api()
    listed = api.routes_listed(page)
    for endpoint in ENDPOINTS:
        assert (endpoint.method, endpoint.open_path) in listed, endpoint.path
        section = page.split(f"### `{endpoint.method} {endpoint.open_path}`", 1)[1]
        section = section.split("\n### ", 1)[0]
        assert f"**Access:** {endpoint.access.name}" in section
    assert len(listed) == len(ENDPOINTS)


def test_a_route_missing_from_the_document_is_missing_from_the_page() -> None:
    document = copy.deepcopy(api.document())
    del document["paths"]["/api/v1/push"]
    assert ("POST", "/api/v1/push") not in api.routes_listed(api.render_api(document))


def test_every_schema_has_a_section_and_every_link_to_one_resolves() -> None:
    document = api.document()
    schemas = api.render_schemas(document)
    anchors = set(re.findall(r"\{ #(schema-[a-z0-9-]+) \}", schemas))
    assert anchors == {api.schema_anchor(n) for n in document["components"]["schemas"]}
    linked = set(re.findall(r"http-schemas\.md#(schema-[a-z0-9-]+)", api.render_api(document)))
    linked |= set(re.findall(r"\]\(#(schema-[a-z0-9-]+)\)", schemas))
    assert linked <= anchors


def test_the_pop_route_documents_its_parameters() -> None:
    page = api.render_api()
    section = page.split("### `GET /api/v1/pop/queue/{queue}`", 1)[1].split("\n### ", 1)[0]
    for parameter in ("batch", "partitions", "wait", "timeout", "consumerGroup", "autoAck",
                      "subscriptionMode", "leaseSeconds", "autopilot", "conflation"):
        assert f"| `{parameter}` | query |" in section


def test_the_queue_options_reference_lists_every_option_with_its_default() -> None:
    page = queue_options.render_queue_options()
    for name, default in DEFAULTS.items():
        assert re.search(rf"^\| `{name}` \| `{str(default).lower()}` \| \w", page, re.MULTILINE), name


def test_the_cli_reference_names_every_command() -> None:
    page = cli.render_cli()
    for name in cli.commands():
        assert (f":prog_name: queen-broker {name}" in page
                or name in ("serve", "web", "postgres", "migrate")), name


def test_the_error_reference_has_every_refusal_code_raised_in_the_code() -> None:
    page = errors.render_errors()
    refusals = errors.coded_refusals()
    reasons = {r.reason for r in refusals}
    # A sample of each family, found by reading the source (helpers included).
    assert {"kv_bad_ttl", "locks_bad_token", "timers_horizon", "timers_queue_required",
            "kv_unavailable"} <= reasons
    for r in refusals:
        assert f"| `{r.code}` | `{r.reason}` | {r.status} |" in page
    assert "| 503 | `StorageUnavailable` |" in page and "| 401 | `Unauthenticated` |" in page
