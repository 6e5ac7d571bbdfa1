"""Kueue's real manager (built from its Go module by `make peers`) with kube-scheduler on a control plane of its
own, with the CRDs, roles and webhooks its Helm chart installs (the webhooks on loopback): a pod group that fits
its ClusterQueue is admitted and bound whole; one that does not fit stays gated and unadmitted, no pod of it
bound (kube-scheduler alone would bind the members that fit); and the live bench's own Kueue run on the users'
TFJobs. Skipped, saying why, when the manager is not built."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import pytest
from clusters import control_plane
from live_helpers import bound, create, pod, pods, poll

from gangsolve.bench.devcluster import Binaries, ControlPlane, NodeSpec, kueue
from gangsolve.bench.devcluster.volcano import PeerMissing

pytestmark = pytest.mark.e2e

try:
    KUEUE: kueue.Kueue | None = kueue.Kueue.locate()
    NOT_BUILT = ""
except PeerMissing as missing:
    KUEUE, NOT_BUILT = None, str(missing)

NAMESPACE = "kueue-smoke"
TAG = {"smoke": "kueue"}


@pytest.fixture(scope="module")
def kueue_plane(binaries: Binaries) -> Iterator[ControlPlane]:
    if KUEUE is None:
        pytest.skip(NOT_BUILT)
    with control_plane(binaries, peer=True) as cp:
        nodes = [NodeSpec(f"kueue-gpu-{i}", cpu="16", memory="64Gi", gpus=4, labels=TAG) for i in range(2)]
        cp.add_nodes(nodes, wait=True)
        port = kueue.free_port()
        certs = kueue.install(cp, KUEUE, port)
        kueue.start(cp, kueue.add(cp, KUEUE, certs, port))
        cp.create_namespace(NAMESPACE)
        pool = kueue.GpuPool("gpu-smoke", TAG, [], 8)
        kueue.create_queues(
            cp,
            [
                kueue.resource_flavor(kueue.DEFAULT_FLAVOR),
                kueue.resource_flavor(pool.flavor, pool.node_labels),
                kueue.cluster_queue("smoke", Decimal(32), Decimal(128 * 2**30), [pool]),
                kueue.local_queue("smoke", NAMESPACE, "smoke"),
            ],
        )
        yield cp


def gang(name: str, size: int) -> list[dict]:
    """A Kueue pod group of `size` pods of one GPU each, in the `smoke` LocalQueue."""
    members = [
        pod(f"{name}-{i}", scheduler="default-scheduler", gpus=1, cpu="500m", memory="512Mi") for i in range(size)
    ]
    return kueue.label_members(members, name, queue="smoke")


def workload_of(cp: ControlPlane, group: str) -> dict | None:
    """The Workload Kueue made for a pod group (named after the group)."""
    items = cp.request("GET", f"/apis/{kueue.API}/namespaces/{NAMESPACE}/workloads")["items"]
    return next((w for w in items if w["metadata"]["name"] == group), None)


def condition(workload: dict | None, kind: str) -> dict | None:
    return next((c for c in ((workload or {}).get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def test_pod_group_admitted_and_bound_whole_or_not_at_all(kueue_plane: ControlPlane) -> None:
    cp = kueue_plane
    first = gang("first", 6)  # 6 of the 8 GPUs
    for obj in first:
        created = create(cp, NAMESPACE, obj)
        assert {"name": kueue.ADMISSION_GATE} in created["spec"].get("schedulingGates", [])  # Kueue's webhook gated it
    poll(
        lambda: len(bound(pods(cp, NAMESPACE))) == 6, timeout=90, what="kube-scheduler binding the admitted 6-pod group"
    )
    placed = bound(pods(cp, NAMESPACE))
    assert {p["spec"]["nodeName"] for p in placed} <= {"kueue-gpu-0", "kueue-gpu-1"}
    assert all(p["spec"]["nodeSelector"] == TAG for p in placed)  # the flavor's node labels, added on admission
    assert condition(workload_of(cp, "first"), "Admitted")["status"] == "True"

    for obj in gang("second", 4):  # 4 more: 2 GPUs left in the quota, the group does not fit
        create(cp, NAMESPACE, obj)
    pending = poll(
        lambda: (c := condition(workload_of(cp, "second"), "QuotaReserved")) and c["status"] == "False" and c,
        timeout=60,
        what="Kueue's verdict on the 4-pod group",
    )
    assert "insufficient unused quota for nvidia.com/gpu" in pending["message"]
    second = [p for p in pods(cp, NAMESPACE) if p["metadata"]["name"].startswith("second-")]
    assert len(second) == 4
    assert not bound(second)
    assert all({"name": kueue.ADMISSION_GATE} in p["spec"]["schedulingGates"] for p in second)
    assert len(bound(pods(cp, NAMESPACE))) == 6


def test_the_live_bench_runs_kueue_on_the_users_tfjobs(binaries: Binaries, tmp_path) -> None:
    """The bench's own path (its users' pod groups, one ClusterQueue over what the cluster leaves free): one
    TFJob is bound whole, the other not at all, and the configuration it ran with is in the result. Which one
    is a race: Kueue admits by its Workloads' creation, and it makes the two groups' Workloads concurrently."""
    if KUEUE is None:
        pytest.skip(NOT_BUILT)
    from gangsolve.bench.live.runs import run_scenarios
    from tests.e2e.live_helpers import bench_runs

    run = bench_runs(run_scenarios, "live/tfjob", ["kueue"], tmp_path)["kueue"]
    assert (run["gangs_placed"], run["partial_gangs"], run["violations"]) == (1, 0, [])
    assert run["pods_placed"] in (8, 6)  # the 8-pod TFJob (7 GPUs) or the 6-pod one (5 GPUs), whole
    conf = run["peer"]["manager_config"]
    assert conf["waitForPodsReady"]["blockAdmission"] is True
    assert conf["integrations"]["frameworks"] == ["pod"]
    (queue,) = [q for q in run["peer"]["queues"] if q["kind"] == "ClusterQueue"]
    gpu_group = queue["spec"]["resourceGroups"][1]
    assert gpu_group["flavors"][0]["resources"] == [{"name": "nvidia.com/gpu", "nominalQuota": "8"}]
    # kube-scheduler's scheduling algorithm: it places what Kueue admits.
    assert run["decisions"]["metric"] == "scheduler_scheduling_algorithm_duration_seconds"
    assert run["decisions"]["count"] >= 1
