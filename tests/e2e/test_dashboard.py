"""The chart's Grafana dashboard against a live scheduler on the real control plane: every series it queries is
served on /metrics with the type the query assumes, and after a gang is bound every panel has data."""

from __future__ import annotations

import re

import pytest
from live_helpers import pods, poll, running
from test_live_scheduling import tfjob, users_cluster

from tests.test_chart_dashboard import dashboard, queries

pytestmark = pytest.mark.e2e


def declared(name: str, types: dict[str, str]) -> bool:
    """A series /metrics declares: a counter (its `_total`) or gauge by name, a histogram's by its family's."""
    if types.get(name) in ("counter", "gauge"):
        return True
    family = re.sub(r"_(bucket|sum|count)$", "", name)
    return family != name and types.get(family) == "histogram"


def test_every_panel_has_data_from_a_live_scheduler(helm, control_plane, make_nodes, namespace, gangsolve_factory):
    g = gangsolve_factory()
    users_cluster(make_nodes, namespace)
    tfjob(control_plane, namespace, g.scheduler_name, namespace, workers=7)
    poll(lambda: len(running(pods(control_plane, namespace))) == 8, timeout=60, what="all 8 pods Running")
    poll(lambda: g.metric("gangsolve_pods_bound_total") == 8, timeout=30, what="8 binds counted")

    exposition = g.get("/metrics")[1]
    types = dict(re.findall(r"^# TYPE (\w+) (\w+)$", exposition, re.M))
    served: dict[str, list[str]] = {}  # series -> the label sets of its samples
    for line in exposition.splitlines():
        if line and not line.startswith("#"):
            name, _, labels = line.partition("{")
            served.setdefault(name.split(" ")[0], []).append(labels)

    _, board = dashboard(helm)
    for title, expr, _legend in queries(board):
        for name in re.findall(r"\bgangsolve_\w+", expr):
            assert declared(name, types), f"{title}: {name} is not served"
    for panel in board["panels"]:
        series = {n for target in panel["targets"] for n in re.findall(r"\bgangsolve_\w+", target["expr"])}
        assert any(served.get(n) for n in series), f"panel {panel['title']}: none of {sorted(series)} has a sample"
    # The GPU panel's selector matches what a queue of GPU pods reports.
    assert any('resource="nvidia.com/gpu"' in labels for labels in served["gangsolve_queue_allocated"])
