"""gangsolve run solving a cycle's node pools in forked processes (`solver-processes`), on the real control
plane: each pool's gangs bind on their own nodes, a gang that cannot fit its pool says why with the nodes of
the whole cluster counted, and the scheduler goes on cycling (the children are gone, nothing leaks)."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import orjson
import pytest
from live_helpers import bound, create, pod, pod_group, pods, poll, running

pytestmark = pytest.mark.e2e


def test_node_pools_are_solved_apart_and_bind_on_their_own_nodes(
    control_plane, make_nodes, namespace, pod_group_crds, gangsolve_factory, tmp_path
):
    config = tmp_path / "config.yaml"
    config.write_bytes(orjson.dumps({"solver-processes": 2}))  # (JSON is YAML)
    g = gangsolve_factory("--config", str(config), "--log-format", "json")
    pool = f"{namespace}-pool"  # these nodes alone carry it: the shared control plane's others are in no pool
    nodes = {p: make_nodes(2, cpu="32", memory="256Gi", gpus=8, labels={pool: p}) for p in ("a", "b")}
    jobs = {"a-small": ("a", 2), "a-wide": ("a", 3), "b-small": ("b", 2), "b-wide": ("b", 3)}
    for job, (p, size) in jobs.items():
        create(control_plane, namespace, pod_group("scheduling.x-k8s.io", job, size))
        for i in range(size):
            labels = {"job": job, "scheduling.x-k8s.io/pod-group": job}
            create(
                control_plane,
                namespace,
                pod(f"{job}-{i}", scheduler=g.scheduler_name, gpus=8, labels=labels, node_selector={pool: p}),
            )

    def settled():
        placed = {job: len(running(pods(control_plane, namespace, f"job={job}"))) for job in jobs}
        return placed if sum(placed.values()) == 4 else None

    # Each pool has 16 GPUs: its 2-pod gang runs, its 3-pod gang (24 GPUs) never fits.
    assert poll(settled, timeout=90, what="one gang of each pool running") == {
        "a-small": 2,
        "a-wide": 0,
        "b-small": 2,
        "b-wide": 0,
    }
    for job, (p, _size) in jobs.items():
        got = bound(pods(control_plane, namespace, f"job={job}"))
        assert {q["spec"]["nodeName"] for q in got} <= set(nodes[p]), job
    lines = [orjson.loads(line) for line in g.log().splitlines()]
    cycles = [line for line in lines if line["msg"] == "cycle" and line.get("gangs")]
    assert any(line["pools"] == 2 for line in cycles), cycles[-3:]
    # The gang left waiting in its pool explains itself counting the whole cluster: its pool's free GPUs, and
    # the other pool's nodes are not among those its selector matches.
    for job in ("a-wide", "b-wide"):
        p = jobs[job][0]
        # (16 GPUs free in the cycle that first saw it, 0 once its pool's small gang is bound)
        wording = rf"needs 24 nvidia.com/gpu, (16|0) free on nodes matching nodeSelector {re.escape(pool)}={p}\b"

        def explained(job: str = job, wording: str = wording) -> str | None:
            messages = [
                c.get("message", "")
                for c in pods(control_plane, namespace, f"job={job}")[0]["status"].get("conditions", [])
                if c["type"] == "PodScheduled" and c["status"] == "False"
            ]
            return next((m for m in messages if re.search(wording, m)), None)

        # A cycle that saw fewer than its 3 pods may write "waiting for more members" first; the cycle that
        # sees all three names the GPUs its pool lacks.
        poll(explained, timeout=30, what=f"{job}'s PodScheduled condition naming the GPUs its pool lacks")
    # Cycles go on after the split ones: a gang arriving in pool b is solved and bound.
    create(
        control_plane,
        namespace,
        pod("late-0", scheduler=g.scheduler_name, cpu="1", labels={"job": "late"}, node_selector={pool: "b"}),
    )
    poll(lambda: running(pods(control_plane, namespace, "job=late")), timeout=60, what="the late pod running")

    # The processes a split cycle forks exit and are reaped: none is left behind its cycle.
    def children() -> list[str]:
        found = []
        for task in Path(f"/proc/{g.proc.pid}/task").iterdir():
            with contextlib.suppress(OSError):  # a thread that ended since it was listed
                found += (task / "children").read_text().split()
        return found

    poll(lambda: not children() and "none left", timeout=10, what="no child processes left")
