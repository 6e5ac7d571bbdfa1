"""The named benchmark scenarios: each builds a list of Kubernetes objects from a seeded RNG.

Names are `family/shape`: `synthetic/1000nodes`, `kube-perf/5000nodes-1000x3`, `openb/gangs`. Grids are the
lists `gangsolve bench --grid quick|full` runs; `timeline/...` scenarios feed the time-based mode.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gangsolve.bench import manifests, openb, sharing, sharing_reference
from gangsolve.solver.model import GPU

HIGH, NORMAL, LOW = "high", "normal", "low"
# The placement scenarios compare schedulers that do not preempt, on the same free capacity: their classes say
# preemptionPolicy Never (as the live mode's do), so gangsolve preempts nothing there either. The preemption
# scenarios (bench/static/preemption_rounds.py) have classes that may.
PRIORITY_CLASSES = [
    manifests.priority_class(HIGH, 1000, "Never"),
    manifests.priority_class(NORMAL, 100, "Never"),
    manifests.priority_class(LOW, 0, "Never"),
]
H100_TAINT = {"key": "dedicated", "value": "h100", "effect": "NoSchedule"}
RACK_SIZE = 8  # nodes per rack (the co-location domain)


@dataclass(frozen=True)
class Scenario:
    name: str
    nodes: int  # cluster size, the x axis of the plots
    build: Callable[[], list[dict]]
    description: str
    time_limit: float = 1.0  # gangsolve's cycle budget: the latency target at this size
    contended: bool = True  # pending demand exceeds what fits (the +5% GPU target applies)
    peers: tuple[str, ...] = ()  # schedulers run on this scenario only, beside the usual ones
    only: tuple[str, ...] | None = None  # of the usual schedulers, only these (None: all)


# --- synthetic GPU clusters ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    name: str
    share: float  # of the cluster's nodes
    gpus: int
    cores: int
    memory_gib: int
    model: str | None
    tainted: bool = False


SHAPES = (
    Shape("a100", 0.20, 8, 96, 1024, "A100-SXM4-80GB"),
    Shape("h100", 0.10, 8, 192, 2048, "H100-80GB-HBM3", tainted=True),  # a dedicated, tainted pool
    Shape("v100", 0.20, 4, 48, 384, "V100-SXM2-32GB"),
    Shape("t4", 0.15, 4, 32, 192, "T4"),
    Shape("cpu", 0.35, 0, 64, 256, None),
)
OPEN_MODELS = ("A100-SXM4-80GB", "V100-SXM2-32GB", "T4")  # models a node selector may ask for


def shape_counts(n: int) -> list[int]:
    """Nodes per shape for a cluster of n (largest remainder, so small clusters still get every shape)."""
    exact = [s.share * n for s in SHAPES]
    counts = [math.floor(x) for x in exact]
    for i in sorted(range(len(SHAPES)), key=lambda i: (counts[i] - exact[i], i))[: n - sum(counts)]:
        counts[i] += 1
    return counts


def synthetic_nodes(n: int) -> tuple[list[dict], list[Shape]]:
    """Nodes in racks of 8 of one shape (racks are homogeneous, as bought), 3 zones."""
    nodes, shapes = [], []
    i = 0
    for shape, count in zip(SHAPES, shape_counts(n), strict=True):
        for _ in range(count):
            rack = i // RACK_SIZE
            labels = {manifests.RACK_LABEL: f"rack-{rack:04d}", manifests.ZONE_LABEL: f"zone-{rack % 3}"}
            if shape.model:
                labels[manifests.GPU_MODEL_LABEL] = shape.model
            taints = [H100_TAINT] if shape.tainted else None
            nodes.append(
                manifests.node(f"node-{i:05d}", shape.cores * 1000, shape.memory_gib * 1024, shape.gpus, labels, taints)
            )
            shapes.append(shape)
            i += 1
    return nodes, shapes


def background(rng: np.random.Generator, nodes: list[dict], shapes: list[Shape], small_pods: float) -> list[dict]:
    """Running pods that already hold capacity: GPU jobs on ~35% of the GPUs and small services everywhere
    (`small_pods` per node on average), so the pending work meets a fragmented cluster."""
    pods: list[dict] = []
    for node, shape in zip(nodes, shapes, strict=True):
        name = node["metadata"]["name"]
        cores, mem = shape.cores * 1000, shape.memory_gib * 1024
        gpus = 0
        while shape.gpus and rng.random() < 0.55 and gpus < shape.gpus:
            g = int(min(rng.choice([1, 2, 4]), shape.gpus - gpus))
            c, m = g * 4000, g * 32 * 1024
            if c > cores or m > mem:
                break
            pods.append(
                manifests.pod(f"bg-{name}-g{len(pods)}", c, m, g, node_name=name, scheduler_name="default-scheduler")
            )
            cores, mem, gpus = cores - c, mem - m, gpus + g
        for _ in range(rng.poisson(small_pods)):
            c, m = int(rng.choice([100, 250, 500, 1000])), int(rng.choice([128, 256, 512, 1024]))
            if c > cores or m > mem:
                break
            pods.append(
                manifests.pod(f"bg-{name}-s{len(pods)}", c, m, node_name=name, scheduler_name="default-scheduler")
            )
            cores, mem = cores - c, mem - m
    return pods


def gang_objects(
    name: str,
    created: float,
    pods: list[tuple[str, int, int, int]],
    min_member: int,
    priority: str,
    selector: dict[str, str] | None = None,
    tolerations: list[dict] | None = None,
    colocate: str | None = None,
    annotations: dict[str, str] | None = None,
) -> list[dict]:
    """A PodGroup and its pods; `pods` are (role, cpu milli, memory MiB, GPUs)."""
    out = [manifests.pod_group(name, min_member, colocate, annotations)]
    for i, (role, cpu, mem, gpus) in enumerate(pods):
        out.append(
            manifests.pod(
                f"{name}-{role}-{i}",
                cpu,
                mem,
                gpus,
                created=created,
                group=name,
                priority_class=priority,
                node_selector=selector if gpus else None,
                tolerations=tolerations if gpus else None,
                colocate=colocate,
                labels={"job-role": role},
            )
        )
    return out


def synthetic_gangs(rng: np.random.Generator, count: int, gpu_cap: int, start: float = 0) -> list[list[dict]]:
    """`count` gangs of the mix GPU clusters see; a gang asks for at most `gpu_cap` GPUs in all."""
    gangs = []
    for j in range(count):
        name = f"job-{j:05d}"
        priority = str(rng.choice([HIGH, NORMAL, LOW], p=[0.15, 0.6, 0.25]))
        kind = rng.choice(["tfjob", "gang", "h100", "colocated"], p=[0.3, 0.45, 0.1, 0.15])
        selector: dict[str, str] | None = None
        tolerations: list[dict] | None = None
        colocate: str | None = None
        if kind == "h100":
            gpus = int(rng.choice([4, 8]))
            size = int(rng.integers(1, 9))
            selector = {manifests.GPU_MODEL_LABEL: str(SHAPES[1].model)}
            tolerations = [dict(H100_TAINT, operator="Equal")]
        elif kind == "colocated":
            gpus = int(rng.choice([1, 2, 4]))
            size = int(rng.integers(2, 17))
            colocate = manifests.RACK_LABEL
        else:
            gpus = int(rng.choice([1, 2, 4, 8], p=[0.35, 0.25, 0.25, 0.15]))
            size = int(rng.integers(1, 17)) if kind == "gang" else int(rng.integers(4, 17))
        if kind in ("gang", "tfjob") and rng.random() < 0.3:
            selector = {manifests.GPU_MODEL_LABEL: str(rng.choice(OPEN_MODELS))}
        if selector and selector[manifests.GPU_MODEL_LABEL] in ("V100-SXM2-32GB", "T4"):
            gpus = min(gpus, 4)  # those nodes have 4 GPUs
        size = max(1, min(size, gpu_cap // gpus))
        cores = int(rng.choice([4, 6, 8]))
        pods = [("worker", gpus * cores * 1000, gpus * 48 * 1024, gpus)] * size
        if kind == "tfjob":
            pods = [("ps", 4000, 16 * 1024, 0)] * int(rng.integers(1, 3)) + pods
        min_member = len(pods)
        if kind == "gang" and size > 2 and rng.random() < 0.15:
            min_member = math.ceil(size / 2)  # elastic: runs with half its workers
        gangs.append(gang_objects(name, start + j, pods, min_member, priority, selector, tolerations, colocate))
    return gangs


def synthetic(n_nodes: int, n_gangs: int, seed: int, small_pods: float = 7.5) -> list[dict]:
    rng = np.random.default_rng(seed)
    nodes, shapes = synthetic_nodes(n_nodes)
    total_gpus = sum(s.gpus for s in shapes)
    objs = [*PRIORITY_CLASSES, *nodes, *background(rng, nodes, shapes, small_pods)]
    for gang in synthetic_gangs(rng, n_gangs, gpu_cap=max(8, total_gpus // 4)):
        objs += gang
    return objs


POOL_LABEL = "bench.gangsolve.io/pool"
_NAMED = re.compile(r"\b(node|job|rack)-(?=\d)")  # the names `synthetic` makes, to make unique per pool


def pools(n_nodes: int, n_gangs: int, seed: int, count: int = 4) -> list[dict]:
    """`count` node pools, each the synthetic mix on its share of the nodes with its share of the gangs, every
    pending pod selecting its pool (a node group per team or instance type, as cloud clusters are built)."""
    objs: list[dict] = [*PRIORITY_CLASSES]
    for i in range(count):
        pool = f"pool-{i}"
        part = json.loads(_NAMED.sub(rf"p{i}-\1-", json.dumps(synthetic(n_nodes // count, n_gangs // count, seed + i))))
        for obj in part:
            if obj["kind"] == "Node":
                obj["metadata"]["labels"][POOL_LABEL] = pool
            elif obj["kind"] == "Pod" and not obj["spec"].get("nodeName"):
                obj["spec"]["nodeSelector"] = {**(obj["spec"].get("nodeSelector") or {}), POOL_LABEL: pool}
        objs += [obj for obj in part if obj["kind"] != "PriorityClass"]
    return objs


# --- the same clusters with GPUs as DRA devices ----------------------------------------------------------------

DRA_DRIVER = "gpu.bench.gangsolve.io"  # a test driver: kwok nodes publish no devices of their own


def as_dra(objs: list[dict]) -> list[dict]:
    """The same cluster with its GPUs as Dynamic Resource Allocation devices instead of `nvidia.com/gpu`: each
    GPU node publishes a ResourceSlice of its GPUs (model and PCIe root attributes, 80Gi of memory) and no
    longer lists them in allocatable; a DeviceClass selects the driver's devices by CEL; each pod asks for
    its GPUs through a ResourceClaim of that class (running pods' claims are allocated on their nodes)."""
    out: list[dict] = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": DRA_DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRA_DRIVER}"'}}]},
        }
    ]
    taken: dict[str, int] = {}  # node -> GPUs allocated to running pods so far
    for obj in objs:
        obj = copy.deepcopy(obj)
        if obj["kind"] == "Node" and GPU in obj["status"]["allocatable"]:
            count = int(obj["status"]["allocatable"].pop(GPU))
            out.append(manifests.resource_slice(obj["metadata"]["name"], DRA_DRIVER, count, obj["metadata"]["labels"]))
        elif obj["kind"] == "Pod":
            requests = obj["spec"]["containers"][0]["resources"]["requests"]
            if GPU in requests:
                count = int(requests.pop(GPU))
                node = obj["spec"].get("nodeName")
                devices = None
                if node:
                    devices = [f"gpu-{i}" for i in range(taken.get(node, 0), taken.get(node, 0) + count)]
                    taken[node] = taken.get(node, 0) + count
                claim = manifests.resource_claim(f"{obj['metadata']['name']}-gpus", DRA_DRIVER, count, node, devices)
                out.append(claim)
                obj["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": claim["metadata"]["name"]}]
        out.append(obj)
    return out


