"""Scenarios from the OpenB trace (Alibaba GPU cluster trace 2023): its 1,213 GPU nodes and its GPU pods.

Static snapshots follow the paper's method: pods sampled from the trace until their GPU demand reaches a share
of the cluster's GPUs. The first 80% of capacity is already running, placed the way the trace's cluster placed
pods (per-pod, LeastAllocated), which leaves it fragmented; the next 30% is pending. Demand is 110% of capacity,
so not everything fits and the schedulers' choices matter.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from gangsolve.bench import manifests
from gangsolve.bench.baselines import LEAST_ALLOCATED, per_pod
from gangsolve.edge.shares import FRACTION
from gangsolve.solver.model import WHOLE

DATA = Path(__file__).parent / "data"
NODES = 1213
RUNNING_SHARE = 0.8
PENDING_SHARE = 0.3
GANG_SIZES, GANG_WEIGHTS = (1, 2, 4, 8), (0.4, 0.25, 0.25, 0.1)
DESCRIPTION_PODS = "OpenB: 1,213 GPU nodes, 80% of GPUs running, pending whole-GPU pods worth 30% more"
DESCRIPTION_GANGS = "OpenB: as openb/pods, the pending pods grouped into gangs of 1-8 identical pods"


@dataclass(frozen=True)
class TracePod:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    gpu_spec: str
    duration: int  # seconds between creation and deletion
    created: int = 0  # seconds into the trace
    gpu_milli: int = WHOLE  # thousandths of each of its GPUs: below WHOLE, a share of one GPU


@cache
def trace_nodes() -> tuple[dict[str, str], ...]:
    with open(DATA / "openb_node_list_gpu_node.csv", newline="") as f:
        return tuple(csv.DictReader(f))


@cache
def trace_pods(shares: bool = False) -> tuple[TracePod, ...]:
    """The trace's whole-GPU pods, in creation order; with `shares`, its pods asking part of one GPU too."""
    with open(DATA / "openb_pod_list_default.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return tuple(
        TracePod(
            r["name"],
            int(r["cpu_milli"]),
            int(r["memory_mib"]),
            int(r["num_gpu"]),
            r["gpu_spec"],
            max(0, int(r["deletion_time"] or r["creation_time"]) - int(r["creation_time"])),
            int(r["creation_time"]),
            int(r["gpu_milli"]),
        )
        for r in rows
        if int(r["num_gpu"]) >= 1 and (int(r["gpu_milli"]) == WHOLE or shares)
    )


def node_objects(rows=None) -> list[dict]:
    return [
        manifests.node(
            r["sn"], int(r["cpu_milli"]), int(r["memory_mib"]), int(r["gpu"]), {manifests.GPU_MODEL_LABEL: r["model"]}
        )
        for r in (rows if rows is not None else trace_nodes())
    ]


def pod_object(name: str, tp: TracePod, created: float, **kwargs) -> dict:
    """`tp` as a pending pod: whole GPUs as `nvidia.com/gpu`, a share of one GPU as KAI's `gpu-fraction`."""
    share = tp.gpu_milli < WHOLE
    obj = manifests.pod(name, tp.cpu_milli, tp.memory_mib, 0 if share else tp.gpus, created=created, **kwargs)
    if share:
        obj["metadata"].setdefault("annotations", {})[FRACTION] = f"{tp.gpu_milli / WHOLE:g}"
    if tp.gpu_spec:  # `V100M16|V100M32`: any of these models
        term = {
            "matchExpressions": [{"key": manifests.GPU_MODEL_LABEL, "operator": "In", "values": tp.gpu_spec.split("|")}]
        }
        affinity = obj["spec"].setdefault("affinity", {})
        affinity["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    return obj


def sample(rng: np.random.Generator, gpus: int) -> list[TracePod]:
    """Trace pods drawn with replacement until their GPUs add up to `gpus`."""
    pods, total = [], 0
    population = trace_pods()
    while total < gpus:
        tp = population[int(rng.integers(len(population)))]
        pods.append(tp)
        total += tp.gpus
    return pods


def running(nodes: list[dict], pods: list[TracePod]) -> list[dict]:
    """`pods` bound where per-pod LeastAllocated scheduling puts them (the ones that fit), as running pods."""
    pending = [pod_object(f"run-{i:05d}", tp, created=i) for i, tp in enumerate(pods)]
    bindings = per_pod(manifests.to_cluster(nodes + pending), LEAST_ALLOCATED, seed=0)
    placed = []
    for obj in pending:
        node = bindings.get(f"{manifests.NAMESPACE}/{obj['metadata']['name']}")
        if node:
            obj["spec"].update(nodeName=node, schedulerName="default-scheduler")
            obj["status"]["phase"] = "Running"
            placed.append(obj)
    return placed


def group(rng: np.random.Generator, pods: list[TracePod], gangs: bool) -> list[list[TracePod]]:
    """Jobs of k identical copies of a sampled pod, until the sampled GPU demand is used up."""
    if not gangs:
        return [[tp] for tp in pods]
    jobs, budget, i = [], sum(tp.gpus for tp in pods), 0
    while budget > 0:
        tp = pods[i % len(pods)]
        k = int(min(rng.choice(GANG_SIZES, p=GANG_WEIGHTS), max(1, budget // tp.gpus)))
        jobs.append([tp] * k)
        budget -= k * tp.gpus
        i += 1
    return jobs


def job_objects(
    name: str, job: list[TracePod], created: float, annotations: dict[str, str] | None = None
) -> list[dict]:
    if len(job) == 1 and not annotations:
        return [pod_object(name, job[0], created)]  # a plain pod: its own gang of one
    pods = [pod_object(f"{name}-{i}", tp, created, group=name) for i, tp in enumerate(job)]
    return [manifests.pod_group(name, len(job), annotations=annotations), *pods]


def snapshot(gangs: bool, seed: int = 2023) -> list[dict]:
    rng = np.random.default_rng(seed)
    nodes = node_objects()
    capacity = sum(int(r["gpu"]) for r in trace_nodes())
    objs = [*nodes, *running(nodes, sample(rng, int(RUNNING_SHARE * capacity)))]
    for j, job in enumerate(group(rng, sample(rng, int(PENDING_SHARE * capacity)), gangs)):
        objs += job_objects(f"job-{j:05d}", job, created=100_000 + j)
    return objs
