"""GPU shares as pods ask for them (KAI's gpu-fraction and gpu-memory annotations) and as bound pods hold them
(gangsolve.io/gpu-index): what the cluster the solver gets says, and one line naming the object and field for
each bad value."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gangsolve.cli import cli
from gangsolve.edge.errors import InputError
from gangsolve.edge.gangs import build_cluster
from gangsolve.edge.snapshot import Snapshot
from gangsolve.solver.model import GPU, SHARE
from tests.builders import k8s_node, k8s_pod

ROOT = Path(__file__).parents[2]
A100 = {"nvidia.com/gpu.memory": "81920"}
L4 = {"nvidia.com/gpu.memory": "24576"}


def _cluster(*objs):
    snap = Snapshot()
    for obj in objs:
        snap.add(obj)
    return build_cluster(snap)


def _pending(cluster):
    return {p.name: p for g in cluster.gangs for p in g.pods}


def test_a_fraction_is_a_share_in_thousandths_and_memory_is_planned_on_the_smallest_gpu_that_holds_it():
    cluster = _cluster(
        k8s_node("big", gpus=4, labels=A100),
        k8s_node("small", gpus=2, labels=L4),
        k8s_pod("half", annotations={"gpu-fraction": "0.5"}),
        k8s_pod("third", annotations={"gpu-fraction": ".333"}),
        k8s_pod("embed", annotations={"gpu-memory": "4096"}),
        k8s_pod("large", annotations={"gpu-memory": "40000"}),
    )
    pods = _pending(cluster)
    assert pods["default/half"].requests[SHARE] == 500
    assert pods["default/third"].requests[SHARE] == 333
    assert GPU not in pods["default/half"].requests
    # 4096 MiB of the 24576 MiB L4 is its largest share anywhere; 40000 MiB only fits the A100s.
    assert (pods["default/embed"].requests[SHARE], pods["default/embed"].gpu_memory) == (167, 4096)
    assert (pods["default/large"].requests[SHARE], pods["default/large"].gpu_memory) == (489, 40000)
    assert {n.name: n.gpu_memory for n in cluster.nodes} == {"big": 81920, "small": 24576}


def test_bound_pods_say_which_gpu_they_hold_and_their_queue_counts_the_share():
    cluster = _cluster(
        k8s_node("big", gpus=4, labels=A100),
        k8s_pod(
            "a", node_name="big", phase="Running", annotations={"gpu-fraction": "0.5", "gangsolve.io/gpu-index": "2"}
        ),
        k8s_pod(
            "b", node_name="big", phase="Running", annotations={"gpu-fraction": "0.25", "gangsolve.io/gpu-index": "2"}
        ),
        k8s_pod(
            "c", node_name="big", phase="Running", annotations={"gpu-memory": "8192", "gangsolve.io/gpu-index": "0"}
        ),
        k8s_pod("unnamed", node_name="big", phase="Running", annotations={"gpu-fraction": "0.1"}),
        k8s_pod("whole", node_name="big", phase="Running", gpus=1),
        k8s_pod("pending", annotations={"gpu-fraction": "0.5"}),
    )
    (big,) = cluster.nodes
    # A share whose GPU is not named holds a GPU of its own (index -1): never assumed to have room.
    assert big.gpu_shares == {2: 750, 0: 100, -1: 100}
    assert big.used[SHARE] == 950
    assert big.used[GPU] == 1
    running = {r.name: r for r in cluster.running}
    assert (running["default/a"].gpu, running["default/a"].requests[SHARE]) == (2, 500)
    assert (running["default/unnamed"].gpu, running["default/whole"].gpu) == (None, None)
    (queue,) = cluster.queues
    assert queue.allocated[SHARE] == 950


BAD = [
    ({"gpu-fraction": "0"}, None, "metadata.annotations.gpu-fraction", "in (0, 1]"),
    ({"gpu-fraction": "1.5"}, None, "metadata.annotations.gpu-fraction", "in (0, 1]"),
    ({"gpu-fraction": "-0.5"}, None, "metadata.annotations.gpu-fraction", "in (0, 1]"),
    ({"gpu-fraction": "half"}, None, "metadata.annotations.gpu-fraction", "in (0, 1]"),
    ({"gpu-fraction": "nan"}, None, "metadata.annotations.gpu-fraction", "in (0, 1]"),
    ({"gpu-fraction": "0.5", "gpu-memory": "2000"}, None, "metadata.annotations.gpu-memory", "not both"),
    ({"gpu-memory": "0"}, None, "metadata.annotations.gpu-memory", "above 0"),
    ({"gpu-memory": "2Gi"}, None, "metadata.annotations.gpu-memory", "whole number"),
    ({"gpu-memory": "90000"}, None, "metadata.annotations.gpu-memory", "above every GPU's memory"),
    ({"gpu-fraction": "0.5"}, 1, "metadata.annotations.gpu-fraction", "not both"),
]


@pytest.mark.parametrize(("annotations", "gpus", "field", "words"), BAD)
def test_a_bad_request_names_the_pod_and_the_annotation(annotations, gpus, field, words):
    with pytest.raises(InputError) as caught:
        _cluster(k8s_node("big", gpus=4, labels=A100), k8s_pod("p", annotations=annotations, gpus=gpus))
    assert (caught.value.obj, caught.value.field) == ("Pod default/p", field)
    assert words in caught.value.message


@pytest.mark.parametrize(
    ("node_labels", "annotations", "field", "words"),
    [
        ({}, {"gpu-memory": "2000", "gangsolve.io/gpu-index": "0"}, "gpu-memory", "has no label nvidia.com/gpu.memory"),
        (L4, {"gpu-memory": "30000", "gangsolve.io/gpu-index": "0"}, "gpu-memory", "above the 24576 MiB"),
        (L4, {"gpu-fraction": "0.5", "gangsolve.io/gpu-index": "2"}, "gangsolve.io/gpu-index", "0 to 1"),
        (L4, {"gpu-fraction": "0.5", "gangsolve.io/gpu-index": "first"}, "gangsolve.io/gpu-index", "0 to 1"),
    ],
)
def test_a_bound_pods_bad_share_names_the_pod(node_labels, annotations, field, words):
    with pytest.raises(InputError) as caught:
        _cluster(
            k8s_node("n", gpus=2, labels=node_labels),
            k8s_pod("p", node_name="n", phase="Running", annotations=annotations),
        )
    assert (caught.value.obj, caught.value.field) == ("Pod default/p", f"metadata.annotations.{field}")
    assert words in caught.value.message


def test_a_memory_request_with_no_labelled_node_names_the_pod():
    with pytest.raises(InputError, match=r"no node has label nvidia\.com/gpu\.memory"):
        _cluster(k8s_node("n", gpus=2), k8s_pod("p", annotations={"gpu-memory": "2000"}))


def test_a_bad_gpu_memory_label_names_the_node():
    with pytest.raises(InputError) as caught:
        _cluster(k8s_node("n", gpus=2, labels={"nvidia.com/gpu.memory": "80GB"}))
    assert (caught.value.obj, caught.value.field) == ("Node n", "metadata.labels.nvidia.com/gpu.memory")


def test_solve_prints_one_line_and_exits_2_on_a_bad_fraction():
    snapshot = {"kind": "List", "items": [k8s_node("n", gpus=1), k8s_pod("p", annotations={"gpu-fraction": "2"})]}
    result = CliRunner().invoke(cli, ["solve", "-"], input=json.dumps(snapshot))
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "error: Pod default/p: metadata.annotations.gpu-fraction: expected a share of one GPU in (0, 1] such as "
        "'0.5', got '2'"
    ]


def test_solve_gives_each_fractional_pod_its_gpu(monkeypatch):
    """The example cluster: the pending fractions and the memory request each get one GPU, none past all of it,
    and the whole-GPU gang gets GPUs no share is on."""
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(cli, ["solve", "examples/gpu-sharing.yaml", "--time-limit", "1", "-o", "json"])
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    shares = out["gpuShares"]
    assert set(shares) == {f"ml/notebook-{i}" for i in range(4)} | {"ml/embed-0"}
    assert all(out["bindings"][pod] == share["node"] for pod, share in shares.items())
    held = {("a100-1", 0): 0.5, ("l4-1", 1): 20000 / 24576}  # the bound pods' shares
    for share in shares.values():
        held[(share["node"], share["gpu"])] = held.get((share["node"], share["gpu"]), 0) + share["share"]
    assert max(held.values()) <= 1 + 1e-9
    assert shares["ml/embed-0"]["share"] == pytest.approx(
        4096 / 24576 if shares["ml/embed-0"]["node"] == "l4-1" else 4096 / 81920, abs=1e-3
    )
    whole_nodes = {out["bindings"][f"ml/finetune-{i}"] for i in range(3)}
    for node in whole_nodes:
        whole = sum(1 for i in range(3) if out["bindings"][f"ml/finetune-{i}"] == node) + (2 if node == "a100-2" else 0)
        assert whole + len({gpu for (n, gpu) in held if n == node}) <= 4


def test_a_share_is_read_for_each_pod_even_among_pods_of_one_resource_shape():
    # The edge remembers requests by resource fields; a share comes from annotations, so two pods alike but for
    # the annotation must not get each other's requests, in either order.
    pods = _pending(
        _cluster(
            k8s_node("n", gpus=2),
            k8s_pod("plain"),
            k8s_pod("half", annotations={"gpu-fraction": "0.5"}),
            k8s_pod("plain-again"),
        )
    )
    assert pods["default/half"].requests[SHARE] == 500
    assert SHARE not in pods["default/plain"].requests
    assert SHARE not in pods["default/plain-again"].requests
