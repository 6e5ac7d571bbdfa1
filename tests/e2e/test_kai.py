"""NVIDIA's KAI scheduler (its scheduler and binder, built from source by `make peers`) on a control plane of its
own, with its chart's CRDs, roles and default queues and its operator's configuration for the default shard: a
gang under a KAI PodGroup is bound whole, and a gang that does not fit is bound not at all (kube-scheduler would
bind the members that fit); and the live bench's own KAI run on the users' TFJobs. Skipped, saying why, when the
binaries are not built."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from clusters import control_plane
from live_helpers import bound, create, pod, pods, poll

from gangsolve.bench.devcluster import Binaries, ControlPlane, NodeSpec, kai
from gangsolve.bench.devcluster.volcano import PeerMissing

pytestmark = pytest.mark.e2e

try:
    KAI: kai.Kai | None = kai.Kai.locate()
    NOT_BUILT = ""
except PeerMissing as missing:
    KAI, NOT_BUILT = None, str(missing)


@pytest.fixture(scope="module")
def kai_plane(binaries: Binaries) -> Iterator[ControlPlane]:
    if KAI is None:
        pytest.skip(NOT_BUILT)
    with control_plane(binaries, peer=False) as cp:
        chart = kai.install(cp, KAI)
        kai.create_queues(cp, kai.default_queues(chart))
        kai.start(kai.add(cp, KAI, kai.scheduler_conf(kai.default_shard(chart))))
        yield cp


def gang(name: str, size: int, tag: dict[str, str]) -> list[dict]:
    """A KAI PodGroup of `size` (minMember = size) and its pods of one GPU each, as KAI's users write them."""
    members = [
        pod(f"{name}-{i}", scheduler=kai.SCHEDULER_NAME, gpus=1, cpu="500m", memory="512Mi", node_selector=tag)
        for i in range(size)
    ]
    return [kai.pod_group(name, size, members, "kai-smoke"), *kai.label_members(members, name)]


def test_gang_bound_whole_or_not_at_all(kai_plane: ControlPlane) -> None:
    cp = kai_plane
    namespace = "kai-smoke"
    cp.create_namespace(namespace)
    tag = {"smoke": "kai"}
    nodes = [NodeSpec(f"kai-gpu-{i}", cpu="16", memory="64Gi", gpus=4, labels=tag) for i in range(2)]
    cp.add_nodes(nodes, wait=True)

    for obj in gang("first", 6, tag):  # 6 of the 8 GPUs
        create(cp, namespace, obj)
    poll(lambda: len(bound(pods(cp, namespace))) == 6, timeout=90, what="KAI binding the 6-pod gang")
    assert {p["spec"]["nodeName"] for p in bound(pods(cp, namespace))} <= {n.name for n in nodes}

    for obj in gang("second", 4, tag):  # 4 more: 2 would fit, the gang does not
        create(cp, namespace, obj)
    group = poll(
        lambda: (
            (pg := cp.get(f"/apis/{kai.POD_GROUP_API}/namespaces/{namespace}/podgroups/second"))
            and (pg.get("status") or {}).get("schedulingConditions")
            and pg
        ),
        timeout=60,
        what="KAI's verdict on the 4-pod gang",
    )
    assert group["status"]["schedulingConditions"][0]["type"] == "UnschedulableOnNodePool"
    second = [p for p in pods(cp, namespace) if p["metadata"]["name"].startswith("second-")]
    assert len(second) == 4
    assert not bound(second)
    assert len(bound(pods(cp, namespace))) == 6


def test_the_live_bench_runs_kai_on_the_users_tfjobs(binaries: Binaries, tmp_path) -> None:
    """The bench's own path (its users' KAI PodGroups, the default queues, the operator's configuration): the
    8-pod TFJob is bound whole, the 6-pod one not at all, and the configuration it ran with is in the result."""
    if KAI is None:
        pytest.skip(NOT_BUILT)
    from gangsolve.bench.live.runs import run_scenarios
    from tests.e2e.live_helpers import bench_runs

    run = bench_runs(run_scenarios, "live/tfjob", ["kai"], tmp_path)["kai"]
    assert (run["pods_placed"], run["gangs_placed"], run["partial_gangs"], run["violations"]) == (8, 1, 0, [])
    assert run["peer"]["scheduler_conf"]["actions"] == "allocate, stalegangeviction"  # the bench evicts nothing
    assert [q["name"] for q in run["peer"]["queues"]] == ["default-parent-queue", "default-queue"]
    # Its sessions, from its log.
    assert run["decisions"]["metric"] == "kai-scheduler log"
    assert run["decisions"]["count"] >= 1
