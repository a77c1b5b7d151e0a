"""Every route the app serves has an access level, and each level is what §9 says.

The expected table is written out here by hand from wire-protocol §9 (and the decisions in
`broker/table.py` for routes §9 does not list), so a new route cannot slip in without
someone choosing its level: the app would fail to build without one, and this test fails
until the route is added below.
"""

from __future__ import annotations

from starlette.routing import Route

from broker.app import create_app
from broker.auth.access import Access
from broker.endpoint import endpoints_of
from broker.table import ENDPOINTS
from core.settings import Settings

PUBLIC, READ_ONLY, WRITE_ONLY = Access.PUBLIC, Access.READ_ONLY, Access.WRITE_ONLY
READ_WRITE, ADMIN, OPERATOR = Access.READ_WRITE, Access.ADMIN, Access.OPERATOR
G = "/api/v1/consumer-groups"
MESSAGE = "/api/v1/messages/{partitionId}/{transactionId:path}"

SECTION_9 = {
    # PUBLIC: health and metrics; this API's own description (a decision, docs/security/index.md)
    ("GET", "/health"): PUBLIC,
    ("GET", "/metrics"): PUBLIC,
    ("GET", "/metrics/prometheus"): PUBLIC,
    ("GET", "/openapi.json"): PUBLIC,
    ("GET", "/docs"): PUBLIC,
    ("GET", "/"): PUBLIC,  # the dashboard page (it holds no data; its API calls carry the token)
    # WRITE_ONLY: push
    ("POST", "/api/v1/push"): WRITE_ONLY,
    # READ_WRITE: pop (a GET), ack, ack/batch, transaction, lease extend, configure, POST
    # traces, seek, subscription, DELETE message; the DLQ retry route (§9 suggests READ_WRITE)
    ("GET", "/api/v1/pop/queue/{queue}"): READ_WRITE,
    ("GET", "/api/v1/pop/queue/{queue}/partition/{partition}"): READ_WRITE,
    ("GET", "/api/v1/pop"): READ_WRITE,
    ("POST", "/api/v1/ack"): READ_WRITE,
    ("POST", "/api/v1/ack/batch"): READ_WRITE,
    ("POST", "/api/v1/transaction"): READ_WRITE,
    ("POST", "/api/v1/lease/{leaseId}/extend"): READ_WRITE,
    ("POST", "/api/v1/configure"): READ_WRITE,
    ("POST", "/api/v1/traces"): READ_WRITE,
    ("POST", G + "/{group}/subscription"): READ_WRITE,
    ("POST", G + "/{group}/queues/{queue}/seek"): READ_WRITE,
    ("POST", G + "/{group}/queues/{queue}/partitions/{partition}/seek"): READ_WRITE,
    ("DELETE", MESSAGE): READ_WRITE,
    ("POST", MESSAGE + "/retry"): READ_WRITE,
    # Ephemeral queues (wire-protocol-extensions §19.1 gives each its level)
    ("POST", "/api/v1/ephemeral/push"): WRITE_ONLY,
    ("GET", "/api/v1/ephemeral/pop"): READ_WRITE,
    ("POST", "/api/v1/ephemeral/ack"): READ_WRITE,
    ("POST", "/api/v1/ephemeral/configure"): READ_WRITE,
    ("POST", "/api/v1/ephemeral/reset"): READ_WRITE,
    ("DELETE", "/api/v1/ephemeral/queue/{queue:path}"): READ_WRITE,
    ("GET", "/api/v1/ephemeral/queues"): READ_ONLY,
    ("GET", "/api/v1/ephemeral/queues/{queue:path}/depth"): READ_ONLY,
    # ADMIN: delete queue, delete consumer group(s)
    ("DELETE", "/api/v1/resources/queues/{queue}"): ADMIN,
    ("DELETE", G + "/{group}"): ADMIN,
    ("DELETE", G + "/{group}/queues/{queue}"): ADMIN,
    # OPERATOR (ADMIN bound to no tenant, docs/security/tenants.md): what is the
    # deployment's and not a tenant's: a stats sample of every queue, /api/v1/system/* (the
    # maintenance switches), the tenants and their quotas
    ("POST", "/api/v1/stats/refresh"): OPERATOR,
    ("GET", "/api/v1/system/maintenance"): OPERATOR,
    ("POST", "/api/v1/system/maintenance"): OPERATOR,
    ("GET", "/api/v1/system/maintenance/pop"): OPERATOR,
    ("POST", "/api/v1/system/maintenance/pop"): OPERATOR,
    ("GET", "/api/v1/tenants"): OPERATOR,
    ("GET", "/api/v1/tenants/{tenant}"): OPERATOR,
    ("PUT", "/api/v1/tenants/{tenant}/quota"): OPERATOR,
    ("DELETE", "/api/v1/tenants/{tenant}/quota"): OPERATOR,
    # READ_ONLY: GET on resources, status, analytics, DLQ, messages, traces, consumer groups;
    # fetch
    # (a POST that only reads, like the GETs on DLQ and messages: a decision)
    ("POST", "/api/v1/fetch"): READ_ONLY,
    ("GET", "/api/v1/traces/{partitionId}/{transactionId:path}"): READ_ONLY,
    ("GET", "/api/v1/traces/by-name/{name:path}"): READ_ONLY,
    ("GET", "/api/v1/traces/names"): READ_ONLY,
    ("GET", "/api/v1/dlq"): READ_ONLY,
    ("GET", MESSAGE): READ_ONLY,
    ("GET", "/api/v1/messages"): READ_ONLY,
    ("GET", G): READ_ONLY,
    ("GET", G + "/lagging"): READ_ONLY,
    ("GET", G + "/{group}"): READ_ONLY,
    ("GET", "/api/v1/resources/queues"): READ_ONLY,
    ("GET", "/api/v1/resources/queues/{queue}"): READ_ONLY,
    ("GET", "/api/v1/resources/queues/{queue}/depth"): READ_ONLY,
    ("GET", "/api/v1/resources/partitions"): READ_ONLY,
    ("GET", "/api/v1/resources/namespaces"): READ_ONLY,
    ("GET", "/api/v1/resources/tasks"): READ_ONLY,
    ("GET", "/api/v1/resources/overview"): READ_ONLY,
    ("GET", "/api/v1/status"): READ_ONLY,
    ("GET", "/api/v1/status/queues"): READ_ONLY,
    ("GET", "/api/v1/status/queues/{queue}"): READ_ONLY,
    ("GET", "/api/v1/status/queues/{queue}/messages"): READ_ONLY,
    ("GET", "/api/v1/status/analytics"): READ_ONLY,
    # The analytics family (issue 38): read-only, like the status routes
    ("GET", "/api/v1/analytics/system-metrics"): READ_ONLY,
    ("GET", "/api/v1/analytics/worker-metrics"): READ_ONLY,
    ("GET", "/api/v1/analytics/queue-lag"): READ_ONLY,
    ("GET", "/api/v1/analytics/queue-ops"): READ_ONLY,
    ("GET", "/api/v1/analytics/retention"): READ_ONLY,
    # Decisions (broker/table.py): the partitions feed reads like fetch;
    # replay by id like the DLQ retry route; a bulk purge is ADMIN like DELETE queue.
    ("POST", "/api/v1/partitions/changed"): READ_ONLY,
    ("POST", "/api/v1/dlq/{id}/replay"): READ_WRITE,
    ("DELETE", "/api/v1/dlq"): ADMIN,
    # KV and locks (extensions §14.1, §15.1, decision 15): the batch routes are READ_WRITE
    # even for reads; a path GET is READ_ONLY; the dashboard's namespace listing READ_ONLY
    ("POST", "/api/v1/kv"): READ_WRITE,
    ("GET", "/api/v1/kv/{ns}/{key:path}"): READ_ONLY,
    ("PUT", "/api/v1/kv/{ns}/{key:path}"): READ_WRITE,
    ("DELETE", "/api/v1/kv/{ns}/{key:path}"): READ_WRITE,
    ("POST", "/api/v1/locks"): READ_WRITE,
    ("GET", "/api/v1/resources/kv-namespaces"): READ_ONLY,
    # Streams (wire-protocol-extensions §18 table); the listing reads, deleting a query with
    # its state is ADMIN like DELETE queue.
    ("POST", "/streams/v1/queries"): READ_WRITE,
    ("POST", "/streams/v1/state/get"): READ_ONLY,
    ("POST", "/streams/v1/cycle"): READ_WRITE,
    ("GET", "/streams/v1/queries"): READ_ONLY,
    ("DELETE", "/streams/v1/queries/{name}"): ADMIN,
    # Timers (wire-protocol-extensions §16.1): scheduling is producing; the cancel route
    # READ_WRITE; peek, list and the dashboard's queue listing READ_ONLY.
    ("POST", "/api/v1/timers"): WRITE_ONLY,
    ("DELETE", "/api/v1/timers/{queue}/{timerKey:path}"): READ_WRITE,
    ("GET", "/api/v1/timers/{queue}/{timerKey:path}"): READ_ONLY,
    ("GET", "/api/v1/timers/{queue}"): READ_ONLY,
    ("GET", "/api/v1/timers"): READ_ONLY,
}


