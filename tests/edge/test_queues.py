"""Queues as users write them: Volcano's Queue, a Volcano PodGroup's spec.queue, the queue annotations on other
gangs, `default` otherwise; what bound pods hold is the queue's allocation; bad fields are one line, exit 2."""

import orjson
import pytest
from click.testing import CliRunner

from gangsolve.cli import cli
from gangsolve.edge.gangs import build_cluster
from gangsolve.edge.snapshot import parse
from gangsolve.solver import GPU, Queue
from tests.builders import k8s_list, k8s_node, k8s_pod, k8s_pod_group, k8s_queue

GI = 2**30


def snapshot(*items: dict) -> str:
    return orjson.dumps(k8s_list(*items)).decode()


def cluster(*items: dict):
    return build_cluster(parse(snapshot(*items)))


def test_each_kind_of_gang_names_its_queue_as_its_users_write_it():
    c = cluster(
        k8s_node("n", gpus=8),
        k8s_queue("research", weight=3),
        k8s_queue("prod"),
        k8s_pod_group("vj", 1, volcano=True, queue="research"),
        k8s_pod("v0", annotations={"scheduling.k8s.io/group-name": "vj"}),
        k8s_pod_group("pg", 1, annotations={"gangsolve.io/queue": "prod"}),
        k8s_pod("p0", labels={"scheduling.x-k8s.io/pod-group": "pg"}),
        k8s_pod("solo", annotations={"scheduling.volcano.sh/queue-name": "research"}),
        k8s_pod("mine", annotations={"gangsolve.io/queue": "prod"}),
        k8s_pod("nobody"),
    )
    assert {g.name: g.queue for g in c.gangs} == {
        "default/vj": "research",
        "default/pg": "prod",
        "default/solo": "research",
        "default/mine": "prod",
        "default/nobody": "default",
    }


def test_a_queue_is_read_with_its_weight_caps_guarantee_and_what_its_bound_pods_hold():
    c = cluster(
        k8s_node("n", gpus=8),
        k8s_queue("a", 2, {"nvidia.com/gpu": "4", "cpu": "8"}, {"nvidia.com/gpu": "1"}, reclaimable=False),
        k8s_queue("b"),
        k8s_pod("run", gpus=2, cpu="1", node_name="n", phase="Running", annotations={"gangsolve.io/queue": "a"}),
        k8s_pod("done", gpus=4, node_name="n", phase="Succeeded", annotations={"gangsolve.io/queue": "a"}),
        k8s_pod("wait", gpus=1, annotations={"gangsolve.io/queue": "a"}),
        k8s_pod("other", gpus=1, node_name="n", phase="Running"),
    )
    a, b, default = c.queues
    assert a == Queue(
        "a",
        weight=2,
        capability={GPU: 4, "cpu": 8000},
        guarantee={GPU: 1},
        reclaimable=False,
        allocated={GPU: 2, "cpu": 1000, "memory": 1 * GI, "pods": 1},
    )
    assert b == Queue("b")  # weight 1, no cap, reclaimable: Volcano's defaults
    assert default.name == "default"
    assert default.allocated[GPU] == 1


def test_running_pods_carry_their_gangs_queue_and_a_closed_queue_says_so():
    """Reclaim takes from queues by what their running gangs hold: our bound pods name their gang's queue, other
    schedulers' pods none (they are never reclaimed). Volcano's status.state Closed or Closing closes a queue."""
    c = cluster(
        k8s_node("n", gpus=8),
        k8s_queue("a", state="Closed"),
        k8s_queue("b", state="Closing"),
        k8s_queue("c", state="Open"),
        k8s_pod("run", gpus=2, node_name="n", phase="Running", annotations={"gangsolve.io/queue": "a"}),
        k8s_pod("theirs", gpus=1, node_name="n", phase="Running", scheduler="default-scheduler"),
        k8s_pod("plain", gpus=1, node_name="n", phase="Running"),
    )
    assert {r.name: r.queue for r in c.running} == {
        "default/run": "a",
        "default/theirs": "",
        "default/plain": "default",
    }
    assert {q.name: q.closed for q in c.queues} == {"a": True, "b": True, "c": False, "default": False}


def test_the_plan_lists_queues_and_keeps_each_under_its_capability():
    text = snapshot(
        k8s_node("n", gpus=8),
        k8s_queue("small", capability={"nvidia.com/gpu": "2"}),
        *(k8s_pod(f"s{i}", gpus=1, annotations={"gangsolve.io/queue": "small"}) for i in range(4)),
    )
    result = CliRunner().invoke(cli, ["solve", "-", "-o", "json"], input=text)
    assert result.exit_code == 0, result.output
    plan = orjson.loads(result.stdout)
    assert len(plan["bindings"]) == 2
    (small,) = [q for q in plan["queues"] if q["name"] == "small"]
    assert small == {
        "name": "small",
        "parent": "",
        "weight": 1,
        "capability": {GPU: "2"},
        "allocated": {"cpu": "2", "memory": "2Gi", GPU: "2", "pods": "2"},
        "share": 0.25,
        "fairShare": 0.25,  # it asks for 4 of the 8 GPUs, but no share exceeds its queue's cap
        "usage": 0.0,
    }
    held = [g["reason"] for g in plan["gangs"] if not g["placed"]]
    assert held == ["held by queue small's capability: needs 1 nvidia.com/gpu, 0 left under its cap"] * 2
    table = CliRunner().invoke(cli, ["solve", "-"], input=text)
    assert "Queues" in table.stdout
    assert "nvidia.com/gpu=2" in table.stdout


