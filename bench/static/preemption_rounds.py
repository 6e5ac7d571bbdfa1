"""Preemption scenarios: high-priority gangs arrive on a cluster full of lower-priority work, and each scheduler
preempts as it does, round after round until nothing changes.

Schedulers: `gangsolve` (solve(): victims chosen exactly), `kube-scheduler` (its default per-pod preemption) and
`kube-scheduler-wap` (its workload-aware preemption, GenericWorkload on; running gangs' PodGroups with
disruptionMode All, as their users configure them), the last two as bench/baselines.py models them. Every
scheduler starts from the same Cluster (read from the scenario's snapshot by the edge); a round is one pass of the
scheduler; victims it evicts hold their capacity until the round ends (their grace period), then are gone;
nominated pods bind in a later round.

Scenarios: kube-scheduler's scheduler_perf workload-preemption shapes (100 nodes of 4 cpu: one gang of 100 pods
against 1,000 low-priority pods; one gang of 100 against 5 low-priority gangs; 10 gangs of 10 against 50 gangs),
GPU clusters of the synthetic shapes full of running low- and normal-priority gangs and PDB-guarded serving pods
with high-priority gangs pending, and the users' TFJob cluster.

Measured per scheduler: preemptor gangs placed, pods and GPUs evicted (and per GPU placed for preemptors),
victim gangs broken (some members evicted, the rest below the gang's minimum), PDB violations (victims beyond a
budget's allowance), futile evictions (victims of gangs that ended unplaced), rounds and scheduler seconds until
the last preemptor was placed.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from gangsolve.bench import manifests, scenarios
from gangsolve.bench.baselines import Round, per_pod_preemption, workload_preemption
from gangsolve.solver.model import GPU, Cluster, Gang, Running, SolveConfig

MAX_ROUNDS = 8


@dataclass(frozen=True)
class PreemptionScenario:
    name: str
    nodes: int
    build: Callable[[], list[dict]]
    description: str
    time_limit: float = 2.0  # gangsolve's cycle budget


# --- scenarios ------------------------------------------------------------------------------------------------


def _classes(*values: tuple[str, int]) -> list[dict]:
    return [manifests.priority_class(name, value) for name, value in values]


def _running(name: str, cpu: int, mem: int, gpus: int, node: str, started: float, **kw) -> dict:
    pod = manifests.pod(name, cpu, mem, gpus, node_name=node, **kw)
    pod["status"]["startTime"] = manifests.timestamp(started)
    return pod


def perf_vs_pods(nodes: int = 100, low: int = 1000, gangs: int = 1, size: int = 100) -> list[dict]:
    """scheduler_perf's GangPreemptionBasic: low-priority pods of 40m spread evenly (10 a node), preemptor gangs
    of pods of 3970m: each needs a node emptied of every low-priority pod."""
    objs = _classes(("perf-low", 0), ("perf-high", 8888888))
    objs += [manifests.node(f"node-{i:05d}", 4000, 32 * 1024) for i in range(nodes)]
    objs += [
        _running(f"low-{i:05d}", 40, 100, 0, f"node-{i % nodes:05d}", i, priority_class="perf-low") for i in range(low)
    ]
    for g in range(gangs):
        objs += scenarios.gang_objects(f"gang-{g:03d}", 10_000 + g, [("pod", 3970, 100, 0)] * size, size, "perf-high")
    return objs


def perf_vs_gangs(nodes: int = 100, low: int = 5, high: int = 1, size: int = 100) -> list[dict]:
    """scheduler_perf's GangPreemptionPodGroups: `low` gangs of `size` pods of 600m spread one pod a node
    (hostPorts do it there), `high` preemptor gangs of `size` pods of 3500m."""
    objs = _classes(("perf-low", 1000), ("perf-high", 9999999))
    objs += [manifests.node(f"node-{i:05d}", 4000, 32 * 1024) for i in range(nodes)]
    for g in range(low):
        name = f"low-{g:03d}"
        objs.append(manifests.pod_group(name, size))
        spread = [f"node-{(g * size + i) % nodes:05d}" for i in range(size)]
        objs += [
            _running(f"{name}-{i}", 600, 100, 0, node, g * size + i, group=name, priority_class="perf-low")
            for i, node in enumerate(spread)
        ]
    for g in range(high):
        objs += scenarios.gang_objects(f"gang-{g:03d}", 10_000 + g, [("pod", 3500, 100, 0)] * size, size, "perf-high")
    return objs


def gpu_cluster(n_nodes: int, pending: int, seed: int) -> list[dict]:
    """The synthetic GPU shapes, ~90% of the untainted GPUs held by running low- and normal-priority gangs (and
    PDB-guarded serving pods), and `pending` high-priority gangs that fit only by preempting."""
    rng = np.random.default_rng(seed)
    nodes, shapes = scenarios.synthetic_nodes(n_nodes)
    objs = [*_classes((scenarios.HIGH, 1000), (scenarios.NORMAL, 100), (scenarios.LOW, 0)), *nodes]
    free = {
        n["metadata"]["name"]: [s.gpus, s.cores * 1000, s.memory_gib * 1024]
        for n, s in zip(nodes, shapes, strict=True)
        if s.gpus and not s.tainted
    }
    order = sorted(free)
    target = 0.9 * sum(v[0] for v in free.values())
    used, started, g = 0, 0.0, 0
    while used < target and g < 10 * n_nodes:
        g += 1
        serving = rng.random() < 0.15
        size = int(rng.integers(2, 5)) if serving else int(rng.integers(1, 9))
        gpus = 1 if serving else int(rng.choice([1, 2, 4, 8], p=[0.4, 0.3, 0.2, 0.1]))
        cpu, mem = gpus * 4000, gpus * 32 * 1024
        # Place the gang first fit, in node order: the cluster a long day of scheduling leaves.
        where: list[str] = []
        for name in order:
            while len(where) < size and free[name][0] >= gpus and free[name][1] >= cpu and free[name][2] >= mem:
                free[name][0] -= gpus
                free[name][1] -= cpu
                free[name][2] -= mem
                where.append(name)
        if len(where) < size:
            for name in where:  # does not fit whole: give its room back, try smaller gangs
                free[name][0] += gpus
                free[name][1] += cpu
                free[name][2] += mem
            continue
        used += gpus * size
        priority = scenarios.NORMAL if rng.random() < 0.4 else scenarios.LOW
        started += float(rng.integers(1, 600))
        if serving:
            app = f"serve-{g:04d}"
            objs.append(_pdb(app, size - 1))
            objs += [
                _running(f"{app}-{i}", cpu, mem, gpus, node, started, priority_class=priority, labels={"app": app})
                for i, node in enumerate(where)
            ]
            continue
        name = f"train-{g:04d}"
        objs.append(manifests.pod_group(name, size if rng.random() < 0.8 else max(1, size // 2)))
        objs += [
            _running(f"{name}-{i}", cpu, mem, gpus, node, started, group=name, priority_class=priority)
            for i, node in enumerate(where)
        ]
    for j in range(pending):
        gpus = int(rng.choice([1, 2, 4, 8], p=[0.25, 0.25, 0.3, 0.2]))
        size = int(rng.integers(2, 9)) if gpus < 8 else int(rng.integers(1, 4))
        pods = [("worker", gpus * 4000, gpus * 32 * 1024, gpus)] * size
        objs += scenarios.gang_objects(f"urgent-{j:03d}", 100_000 + j, pods, size, scenarios.HIGH)
    return objs


def _pdb(app: str, min_available: int) -> dict:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": app, "namespace": manifests.NAMESPACE},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": app}}},
    }


def users_tfjob() -> list[dict]:
    """The users' cluster: TFJob resnet (low priority, 3 GPU workers and a ps, one gang) and a PDB-guarded
    notebook run; TFJob mnist (high priority, 7 GPU workers and a ps) waits for 7 of the 8 GPUs."""
    master = manifests.node(
        "master", 24000, 128 * 1024, taints=[{"key": "node-role.kubernetes.io/master", "effect": "NoSchedule"}]
    )
    gpu = [manifests.node(f"gpu-{i}", 28000, 128 * 1024, 4, labels={"gpu": "yes"}) for i in range(2)]
    objs = [*_classes(("research", 100), ("production", 1000)), master, *gpu]
    objs.append(manifests.pod_group("resnet", 4))
    objs += [_running("resnet-ps-0", 2000, 4096, 0, "gpu-0", 1, group="resnet", priority_class="research")]
    objs += [
        _running(f"resnet-worker-{i}", 2000, 4096, 1, "gpu-0", 1, group="resnet", priority_class="research")
        for i in range(3)
    ]
    objs.append(_pdb("notebook", 1))
    objs.append(
        _running(
            "notebook",
            2000,
            4096,
            1,
            "gpu-1",
            2,
            priority_class="research",
            labels={"app": "notebook"},
            scheduler_name="default-scheduler",
        )
    )
    pods = [("ps", 2000, 4096, 0)] + [("worker", 2000, 4096, 1)] * 7
    objs += scenarios.gang_objects("mnist", 10, pods, 8, "production", selector={"gpu": "yes"})
    return objs


def gpu_small() -> list[dict]:
    """Four 8-GPU nodes, 30 GPUs held by 12 running pods (gangs of low and normal priority, a PDB-guarded
    service, pods alone), a high-priority gang of two 4-GPU pods: small enough for an exhaustive search over
    every set of victims (tests/bench/test_preemption_bench.py)."""
    objs = [*_classes((scenarios.HIGH, 1000), (scenarios.NORMAL, 100), (scenarios.LOW, 0))]
    objs += [manifests.node(f"node-{i}", 96_000, 1024 * 1024, 8) for i in range(4)]
    t = iter(range(1, 100))

    def gang(name: str, minimum: int, priority: str, pods: list[tuple[str, int]]) -> None:
        objs.append(manifests.pod_group(name, minimum))
        for i, (node, gpus) in enumerate(pods):
            objs.append(
                _running(
                    f"{name}-{i}",
                    gpus * 4000,
                    gpus * 32 * 1024,
                    gpus,
                    node,
                    next(t),
                    group=name,
                    priority_class=priority,
                )
            )

    gang("low-a", 2, scenarios.LOW, [("node-0", 4), ("node-1", 4)])
    gang("low-b", 1, scenarios.LOW, [("node-2", 4), ("node-3", 4)])
    gang("normal-c", 3, scenarios.NORMAL, [("node-0", 2), ("node-1", 2), ("node-2", 2)])
    objs.append(_pdb("serve", 1))
    for i, node in enumerate(("node-1", "node-3")):
        objs.append(
            _running(
                f"serve-{i}",
                8000,
                64 * 1024,
                2,
                node,
                next(t),
                priority_class=scenarios.LOW,
                labels={"app": "serve"},
                scheduler_name="default-scheduler",
            )
        )
    for name, node, gpus, priority in (
        ("solo-0", "node-0", 1, scenarios.LOW),
        ("solo-1", "node-3", 1, scenarios.LOW),
        ("solo-2", "node-2", 2, scenarios.NORMAL),
    ):
        objs.append(_running(name, gpus * 4000, gpus * 32 * 1024, gpus, node, next(t), priority_class=priority))
    objs += scenarios.gang_objects("urgent", 1000, [("worker", 16000, 128 * 1024, 4)] * 2, 2, scenarios.HIGH)
    return objs


SCENARIOS: dict[str, PreemptionScenario] = {
    s.name: s
    for s in (
        PreemptionScenario(
            "preempt/tfjob",
            3,
            users_tfjob,
            "the users' cluster: TFJob mnist (high, 7 GPUs) against TFJob resnet (low, 3 GPUs) and a notebook "
            "under a PDB",
        ),
        PreemptionScenario(
            "preempt/gpu-4nodes",
            4,
            gpu_small,
            "four 8-GPU nodes held by 12 running pods (gangs, a PDB-guarded service, pods alone); a gang of 2x4 GPUs",
        ),
        PreemptionScenario(
            "preempt/perf-100nodes-1x100-vs-1000pods",
            100,
            perf_vs_pods,
            "scheduler_perf: 100 nodes, one gang of 100 pods of 3970m against 1,000 low-priority pods",
        ),
        PreemptionScenario(
            "preempt/perf-100nodes-1x100-vs-5gangs",
            100,
            perf_vs_gangs,
            "scheduler_perf: 100 nodes, one gang of 100 pods of 3500m against 5 low-priority gangs of 100",
        ),
        PreemptionScenario(
            "preempt/perf-100nodes-10x10-vs-50gangs",
            100,
            lambda: perf_vs_gangs(low=50, high=10, size=10),
            "scheduler_perf: 100 nodes, 10 gangs of 10 pods of 3500m against 50 low-priority gangs of 10",
        ),
        PreemptionScenario(
            "preempt/gpu-100nodes",
            100,
            lambda: gpu_cluster(100, 6, seed=100),
            "synthetic 100 nodes, 90% of GPUs held by low/normal gangs and PDB-guarded serving pods; 6 high gangs",
        ),
        PreemptionScenario(
            "preempt/gpu-1000nodes",
            1000,
            lambda: gpu_cluster(1000, 40, seed=1000),
            "synthetic 1,000 nodes, as above; 40 high gangs",
            5.0,
        ),
    )
}
GRID = list(SCENARIOS)
PREEMPTION_SCHEDULERS = ("kube-scheduler", "kube-scheduler-wap", "gangsolve")


# --- the simulation -------------------------------------------------------------------------------------------


class Sim:
    """A cluster's pods over rounds: pending gangs, running pods, victims leaving, nominations."""

    def __init__(self, cluster: Cluster) -> None:
        self.start = cluster
        self.nodes = {n.name: n for n in cluster.nodes}
        self.running: dict[str, Running] = {r.name: r for r in cluster.running}
        self.gangs: dict[str, Gang] = {g.name: g for g in cluster.gangs}
        self.pod_gang = {p.name: g.name for g in cluster.gangs for p in g.pods}
        self.nominated: dict[str, str] = dict(cluster.nominated)
        self.evicted: list[tuple[Running, str]] = []  # victim, the gang it made room for
        self.placed_round: dict[str, int] = {}  # gang -> round it reached its minimum
        self.rounds = 0

    def cluster(self) -> Cluster:
        used: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for r in self.running.values():
            for k, q in r.requests.items():
                used[r.node][k] += q
        nodes = tuple(replace(n, used=dict(used[n.name])) for n in self.nodes.values())
        evicted: dict[str, int] = defaultdict(int)
        for victim, _for in self.evicted:
            for b in victim.pdbs:
                evicted[b] += 1
        budgets = {b: max(0, a - evicted[b]) for b, a in self.start.budgets.items()}
        gangs = tuple(g for g in self.gangs.values() if g.pods)
        return Cluster(
            nodes, gangs, running=tuple(self.running.values()), nominated=dict(self.nominated), budgets=budgets
        )

    def settle(self) -> None:
        """The last round's victims are gone (their grace period was the round)."""
        for name, r in list(self.running.items()):
            if r.leaving:
                del self.running[name]

    def apply(self, result: Round, now: float) -> bool:
        """One round's decisions; True when anything changed."""
        self.rounds += 1
        changed = bool(result.bindings or result.evictions) or result.nominations != self.nominated
        for e in result.evictions:
            victim = self.running[e.pod]
            self.running[e.pod] = replace(victim, leaving=True)
            self.evicted.append((victim, e.preemptor))
        by_gang: dict[str, list[str]] = defaultdict(list)
        for pod, node in result.bindings.items():
            by_gang[self.pod_gang[pod]].append(pod)
            gang = self.gangs[self.pod_gang[pod]]
            member = next(p for p in gang.pods if p.name == pod)
            self.running[pod] = Running(
                node,
                {**member.requests, "pods": 1},
                name=pod,
                priority=member.priority,
                gang=gang.name,
                min_member=gang.min_member,
                started=now,
            )
        for name, pods in by_gang.items():
            gang = self.gangs[name]
            bound = tuple(self.running[p].node for p in pods)
            self.gangs[name] = replace(
                gang, pods=tuple(p for p in gang.pods if p.name not in pods), bound_nodes=gang.bound_nodes + bound
            )
            if len(self.gangs[name].bound_nodes) >= gang.min_member and name not in self.placed_round:
                self.placed_round[name] = self.rounds
        self.nominated = {k: v for k, v in result.nominations.items() if k not in result.bindings}
        return changed


