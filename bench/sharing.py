"""The OpenB trace as its paper ran it ("Beware of Fragmentation", Weng et al., USENIX ATC'23): every kind of
pod of the trace (GPU shares, whole GPUs, cpu only, with their GPU-model constraints) arriving one at a time
on its 1,213 GPU nodes, until the GPUs requested reach a share of the cluster's (100% to 130%).

The peers are the paper's policies, written from its rules, each placing the pods in arrival order, a pod that
fits nowhere failing for good (as in the paper's simulator): FGD (the node and GPU where the expected
fragmentation of the workload grows least), BestFit, DotProduct (Tetris' alignment), GPU packing, GPU
clustering and random. gangsolve sees the arrived pods at once, as one cycle's pending pods.

Measured against the arrived workload: the GPUs allocated, and of the GPUs left unallocated those stranded
(FGD's fragmentation: free GPU share no pod of the workload could use where it is).
"""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import numpy as np

from gangsolve.bench import manifests, openb
from gangsolve.solver.model import GPU, SHARE, WHOLE, Cluster, Pod
from gangsolve.solver.problem import exclusion

LOADS = (1.0, 1.1, 1.2, 1.3)  # GPUs requested by the arrived pods, as a share of the cluster's
TYPES_COVER = 0.99  # the workload's most frequent GPU request types, up to this share of its GPU pods


@dataclass(frozen=True)
class Ask:
    """One trace pod: cpu, memory, GPUs and thousandths of each (1000: whole GPUs), the models it accepts."""

    cpu_milli: int
    memory_mib: int
    gpus: int
    milli: int
    models: tuple[str, ...] = ()

    @property
    def gpu_milli(self) -> int:
        return self.gpus * self.milli


@cache
def trace() -> tuple[Ask, ...]:
    """Every pod of the default trace (8,152: GPU shares, whole GPUs and cpu only)."""
    with open(openb.DATA / "openb_pod_list_default.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return tuple(
        Ask(
            int(r["cpu_milli"]),
            int(r["memory_mib"]),
            int(r["num_gpu"]),
            int(r["gpu_milli"]) if int(r["num_gpu"]) else 0,
            tuple(m for m in r["gpu_spec"].split("|") if m),
        )
        for r in rows
    )


def arrivals(load: float, seed: int = 2023) -> list[Ask]:
    """Trace pods drawn with replacement until the GPUs they request reach `load` of the cluster's (the
    paper's workload); a prefix of the same draw for every load, so loads compare as the paper's curves."""
    rng = np.random.default_rng(seed)
    capacity = WHOLE * sum(int(r["gpu"]) for r in openb.trace_nodes())
    population = trace()
    out, total = [], 0
    while total < load * capacity:
        ask = population[int(rng.integers(len(population)))]
        out.append(ask)
        total += ask.gpu_milli
    return out


def snapshot(load: float, seed: int = 2023) -> list[dict]:
    """The trace's nodes, and the pods arrived by `load`, pending in arrival order (a share as KAI's
    `gpu-fraction` annotation, a GPU model restriction as a required node affinity)."""
    objs = openb.node_objects()
    for i, ask in enumerate(arrivals(load, seed)):
        whole = ask.gpus if ask.milli == WHOLE else 0
        obj = manifests.pod(f"p-{i:05d}", ask.cpu_milli, ask.memory_mib, whole, created=i)
        if ask.gpus and ask.milli < WHOLE:
            obj["metadata"]["annotations"] = {"gpu-fraction": f"{ask.milli / WHOLE:g}"}
        if ask.models:
            term = {
                "matchExpressions": [{"key": manifests.GPU_MODEL_LABEL, "operator": "In", "values": list(ask.models)}]
            }
            obj["spec"]["affinity"] = {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
            }
        objs.append(obj)
    return objs


def description(load: float) -> str:
    return (
        f"OpenB as its paper ran it: every pod kind of the trace (shares, whole GPUs, cpu only) arriving on its 1,213 "
        f"GPU nodes until the GPUs requested reach {load:.0%} of the cluster's"
    )


# --- the workload and its fragmentation ----------------------------------------------------------------------


@cache
def workload() -> tuple[tuple[int, int, int, int, float], ...]:
    """The trace's GPU request types, most frequent first, covering TYPES_COVER of its GPU pods: (GPUs,
    thousandths of each, cpu and memory of a typical one (the median), probability among GPU pods)."""
    asks = [a for a in trace() if a.gpus]
    counts = Counter((a.gpus, a.milli) for a in asks)
    out, covered = [], 0
    for (gpus, milli), k in counts.most_common():
        if covered >= TYPES_COVER * len(asks):
            break
        same = [a for a in asks if (a.gpus, a.milli) == (gpus, milli)]
        cpu = int(np.median([a.cpu_milli for a in same]))
        memory = int(np.median([a.memory_mib for a in same]))
        out.append((gpus, milli, cpu, memory, k / len(asks)))
        covered += k
    return tuple(out)


