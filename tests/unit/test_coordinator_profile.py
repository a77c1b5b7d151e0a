"""The coordinator profile of `loadtest citus` names each backend by what it does."""

from __future__ import annotations

from typing import Any

from loadtest.coordinator_profile import _kind


def _row(backend_type: str, application: str = "", query: str = "") -> Any:
    return {"backend_type": backend_type, "application_name": application, "query": query}


def test_backends_are_named_by_type_role_and_for_wake_ups_by_what_they_ran() -> None:
    assert _kind(_row("Citus Maintenance Daemon")) == "Citus Maintenance Daemon"
    assert _kind(_row("client backend", "queen-broker-stats")) == "queen-broker-stats"
    assert _kind(_row("client backend", "citus_internal gpid=20000006879")) == \
        "citus_internal (from another node)"
    notify = "SELECT pg_notify(c, p) FROM unnest($1::text[], $2::text[]) AS n(c, p)"
    assert _kind(_row("client backend", "queen-broker-wakeup", notify)) == \
        "queen-broker-wakeup (notify)"
    assert _kind(_row("client backend", "queen-broker-wakeup", "SELECT 1;")) == \
        "queen-broker-wakeup (listen)"
    assert _kind(_row("client backend", "queen-broker-wakeup")) == "queen-broker-wakeup"