def served_levels() -> dict[tuple[str, str], Access]:
    """Walk the app's routes: each method of each route, with the level it is served at."""
    app = create_app(Settings())
    levels: dict[tuple[str, str], Access] = {}
    for route in app.routes:
        endpoints = endpoints_of(route)
        assert isinstance(route, Route) and endpoints is not None, (
            f"{route!r} is not served from the route table")
        assert route.methods is not None
        for method in route.methods:
            endpoint = endpoints[method]
            assert isinstance(endpoint.access, Access), (method, route.path)
            levels[(method, route.path)] = endpoint.access
    return levels


def test_every_route_the_app_serves_has_the_level_section_9_gives_it() -> None:
    levels = served_levels()
    heads = {key: level for key, level in levels.items() if key[0] == "HEAD"}
    others = {key: level for key, level in levels.items() if key[0] != "HEAD"}
    assert others == SECTION_9
    # HEAD answers like the GET it mirrors, at the GET's level.
    assert heads and all(SECTION_9[("GET", path)] is level for (_, path), level in heads.items())


def test_pop_is_read_write_although_it_is_a_get() -> None:
    levels = served_levels()
    assert {levels[("GET", p)] for p in ("/api/v1/pop", "/api/v1/pop/queue/{queue}")} == {
        READ_WRITE}
    assert ("HEAD", "/api/v1/pop") not in levels


def test_every_route_but_the_public_and_the_operators_is_given_the_tenant() -> None:
    """A tenant's request names its tenant to the handler of every route that touches a
    tenant's data, so no route can forget to scope it (docs/security/tenants.md)."""
    unscoped = sorted((e.method, e.path) for e in ENDPOINTS
                      if e.access not in (PUBLIC, OPERATOR) and not e.scoped)
    assert unscoped == []
    # The metrics are PUBLIC but show a tenant its own figures.
    assert all(e.scoped for e in ENDPOINTS if e.path.startswith("/metrics"))
