"""gangsolve run on the real control plane: the users' TFJob, an oversized job that waits and explains why,
competing gangs, and kube-scheduler alongside."""

from __future__ import annotations

import orjson
import pytest
from live_helpers import (
    assert_cluster_sound,
    bound,
    create,
    delete_pod,
    events,
    get_pod_group,
    pod,
    pod_group,
    pods,
    poll,
    running,
)

from gangsolve.bench.devcluster import ControlPlane

pytestmark = pytest.mark.e2e

MASTER_TAINT = "node-role.kubernetes.io/master=:NoSchedule"


def users_cluster(make_nodes, tag: str) -> tuple[str, list[str]]:
    """The reported cluster: a tainted control-plane node without GPUs and two 4-GPU nodes."""
    (master,) = make_nodes(
        1,
        cpu="24",
        memory="128Gi",
        taints=[MASTER_TAINT],
        labels={"node-role.kubernetes.io/master": "", "gangsolve.dev/test": tag},
    )
    gpu_nodes = make_nodes(2, cpu="28", memory="128Gi", gpus=4, labels={"gpu": "yes", "gangsolve.dev/test": tag})
    return master, gpu_nodes


def tfjob(
    cp: ControlPlane,
    namespace: str,
    scheduler: str,
    tag: str,
    workers: int,
    name: str = "mnist",
    priority_class: str | None = None,
) -> list[str]:
    """A TFJob-shaped job: `workers` 1-GPU workers and a parameter server, one controlling owner, and a PDB with
    minAvailable = all of them (the legacy kube-batch gang convention)."""
    # The owner is a real object (a ConfigMap standing in for the TFJob) so the garbage collector leaves the pods.
    owner = create(cp, namespace, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": owner["metadata"]["uid"]}
    create(
        cp,
        namespace,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name},
            "spec": {"minAvailable": workers + 1, "selector": {"matchLabels": {"tf-job-name": name}}},
        },
    )
    selector = {"gpu": "yes", "gangsolve.dev/test": tag}
    names = [f"{name}-ps-0"] + [f"{name}-worker-{i}" for i in range(workers)]
    for n in names:
        kind = "ps" if "-ps-" in n else "worker"
        obj = pod(
            n,
            scheduler=scheduler,
            cpu="2",
            memory="4Gi",
            gpus=0 if kind == "ps" else 1,
            labels={"tf-job-name": name, "tf-replica-type": kind},
            node_selector=selector,
            owner=ref,
        )
        if priority_class:
            obj["spec"]["priorityClassName"] = priority_class
        create(cp, namespace, obj)
    return names


def test_users_tfjob_runs_whole_on_gpu_nodes(control_plane, make_nodes, namespace, gangsolve_factory):
    g = gangsolve_factory()
    master, gpu_nodes = users_cluster(make_nodes, namespace)
    names = tfjob(control_plane, namespace, g.scheduler_name, namespace, workers=7)

    got = poll(
        lambda: len(running(pods(control_plane, namespace))) == 8 and pods(control_plane, namespace),
        timeout=60,
        what="all 8 pods Running",
    )
    assert sorted(p["metadata"]["name"] for p in got) == sorted(names)
    assert {p["spec"]["nodeName"] for p in got} <= set(gpu_nodes)
    assert all(p["spec"]["nodeName"] != master for p in got)
    per_node = {
        n: sum(1 for p in got if p["spec"]["nodeName"] == n and "worker" in p["metadata"]["name"]) for n in gpu_nodes
    }
    assert sorted(per_node.values()) == [3, 4]
    scheduled = poll(
        lambda: (
            len(events(control_plane, namespace, "Scheduled")) >= 8 and events(control_plane, namespace, "Scheduled")
        ),
        timeout=30,
        what="Scheduled events",
    )
    assert {e["reportingController"] for e in scheduled} == {"gangsolve"}
    assert g.metric("gangsolve_schedule_attempts_total", 'result="scheduled"') >= 1
    assert g.metric("gangsolve_pods_bound_total") == 8