def fragmentation(left: np.ndarray, cpu: np.ndarray, memory: np.ndarray) -> np.ndarray:
    """FGD's expected fragmentation (thousandths of a GPU) of nodes (rows) with `left` thousandths free per GPU
    (-1: no such GPU) and `cpu`, `memory` free: per request type of the workload, the free share of the GPUs
    that cannot hold it there (all of the node's when the node cannot hold it at all)."""
    free = np.where(left > 0, left, 0)
    total = free.sum(axis=1)
    whole = (left == WHOLE).sum(axis=1)
    out = np.zeros(len(left))
    for gpus, milli, cpu_asked, memory_asked, p in workload():
        fits = (cpu >= cpu_asked) & (memory >= memory_asked)
        if milli < WHOLE:
            stranded = np.where(free < milli, free, 0).sum(axis=1)
            fits &= (left >= milli).any(axis=1)
        else:
            stranded = np.where(free < WHOLE, free, 0).sum(axis=1)
            fits &= whole >= gpus
        out += p * np.where(fits, stranded, total)
    return out


# --- the simulated cluster -----------------------------------------------------------------------------------


class State:
    """Free cpu, memory, pod slots and thousandths per GPU of every node, as pods are placed one by one."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.nodes = cluster.nodes
        self.index = {n.name: i for i, n in enumerate(self.nodes)}
        most = max((int(n.allocatable.get(GPU, 0)) for n in self.nodes), default=0)
        gpus = np.array([int(n.allocatable.get(GPU, 0)) for n in self.nodes])
        self.present = np.arange(max(most, 1))[None, :] < gpus[:, None]  # the GPUs nodes have
        self.left = np.where(self.present, WHOLE, -1)
        for i, n in enumerate(self.nodes):  # bound shares on their GPUs, whole GPUs held on the last free ones
            for d, taken in n.gpu_shares.items():
                if 0 <= d < gpus[i]:
                    self.left[i, d] = WHOLE - taken
            held = [d for d in range(gpus[i]) if d not in n.gpu_shares][::-1][: int(n.used.get(GPU, 0))]
            self.left[i, held] = 0
        self.cpu = np.array([n.free("cpu") for n in self.nodes], dtype=np.int64)
        self.memory = np.array([n.free("memory") for n in self.nodes], dtype=np.int64)
        self.slots = np.array([n.free("pods") for n in self.nodes], dtype=np.int64)
        self.max_cpu = max(int(self.cpu.max(initial=1)), 1)
        self.max_memory = max(int(self.memory.max(initial=1)), 1)
        self.max_gpu = WHOLE * max(most, 1)
        self._eligible: dict[tuple[object, ...], np.ndarray] = {}
        self.kinds: dict[int, Counter] = {}  # node -> the GPU requests (GPUs, thousandths) of its pods
        self.rng = np.random.default_rng(0)  # the random policy's

    def eligible(self, pod: Pod) -> np.ndarray:
        key = (pod.affinity, tuple(sorted(pod.node_selector.items())), pod.tolerations)
        if key not in self._eligible:
            self._eligible[key] = np.array([exclusion(pod, n) is None for n in self.nodes])
        return self._eligible[key]

    def feasible(self, pod: Pod) -> np.ndarray:
        gpus, milli = asked(pod)
        ok = self.eligible(pod) & (self.cpu >= pod.requests.get("cpu", 0)) & (self.slots >= 1)
        ok &= self.memory >= pod.requests.get("memory", 0)
        if milli == WHOLE:
            ok &= (self.left == WHOLE).sum(axis=1) >= gpus
        elif milli:
            ok &= (self.left >= milli).any(axis=1)
        return ok

    def place(self, pod: Pod, n: int, gpu: int | None = None) -> list[int]:
        """Put `pod` on node n: a share on GPU `gpu` (the tightest when None), whole GPUs on the first free
        ones. Returns the GPUs it took."""
        gpus, milli = asked(pod)
        self.cpu[n] -= pod.requests.get("cpu", 0)
        self.memory[n] -= pod.requests.get("memory", 0)
        self.slots[n] -= 1
        if milli == WHOLE:
            taken = [int(g) for g in np.flatnonzero(self.left[n] == WHOLE)[:gpus]]
        elif milli:
            taken = [tightest(self.left[n], milli) if gpu is None else gpu]
        else:
            return []
        self.left[n, taken] -= milli
        return taken

    def allocated(self) -> int:
        """Thousandths of a GPU allocated."""
        return int(np.where(self.present, WHOLE - self.left, 0).sum())

    def stranded(self) -> float:
        return float(fragmentation(self.left, self.cpu, self.memory).sum())


def asked(pod: Pod) -> tuple[int, int]:
    """(GPUs, thousandths of each) a pod asks for: (1, share), (k, WHOLE) or (0, 0)."""
    if pod.requests.get(SHARE):
        return 1, int(pod.requests[SHARE])
    if pod.requests.get(GPU):
        return int(pod.requests[GPU]), WHOLE
    return 0, 0


def tightest(left: np.ndarray, milli: int) -> int:
    """The GPU with the least left that holds `milli`."""
    room = np.where(left >= milli, left, WHOLE + 1)
    return int(np.argmin(room))


def metrics(state: State, arrived: int) -> dict:
    """GPUs allocated and stranded, in GPUs and as shares of the cluster's, against the arrived GPU demand."""
    capacity = int(state.present.sum()) * WHOLE
    allocated, stranded = state.allocated(), state.stranded()
    return {
        "gpu_arrived": arrived / WHOLE,
        "gpu_allocated": allocated / WHOLE,
        "gpu_allocated_share": allocated / capacity,
        "gpu_stranded": stranded / WHOLE,
        "gpu_stranded_share": stranded / (capacity - allocated) if capacity > allocated else 0.0,
        "gpu_capacity": capacity / WHOLE,
        "gpus_over": int((state.left[state.present] < 0).sum()),  # GPUs given more than all of them: 0
    }


