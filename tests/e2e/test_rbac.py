"""The chart's RBAC is exactly what the scheduler calls, derived from the real API server's audit log.

The whole e2e suite runs `gangsolve run` as the chart's ServiceAccount (tests/e2e/conftest.py), and the API
server records every request that account makes. This test runs one more scheduler through every kind of
call (leader election from a missing Lease to its release, every watch, binds of the three PodGroup kinds, a
pod whose ResourceClaim it allocates, a fractional pod whose GPU it writes, a gang that cannot fit and says so,
a high-priority pod that preempts one of those gangs, a Volcano Queue's status), then holds every request of
the session so far against the chart's rules: every request of a kind a rule grants, every rule used, the
Lease touched only by its name.
"""

from __future__ import annotations

import pytest
import yaml
from live_helpers import bound, create, events, pod, pod_group, pods, poll

pytestmark = pytest.mark.e2e


def _granted(rbac: list[dict]) -> tuple[set[tuple[str, str, str, str]], dict[tuple[str, str, str, str], set[str]]]:
    """(api group, resource, subresource, verb) for every rule of the chart's ClusterRole and Role; and, for
    rules that name their objects, which names."""
    granted: set[tuple[str, str, str, str]] = set()
    names: dict[tuple[str, str, str, str], set[str]] = {}
    for role in (d for d in rbac if d["kind"] in ("ClusterRole", "Role")):
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    base, _, sub = resource.partition("/")
                    for verb in rule["verbs"]:
                        key = (group, base, sub, verb)
                        granted.add(key)
                        if rule.get("resourceNames"):
                            names.setdefault(key, set()).update(rule["resourceNames"])
    return granted, names