# --- kube-scheduler's scheduler_perf shapes -----------------------------------------------------------------


def kube_perf(n_nodes: int, n_gangs: int, pods_per_gang: int) -> list[dict]:
    """scheduler_perf's gang workloads: its default node (4 cpu, 32Gi, 110 pods) and gang pod (100m cpu,
    100Mi memory), minCount = pods per group, one priority."""
    objs = [manifests.node(f"node-{i:05d}", 4000, 32 * 1024) for i in range(n_nodes)]
    for g in range(n_gangs):
        name = f"gang-group-{g:04d}"
        objs += gang_objects(name, g, [("pod", 100, 100, 0)] * pods_per_gang, pods_per_gang, NORMAL)
    return [*PRIORITY_CLASSES, *objs]


# --- topology: racks, blocks, zones ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Topology:
    """The shape of a topology scenario: racks of nodes, blocks of racks, zones of blocks, and the gangs'
    sizes in GPUs with their probabilities."""

    nodes_per_rack: int = 16
    racks_per_block: int = 4
    blocks_per_zone: int = 4
    gang_gpus: tuple[int, ...] = (8, 16, 32, 64, 128)
    gang_gpus_p: tuple[float, ...] = (0.25, 0.25, 0.2, 0.2, 0.1)


def topology(n_nodes: int, n_gangs: int, seed: int, shape: Topology = Topology()) -> list[dict]:
    """8-GPU nodes in racks of 16, blocks of 4 racks, zones of 4 blocks (or `shape`); about a third of the
    GPUs held by running jobs; gangs of 8 to 128 GPUs (pods of 8, 4 or 2 GPUs), each a scheduling.k8s.io
    PodGroup that requires one block (its topology constraint) and prefers as few racks as possible
    (gangsolve's annotation)."""
    rng = np.random.default_rng(seed)
    nodes = []
    for i in range(n_nodes):
        rack = i // shape.nodes_per_rack
        block = rack // shape.racks_per_block
        labels = {
            manifests.RACK_LABEL: f"rack-{rack:03d}",
            manifests.BLOCK_LABEL: f"block-{block:02d}",
            manifests.ZONE_LABEL: f"zone-{block // shape.blocks_per_zone}",
            manifests.GPU_MODEL_LABEL: "H100-80GB-HBM3",
        }
        nodes.append(manifests.node(f"node-{i:05d}", 192_000, 2048 * 1024, 8, labels))
    held: list[dict] = []
    for node in nodes:
        name, gpus = node["metadata"]["name"], 0
        while rng.random() < 0.45 and gpus < 8:
            g = int(min(rng.choice([1, 2, 4, 8], p=[0.3, 0.3, 0.3, 0.1]), 8 - gpus))
            held.append(manifests.pod(f"bg-{name}-{len(held)}", g * 8000, g * 64 * 1024, g, node_name=name))
            gpus += g
    objs = [*PRIORITY_CLASSES, *nodes, *held]
    for j in range(n_gangs):
        name = f"train-{j:04d}"
        per_pod = int(rng.choice([8, 4, 2], p=[0.5, 0.3, 0.2]))
        total = int(rng.choice(list(shape.gang_gpus), p=list(shape.gang_gpus_p)))
        size = max(1, total // per_pod)
        priority = str(rng.choice([HIGH, NORMAL, LOW], p=[0.15, 0.6, 0.25]))
        objs += manifests.upstream_gang(
            name,
            j,
            size,
            per_pod * 8000,
            per_pod * 64 * 1024,
            per_pod,
            priority,
            manifests.BLOCK_LABEL,
            (manifests.RACK_LABEL,),
        )
    return objs


# --- the registry ---------------------------------------------------------------------------------------------


def _synthetic(n: int, gangs: int, limit: float) -> Scenario:
    return Scenario(
        f"synthetic/{n}nodes",
        n,
        lambda: synthetic(n, gangs, seed=n),
        f"{n} nodes (4/8-GPU models, CPU-only, tainted H100 pool, background load), {gangs} pending gangs",
        limit,
    )


def _pools(n: int, gangs: int, limit: float) -> Scenario:
    return Scenario(
        f"pools/{n}nodes",
        n,
        lambda: pools(n, gangs, seed=n),
        f"{n} nodes in 4 node pools, each the synthetic mix with its own {gangs // 4} pending gangs selecting it",
        limit,
    )


def _synthetic_dra(n: int, gangs: int, limit: float) -> Scenario:
    return Scenario(
        f"synthetic-dra/{n}nodes",
        n,
        lambda: as_dra(synthetic(n, gangs, seed=n)),
        f"synthetic/{n}nodes with its GPUs as DRA devices (ResourceSlices, a DeviceClass, ResourceClaims)",
        limit,
    )


def _kube_perf(n: int, gangs: int, size: int, limit: float) -> Scenario:
    return Scenario(
        f"kube-perf/{n}nodes-{gangs}x{size}",
        n,
        lambda: kube_perf(n, gangs, size),
        f"scheduler_perf gang shape: {n} nodes, {gangs} gangs x {size} pods",
        limit,
        contended=False,
    )


def _sharing(load: float) -> Scenario:
    # The per-pod kube-scheduler peers do not model GPU shares: the paper's policies stand in for them.
    return Scenario(
        f"openb/sharing-{round(load * 100)}",
        openb.NODES,
        lambda: sharing.snapshot(load),
        sharing.description(load),
        10.0,
        contended=False,  # the +5% target counts whole GPUs: the sharing table is this scenario's measure
        # At the top load, the reference placements too: how far from the best the answers are (minutes).
        peers=(*sharing.POLICIES, *(sharing_reference.PEERS if load == sharing.LOADS[-1] else ())),
        only=("gangsolve", "greedy-gang"),
    )


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        _synthetic(10, 6, 1.0),
        _synthetic(100, 20, 1.0),
        _synthetic(1000, 200, 1.0),
        _synthetic(5000, 1000, 5.0),
        _synthetic(16384, 3277, 5.0),  # frontier scale (issue 26): the same mix, pending gangs in proportion
        _synthetic(65536, 13107, 20.0),
        _pools(1000, 200, 1.0),  # the same sizes as node pools, which a cycle may solve apart (solver/pools.py)
        _pools(5000, 1000, 5.0),
        _pools(16384, 3276, 5.0),
        _pools(65536, 13104, 20.0),
        _synthetic_dra(100, 20, 1.0),
        _synthetic_dra(1000, 200, 1.0),
        _kube_perf(100, 20, 3, 1.0),
        _kube_perf(5000, 1000, 3, 5.0),
        _kube_perf(5000, 3, 1000, 5.0),
        _kube_perf(16384, 1000, 3, 5.0),
        _kube_perf(16384, 3, 1000, 5.0),
        Scenario(
            "topology/1024nodes",
            1024,
            lambda: topology(1024, 220, seed=1024),
            "1,024 8-GPU nodes (racks of 16, blocks of 4 racks, 4 zones), a third held; 220 upstream PodGroups of "
            "8-128 GPUs, required block, preferred rack",
            5.0,
            peers=("tas-bestfit",),
        ),
        Scenario("openb/pods", openb.NODES, lambda: openb.snapshot(gangs=False), openb.DESCRIPTION_PODS, 2.0),
        Scenario("openb/gangs", openb.NODES, lambda: openb.snapshot(gangs=True), openb.DESCRIPTION_GANGS, 2.0),
        *(_sharing(load) for load in sharing.LOADS),
    )
}

