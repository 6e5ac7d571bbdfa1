"""The chart's Grafana dashboard, rendered by the real helm: off by default, found by Grafana's sidecar when on,
and every series and label it queries one the scheduler exports (no dead panels)."""

from __future__ import annotations

import json
import re

from prometheus_client.metrics import MetricWrapperBase

from gangsolve.live.metrics import Metrics
from tests.helm import Helm, render

SERIES_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
ADDED_BY_PROMETHEUS = {"job", "instance"}  # the scrape's target labels; `le` is a histogram's own


def exported() -> dict[str, set[str]]:
    """Every series name the scheduler serves on /metrics, with its labels."""
    series = {}
    for metric in vars(Metrics()).values():
        if isinstance(metric, MetricWrapperBase):
            (family,) = metric.describe()
            labels = set(metric._labelnames) | ADDED_BY_PROMETHEUS  # no public accessor for a family's labels
            for suffix in SERIES_SUFFIXES[family.type]:
                series[family.name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    return series


def dashboard_configmaps(docs: list[dict]) -> list[dict]:
    return [d for d in docs if d["kind"] == "ConfigMap" and "gangsolve.json" in d.get("data", {})]


def dashboard(helm: Helm, *sets: str) -> tuple[dict, dict]:
    (configmap,) = dashboard_configmaps(render(helm, "dashboard.enabled=true", *sets))
    return configmap, json.loads(configmap["data"]["gangsolve.json"])


def queries(board: dict) -> list[tuple[str, str, str]]:
    """(panel title, PromQL, legend) for every query of the board, its variables' included."""
    found = [
        (panel["title"], target["expr"], target.get("legendFormat", ""))
        for panel in board["panels"]
        for target in panel["targets"]
    ]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            found.append((f"variable {variable['name']}", variable["query"]["query"], ""))
    return found


def test_the_dashboard_is_off_by_default(helm: Helm) -> None:
    assert dashboard_configmaps(render(helm)) == []
    assert dashboard_configmaps(render(helm, "serviceMonitor.enabled=true")) == []


def test_grafanas_sidecar_finds_it_where_it_looks(helm: Helm) -> None:
    configmap, board = dashboard(helm)
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["namespace"] == "gangsolve-system"
    assert board["uid"] == "gangsolve"
    configmap, _ = dashboard(
        helm,
        "dashboard.namespace=monitoring",
        "dashboard.labels.grafana_dashboard=null",
        "dashboard.labels.dashboards=gpu",
        "dashboard.annotations.grafana_folder=Scheduling",
    )
    assert configmap["metadata"]["namespace"] == "monitoring"
    assert configmap["metadata"]["labels"]["dashboards"] == "gpu"
    assert "grafana_dashboard" not in configmap["metadata"]["labels"]
    assert configmap["metadata"]["annotations"] == {"grafana_folder": "Scheduling"}


def test_every_series_and_label_the_dashboard_queries_is_exported(helm: Helm) -> None:
    _, board = dashboard(helm)
    series = exported()
    used = set()
    for title, expr, legend in queries(board):
        names = set(re.findall(r"\bgangsolve_\w+", expr))
        assert names, f"{title}: {expr} reads no gangsolve series"
        unknown = names - series.keys()
        assert not unknown, f"{title}: {sorted(unknown)} are not exported"
        labels = set().union(*(series[n] for n in names))
        grouped = {label.strip() for by in re.findall(r"\bby \(([^)]*)\)", expr) for label in by.split(",")}
        matched = set(re.findall(r"(\w+)\s*=~?", expr))
        legends = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))
        assert grouped | matched | legends <= labels, f"{title}: {expr} uses labels beyond {sorted(labels)}"
        used |= names
    # What operators look at, each on a panel.
    assert {
        "gangsolve_scheduling_cycle_duration_seconds_bucket",
        "gangsolve_schedule_attempts_total",
        "gangsolve_pending_gangs",
        "gangsolve_pods_bound_total",
        "gangsolve_binding_errors_total",
        "gangsolve_queue_share",
        "gangsolve_queue_fair_share",
        "gangsolve_queue_allocated",
        "gangsolve_preemption_victims_total",
        "gangsolve_preemption_evictions_total",
        "gangsolve_reservations",
        "gangsolve_reserved_gpus",
        "gangsolve_definition_wait_seconds_bucket",
    } <= used


def test_panels_have_their_own_place_and_name_the_variables_they_use(helm: Helm) -> None:
    _, board = dashboard(helm)
    ids = [panel["id"] for panel in board["panels"]]
    assert len(set(ids)) == len(ids)
    cells = [
        (x, y)
        for panel in board["panels"]
        for x in range(panel["gridPos"]["x"], panel["gridPos"]["x"] + panel["gridPos"]["w"])
        for y in range(panel["gridPos"]["y"], panel["gridPos"]["y"] + panel["gridPos"]["h"])
    ]
    assert len(set(cells)) == len(cells), "panels overlap"
    assert all(x < 24 for x, _ in cells)
    variables = {v["name"] for v in board["templating"]["list"]}
    text = json.dumps(board["panels"])
    assert set(re.findall(r"\$\{?(\w+)", text)) - {"__rate_interval"} <= variables
