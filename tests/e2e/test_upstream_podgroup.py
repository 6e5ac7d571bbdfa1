"""Kubernetes' own PodGroup (scheduling.k8s.io/v1beta1, KEP-4671) as a gang source, on the real v1.37 API
server with the API served: minCount all or nothing, the PodGroup's priority (KEP-5710), its topology
constraint (KEP-5732), the status condition kube-scheduler writes, a `basic` policy, and pods that name a
PodGroup not created yet."""

from __future__ import annotations

import contextlib

import pytest
from live_helpers import bound, create, pod, pods, poll

from gangsolve.bench.devcluster import ApiError, ControlPlane

pytestmark = pytest.mark.e2e

API = "scheduling.k8s.io/v1beta1"
RACK = "topology.gangsolve.dev/rack"


def pod_group(name: str, *, min_count: int | None, priority_class: str | None = None, topology: str | None = None):
    """A v1beta1 PodGroup: a gang policy of `min_count`, or a basic policy when None."""
    policy = {"gang": {"minCount": min_count}} if min_count is not None else {"basic": {}}
    spec: dict = {"schedulingPolicy": policy}
    if priority_class:
        spec["priorityClassName"] = priority_class
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    return {"apiVersion": API, "kind": "PodGroup", "metadata": {"name": name}, "spec": spec}


def member(name: str, group: str, scheduler: str, tag: dict, *, gpus: int = 0, priority_class: str | None = None):
    p = pod(name, scheduler=scheduler, gpus=gpus, cpu="100m", memory="128Mi", node_selector=tag)
    p["spec"]["schedulingGroup"] = {"podGroupName": group}
    if priority_class:
        p["spec"]["priorityClassName"] = priority_class
    return p


def condition(cp: ControlPlane, namespace: str, name: str) -> dict | None:
    pg = cp.get(f"/apis/{API}/namespaces/{namespace}/podgroups/{name}") or {}
    found = [c for c in (pg.get("status") or {}).get("conditions") or [] if c["type"] == "PodGroupInitiallyScheduled"]
    return found[0] if found else None


def bound_in(cp: ControlPlane, namespace: str, prefix: str) -> list[dict]:
    return [p for p in bound(pods(cp, namespace)) if p["metadata"]["name"].startswith(prefix)]


@pytest.fixture
def high_priority(control_plane: ControlPlane, namespace: str):
    name = f"{namespace}-high"[:63]
    control_plane.request(
        "POST",
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": 1000},
    )
    yield name
    with contextlib.suppress(ApiError):
        control_plane.request("DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")


def test_upstream_podgroups_are_gangs_with_priority_topology_and_status(
    control_plane, make_nodes, namespace, gangsolve_factory, high_priority
):
    cp, scheduler = control_plane, gangsolve_factory.scheduler_name
    tag = {"gangsolve.dev/test": namespace}
    rack_a = make_nodes(2, gpus=4, labels={**tag, RACK: f"{namespace}-a"})
    make_nodes(1, gpus=4, labels={**tag, RACK: f"{namespace}-b"})
    # Two gangs that cannot both fit (12 GPUs): the older one asks for all of them; the newer one has the
    # higher PodGroup priority and must sit in one rack (6 GPUs: only rack a has them).
    create(cp, namespace, pod_group("a-low", min_count=3))
    for i in range(3):
        create(cp, namespace, member(f"a-low-{i}", "a-low", scheduler, tag, gpus=4))
    create(cp, namespace, pod_group("b-high", min_count=3, priority_class=high_priority, topology=RACK))
    for i in range(3):
        create(cp, namespace, member(f"b-high-{i}", "b-high", scheduler, tag, gpus=2, priority_class=high_priority))
    # Its pods' priority (0) differs from the PodGroup's (1000): upstream refuses the group, and so do we.
    create(cp, namespace, pod_group("mixed", min_count=1, priority_class=high_priority))
    create(cp, namespace, member("mixed-0", "mixed", scheduler, tag))
    create(cp, namespace, pod_group("solo", min_count=None))  # basic: pod by pod
    for i in range(2):
        create(cp, namespace, member(f"solo-{i}", "solo", scheduler, tag))
    create(cp, namespace, member("late-0", "late", scheduler, tag))  # its PodGroup comes later

    gangsolve_factory()
    poll(lambda: len(bound_in(cp, namespace, "b-high")) == 3, timeout=60, what="the high-priority gang bound")
    assert {p["spec"]["nodeName"] for p in bound_in(cp, namespace, "b-high")} <= set(rack_a)
    poll(lambda: len(bound_in(cp, namespace, "solo")) == 2, timeout=30, what="the basic group's pods bound")
    poll(
        lambda: (condition(cp, namespace, "a-low") or {}).get("reason") == "Unschedulable",
        timeout=30,
        what="the low gang's Unschedulable condition",
    )
    assert bound_in(cp, namespace, "a-low") == []
    poll(
        lambda: (condition(cp, namespace, "b-high") or {}).get("status") == "True",
        timeout=30,
        what="the high gang's condition",
    )
    assert condition(cp, namespace, "b-high") | {"lastTransitionTime": None} == {
        "type": "PodGroupInitiallyScheduled",
        "status": "True",
        "reason": "Scheduled",
        "message": "",
        "lastTransitionTime": None,
    }
    poll(
        lambda: (condition(cp, namespace, "mixed") or {}).get("reason") == "SchedulerError",
        timeout=30,
        what="the mixed-priority group's SchedulerError",
    )
    mixed = condition(cp, namespace, "mixed") or {}
    assert mixed["status"] == "False"
    assert "same priority as the pod group's priority" in mixed["message"]
    assert bound_in(cp, namespace, "mixed") == []
    late = cp.get(f"/api/v1/namespaces/{namespace}/pods/late-0") or {}
    assert not late["spec"].get("nodeName")
    scheduled = [c for c in late["status"].get("conditions") or [] if c["type"] == "PodScheduled"]
    assert scheduled
    assert f"PodGroup {namespace}/late" in scheduled[0]["message"]

    create(cp, namespace, pod_group("late", min_count=1))
    poll(lambda: len(bound_in(cp, namespace, "late")) == 1, timeout=30, what="the late pod bound to its gang")
    poll(
        lambda: (condition(cp, namespace, "late") or {}).get("status") == "True",
        timeout=30,
        what="the late group's condition",
    )