def arrived(cluster: Cluster) -> int:
    pods = [p for g in cluster.gangs for p in g.pods]
    return sum(gpus * milli for gpus, milli in map(asked, pods))


# --- the paper's policies ------------------------------------------------------------------------------------

# (state, pod, feasible nodes) -> (node, GPU for a share or None)
Policy = Callable[[State, Pod, np.ndarray], tuple[int, int | None]]


def _best(nodes: np.ndarray, score: np.ndarray) -> int:
    return int(nodes[int(np.argmin(score))])


def best_fit(state: State, pod: Pod, nodes: np.ndarray) -> tuple[int, int | None]:
    """The least left over after the pod, cpu and GPU weighted equally, each over the largest node's."""
    gpus, milli = asked(pod)
    cpu = (state.cpu[nodes] - pod.requests.get("cpu", 0)) / state.max_cpu
    gpu = (np.where(state.left[nodes] > 0, state.left[nodes], 0).sum(axis=1) - gpus * milli) / state.max_gpu
    return _best(nodes, 0.5 * cpu + 0.5 * gpu), None


def dot_product(state: State, pod: Pod, nodes: np.ndarray) -> tuple[int, int | None]:
    """Tetris' alignment as the paper's simulator scores it: the smallest dot product of the node's free
    vector (cpu, memory, GPU; a share sees its tightest GPU) and the pod's request, each over the largest
    node's."""
    gpus, milli = asked(pod)
    left = state.left[nodes]
    if milli and milli < WHOLE:
        gpu_free = np.where(left >= milli, left, WHOLE + 1).min(axis=1)
    else:
        gpu_free = np.where(left > 0, left, 0).sum(axis=1)
    score = (
        state.cpu[nodes] / state.max_cpu * pod.requests.get("cpu", 0) / state.max_cpu
        + state.memory[nodes] / state.max_memory * pod.requests.get("memory", 0) / state.max_memory
        + gpu_free / state.max_gpu * gpus * milli / state.max_gpu
    )
    return _best(nodes, score), None


def gpu_packing(state: State, pod: Pod, nodes: np.ndarray) -> tuple[int, int | None]:
    """GPU packing: a share on a GPU already shared (the least left first), else whole free GPUs of a node
    already in use (the fewest taken), else an idle node (the fewest GPUs)."""
    gpus, milli = asked(pod)
    left = state.left[nodes]
    count = (left >= 0).sum(axis=1)
    whole = (left == WHOLE).sum(axis=1)
    idle = whole == count
    if milli and milli < WHOLE:
        shared = np.where((left >= milli) & (left < WHOLE), left, WHOLE + 1).min(axis=1)
        score = np.where(shared <= WHOLE, shared, np.where(idle, 3 * WHOLE + count, 2 * WHOLE + 1))
    else:
        score = np.where(idle, 3 * WHOLE + count, 2 * WHOLE + gpus)
    return _best(nodes, score), None