FRONTIER = frozenset(name for name in SCENARIOS if SCENARIOS[name].nodes > 5000)

GRIDS = {
    "quick": [
        "synthetic/10nodes",
        "synthetic/100nodes",
        "synthetic/1000nodes",
        "kube-perf/100nodes-20x3",
        "openb/gangs",
    ],
    # Not the paper's GPU-sharing experiment (FGD alone takes a minute and a half a load): run it by name,
    # `--scenario openb/sharing-100` and the others (docs/benchmarks.md).
    # Nor the frontier sizes (16,384 and 65,536 nodes): minutes and gigabytes each, run by name.
    "full": [name for name in SCENARIOS if not name.startswith("openb/sharing") and name not in FRONTIER],
}


# --- timelines (the time-based mode and the live timeline) ---------------------------------------------------

PERIOD = 60.0  # seconds of simulated time between cycles
WINDOW = 180  # cycles during which jobs arrive (synthetic and scaled OpenB)
WARM_UP = 60  # cycles before the cluster reaches its steady state (jobs run up to an hour)
LOAD = 1.3  # offered GPU load over the window, as a share of the cluster's GPUs
MAX_CYCLES = 480  # the queue drains for up to 5 h after the last arrival
WORKLOAD_LABEL = "bench.gangsolve.io/workload"  # the label the history groups finished jobs by


