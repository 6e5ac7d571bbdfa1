"""GPU shares on the real control plane: `gangsolve run` places fractional pods and a gang mixing whole-GPU and
fractional pods on kwok nodes, writing each share's GPU on its pod before binding it; a scheduler started again
reads those GPUs back and fills exactly what is left; a pod with a bad share gets its reason and the others are
placed. Every check reads the API alone (nodes, pods' nodeName and annotations) by the documented rules."""

from __future__ import annotations

import pytest
from live_helpers import (
    GPU_INDEX,
    GPU_MEMORY,
    assert_gpus_sound,
    bound,
    create,
    gpu_holdings,
    pod,
    pod_group,
    pods,
    poll,
)

pytestmark = pytest.mark.e2e

MIB = 81920  # each GPU's memory, as the nodes' label says


def _nodes(cp, names: list[str]) -> dict[str, dict]:
    return {n: cp.get(f"/api/v1/nodes/{n}") for n in names}


def _fractional(p: dict) -> bool:
    annotations = p["metadata"].get("annotations") or {}
    return "gpu-fraction" in annotations or "gpu-memory" in annotations


def _check(cp, namespace: str, nodes: list[str]) -> dict[tuple[str, str], int]:
    """The placement as the API shows it is sound, and every fractional pod bound carries one GPU of its own
    node: returns what each GPU holds."""
    objs, bound_pods = _nodes(cp, nodes), bound(pods(cp, namespace))
    assert_gpus_sound(objs, bound_pods)
    for p in bound_pods:
        if _fractional(p):
            index = (p["metadata"].get("annotations") or {}).get(GPU_INDEX)
            gpus = int(objs[p["spec"]["nodeName"]]["status"]["allocatable"]["nvidia.com/gpu"])
            assert index is not None, f"{p['metadata']['name']} bound without its GPU index"
            assert int(index) in range(gpus), f"{p['metadata']['name']}: GPU index {index} of {gpus}"
    return gpu_holdings(objs, bound_pods)[0]


def test_shares_placed_live_recorded_on_the_pods_and_read_back_after_a_restart(
    control_plane, gangsolve_factory, make_nodes, namespace, pod_group_crds
):
    tag = {"gangsolve.dev/test": namespace}
    nodes = make_nodes(2, gpus=2, labels={**tag, GPU_MEMORY: str(MIB)})
    scheduler = gangsolve_factory.scheduler_name

    def share(name: str, fraction: str | None = None, memory: str | None = None, **kw) -> dict:
        annotations = {"gpu-fraction": fraction} if fraction else {"gpu-memory": memory}
        return pod(name, scheduler=scheduler, annotations=annotations, node_selector=tag, cpu="100m", **kw)

    # 3.6 GPUs of the 4: a gang of a whole GPU and two halves, shares of several sizes (one asked as memory),
    # and a pod whose share is no share. All there before the scheduler starts: one cycle sees them all.
    create(control_plane, namespace, pod_group("scheduling.x-k8s.io", "mix", 3))
    member = {"labels": {"scheduling.x-k8s.io/pod-group": "mix"}}
    create(control_plane, namespace, pod("mix-whole", scheduler=scheduler, gpus=1, node_selector=tag, **member))
    for i in range(2):
        create(control_plane, namespace, share(f"mix-half-{i}", "0.5", **member))
    for name, fraction in (("three-quarters", "0.75"), ("six-tenths", "0.6")):
        create(control_plane, namespace, share(name, fraction))
    create(control_plane, namespace, share("quarter-by-memory", memory=str(MIB // 4)))
    create(control_plane, namespace, share("bad", "1.5"))
    first = gangsolve_factory()
    poll(lambda: len(bound(pods(control_plane, namespace))) == 6, timeout=60, what="the six good pods bound")
    held = _check(control_plane, namespace, nodes)
    assert sum(held.values()) == 2600  # every share placed as asked: 0.5 + 0.5 + 0.75 + 0.6 + 0.25

    def bad_condition() -> str:
        bad = control_plane.get(f"/api/v1/namespaces/{namespace}/pods/bad")
        scheduled = [c for c in (bad.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"]
        return scheduled[0]["message"] if scheduled and scheduled[0]["status"] == "False" else ""

    poll(bad_condition, timeout=30, what="the bad pod's condition")
    assert bad_condition() == (
        f"cannot be scheduled: Pod {namespace}/bad: metadata.annotations.gpu-fraction: expected a share of one GPU "
        "in (0, 1] such as '0.5', got '1.5'"
    )

    # A new scheduler process: new shares that fill exactly what is left on each GPU (which it knows only from
    # the annotations), and one more that fits nowhere.
    assert first.terminate() == 0
    left = {gpu: 1000 - milli for gpu, milli in held.items() if milli < 1000}
    assert left, "the first placement left no GPU part free"
    for i, (_gpu, milli) in enumerate(sorted(left.items())):
        create(control_plane, namespace, share(f"filler-{i}", f"{milli / 1000:g}"))
    create(control_plane, namespace, share("one-too-many", "0.05"))
    gangsolve_factory(scheduler_name=scheduler)
    poll(lambda: len(bound(pods(control_plane, namespace))) == 6 + len(left), timeout=60, what="the fillers bound")
    held = _check(control_plane, namespace, nodes)
    assert all(milli == 1000 for milli in held.values())  # every GPU used to its last thousandth, none past it
    assert "one-too-many" not in {p["metadata"]["name"] for p in bound(pods(control_plane, namespace))}
    assert len(held) == 3  # and the fourth GPU is the gang's whole one, shared by none
