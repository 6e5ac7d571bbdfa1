"""PodGroup status, event rate limits and the metric names dashboards rely on."""

import pytest
from prometheus_client import generate_latest

from gangsolve.live.feedback import EventLimiter, pod_group_status
from gangsolve.live.metrics import Metrics
from tests.builders import k8s_pod, k8s_pod_group


def test_pod_group_status_pending_then_running():
    pg = k8s_pod_group("g", 2)
    pending = [k8s_pod("a"), k8s_pod("b")]
    s = pod_group_status(pg, pending, "needs 2 nvidia.com/gpu, 1 free")
    assert s["phase"] == "Pending"
    assert s["scheduled"] == 0
    assert s["running"] == 0
    (cond,) = s["conditions"]
    assert (cond["type"], cond["reason"], cond["message"]) == (
        "Unschedulable",
        "Unschedulable",
        "needs 2 nvidia.com/gpu, 1 free",
    )
    bound = [k8s_pod("a", node_name="n", phase="Running"), k8s_pod("b", node_name="n")]
    s = pod_group_status(pg, bound, "")
    assert s["phase"] == "Scheduled"
    assert s["scheduled"] == 2
    assert s["running"] == 1
    assert s["conditions"][0]["type"] == "Scheduled"
    s2 = pod_group_status(pg, bound, "", existing=s)
    assert s2["conditions"][0]["lastTransitionTime"] == s["conditions"][0]["lastTransitionTime"]


def test_volcano_pod_group_status_shape():
    pg = k8s_pod_group("g", 1, volcano=True)
    s = pod_group_status(pg, [k8s_pod("a", node_name="n", phase="Running")], "")
    assert s["phase"] == "Running"
    assert s["running"] == 1
    assert "scheduled" not in s


@pytest.mark.asyncio
async def test_event_limiter_dedups_per_pod_and_caps_the_rate():
    lim = EventLimiter(interval=60, rate=2)
    assert await lim.allow("u1", "FailedScheduling", "no room")
    assert not await lim.allow("u1", "FailedScheduling", "no room")  # same event again: suppressed
    assert await lim.allow("u1", "FailedScheduling", "other reason")
    burst = [await lim.allow(f"u{i}", "FailedScheduling", "x") for i in range(100)]
    assert sum(burst) == 8  # a burst of 10 (5 s at 2/s), two taken above; the rest are dropped, not queued


def test_metric_names():
    m = Metrics()
    m.schedule_attempts.labels("scheduled").inc()
    m.bind_errors.labels("conflict").inc()
    m.watch_errors.labels("Pod.v1", "410").inc()
    m.solver_status.labels("OPTIMAL").inc()
    text = generate_latest(m.registry).decode()
    for name in [
        'gangsolve_schedule_attempts_total{result="scheduled"}',
        "gangsolve_scheduling_cycle_duration_seconds_bucket",
        "gangsolve_solve_duration_seconds_bucket",
        "gangsolve_solver_optimality_gap",
        "gangsolve_pending_gangs",
        "gangsolve_pending_pods",
        "gangsolve_binding_duration_seconds_bucket",
        'gangsolve_binding_errors_total{reason="conflict"}',
        "gangsolve_gang_binding_duration_seconds_bucket",
        "gangsolve_pods_bound_total",
        "gangsolve_leader",
        'gangsolve_solver_status_total{status="OPTIMAL"}',
    ]:
        assert name in text, name
