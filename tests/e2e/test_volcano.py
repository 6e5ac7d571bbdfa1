"""Volcano's real scheduler (vc-scheduler, built from source by `make peers`) on a control plane of its own, with
its CRDs and the configuration its Helm chart installs: a gang under a Volcano PodGroup is bound whole, and a
gang that does not fit is bound not at all (kube-scheduler would bind the members that fit); and the live
bench's own Volcano run on the users' TFJobs. Skipped, saying why, when the binaries are not built."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from clusters import control_plane
from live_helpers import bound, create, pod, pods, poll

from gangsolve.bench.devcluster import Binaries, ControlPlane, NodeSpec, volcano

pytestmark = pytest.mark.e2e

try:
    VOLCANO: volcano.Volcano | None = volcano.Volcano.locate()
    NOT_BUILT = ""
except volcano.PeerMissing as missing:
    VOLCANO, NOT_BUILT = None, str(missing)


@pytest.fixture(scope="module")
def volcano_plane(binaries: Binaries) -> Iterator[ControlPlane]:
    if VOLCANO is None:
        pytest.skip(NOT_BUILT)
    with control_plane(binaries, peer=False) as cp:
        volcano.install(cp, VOLCANO)
        volcano.start(cp, volcano.add(cp, VOLCANO, VOLCANO.chart_scheduler_conf(binaries.helm)))
        yield cp


def gang(name: str, size: int, tag: dict[str, str]) -> list[dict]:
    """A Volcano PodGroup of `size` (minMember = size) and its pods of one GPU each."""
    members = [
        pod(
            f"{name}-{i}",
            scheduler=volcano.SCHEDULER_NAME,
            gpus=1,
            cpu="500m",
            memory="512Mi",
            node_selector=tag,
            annotations={volcano.GROUP_NAME_ANNOTATION: name},
        )
        for i in range(size)
    ]
    return [volcano.pod_group(name, size, members), *members]


def submit(cp: ControlPlane, namespace: str, objs: list[dict]) -> None:
    for obj in objs:
        create(cp, namespace, obj)


def test_gang_bound_whole_or_not_at_all(volcano_plane: ControlPlane) -> None:
    cp = volcano_plane
    namespace = "volcano-smoke"
    cp.create_namespace(namespace)
    tag = {"smoke": "volcano"}
    nodes = [NodeSpec(f"volcano-gpu-{i}", cpu="16", memory="64Gi", gpus=4, labels=tag) for i in range(2)]
    cp.add_nodes(nodes, wait=True)

    submit(cp, namespace, gang("first", 6, tag))  # 6 of the 8 GPUs
    poll(lambda: len(bound(pods(cp, namespace))) == 6, timeout=90, what="vc-scheduler binding the 6-pod gang")
    assert {p["spec"]["nodeName"] for p in bound(pods(cp, namespace))} <= {n.name for n in nodes}

    submit(cp, namespace, gang("second", 4, tag))  # 4 more: 2 would fit, the gang does not
    group = poll(
        lambda: (
            (pg := cp.get(f"/apis/{volcano.POD_GROUP_API}/namespaces/{namespace}/podgroups/second"))
            and (pg.get("status") or {}).get("conditions")
            and pg
        ),
        timeout=60,
        what="vc-scheduler's verdict on the 4-pod gang",
    )
    assert [c["type"] for c in group["status"]["conditions"]] == ["Unschedulable"]
    second = [p for p in pods(cp, namespace) if p["metadata"]["name"].startswith("second-")]
    assert len(second) == 4
    assert not bound(second)
    assert len(bound(pods(cp, namespace))) == 6


def test_the_live_bench_runs_volcano_on_the_users_tfjobs(binaries: Binaries, tmp_path) -> None:
    """The bench's own path (its users' Volcano PodGroups, the chart's configuration): the 8-pod TFJob is bound
    whole, the 6-pod one not at all, and the configuration it ran with is in the result."""
    if VOLCANO is None:
        pytest.skip(NOT_BUILT)
    from gangsolve.bench.live.runs import run_scenarios
    from tests.e2e.live_helpers import bench_runs

    run = bench_runs(run_scenarios, "live/tfjob", ["volcano"], tmp_path)["volcano"]
    assert (run["pods_placed"], run["gangs_placed"], run["partial_gangs"], run["violations"]) == (8, 1, 0, [])
    conf = run["peer"]["scheduler_conf"]
    assert conf["actions"] == "enqueue, allocate, backfill"
    assert {p["name"] for tier in conf["tiers"] for p in tier["plugins"]} >= {"gang", "proportion", "binpack"}
    # Its sessions, from its log.
    assert run["decisions"]["metric"] == "vc-scheduler log"
    assert run["decisions"]["count"] >= 1
