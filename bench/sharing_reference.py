"""How many GPUs the sharing workloads allow to be allocated, approached offline: a reference placement for
openb/sharing-* that no scheduling cycle could afford (minutes), to say how far the cycle's answer is from the
best.

A node's configuration is a set of pods it can hold: its cpu, memory and pod slots, whole-GPU pods on GPUs
of their own, and shares adding up to at most each GPU. The configuration LP (Gilmore and Gomory's for
cutting stock) chooses how many nodes of each kind take each configuration, each kind of pod used at most as
often as it arrived, and maximizes the GPU thousandths allocated (or the pods placed, then the GPUs).
Column generation solves it: the LP over the configurations found so far prices each kind of pod, and CP-SAT
finds per node kind the configuration worth most at those prices; an integer program over the configurations
found then gives every node one. What room is left then takes the remaining pods in arrival order, best fit.

What it allocates is a placement that exists, so the best placement allocates at least as much; the
cluster's GPUs bound it from above.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import ortools.linear_solver.pywraplp as pywraplp
from ortools.sat.python import cp_model

from gangsolve.bench import sharing
from gangsolve.solver.model import WHOLE, Cluster, Pod

ROUNDS = 60  # column generation rounds at most (each a pricing problem per node kind)
PRICING_WORK = 1.0  # CP-SAT's deterministic time per pricing problem: the same answer on any machine
MASTER_WORK = 30.0  # and for the integer program over the configurations


@dataclass(frozen=True)
class Kind:
    """Pods alike: cpu, memory, GPUs and thousandths of each, and where they may go."""

    cpu: int
    memory: int
    gpus: int
    milli: int
    eligible: frozenset[int]  # node kinds

    @property
    def value(self) -> int:
        return self.gpus * self.milli


@dataclass(frozen=True)
class NodeKind:
    """Nodes alike: free cpu, memory and pod slots, and thousandths left per GPU (largest first)."""

    cpu: int
    memory: int
    slots: int
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class Configuration:
    """What one node of `node` holds: whole-GPU pods per kind, and per GPU the shares put on it."""

    node: int
    whole: tuple[tuple[int, int], ...]  # (pod kind, pods) of whole-GPU and cpu-only pods
    shares: tuple[tuple[int, ...], ...]  # per GPU of the node kind (its order), the pod kinds on it

    @cached_property
    def counts(self) -> Counter:
        """Pods per pod kind (read by every LP round: kept)."""
        out = Counter(dict(self.whole))
        for on_gpu in self.shares:
            out.update(on_gpu)
        return out


def _kinds(
    state: sharing.State, pods: list[Pod], cpu_only: bool
) -> tuple[list[NodeKind], list[list[int]], list[Kind], list[list[Pod]]]:
    """Node kinds (and their nodes), pod kinds (and their pods, in arrival order) of the GPU pods (and the
    cpu-only ones, `cpu_only`)."""
    by_key: dict[tuple, list[Pod]] = defaultdict(list)  # (cpu, memory, GPUs, thousandths, eligible nodes)
    for pod in pods:
        gpus, milli = sharing.asked(pod)
        if not gpus and not cpu_only:
            continue
        eligible = state.eligible(pod).tobytes()  # a byte per node, nonzero where the pod may go
        by_key[(pod.requests.get("cpu", 0), pod.requests.get("memory", 0), gpus, milli, eligible)].append(pod)
    node_keys: dict[tuple, list[int]] = defaultdict(list)
    for n in range(len(state.nodes)):
        left = tuple(sorted((int(g) for g in state.left[n] if g > 0), reverse=True))
        accepts = tuple(key[4][n] for key in by_key)
        node_keys[(int(state.cpu[n]), int(state.memory[n]), int(state.slots[n]), left, accepts)].append(n)
    node_kinds = [NodeKind(*key[:4]) for key in node_keys]
    kinds = [
        Kind(cpu, memory, gpus, milli, frozenset(t for t, nk in enumerate(node_keys) if nk[4][k]))
        for k, (cpu, memory, gpus, milli, _eligible) in enumerate(by_key)
    ]
    return node_kinds, list(node_keys.values()), kinds, list(by_key.values())


def _best_configuration(
    t: int, node: NodeKind, kinds: list[Kind], supply: list[int], price: list[int]
) -> Configuration | None:
    """The configuration of node kind `t` worth most, each pod valued at `price` (CP-SAT, within its work
    budget: the best found)."""
    free = [j for j, g in enumerate(node.gpus) if g == WHOLE]
    worth_it = [
        k
        for k, kind in enumerate(kinds)
        if price[k] > 0 and t in kind.eligible and kind.cpu <= node.cpu and kind.memory <= node.memory
    ]
    whole = [k for k in worth_it if kinds[k].milli == WHOLE and kinds[k].gpus <= len(free)]
    shared = [k for k in worth_it if 0 < kinds[k].milli < WHOLE and node.gpus and kinds[k].milli <= node.gpus[0]]
    plain = [k for k in worth_it if not kinds[k].gpus]
    if not whole and not shared and not plain:
        return None
    m = cp_model.CpModel()
    y = {k: m.new_int_var(0, min(supply[k], len(free) // kinds[k].gpus), "") for k in whole}
    taken = {j: m.new_bool_var("") for j in free}  # GPU j holds a whole-GPU pod
    m.add(sum(taken.values()) == sum(kinds[k].gpus * y[k] for k in whole))
    z = {
        (k, j): m.new_int_var(0, min(supply[k], room // kinds[k].milli), "")
        for k in shared
        for j, room in enumerate(node.gpus)
        if kinds[k].milli <= room
    }
    load = []
    for j, room in enumerate(node.gpus):
        used = sum(kinds[k].milli * z[k, j] for k in shared if (k, j) in z) + WHOLE * taken.get(j, 0)
        m.add(used <= room)
        load.append(used)
    for j in range(len(node.gpus) - 1):  # GPUs alike are interchangeable: order them, fuller first
        if node.gpus[j] == node.gpus[j + 1]:
            m.add(load[j] >= load[j + 1])
            if j in taken:
                m.add(taken[j] >= taken[j + 1])
    count: dict[int, cp_model.LinearExprT] = {k: y[k] for k in whole}
    count |= {k: m.new_int_var(0, supply[k], "") for k in plain}
    for k in shared:
        count[k] = sum(z[k, j] for j in range(len(node.gpus)) if (k, j) in z)
        m.add(count[k] <= supply[k])
    m.add(sum(kinds[k].cpu * c for k, c in count.items()) <= node.cpu)
    m.add(sum(kinds[k].memory * c for k, c in count.items()) <= node.memory)
    m.add(sum(count.values()) <= node.slots)
    m.maximize(sum(price[k] * c for k, c in count.items()))
    solver = cp_model.CpSolver()
    solver.parameters.max_deterministic_time = PRICING_WORK
    solver.parameters.num_workers = 1
    if solver.solve(m) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    return Configuration(
        t,
        tuple((k, v) for k in (*whole, *plain) if (v := solver.value(count[k]))),
        tuple(
            tuple(k for k in shared if (k, j) in z for _ in range(solver.value(z[k, j]))) for j in range(len(node.gpus))
        ),
    )


def _first_fit(
    node_kinds: list[NodeKind], nodes: list[list[int]], kinds: list[Kind], supply: list[int], worth: list[int]
) -> set:
    """Configurations to start from: nodes filled one by one, the pods worth most first, first fit."""
    left, out = list(supply), set()
    order = sorted(range(len(kinds)), key=lambda k: -worth[k])
    for t, node in enumerate(node_kinds):
        for _ in nodes[t]:
            cpu, memory, slots, room = node.cpu, node.memory, node.slots, list(node.gpus)
            whole: Counter = Counter()
            shares: list[list[int]] = [[] for _ in room]
            for k in order:
                kind = kinds[k]
                while left[k] and t in kind.eligible and kind.cpu <= cpu and kind.memory <= memory and slots:
                    if not kind.gpus:
                        whole[k] += 1
                    elif kind.milli == WHOLE:
                        free = [j for j, r in enumerate(room) if r == WHOLE][: kind.gpus]
                        if len(free) < kind.gpus:
                            break
                        for j in free:
                            room[j] = 0
                        whole[k] += 1
                    else:
                        fits = [j for j, r in enumerate(room) if r >= kind.milli and (shares[j] or r < WHOLE)]
                        fits = fits or [j for j, r in enumerate(room) if r >= kind.milli]
                        if not fits:
                            break
                        j = min(fits, key=lambda j: room[j])
                        room[j] -= kind.milli
                        shares[j].append(k)
                    cpu, memory, slots, left[k] = cpu - kind.cpu, memory - kind.memory, slots - 1, left[k] - 1
            if whole or any(shares):
                out.add(Configuration(t, tuple(sorted(whole.items())), tuple(tuple(sorted(s)) for s in shares)))
    return out


def _prices(
    columns: list[Configuration], nodes: list[list[int]], worth: list[int], supply: list[int]
) -> tuple[list[float], list[float]]:
    """The configuration LP over `columns` (how many nodes of each kind take each, each pod kind used at most
    as often as it arrived): its prices of pod kinds and of node kinds."""
    lp = pywraplp.Solver.CreateSolver("GLOP")
    per_node = [lp.Constraint(-lp.infinity(), len(n)) for n in nodes]
    per_kind = [lp.Constraint(-lp.infinity(), s) for s in supply]
    objective = lp.Objective()
    for c in columns:
        x = lp.NumVar(0, lp.infinity(), "")
        per_node[c.node].SetCoefficient(x, 1)
        for k, n in c.counts.items():
            per_kind[k].SetCoefficient(x, n)
        objective.SetCoefficient(x, sum(worth[k] * n for k, n in c.counts.items()))
    objective.SetMaximization()
    lp.Solve()
    return [c.dual_value() for c in per_kind], [c.dual_value() for c in per_node]


def _choose(columns: list[Configuration], nodes: list[list[int]], worth: list[int], supply: list[int]) -> list[int]:
    """The same program in whole nodes (CP-SAT): how many nodes take each configuration."""
    m = cp_model.CpModel()
    x = [m.new_int_var(0, len(nodes[c.node]), "") for c in columns]
    per_node: dict[int, list] = defaultdict(list)
    per_kind: dict[int, list] = defaultdict(list)
    for v, c in zip(x, columns, strict=True):
        per_node[c.node].append(v)
        for k, n in c.counts.items():
            per_kind[k].append(n * v)
    for t, terms in per_node.items():
        m.add(sum(terms) <= len(nodes[t]))
    for k, terms in per_kind.items():
        m.add(sum(terms) <= supply[k])
    m.maximize(sum(sum(worth[k] * n for k, n in c.counts.items()) * v for v, c in zip(x, columns, strict=True)))
    solver = cp_model.CpSolver()
    solver.parameters.max_deterministic_time = MASTER_WORK
    solver.parameters.num_workers = 1
    solver.solve(m)
    return [solver.value(v) for v in x]


def _generate(
    node_kinds: list[NodeKind], nodes: list[list[int]], kinds: list[Kind], supply: list[int], worth: list[int]
) -> tuple[list[Configuration], dict]:
    """Column generation: the configurations worth having, and how it went (rounds, whether it converged: no
    node kind had a configuration worth more than the LP pays for it, within the pricing's work budget)."""
    columns = sorted(_first_fit(node_kinds, nodes, kinds, supply, worth), key=repr)
    found = set(columns)
    for rounds in range(1, ROUNDS + 1):
        kind_price, node_price = _prices(columns, nodes, worth, supply)
        # Each pod kind valued at what it brings less what the LP says the pod kind is worth elsewhere
        # (integers: CP-SAT's objective is integral).
        price = [worth[k] - round(max(0.0, p)) for k, p in enumerate(kind_price)]
        added = 0
        for t, node in enumerate(node_kinds):
            c = _best_configuration(t, node, kinds, supply, price)
            if c is None or c in found:
                continue
            if sum((worth[k] - kind_price[k]) * n for k, n in c.counts.items()) - node_price[t] > 0.5:
                columns.append(c)
                found.add(c)
                added += 1
        if not added:
            return columns, {"columns": len(columns), "rounds": rounds, "converged": True}
    return columns, {"columns": len(columns), "rounds": ROUNDS, "converged": False}


def place(cluster: Cluster, pods_first: bool = False) -> tuple[dict[str, str], dict[str, tuple[str, int]], dict]:
    """The reference placement: bindings, each share's (node, GPU), and how the column generation went.
    It maximizes the GPU thousandths allocated, or (`pods_first`) the pods placed, then the GPUs: gangsolve's
    own objective where every gang is one pod."""
    state = sharing.State(cluster)
    pods = sorted((p for g in cluster.gangs for p in g.pods), key=lambda p: (p.order, p.name))
    node_kinds, nodes, kinds, members = _kinds(state, pods, cpu_only=pods_first)
    supply = [len(m) for m in members]
    per_pod = int(state.present.sum()) * WHOLE + 1 if pods_first else 0  # more than all GPUs: pods come first
    worth = [per_pod + kind.value for kind in kinds]
    columns, facts = _generate(node_kinds, nodes, kinds, supply, worth)
    chosen = _choose(columns, nodes, worth, supply)
    bindings: dict[str, str] = {}
    shares: dict[str, tuple[str, int]] = {}
    queues = [list(m) for m in members]
    free = [list(n) for n in nodes]
    for c, times in zip(columns, chosen, strict=True):
        for _ in range(times):
            n = free[c.node].pop(0)
            name = state.nodes[n].name
            gpus = sorted(range(len(state.left[n])), key=lambda d: -int(state.left[n][d]))  # the kind's order
            for k, count in c.whole:
                for _ in range(count):
                    bindings[queues[k].pop(0).name] = name
            for j, on_gpu in enumerate(c.shares):
                for k in on_gpu:
                    pod = queues[k].pop(0)
                    bindings[pod.name] = name
                    shares[pod.name] = (name, gpus[j])
    # The room left takes the pods left (cpu-only ones included) in arrival order, best fit.
    state = sharing.replay(cluster, bindings, shares)
    sharing.place_each(state, [p for p in pods if p.name not in bindings], sharing.best_fit, bindings, shares)
    return bindings, shares, facts


def peer(pods_first: bool) -> Callable[[Cluster, str, float], tuple[dict[str, str], dict]]:
    """The reference as a benchmark scheduler: its bindings and shares (the runner measures them as
    gangsolve's)."""

    def run(cluster: Cluster, _snapshot: str, _limit: float) -> tuple[dict[str, str], dict]:
        bindings, shares, facts = place(cluster, pods_first)
        return bindings, {**facts, "shares": {pod: [node, gpu] for pod, (node, gpu) in shares.items()}}

    return run


PEERS = {"config-lp": peer(pods_first=False), "config-lp-pods": peer(pods_first=True)}