def gpu_clustering(state: State, pod: Pod, nodes: np.ndarray) -> tuple[int, int | None]:
    """GPU clustering: pods of one GPU request onto nodes holding only that kind, then nodes holding it among
    others, then idle nodes, then the rest; within each, the least GPU left. A pod without GPUs has no
    preference: the first node."""
    kind = asked(pod)
    if not kind[0]:
        return int(nodes[0]), None
    kinds = state.kinds
    left = np.where(state.left[nodes] > 0, state.left[nodes], 0).sum(axis=1) / state.max_gpu
    held = [kinds.get(int(n), Counter()) for n in nodes]
    tier = np.array([0 if h and set(h) == {kind} else 1 if kind in h else 2 if not h else 3 for h in held])
    return _best(nodes, tier + left), None


def random_fit(state: State, pod: Pod, nodes: np.ndarray) -> tuple[int, int | None]:
    return int(nodes[int(state.rng.integers(len(nodes)))]), None


def fgd(state: State, pod: Pod, nodes: np.ndarray) -> tuple[int, int | None]:
    """Fragmentation gradient descent: the node and GPU where the workload's expected fragmentation grows
    least (then the lowest node)."""
    gpus, milli = asked(pod)
    before = fragmentation(state.left[nodes], state.cpu[nodes], state.memory[nodes])
    cpu = state.cpu[nodes] - pod.requests.get("cpu", 0)
    memory = state.memory[nodes] - pod.requests.get("memory", 0)
    if not milli or milli == WHOLE:
        left = state.left[nodes].copy()
        if milli == WHOLE:
            order = np.argsort(left != WHOLE, axis=1, kind="stable")[:, :gpus]  # the first free GPUs
            np.put_along_axis(left, order, 0, axis=1)
        return _best(nodes, fragmentation(left, cpu, memory) - before), None
    rows, cols = np.nonzero(state.left[nodes] >= milli)
    left = state.left[nodes][rows]
    left[np.arange(len(rows)), cols] -= milli
    growth = fragmentation(left, cpu[rows], memory[rows]) - before[rows]
    best = int(np.argmin(growth))
    return int(nodes[rows[best]]), int(cols[best])


POLICIES: dict[str, Policy] = {
    "fgd": fgd,
    "bestfit": best_fit,
    "dotproduct": dot_product,
    "gpu-packing": gpu_packing,
    "gpu-clustering": gpu_clustering,
    "random": random_fit,
}


def simulate(cluster: Cluster, policy: Policy) -> tuple[dict[str, str], dict[str, tuple[str, int]], State]:
    """The pending pods one at a time in arrival order, each where `policy` puts it (or nowhere, for good)."""
    state = State(cluster)
    pods = sorted((p for g in cluster.gangs for p in g.pods), key=lambda p: (p.order, p.name))
    bindings: dict[str, str] = {}
    shares: dict[str, tuple[str, int]] = {}
    place_each(state, pods, policy, bindings, shares)
    return bindings, shares, state


def place_each(
    state: State, pods: list[Pod], policy: Policy, bindings: dict[str, str], shares: dict[str, tuple[str, int]]
) -> None:
    """`pods` one at a time, each where `policy` puts it on `state` (or nowhere), into `bindings` and `shares`."""
    for pod in pods:
        nodes = np.flatnonzero(state.feasible(pod))
        if not len(nodes):
            continue
        n, gpu = policy(state, pod, nodes)
        taken = state.place(pod, n, gpu)
        bindings[pod.name] = state.nodes[n].name
        gpus, milli = asked(pod)
        if gpus:
            state.kinds.setdefault(n, Counter())[(gpus, milli)] += 1
        if milli and milli < WHOLE:
            shares[pod.name] = (state.nodes[n].name, taken[0])


def replay(cluster: Cluster, bindings: dict[str, str], shares: dict[str, tuple[str, int]]) -> State:
    """The state a placement leaves: shares on their GPUs, then whole GPUs on the first free ones."""
    state = State(cluster)
    pods = {p.name: p for g in cluster.gangs for p in g.pods}
    for name in sorted(bindings, key=lambda p: p not in shares):
        n = state.index[bindings[name]]
        state.place(pods[name], n, shares[name][1] if name in shares else None)
    return state


def peer(name: str) -> Callable[[Cluster, str, float], tuple[dict[str, str], dict]]:
    """A policy of the paper as a benchmark scheduler: its bindings, and the GPUs it allocated and stranded."""

    def run(cluster: Cluster, _snapshot: str, _limit: float) -> tuple[dict[str, str], dict]:
        bindings, _shares, state = simulate(cluster, POLICIES[name])
        return bindings, metrics(state, arrived(cluster))

    return run
