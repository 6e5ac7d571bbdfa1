"""Planning in time on the real control plane: a gang behind a pod that declares its runtime gets a reservation
(it is not starving: every pending gang is planned), which its pod, its PodGroup and the metrics show; a short
gang backfills the free GPUs, a long one is held back, says why and when it is expected to start."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import yaml
from live_helpers import bound, create, get_pod_group, pod, pod_group, pods, poll, running

pytestmark = pytest.mark.e2e

RUNTIME = "gangsolve.io/expected-runtime"


def condition(cp, namespace: str, name: str) -> str:
    obj = cp.get(f"/api/v1/namespaces/{namespace}/pods/{name}") or {}
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return c.get("message", "")
    return ""


def test_a_reservation_shows_on_the_pod_the_podgroup_and_in_metrics(
    control_plane, make_nodes, namespace, pod_group_crds, gangsolve_factory, tmp_path
):
    config = tmp_path / "gangsolve.yaml"
    # Reservations from their earliest starts: the times below are the running pods' ends.
    config.write_text(yaml.safe_dump({"resync-period": 1, "plan-relaxation": 0}))
    g = gangsolve_factory("--config", str(config))
    tag = {"gangsolve.dev/test": namespace}
    (node,) = make_nodes(1, gpus=8, labels=tag)
    cp = control_plane

    create(
        cp, namespace, pod("long", scheduler=g.scheduler_name, gpus=6, node_selector=tag, annotations={RUNTIME: "2h"})
    )
    (long,) = poll(lambda: running(pods(cp, namespace)), what="the long pod running")
    started = datetime.fromisoformat(long["status"]["startTime"].replace("Z", "+00:00"))
    start = (started + timedelta(hours=2)).astimezone(UTC)
    when = f"{start:%H:%M} UTC" if datetime.now(UTC).date() == start.date() else f"{start:%Y-%m-%d %H:%M} UTC"
    expected = f"expected to start at about {when} on node {node} (8 GPUs held)"

    create(cp, namespace, pod_group("scheduling.x-k8s.io", "big", 1))
    labels = {"scheduling.x-k8s.io/pod-group": "big"}
    big = pod(
        "big-0", scheduler=g.scheduler_name, gpus=8, node_selector=tag, labels=labels, annotations={RUNTIME: "1h"}
    )
    create(cp, namespace, big)

    def big_says() -> str:
        message = condition(cp, namespace, "big-0")
        return message if expected in message else ""

    message = poll(big_says, what="the reservation on the pod's condition")
    assert message.startswith("needs 8 nvidia.com/gpu, 2 free")
    poll(lambda: g.metric("gangsolve_reserved_gpus") == 8, what="reserved GPUs in the metrics")
    assert g.metric("gangsolve_reservations") == 1

    def group_says() -> str:
        status = (get_pod_group(cp, namespace, "scheduling.x-k8s.io", "big") or {}).get("status") or {}
        return next((c.get("message", "") for c in status.get("conditions") or []), "")

    poll(lambda: expected in group_says(), what="the reservation in the PodGroup's status")

    # A gang that ends before the reservation starts takes a free GPU now; one that would still run then waits.
    create(
        cp, namespace, pod("short", scheduler=g.scheduler_name, gpus=1, node_selector=tag, annotations={RUNTIME: "5m"})
    )
    poll(lambda: any(p["metadata"]["name"] == "short" for p in bound(pods(cp, namespace))), what="short bound")
    poll(lambda: (g.metric("gangsolve_backfilled_gangs_total") or 0) >= 1, what="the backfilled gang counted")
    create(
        cp, namespace, pod("later", scheduler=g.scheduler_name, gpus=1, node_selector=tag, annotations={RUNTIME: "3h"})
    )
    poll(
        lambda: "would still be running when a reservation" in condition(cp, namespace, "later"),
        what="the long gang held back, saying why",
    )
    # ... and when it is expected to start: once big's hour after the long pod is over.
    after = start + timedelta(hours=1)
    later_when = f"{after:%H:%M} UTC" if datetime.now(UTC).date() == after.date() else f"{after:%Y-%m-%d %H:%M} UTC"
    poll(
        lambda: (
            f"expected to start at about {later_when} on node {node} (1 GPU held)" in condition(cp, namespace, "later")
        ),
        what="the long gang's expected start",
    )
    assert g.metric("gangsolve_plan_horizon_seconds") > 0
    assert not any(p["metadata"]["name"] in ("big-0", "later") for p in bound(pods(cp, namespace)))


def test_a_start_on_a_default_runtime_is_shown_and_holds_nothing(
    control_plane, make_nodes, namespace, pod_group_crds, gangsolve_factory, tmp_path
):
    """The same cluster with no runtime declared and `default-runtime` set: the big gang is shown when the running
    pod's default runtime ends, as a forecast that says why nothing is held, and a later gang takes the free GPUs."""
    config = tmp_path / "gangsolve.yaml"
    config.write_text(yaml.safe_dump({"resync-period": 1, "default-runtime": 7200}))
    g = gangsolve_factory("--config", str(config))
    tag = {"gangsolve.dev/test": namespace}
    (node,) = make_nodes(1, gpus=8, labels=tag)
    cp = control_plane

    create(cp, namespace, pod("long", scheduler=g.scheduler_name, gpus=6, node_selector=tag))
    poll(lambda: running(pods(cp, namespace)), what="the long pod running")
    create(cp, namespace, pod_group("scheduling.x-k8s.io", "big", 1))
    labels = {"scheduling.x-k8s.io/pod-group": "big"}
    create(cp, namespace, pod("big-0", scheduler=g.scheduler_name, gpus=8, node_selector=tag, labels=labels))
    poll(
        lambda: (
            "(a forecast on runtimes nobody declared: nothing is held for it; declare "
            "gangsolve.io/expected-runtime to have it held)" in condition(cp, namespace, "big-0")
        ),
        what="the forecast on the pod's condition",
    )
    assert f"on node {node}" in condition(cp, namespace, "big-0")
    assert g.metric("gangsolve_reserved_gpus") == 0
    # Nothing held: a gang that would run past big's expected start takes the free GPUs now.
    create(cp, namespace, pod("later", scheduler=g.scheduler_name, gpus=2, node_selector=tag))
    poll(lambda: any(p["metadata"]["name"] == "later" for p in bound(pods(cp, namespace))), what="later bound")