def pod_scheduled_conditions(cp, namespace, selector, count):
    """PodScheduled conditions of the selected pods once all `count` pods show False/Unschedulable with one
    message (a cycle that saw only part of the job says so on the pods it saw; the next rewrites them), else None."""
    job = pods(cp, namespace, selector)
    conds = [next((c for c in p["status"].get("conditions", []) if c["type"] == "PodScheduled"), None) for p in job]
    ok = len(job) == count and all(c and c["status"] == "False" and c["reason"] == "Unschedulable" for c in conds)
    ok = ok and len({c["message"] for c in conds}) == 1
    return conds if ok else None


def test_oversized_job_waits_and_says_why(control_plane, make_nodes, namespace, gangsolve_factory):
    g = gangsolve_factory()
    master, _gpu_nodes = users_cluster(make_nodes, namespace)
    tfjob(control_plane, namespace, g.scheduler_name, namespace, workers=9)

    conds = poll(
        lambda: pod_scheduled_conditions(control_plane, namespace, "tf-job-name=mnist", 10),
        timeout=60,
        what="PodScheduled=False on all 10 pods",
    )
    assert not bound(pods(control_plane, namespace))
    message = conds[0]["message"]
    assert "needs 9 nvidia.com/gpu, 8 free" in message, message
    assert master in message, message
    assert "taint" in message, message
    # Early cycles may see only part of the job (and say so); each pod ends with an event giving the reason.
    failed = poll(
        lambda: (
            len(
                {
                    e["regarding"]["name"]
                    for e in events(control_plane, namespace, "FailedScheduling")
                    if e["note"] == message
                }
            )
            == 10
            and events(control_plane, namespace, "FailedScheduling")
        ),
        timeout=30,
        what="a FailedScheduling event with the reason for each pod",
    )
    assert all(e["type"] == "Warning" and e["reportingController"] == "gangsolve" for e in failed)
    assert g.metric("gangsolve_pending_gangs") == 1
    assert g.metric("gangsolve_pending_pods") == 10
    assert not bound(pods(control_plane, namespace))


def test_waiting_job_is_placed_when_gpus_come_free(control_plane, make_nodes, namespace, gangsolve_factory):
    g = gangsolve_factory()
    _master, gpu_nodes = users_cluster(make_nodes, namespace)
    first = tfjob(control_plane, namespace, g.scheduler_name, namespace, workers=7, name="first")
    poll(
        lambda: len(running(pods(control_plane, namespace, "tf-job-name=first"))) == 8,
        timeout=60,
        what="the first job to run",
    )
    second = tfjob(control_plane, namespace, g.scheduler_name, namespace, workers=7, name="second")
    conds = poll(
        lambda: pod_scheduled_conditions(control_plane, namespace, "tf-job-name=second", 8),
        timeout=60,
        what="the second job to wait",
    )
    assert "needs 7 nvidia.com/gpu, 1 free" in conds[0]["message"], conds[0]["message"]
    assert not bound(pods(control_plane, namespace, "tf-job-name=second"))

    for name in first:  # the pods holding the GPUs go: the waiting gang is placed, no restart needed
        delete_pod(control_plane, namespace, name)
    got = poll(
        lambda: (
            len(running(pods(control_plane, namespace, "tf-job-name=second"))) == 8
            and pods(control_plane, namespace, "tf-job-name=second")
        ),
        timeout=60,
        what="the second job to run",
    )
    assert sorted(p["metadata"]["name"] for p in got) == sorted(second)
    assert {p["spec"]["nodeName"] for p in got} <= set(gpu_nodes)
    assert g.alive()


