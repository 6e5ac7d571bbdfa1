"""Capacity a terminating pod still holds, pods held by scheduling gates, and the soundness oracle itself, on the
real control plane. A finalizer keeps a deleted pod terminating for as long as the test needs."""

from __future__ import annotations

import pytest
from live_helpers import assert_cluster_sound, bound, create, pod, pods, poll

from gangsolve.bench.devcluster import ControlPlane

pytestmark = pytest.mark.e2e

HOLD = "gangsolve.dev/test-hold"  # a finalizer nobody removes but the test


def _merge_patch(cp: ControlPlane, namespace: str, name: str, patch: dict) -> None:
    cp.request("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}", patch, "application/merge-patch+json")


def _terminating_pod_on(cp: ControlPlane, namespace: str, node: str, gpus: int) -> str:
    """A pod bound to `node` holding `gpus`, deleted but kept terminating by a finalizer."""
    held = pod("leaving", scheduler="default-scheduler", gpus=gpus)
    held["metadata"]["finalizers"] = [HOLD]
    held["spec"]["nodeName"] = node
    create(cp, namespace, held)
    cp.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/leaving")
    poll(
        lambda: (
            (cp.get(f"/api/v1/namespaces/{namespace}/pods/leaving") or {}).get("metadata", {}).get("deletionTimestamp")
        ),
        timeout=30,
        what="the pod to be terminating",
    )
    return "leaving"


def _let_go(cp: ControlPlane, namespace: str, name: str) -> None:
    _merge_patch(cp, namespace, name, {"metadata": {"finalizers": None}})
    poll(lambda: cp.get(f"/api/v1/namespaces/{namespace}/pods/{name}") is None, timeout=30, what=f"{name} gone")


def test_oracle_counts_capacity_a_terminating_pod_holds(control_plane, make_nodes, namespace):
    """A check that left terminating pods out (as gangsolve did) could not see this overcommit."""
    (node,) = make_nodes(1, gpus=4)
    leaving = _terminating_pod_on(control_plane, namespace, node, gpus=4)
    try:
        late = pod("late", scheduler="default-scheduler", gpus=4)
        late["spec"]["nodeName"] = node  # bound by hand, past any scheduler
        create(control_plane, namespace, late)
        with pytest.raises(AssertionError, match=f"node {node} overcommitted on nvidia.com/gpu: 8 requested"):
            assert_cluster_sound(control_plane)
    finally:
        _let_go(control_plane, namespace, leaving)


def test_gpus_of_a_terminating_pod_are_not_planned_until_it_is_gone(
    control_plane, make_nodes, namespace, gangsolve_factory
):
    g = gangsolve_factory()
    (node,) = make_nodes(1, gpus=4, labels={"gangsolve.dev/test": namespace})
    leaving = _terminating_pod_on(control_plane, namespace, node, gpus=4)
    create(
        control_plane,
        namespace,
        pod("new", scheduler=g.scheduler_name, gpus=4, node_selector={"gangsolve.dev/test": namespace}),
    )

    def waiting() -> bool:
        (new,) = [p for p in pods(control_plane, namespace) if p["metadata"]["name"] == "new"]
        conds = [c for c in new["status"].get("conditions", []) if c["type"] == "PodScheduled"]
        return bool(conds) and conds[0]["reason"] == "Unschedulable"

    poll(waiting, timeout=60, what="gangsolve to report the new pod unschedulable")
    assert not [p for p in bound(pods(control_plane, namespace)) if p["metadata"]["name"] == "new"]

    _let_go(control_plane, namespace, leaving)
    poll(
        lambda: [p for p in bound(pods(control_plane, namespace)) if p["metadata"]["name"] == "new"],
        timeout=60,
        what="the new pod to be bound once the GPUs are free",
    )


def test_gated_pods_wait_for_their_gates(control_plane, make_nodes, namespace, gangsolve_factory):
    g = gangsolve_factory()
    make_nodes(1, gpus=4, labels={"gangsolve.dev/test": namespace})
    selector = {"gangsolve.dev/test": namespace}
    held = pod("held", scheduler=g.scheduler_name, gpus=1, node_selector=selector)
    held["spec"]["schedulingGates"] = [{"name": "example.com/admission"}]
    create(control_plane, namespace, held)
    create(control_plane, namespace, pod("free", scheduler=g.scheduler_name, gpus=1, node_selector=selector))

    poll(
        lambda: {p["metadata"]["name"] for p in bound(pods(control_plane, namespace))} == {"free"},
        timeout=60,
        what="the ungated pod to be bound",
    )
    (gated,) = [p for p in pods(control_plane, namespace) if p["metadata"]["name"] == "held"]
    conds = [c for c in gated["status"].get("conditions", []) if c["type"] == "PodScheduled"]
    assert [c["reason"] for c in conds] == ["SchedulingGated"]  # as the API server set it: not ours to change
    assert "held" not in g.log()

    _merge_patch(control_plane, namespace, "held", {"spec": {"schedulingGates": None}})
    poll(
        lambda: {p["metadata"]["name"] for p in bound(pods(control_plane, namespace))} == {"free", "held"},
        timeout=60,
        what="the pod to be bound once its gate is removed",
    )
