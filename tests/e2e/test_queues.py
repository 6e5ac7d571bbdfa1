"""Volcano Queues on the real control plane: a queue's capability holds a gang back and its pods say so, the
Queue's status.allocated is written as Volcano writes it, and `gangsolve export` carries Queues to `solve`."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import orjson
import pytest
from live_helpers import REPO, bound, create, events, pod, pod_group, pods, poll, running

from gangsolve.bench.devcluster import ApiError

pytestmark = pytest.mark.e2e
QUEUES = "/apis/scheduling.volcano.sh/v1beta1/queues"


def _condition(p: dict) -> dict:
    return next((c for c in (p.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"), {})


def test_a_queue_caps_its_gangs_and_shows_what_they_hold(
    control_plane, gangsolve_factory, make_nodes, namespace, pod_group_crds, tmp_path
):
    queue = f"q-{namespace}"
    create(
        control_plane,
        namespace,
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": queue},
            "spec": {"weight": 2, "capability": {"nvidia.com/gpu": "2"}},
        },
    )
    try:
        g = gangsolve_factory()
        tag = {"gangsolve.dev/test": namespace}
        make_nodes(1, gpus=8, labels=tag)
        create(
            control_plane,
            namespace,
            {**pod_group("scheduling.volcano.sh", "vpg", 2), "spec": {"minMember": 2, "queue": queue}},
        )
        for i in range(2):
            annotations = {"scheduling.k8s.io/group-name": "vpg"}
            create(
                control_plane,
                namespace,
                pod(f"vpg-{i}", scheduler=g.scheduler_name, gpus=1, node_selector=tag, annotations=annotations),
            )
        extra = {"gangsolve.io/queue": queue}
        create(
            control_plane,
            namespace,
            pod("extra", scheduler=g.scheduler_name, gpus=1, node_selector=tag, annotations=extra),
        )

        poll(lambda: len(bound(pods(control_plane, namespace))) == 2, timeout=60, what="the PodGroup's gang bound")
        held = f"held by queue {queue}'s capability: needs 1 nvidia.com/gpu, 0 left under its cap"
        poll(
            lambda: _condition(control_plane.get(f"/api/v1/namespaces/{namespace}/pods/extra")).get("message") == held,
            timeout=30,
            what="the capped pod's condition",
        )
        assert len(bound(pods(control_plane, namespace))) == 2  # the free GPUs stay free: the cap is hard
        poll(
            lambda: (
                (control_plane.get(f"{QUEUES}/{queue}").get("status") or {}).get("allocated")
                == {"cpu": "2", "memory": "2Gi", "nvidia.com/gpu": "2"}
            ),
            timeout=30,
            what="the Queue's status.allocated",
        )

        out = tmp_path / "snap.json"
        command = [sys.executable, "-m", "gangsolve"]
        kubeconfig = ["--kubeconfig", str(control_plane.kubeconfig)]
        run = subprocess.run(
            [*command, "export", *kubeconfig, "-o", str(out)],
            capture_output=True,
            text=True,
            env=dict(os.environ),
            cwd=REPO,
            timeout=120,
        )
        assert run.returncode == 0, run.stderr
        solved = subprocess.run(
            [*command, "solve", str(out), "--scheduler-name", g.scheduler_name, "-o", "json"],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
        assert solved.returncode == 0, solved.stderr
        plan = orjson.loads(solved.stdout)
        (mine,) = [q for q in plan["queues"] if q["name"] == queue]
        assert mine["weight"] == 2
        assert mine["capability"] == {"nvidia.com/gpu": "2"}
        assert mine["allocated"]["nvidia.com/gpu"] == "2"
        assert plan["bindings"] == {}  # offline too, the cap holds the extra pod back
    finally:
        with contextlib.suppress(ApiError):
            control_plane.request("DELETE", f"{QUEUES}/{queue}")


def _queue(name: str, **spec) -> dict:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def _gang(cp, namespace, scheduler, name, queue, tag):
    """A gang of two 1-GPU pods (owner rule, both needed) in `queue`."""
    owner = create(cp, namespace, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": owner["metadata"]["uid"]}
    notes = {"gangsolve.io/min-available": "2", "gangsolve.io/queue": queue}
    for i in range(2):
        p = pod(f"{name}-{i}", scheduler=scheduler, gpus=1, labels={"gang": name}, annotations=notes, owner=ref)
        create(cp, namespace, {**p, "spec": {**p["spec"], "nodeSelector": tag}})


def test_a_queue_below_its_fair_share_reclaims_a_whole_gang_from_one_past_its_own(
    control_plane, gangsolve_factory, make_nodes, namespace, pod_group_crds
):
    """Queue b's two gangs took the node's 4 GPUs while queue a asked for nothing. Queue a's gang of 2 arrives:
    fair shares are 2 and 2, so one of b's gangs goes, both its pods, and a's gang binds in its room; b keeps
    its fair share (the other gang), and nothing is reclaimed back."""
    lender, borrower = f"b-{namespace}", f"a-{namespace}"
    for name in (lender, borrower):
        create(control_plane, namespace, _queue(name, weight=1))
    try:
        g = gangsolve_factory()
        tag = {"gangsolve.dev/test": namespace}
        (node,) = make_nodes(1, gpus=4, labels=tag)
        for name in ("b1", "b2"):
            _gang(control_plane, namespace, g.scheduler_name, name, lender, tag)
        poll(lambda: len(running(pods(control_plane, namespace))) == 4, timeout=60, what="queue b's gangs running")
        _gang(control_plane, namespace, g.scheduler_name, "a1", borrower, tag)
        poll(lambda: len(running(pods(control_plane, namespace, "gang=a1"))) == 2, timeout=60, what="a1 running")
        left = [p["metadata"]["labels"]["gang"] for p in pods(control_plane, namespace, "gang!=a1")]
        assert len(left) == 2  # one of b's gangs went, whole; the other stays, whole
        assert len(set(left)) == 1
        preempted = events(control_plane, namespace, "Preempted")
        assert len(preempted) == 2
        assert {e["note"] for e in preempted} == {f"Preempted by gang {namespace}/a1 on node {node}"}
        assert g.metric("gangsolve_preemption_victims_total") == 2
    finally:
        for name in (lender, borrower):
            with contextlib.suppress(ApiError):
                control_plane.request("DELETE", f"{QUEUES}/{name}")


def test_a_departments_capability_caps_its_teams_together_and_its_status_holds_theirs(
    control_plane, gangsolve_factory, make_nodes, namespace, pod_group_crds
):
    """A department queue capped at 2 GPUs over two uncapped team queues (spec.parent): of the teams' two gangs
    of two 1-GPU pods, one binds, the other's pods say the department's cap holds them, and the department's
    status.allocated is what its teams hold together."""
    dept, team1, team2 = f"dept-{namespace}", f"t1-{namespace}", f"t2-{namespace}"
    create(control_plane, namespace, _queue(dept, weight=1, capability={"nvidia.com/gpu": "2"}))
    create(control_plane, namespace, _queue(team1, weight=1, parent=dept))
    create(control_plane, namespace, _queue(team2, weight=1, parent=dept))
    try:
        g = gangsolve_factory()
        tag = {"gangsolve.dev/test": namespace}
        make_nodes(1, gpus=8, labels=tag)
        _gang(control_plane, namespace, g.scheduler_name, "g1", team1, tag)
        _gang(control_plane, namespace, g.scheduler_name, "g2", team2, tag)
        poll(lambda: len(bound(pods(control_plane, namespace))) == 2, timeout=60, what="one team's gang bound")
        held = f"held by queue {dept}'s capability: needs 2 nvidia.com/gpu, 0 left under its cap"
        waiting = [p for p in pods(control_plane, namespace) if not p["spec"].get("nodeName")]
        poll(
            lambda: all(
                _condition(control_plane.get(f"/api/v1/namespaces/{namespace}/pods/{p['metadata']['name']}")).get(
                    "message"
                )
                == held
                for p in waiting
            ),
            timeout=30,
            what="the held gang's conditions",
        )
        assert len(bound(pods(control_plane, namespace))) == 2  # 6 GPUs stay free: the department's cap is hard
        poll(
            lambda: (
                ((control_plane.get(f"{QUEUES}/{dept}").get("status") or {}).get("allocated") or {}).get(
                    "nvidia.com/gpu"
                )
                == "2"
            ),
            timeout=30,
            what="the department's status.allocated",
        )
    finally:
        for name in (team1, team2, dept):
            with contextlib.suppress(ApiError):
                control_plane.request("DELETE", f"{QUEUES}/{name}")
