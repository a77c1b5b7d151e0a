"""The shipped monitoring files query only what the broker exports: every metric name in the
Grafana dashboard (deploy/grafana/queen-broker.json) and in the alert rules
(deploy/prometheus/alerts.yml) is a family or a sample of the session broker's
`/metrics/prometheus` (Prometheus' own `up` aside), so a renamed metric breaks this test and
not an operator's dashboard."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.support import ROOT

DASHBOARD = ROOT / "deploy" / "grafana" / "queen-broker.json"
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
PROMETHEUS_OWN = {"up"}
# PromQL words that look like names: keywords and the aggregation modifiers
_KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
             "group_right", "bool", "offset", "inf", "nan"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACES = re.compile(r"\{[^}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (not its functions, labels or keywords)."""
    text = _GROUPING.sub(" ", _RANGE.sub(" ", _BRACES.sub(" ", _STRING.sub(" ", expr))))
    names = set()
    for match in _IDENT.finditer(text):
        name = match.group()
        after = text[match.end():].lstrip()
        if after.startswith("(") or name.lower() in _KEYWORDS:
            continue  # a function or an aggregation, or a keyword
        names.add(name)
    return names


def test_metric_names_are_read_from_promql() -> None:
    assert metric_names(
        'histogram_quantile(0.99, max without (instance) (rate(queen_push_duration_seconds_'
        'bucket{le!="+Inf"}[5m]))) / on (job) group_left count by (le) (up == 1) and x') == {
        "queen_push_duration_seconds_bucket", "up", "x"}


def _exprs_of_dashboard() -> list[tuple[str, str]]:
    board = json.loads(DASHBOARD.read_text())
    found = []
    for panel in board["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            found.append((panel["title"], target["expr"]))
    return found


def _exprs_of_rules() -> list[tuple[str, str]]:
    rules: dict[str, Any] = yaml.safe_load(RULES.read_text())
    return [(rule["alert"], rule["expr"]) for group in rules["groups"]
            for rule in group["rules"]]


async def _exported(http: httpx.AsyncClient) -> set[str]:
    r = await http.get("/metrics/prometheus")
    assert r.status_code == 200
    names = set()
    for family in text_string_to_metric_families(r.text):
        names.add(family.name)  # a family without samples (no standby yet) still counts
        if family.type == "counter":
            names.add(family.name + "_total")
        if family.type == "histogram":
            names.update(family.name + s for s in ("_bucket", "_count", "_sum"))
        names.update(s.name for s in family.samples)
    return names


async def test_every_dashboard_panel_queries_a_metric_the_broker_exports(
        http: httpx.AsyncClient) -> None:
    exported = await _exported(http)
    exprs = _exprs_of_dashboard()
    assert len(exprs) >= 20
    missing = [(title, name) for title, expr in exprs for name in metric_names(expr)
               if name not in exported]
    assert missing == []
    # and each panel reads at least one of them
    assert all(metric_names(expr) & exported for _, expr in exprs)


async def test_every_alert_rule_reads_metrics_the_broker_exports(
        http: httpx.AsyncClient) -> None:
    exported = await _exported(http)
    exprs = _exprs_of_rules()
    assert len(exprs) == 13
    missing = [(alert, name) for alert, expr in exprs for name in metric_names(expr)
               if name not in exported | PROMETHEUS_OWN]
    assert missing == []


def test_a_renamed_metric_would_be_caught() -> None:
    exported = {"queen_dlq_depth_by_queue"}
    assert metric_names("max without (instance) (queen_dlq_depth)") - exported == {
        "queen_dlq_depth"}