def test_the_charts_rbac_is_exactly_what_the_scheduler_calls(
    control_plane, scheduler_account, gangsolve_factory, make_nodes, namespace, pod_group_crds, tmp_path
):
    config = tmp_path / "gangsolve.yaml"
    settings = {"lease-duration": 4, "renew-deadline": 3, "retry-period": 0.5, "usage-half-life": 3600}
    config.write_text(yaml.safe_dump(settings))
    assert control_plane.get(gangsolve_factory.lease_path) is None  # so the scheduler creates it
    g = gangsolve_factory("--config", str(config), "--leader-elect")
    tag = {"gangsolve.dev/test": namespace}
    make_nodes(1, gpus=4, labels=tag)
    for group, name in (("scheduling.x-k8s.io", "xpg"), ("scheduling.volcano.sh", "vpg")):
        create(control_plane, namespace, pod_group(group, name, 2))
        for i in range(2):
            member = (
                {"labels": {"scheduling.x-k8s.io/pod-group": name}}
                if group == "scheduling.x-k8s.io"
                else {"annotations": {"scheduling.k8s.io/group-name": name}}
            )
            create(
                control_plane,
                namespace,
                pod(f"{name}-{i}", scheduler=g.scheduler_name, gpus=1, node_selector=tag, **member),
            )
    # Kubernetes' own PodGroup: a gang of two cpu-only pods.
    create(
        control_plane,
        namespace,
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "kpg"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
        },
    )
    for i in range(2):
        member = pod(f"kpg-{i}", scheduler=g.scheduler_name, node_selector=tag)
        member["spec"]["schedulingGroup"] = {"podGroupName": "kpg"}
        create(control_plane, namespace, member)
    create(control_plane, namespace, pod("too-big", scheduler=g.scheduler_name, gpus=8, node_selector=tag))
    # Dynamic Resource Allocation: a pod whose claim gangsolve allocates and reserves before binding it.
    node = make_nodes(1, labels={**tag, "dra": "yes"})[0]
    device_class = f"rbac-{namespace}"
    driver = "gpu.rbac.gangsolve.io"
    create(
        control_plane,
        namespace,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": device_class},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        },
    )
    create(
        control_plane,
        namespace,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{driver}"},
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": {"name": node, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0"}],
            },
        },
    )
    create(
        control_plane,
        namespace,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "one-gpu"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]}},
        },
    )
    with_claim = pod("dra-0", scheduler=g.scheduler_name, node_selector={"dra": "yes"})
    with_claim["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "one-gpu"}]
    create(control_plane, namespace, with_claim)
    queue = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": f"q-{namespace}"}}
    create(control_plane, namespace, queue)
    queued = pod(
        "queued", scheduler=g.scheduler_name, node_selector=tag, annotations={"gangsolve.io/queue": f"q-{namespace}"}
    )
    create(control_plane, namespace, queued)
    # GPU sharing: a fractional pod's GPU is written on it (through pods/status) before its bind; on a node of
    # its own, out of the preemption below.
    share_tag = {"gangsolve.dev/test-share": namespace}
    make_nodes(1, gpus=1, labels=share_tag)
    fraction = {"gpu-fraction": "0.5"}
    create(
        control_plane,
        namespace,
        pod("share", scheduler=g.scheduler_name, node_selector=share_tag, annotations=fraction),
    )
    poll(
        lambda: len(bound(pods(control_plane, namespace))) == 9, timeout=60, what="the three gangs and three pods bound"
    )
    queues = "/apis/scheduling.volcano.sh/v1beta1/queues"
    poll(
        lambda: (control_plane.get(f"{queues}/q-{namespace}").get("status") or {}).get("allocated"),
        timeout=30,
        what="the Queue's status",
    )
    poll(
        lambda: (
            "gangsolve.io/usage" in (control_plane.get(f"{queues}/q-{namespace}")["metadata"].get("annotations") or {})
        ),
        timeout=30,
        what="the Queue's usage history",
    )
    control_plane.request("DELETE", f"{queues}/q-{namespace}")
    poll(lambda: events(control_plane, namespace, "FailedScheduling"), timeout=30, what="the oversized pod's event")
    poll(
        lambda: all(
            (control_plane.get(f"/apis/{group}/{version}/namespaces/{namespace}/podgroups/{name}") or {}).get("status")
            for group, version, name in (
                ("scheduling.x-k8s.io", "v1alpha1", "xpg"),
                ("scheduling.volcano.sh", "v1beta1", "vpg"),
                ("scheduling.k8s.io", "v1beta1", "kpg"),
            )
        ),
        timeout=30,
        what="the three PodGroups' status",
    )
    # The node is full: a high-priority pod preempts one of the gangs whole (nominatedNodeName, DisruptionTarget
    # and a delete) and binds once it is gone.
    high = f"high-{namespace}"
    create(
        control_plane,
        "",
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": high}, "value": 1000},
    )
    urgent = pod("urgent", scheduler=g.scheduler_name, gpus=1, node_selector=tag)
    urgent["spec"]["priorityClassName"] = high
    create(control_plane, namespace, urgent)
    poll(lambda: bound([p for p in pods(control_plane, namespace) if p["metadata"]["name"] == "urgent"]), timeout=60)
    everyone = {f"{name}-{i}" for name in ("xpg", "vpg", "kpg") for i in range(2)} | {"urgent"}
    gone = everyone - {p["metadata"]["name"] for p in bound(pods(control_plane, namespace))}
    assert gone in ({"xpg-0", "xpg-1"}, {"vpg-0", "vpg-1"})  # one GPU gang, whole
    control_plane.request("DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/{high}")
    assert g.terminate() == 0  # and the Lease is released
    control_plane.request("DELETE", f"/apis/resource.k8s.io/v1/resourceslices/{node}-{driver}")
    control_plane.request("DELETE", f"/apis/resource.k8s.io/v1/deviceclasses/{device_class}")

    records = [e for e in control_plane.audit_events() if e["user"]["username"] == scheduler_account.user]
    assert records, "the audit log holds none of the scheduler's requests"
    # A request the rules do not grant is refused (403) and still counts as used below, so it fails the test.
    # (Granted requests can be refused too, for a moment after an API server restart, while its authorizer
    # loads the roles: the fault tests restart it.)

    granted, names = _granted(scheduler_account.rbac)
    used: set[tuple[str, str, str, str]] = set()
    for e in records:
        ref = e.get("objectRef") or {}
        key = (ref.get("apiGroup", ""), ref.get("resource", ""), ref.get("subresource", ""), e["verb"])
        used.add(key)
        if key in names:
            assert ref.get("name") in names[key], f"{e['verb']} {e['requestURI']} outside the rule's names"
    # Permissions the API server checks without a request of their own: an update of a ResourceClaim's status
    # that changes its allocation or reservedFor also needs `update` on the synthetic resourceclaims/binding.
    if ("resource.k8s.io", "resourceclaims", "status", "update") in used:
        used.add(("resource.k8s.io", "resourceclaims", "binding", "update"))
    assert used == granted