def poisson_arrivals(rng: np.random.Generator, work: list[float], capacity: int) -> list[float]:
    """Poisson arrival times over the window such that the offered GPU-seconds are LOAD x capacity."""
    horizon = WINDOW * PERIOD
    rate = len(work) / (sum(work) / (LOAD * capacity))  # jobs per second
    times = np.cumsum(rng.exponential(1 / rate, size=len(work)))
    return [float(t) for t in times if t < horizon]


def timeline_annotations(arrival: float, duration: float) -> dict[str, str]:
    return {manifests.ARRIVAL_ANNOTATION: str(int(arrival)), manifests.DURATION_ANNOTATION: str(int(duration))}


def label_workload(objs: list[dict], workload: str) -> None:
    for obj in objs:
        if obj["kind"] == "Pod":
            obj["metadata"].setdefault("labels", {})[WORKLOAD_LABEL] = workload


def synthetic_timeline(seed: int = 7, n_nodes: int = 100) -> list[dict]:
    """The synthetic gang mix on an idle synthetic cluster; durations log-normal, median 15 minutes, at most 1 h."""
    rng = np.random.default_rng(seed)
    nodes, shapes = synthetic_nodes(n_nodes)
    capacity = sum(s.gpus for s in shapes)
    gangs = synthetic_gangs(rng, 4 * n_nodes, gpu_cap=max(8, capacity // 4))
    durations = np.clip(rng.lognormal(np.log(900), 1.0, size=len(gangs)), 300, 3600)
    work = [
        d * sum(int(p["spec"]["containers"][0]["resources"]["requests"].get(GPU, 0)) for p in g[1:])
        for g, d in zip(gangs, durations, strict=True)
    ]
    objs = [*PRIORITY_CLASSES, *nodes]
    for gang, arrival, duration in zip(gangs, poisson_arrivals(rng, work, capacity), durations, strict=False):
        gang[0]["metadata"].setdefault("annotations", {}).update(timeline_annotations(arrival, duration))
        for pod in gang[1:]:
            pod["metadata"]["creationTimestamp"] = manifests.timestamp(arrival)
        # A job template: its role mix and GPUs per worker (what a user's `app` label tells apart).
        gpus = max(int(p["spec"]["containers"][0]["resources"]["requests"].get(GPU, 0)) for p in gang[1:])
        label_workload(gang, f"{len(gang) - 1}x{gpus}")
        objs += gang
    return objs
