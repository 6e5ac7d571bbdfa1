"""The live GPU-sharing scenario: the OpenB trace's fractional pods (`gpu_milli` below 1000, each asking part of
one GPU, as KAI's `gpu-fraction` annotation) on a sample of the trace's GPU nodes, arriving until they ask
`LOAD` times the GPUs there, and a check of the final placement from the API's objects alone.

The check (`devices`) reads only the nodes (their `nvidia.com/gpu`) and the pods (nodeName, requests and
annotations) by docs/gpu-sharing.md's rules: a fractional pod holds `gpu-fraction` (rounded up to thousandths)
of the GPU its `gangsolve.io/gpu-index` names; no GPU may hold more than all of it, and the GPUs holding shares
plus the whole GPUs requested may be no more than the node has. It shares no code with the scheduler.

kube-scheduler reads no GPU-share annotation (its way is DRA consumable capacity, KEP-5075), so only gangsolve
runs this scenario.
"""

from __future__ import annotations

import math
from collections import defaultdict
from fractions import Fraction

import numpy as np

from gangsolve.bench import manifests, openb, sharing

NODES, LOAD, SEED = 64, 1.1, 2023
WHOLE = 1000
INDEX = "gangsolve.io/gpu-index"
FRACTION = "gpu-fraction"


def objects(nodes: int = NODES, load: float = LOAD, seed: int = SEED) -> list[dict]:
    """`nodes` GPU nodes drawn from the trace's, then its fractional pods drawn with replacement, pending in
    arrival order, until the thousandths of a GPU they ask reach `load` of the nodes' GPUs."""
    rng = np.random.default_rng(seed)
    rows = openb.trace_nodes()
    chosen = [rows[int(i)] for i in sorted(rng.choice(len(rows), nodes, replace=False))]
    objs = openb.node_objects(chosen)
    capacity = WHOLE * sum(int(r["gpu"]) for r in chosen)
    fractional = [a for a in sharing.trace() if a.gpus == 1 and a.milli < WHOLE]
    asked = 0
    while asked < load * capacity:
        ask = fractional[int(rng.integers(len(fractional)))]
        obj = manifests.pod(f"share-{len(objs) - nodes:04d}", ask.cpu_milli, ask.memory_mib, created=len(objs))
        obj["metadata"]["annotations"] = {FRACTION: f"{ask.milli / WHOLE:g}"}
        objs.append(obj)
        asked += ask.milli
    return objs


def devices(nodes: list[dict], pods: list[dict]) -> dict:
    """The GPUs as the API's objects show them after the run: fractional pods bound, GPUs shared, thousandths
    held, and what breaks the rules (GPUs past all of them, whole GPUs shared, fractional pods bound without a
    GPU index of their node)."""
    gpus = {n["metadata"]["name"]: int((n["status"].get("allocatable") or {}).get(manifests.GPU, 0)) for n in nodes}
    held: dict[tuple[str, int], int] = defaultdict(int)
    whole: dict[str, int] = defaultdict(int)
    fractional = without_index = 0
    for p in pods:
        node = p["spec"].get("nodeName")
        if not node or node not in gpus or (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        annotations = p["metadata"].get("annotations") or {}
        for c in p["spec"].get("containers") or []:
            whole[node] += int(((c.get("resources") or {}).get("requests") or {}).get(manifests.GPU, 0))
        if FRACTION not in annotations:
            continue
        fractional += 1
        index = annotations.get(INDEX, "")
        if not index.isdigit() or int(index) >= gpus[node]:
            without_index += 1
            continue
        held[(node, int(index))] += math.ceil(Fraction(annotations[FRACTION]) * WHOLE)
    shared: dict[str, int] = defaultdict(int)
    for node, _index in held:
        shared[node] += 1
    return {
        "fractional_pods_bound": fractional,
        "gpus": sum(gpus.values()),
        "gpus_shared": len(held),
        "gpu_thousandths_held": sum(held.values()),
        "devices_over_100": sum(1 for milli in held.values() if milli > WHOLE),
        "nodes_with_a_whole_gpu_shared": sum(1 for n in shared if shared[n] + whole[n] > gpus[n]),
        "fractional_pods_without_a_gpu_index": without_index,
    }