BAD = {
    "weight 0": (k8s_queue("q", weight=0), "Queue q: spec.weight: must be from 1 to 65535, got 0"),
    "weight as text": (k8s_queue("q", weight="2"), "Queue q: spec.weight: expected int | null, got str"),
    "capability quantity": (
        k8s_queue("q", capability={"nvidia.com/gpu": "2x"}),
        "Queue q: spec.capability.nvidia.com/gpu: quantity '2x' does not parse",
    ),
    "guarantee not a map": (
        {**k8s_queue("q"), "spec": {"guarantee": {"resource": ["1"]}}},
        "Queue q: spec.guarantee.resource: expected object | null, got array",
    ),
    "reclaimable as text": (
        k8s_queue("q", reclaimable="yes"),
        "Queue q: spec.reclaimable: expected bool | null, got str",
    ),
    "PodGroup's queue not text": (
        k8s_pod_group("g", 1, volcano=True, queue=7),
        "PodGroup default/g: spec.queue: expected str | null, got int",
    ),
    "missing queue": (
        k8s_pod("p", annotations={"gangsolve.io/queue": "ghost"}),
        "Pod default/p: metadata.annotations.gangsolve.io/queue: names Queue 'ghost', not in snapshot",
    ),
    "duplicate queue": (k8s_queue("default"), "Queue default: metadata.name: duplicate object in snapshot"),
    "min-runtime not a duration": (
        {**k8s_queue("q"), "metadata": {"name": "q", "annotations": {"gangsolve.io/min-runtime": "soon"}}},
        "Queue q: metadata.annotations.gangsolve.io/min-runtime: expected a duration such as 10m or 1h30m, got 'soon'",
    ),
    "missing parent": (
        k8s_queue("q", parent="ghost"),
        "Queue q: spec.parent: names queue 'ghost', which does not exist",
    ),
    "parent not text": (k8s_queue("q", parent=3), "Queue q: spec.parent: expected str | null, got int"),
    "deserved not a quantity": (
        k8s_queue("q", deserved={"nvidia.com/gpu": "lots"}),
        "Queue q: spec.deserved.nvidia.com/gpu: quantity 'lots' does not parse",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_queue_field_is_one_line_exit_2(case):
    obj, message = BAD[case]
    extra = [k8s_queue("default")] if case == "duplicate queue" else []
    result = CliRunner().invoke(cli, ["solve", "-"], input=snapshot(k8s_node("n", gpus=1), obj, *extra))
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr == f"error: {message}\n"


def test_a_queue_tree_is_read_from_spec_parent_and_root_is_its_top():
    c = cluster(
        k8s_node("n", gpus=8),
        k8s_queue("root"),
        k8s_queue("dept", parent="root", capability={"nvidia.com/gpu": "6"}),
        k8s_queue("team", parent="dept", deserved={"nvidia.com/gpu": "4"}),
        k8s_pod("run", gpus=2, node_name="n", phase="Running", annotations={"gangsolve.io/queue": "team"}),
    )
    queues = {q.name: q for q in c.queues}
    assert (queues["dept"].parent, queues["team"].parent) == ("", "dept")
    assert queues["team"].deserved == {GPU: 4}
    assert queues["team"].allocated[GPU] == 2
    guarded = {**k8s_queue("g"), "metadata": {"name": "g", "annotations": {"gangsolve.io/min-runtime": "1h30m"}}}
    assert cluster(k8s_node("n", gpus=8), guarded).queues[0].min_runtime == 5400


def test_queues_whose_parents_close_a_loop_are_one_line_exit_2():
    loop = [k8s_queue("a", parent="b"), k8s_queue("b", parent="a")]
    result = CliRunner().invoke(cli, ["solve", "-"], input=snapshot(k8s_node("n", gpus=1), *loop))
    assert result.exit_code == 2, result.output
    assert result.stderr == "error: Queue a: spec.parent: closes a loop: a -> b -> a\n"
    # Live (and with --skip-invalid) the queues are left out and the rest is scheduled.
    pod = k8s_pod("p", gpus=1)
    result = CliRunner().invoke(
        cli, ["solve", "-", "--skip-invalid", "-o", "json"], input=snapshot(k8s_node("n", gpus=1), *loop, pod)
    )
    out = orjson.loads(result.stdout)
    assert out["bindings"] == {"default/p": "n"}
    assert {s["object"] for s in out["skipped"]} == {"Queue a", "Queue b"}