def _gangsolve(time_limit: float) -> Callable[[Cluster, int], Round]:
    def run(cluster: Cluster, _seed: int) -> Round:
        from gangsolve.solver import solve

        placement = solve(cluster, SolveConfig(time_limit=time_limit))
        return Round(dict(placement.bindings), dict(placement.nominations), list(placement.evictions))

    return run


def simulate(cluster: Cluster, scheduler: str, time_limit: float, seed: int = 0) -> dict:
    rounds = {
        "gangsolve": _gangsolve(time_limit),
        "kube-scheduler": per_pod_preemption,
        "kube-scheduler-wap": workload_preemption,
    }[scheduler]
    sim = Sim(cluster)
    seconds: list[float] = []
    for r in range(MAX_ROUNDS):
        sim.settle()
        current = sim.cluster()
        started = time.perf_counter()
        result = rounds(current, seed + r)
        seconds.append(time.perf_counter() - started)
        if not sim.apply(result, now=1e9 + r) and not any(v.leaving for v in sim.running.values()):
            break
    return {"scheduler": scheduler, **measure(cluster, sim, seconds)}


def measure(start: Cluster, sim: Sim, seconds: list[float]) -> dict:
    """What preemption cost, from the start and the end of a simulation, the same way for every scheduler."""
    preemptors = [g for g in start.gangs if g.pods and g.need > 0]
    placed = [g for g in preemptors if g.name in sim.placed_round]
    gpus_placed = sum(p.requests.get(GPU, 0) for g in placed for p in g.pods[: g.need])
    evicted = [v for v, _for in sim.evicted]
    futile = [v for v, why in sim.evicted if why not in sim.placed_round]
    members: dict[str, list[Running]] = defaultdict(list)
    for r in start.running:
        if r.gang:
            members[r.gang].append(r)
    gone = {v.name for v in evicted}
    broken = 0
    for pods in members.values():
        k = sum(1 for r in pods if r.name in gone)
        broken += 0 < k < len(pods) and len(pods) - k < pods[0].min_member
    per_pdb: dict[str, int] = defaultdict(int)
    for v in evicted:
        for b in v.pdbs:
            per_pdb[b] += 1
    last = max(sim.placed_round.values(), default=None)
    gpus_evicted = sum(v.requests.get(GPU, 0) for v in evicted)
    return {
        "preemptors": len(preemptors),
        "preemptors_placed": len(placed),
        "pods_evicted": len(evicted),
        "gpus_evicted": gpus_evicted,
        "gpus_placed": gpus_placed,
        "gpus_evicted_per_gpu": gpus_evicted / gpus_placed if gpus_placed else None,
        "victim_gangs": len({v.gang or v.name for v in evicted}),
        "victim_gangs_broken": broken,
        "pdb_violations": sum(max(0, k - start.budgets.get(b, 0)) for b, k in per_pdb.items()),
        "futile_evictions": len(futile),
        "rounds": sim.rounds,
        "rounds_to_placement": last,
        "seconds_to_placement": sum(seconds[:last]) if last else None,
        "cycle_seconds": seconds,
    }


def run_scenarios(
    names: list[str],
    schedulers: list[str],
    time_limit: float | None = None,
    on_run: Callable[[str, str], None] = lambda _s, _r: None,
) -> list[dict]:
    results = []
    for name in names:
        scenario = SCENARIOS[name]
        objs = scenario.build()
        cluster = manifests.to_cluster(objs)
        runs = []
        for scheduler in schedulers:
            on_run(name, scheduler)
            runs.append(simulate(cluster, scheduler, time_limit or scenario.time_limit))
        results.append(
            {
                "name": name,
                "description": scenario.description,
                "nodes": scenario.nodes,
                "running": len(cluster.running),
                "pending_gangs": sum(1 for g in cluster.gangs if g.pods),
                "runs": runs,
            }
        )
    return results