def test_competing_gangs_one_runs_whole_other_holds_nothing(
    control_plane, make_nodes, namespace, pod_group_crds, gangsolve_factory
):
    """Two 5-GPU gangs on 8 GPUs: a per-pod scheduler interleaving them binds 4 + 4 and both hang. gangsolve
    runs one whole and leaves the other holding nothing; both PodGroup kinds report it. (Logs as JSON here.)"""
    g = gangsolve_factory("--log-format", "json")
    make_nodes(2, cpu="28", memory="128Gi", gpus=4, labels={"gangsolve.dev/test": namespace})
    selector = {"gangsolve.dev/test": namespace}
    create(control_plane, namespace, pod_group("scheduling.x-k8s.io", "alpha", 5))
    create(control_plane, namespace, pod_group("scheduling.volcano.sh", "beta", 5))
    for i in range(5):  # interleaved, as two job controllers would create them
        create(
            control_plane,
            namespace,
            pod(
                f"alpha-{i}",
                scheduler=g.scheduler_name,
                gpus=1,
                node_selector=selector,
                labels={"scheduling.x-k8s.io/pod-group": "alpha", "job": "alpha"},
            ),
        )
        create(
            control_plane,
            namespace,
            pod(
                f"beta-{i}",
                scheduler=g.scheduler_name,
                gpus=1,
                node_selector=selector,
                labels={"job": "beta"},
                annotations={"scheduling.k8s.io/group-name": "beta"},
            ),
        )

    def settled():
        alpha, beta = (len(running(pods(control_plane, namespace, f"job={j}"))) for j in ("alpha", "beta"))
        return (alpha, beta) if {alpha, beta} == {0, 5} else None

    alpha, _beta = poll(settled, timeout=60, what="one whole gang running")
    winner, loser = (("alpha", "scheduling.x-k8s.io"), ("beta", "scheduling.volcano.sh"))[:: 1 if alpha else -1]
    assert not bound(pods(control_plane, namespace, f"job={loser[0]}"))

    def statuses():
        w, lo = (get_pod_group(control_plane, namespace, grp, name) for name, grp in (winner, loser))
        ws, ls = (w or {}).get("status") or {}, (lo or {}).get("status") or {}
        return (
            (ws, ls)
            if ws.get("phase") == "Running"
            and ws.get("running") == 5
            and ls.get("phase") == "Pending"
            # the loser's first status may be written before its fifth pod is seen ("waiting for more
            # members"); the cycle that sees all five says what it lacks
            and "nvidia.com/gpu" in ((ls.get("conditions") or [{}])[0].get("message") or "")
            else None
        )

    ws, ls = poll(statuses, timeout=30, what="PodGroup status of both gangs")
    assert ws["conditions"][0]["type"] == "Scheduled"
    assert ls["running"] == 0
    assert ls["conditions"][0]["type"] == "Unschedulable"
    assert g.metric("gangsolve_pending_gangs") == 1
    lines = [orjson.loads(line) for line in g.log().splitlines()]
    assert {"ts", "level", "msg"} <= set(lines[0])
    assert any(line["msg"] == "gang bound" and line["pods"] == 5 for line in lines)


def test_beside_kube_scheduler_without_overcommit(control_plane, make_nodes, namespace, gangsolve_factory):
    g = gangsolve_factory("--group-label", "job")  # the five pods share no owner: a label makes them one gang
    nodes = make_nodes(2, cpu="28", memory="128Gi", gpus=4, labels={"gangsolve.dev/test": namespace})
    selector = {"gangsolve.dev/test": namespace}
    create(control_plane, namespace, pod("default-0", scheduler="default-scheduler", gpus=2, node_selector=selector))
    poll(lambda: running(pods(control_plane, namespace)), timeout=60, what="kube-scheduler's pod to run")
    for i in range(5):
        create(
            control_plane,
            namespace,
            pod(
                f"gang-{i}",
                scheduler=g.scheduler_name,
                gpus=1,
                node_selector=selector,
                labels={"job": "gang"},
                annotations={"gangsolve.io/min-available": "5"},
            ),
        )
    poll(lambda: len(running(pods(control_plane, namespace, "job=gang"))) == 5, timeout=60, what="our gang to run")
    # One GPU is left: kube-scheduler's next 2-GPU pod must stay pending, and gangsolve leaves it alone.
    create(control_plane, namespace, pod("default-1", scheduler="default-scheduler", gpus=2, node_selector=selector))
    create(control_plane, namespace, pod("default-2", scheduler="default-scheduler", gpus=1, node_selector=selector))
    poll(
        lambda: any(p["metadata"]["name"] == "default-2" for p in running(pods(control_plane, namespace))),
        timeout=60,
        what="kube-scheduler's 1-GPU pod to run",
    )
    late = next(p for p in pods(control_plane, namespace) if p["metadata"]["name"] == "default-1")
    assert not late["spec"].get("nodeName")
    reporters = {e["reportingController"] for e in events(control_plane, namespace, "Scheduled")}
    assert reporters == {"gangsolve", "default-scheduler"}
    assert {p["spec"]["nodeName"] for p in bound(pods(control_plane, namespace))} <= set(nodes)
    assert_cluster_sound(control_plane, "job")
