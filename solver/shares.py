"""GPU shares on devices: each GPU of a node is a device with its remaining share (milli-GPU, WHOLE = all of it).

A fractional pod takes part of exactly one device, never parts of two; a whole-GPU pod takes whole devices,
and a device with any share taken is not whole. Every stage sees devices through two columns of the problem
(problem.py: whole devices free, and milli-GPU left on whole and shared devices together), a relaxation that
lets a node hold shares its devices cannot (three 0.6 shares on two free GPUs). This module makes it exact:

- `pack` puts one node's shares on its devices: each share, largest first, where it adds the least expected
  fragmentation (below); when that leaves a share out, an exhaustive search over the devices decides;
- `restore` gives a node's GPUs back their room when pods leave it (the shares left packed again), so that the
  search keeps each GPU's room as the greedy passes do as they place (`Problem.take`);
- `repair` takes off the gangs whose shares a node cannot pack (the lowest in queue order first): the check
  on every hint and on the search's answer, which CP-SAT's device constraints would refuse otherwise;
- `DeviceVars` adds those constraints to a CP-SAT model: per fractional variable and device, how many of its
  pods go there, within each device's share, whole-GPU pods on whole devices only;
- `finish` chooses every placed fractional pod's device (Placement.shares), taking off what cannot be packed.

The fragmentation measure is FGD's ("Beware of Fragmentation", Weng et al., USENIX ATC'23) at the device level:
for the pending workload's GPU requests as the distribution of what comes next, a device's free share is
fragmented for a request it cannot hold (a share larger than what is left; for whole-GPU requests, any device
already shared). A share goes where the expected fragmentation grows least, ties to the tightest device.
Across nodes (`fragmentation_growth`, the node scorer of one greedy pass where shares are pending) the measure
counts cpu and memory too, as the paper's does: a node short of a request's cpu strands all its free GPU share.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import NamedTuple
from weakref import WeakKeyDictionary

import numpy as np
from ortools.sat.python import cp_model

from gangsolve.solver.devices import take_off
from gangsolve.solver.model import GPU, SHARE, WHOLE, Cluster, GangResult, Node, Placement, Pod, Share
from gangsolve.solver.problem import Counts, Devices, Problem, Rows, devices, rows_of


class Kind(NamedTuple):
    """One GPU request of the workload to come: milli-GPU asked (WHOLE per GPU for whole ones), its probability,
    and what a typical one (the median) asks of cpu and memory."""

    milli: int
    p: float
    cpu: int = 0
    memory: int = 0


Workload = tuple[Kind, ...]
_SEARCH_STEPS = 20_000  # the exhaustive packing's budget per node: beyond it a node's shares count as not packed
COVER = 0.99  # the GPU requests a node's measure counts: the most frequent, covering this share of them (the paper's)
NEAREST = 128  # the best-fit nodes among which a pod's fragmentation is measured (`fragmentation_growth`)


def share_on(pod: Pod, node: Node) -> int:
    """The milli-GPU `pod` takes of one of `node`'s GPUs (0: it asks for no share)."""
    if pod.gpu_memory and node.gpu_memory:
        return math.ceil(WHOLE * pod.gpu_memory / node.gpu_memory)
    return int(pod.requests.get(SHARE, 0))


def workload(pods: Sequence[Pod], cover: float = 1.0) -> Workload:
    """The GPU requests of `pods` as a distribution (each pod equally likely): what the fragmentation measure
    expects to come. `cover`: only the most frequent requests, covering that share of the pods."""
    asked: dict[int, list[Pod]] = defaultdict(list)
    for pod in pods:
        milli = int(pod.requests.get(SHARE, 0)) or WHOLE * int(pod.requests.get(GPU, 0))
        if milli:
            asked[milli].append(pod)
    total = sum(len(same) for same in asked.values())
    kept, covered = [], 0
    for milli, same in sorted(asked.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        if covered >= cover * total:
            break
        kept.append(milli)
        covered += len(same)
    return tuple(
        Kind(
            m,
            len(asked[m]) / total,
            int(np.median([p.requests.get("cpu", 0) for p in asked[m]])),
            int(np.median([p.requests.get("memory", 0) for p in asked[m]])),
        )
        for m in sorted(kept)
    )


def fragmentation(left: Sequence[int], expected: Workload) -> float:
    """FGD's expected fragmentation of devices with `left` milli free each: per request, the free share of
    the devices that cannot hold it (all of them when the node cannot hold it at all). One node's devices,
    cpu and memory aside: how `pack` compares a share's devices (`node_fragmentation` for whole nodes)."""
    total = sum(left)
    out = 0.0
    for kind in expected:
        if kind.milli < WHOLE:
            stranded = sum(r for r in left if r < kind.milli)
        else:
            whole = sum(1 for r in left if r >= WHOLE)
            stranded = total if whole * WHOLE < kind.milli else sum(r for r in left if r < WHOLE)
        out += kind.p * stranded
    return out


def node_fragmentation(left: np.ndarray, cpu: np.ndarray, memory: np.ndarray, expected: Workload) -> np.ndarray:
    """`fragmentation` of many nodes at once (rows of `left`), each with `cpu` and `memory` free: a node short
    of a request's cpu or memory cannot hold it, so all its free GPU share is stranded for it."""
    kinds = _kinds(expected)
    free = np.maximum(left, 0)
    rows, width = len(free), len(kinds.cuts) + 1
    # A GPU is stranded for every request whose cut (the milli it needs of one GPU) is above what it has left:
    # each GPU's free share added at the first cut above it, then summed along the cuts (rows x cuts, not
    # rows x GPUs x requests).
    at = np.searchsorted(kinds.cuts, free, side="right") + np.arange(0, rows * width, width)[:, None]
    stranded = np.bincount(at.ravel(), weights=free.ravel(), minlength=rows * width).reshape(rows, width)
    stranded = stranded.cumsum(axis=1)[:, kinds.cut_of]
    whole = (free >= WHOLE).sum(axis=1)
    fits = (cpu[:, None] >= kinds.cpu) & (memory[:, None] >= kinds.memory) & (whole[:, None] >= kinds.whole)
    per_kind = np.where(fits, stranded, free.sum(axis=1)[:, None])
    # Integers all along (in floats, below 2**53): a node's measure is the same number whether measured alone or
    # among others, whatever order the products are added in.
    out: np.ndarray = (per_kind @ kinds.weight) / _UNIT
    return out


_UNIT = 1 << 24  # a request's probability in these units (`_Kinds.weight`)


class _Kinds(NamedTuple):
    """A workload as arrays: each kind's probability (in _UNIT, as floats of integers), cpu and memory, whole
    GPUs, and the position of its cut (the milli it needs of one GPU) among the sorted distinct `cuts`."""

    weight: np.ndarray
    cpu: np.ndarray
    memory: np.ndarray
    whole: np.ndarray  # the whole GPUs it needs on one node (0 for a share)
    cuts: np.ndarray
    cut_of: np.ndarray


@functools.lru_cache(maxsize=16)
def _kinds(expected: Workload) -> _Kinds:
    milli = np.array([kind.milli for kind in expected], dtype=np.int64)
    cuts, cut_of = np.unique(np.minimum(milli, WHOLE), return_inverse=True)
    return _Kinds(
        np.array([float(round(kind.p * _UNIT)) for kind in expected]),
        np.array([kind.cpu for kind in expected], dtype=np.int64),
        np.array([kind.memory for kind in expected], dtype=np.int64),
        np.where(milli < WHOLE, 0, -(-milli // WHOLE)),
        cuts,
        cut_of,
    )


class _Measure(NamedTuple):
    """What `fragmentation_growth` reads of a cycle's problem, worked out once: the pending workload, the cpu
    and memory columns, and best fit's weights (a node's cpu and milli-GPU left, each as a share of the most
    any node has, equally weighted)."""

    expected: Workload
    cpu: int | None
    memory: int | None
    best_fit: np.ndarray  # per column of the problem


_measures: WeakKeyDictionary[Problem, _Measure] = WeakKeyDictionary()


def pending_workload(problem: Problem) -> Workload:
    """The pending pods' GPU requests (`workload`, the most frequent covering COVER): what is to come."""
    return _measure(problem).expected


def _measure(problem: Problem) -> _Measure:
    found = _measures.get(problem)
    if found is None:
        pods = [problem.class_pods[part.cls] for parts in problem.parts for part in parts for _ in part.pods]
        cpu, memory = problem.res_index.get("cpu"), problem.res_index.get("memory")
        best_fit = np.zeros(len(problem.resources))
        best_fit[problem.devices] = 0.5 / max(WHOLE * len(problem.devices), 1)
        if cpu is not None:
            best_fit[cpu] = 0.5 / max(int(problem.allocatable[:, cpu].max(initial=1)), 1)
        found = _measures[problem] = _Measure(workload(pods, COVER), cpu, memory, best_fit)
    return found


def fragmentation_growth(problem: Problem, cls: int, free: np.ndarray, rows: Rows = slice(None)) -> np.ndarray:
    """A node scorer (greedy.Scorer; lower is better) for pods where shares are pending: FGD's choice ("Beware
    of Fragmentation"), the node where the pending workload's expected fragmentation grows least (cpu and
    memory counted, a share on the tightest GPU that holds it), among the NEAREST nodes of best fit (the least
    cpu and GPU left, equally weighted; the rest after them in that order). The best-fit shortlist packs where
    FGD alone spreads: on the OpenB trace it allocates more GPUs than either (docs/benchmarks.md)."""
    measure = _measure(problem)
    sub = rows_of(free, rows)
    fit = sub @ measure.best_fit  # (what the pod takes is the same on every node: left out)
    chosen = np.arange(len(sub)) if len(sub) <= NEAREST else np.argpartition(fit, NEAREST)[:NEAREST]
    # The chosen nodes as they are (the second half) and with the pod on them (the first).
    picked = sub[chosen]
    state = np.concatenate([picked, picked])
    after = state[: len(chosen)]
    after -= problem.demand[cls]
    gpus, milli = int(problem.demand[cls, problem.res_index[GPU]]), int(problem.share_of[cls])
    if milli or gpus:
        left = after[:, problem.devices]
        if milli:
            tightest = np.where(left >= milli, left, WHOLE + 1).argmin(axis=1)
            left[np.arange(len(left)), tightest] -= milli
        else:
            whole = left == WHOLE
            left[whole & (np.cumsum(whole, axis=1) <= gpus)] = 0  # the lowest whole GPUs, as take does
        after[:, problem.devices] = left
    zero = np.zeros(len(state), dtype=np.int64)
    both = node_fragmentation(
        state[:, problem.devices],
        state[:, measure.cpu] if measure.cpu is not None else zero,
        state[:, measure.memory] if measure.memory is not None else zero,
        measure.expected,
    )
    score: np.ndarray = _SHORTLIST + fit
    score[chosen] = both[: len(chosen)] - both[len(chosen) :]
    return score


_SHORTLIST = 1e12  # above any growth: the nodes past the best-fit shortlist come after it


def pack(room: Devices, shares: Sequence[tuple[str, int]], expected: Workload = ()) -> dict[str, int] | None:
    """Each share (name, milli) on one device of `room`: name -> device index, or None when they do not fit.
    With `expected` (the workload to come), each goes where the expected fragmentation grows least; without,
    best fit (the least left on the device)."""
    left = dict(room.shared)
    fresh = list(room.whole)
    out: dict[str, int] = {}
    for name, milli in sorted(shares, key=lambda s: (-s[1], s[0])):
        options = [i for i, r in left.items() if r >= milli] + fresh[:1]
        if not options:  # best fit where the measure's choices do not pack, then every packing
            return pack(room, shares) if expected else _search(room, shares)
        best = _choose(left, len(fresh), options, milli, expected)
        if best not in left:
            fresh.remove(best)
            left[best] = WHOLE
        left[best] -= milli
        out[name] = best
    return out


def _choose(left: Mapping[int, int], fresh: int, options: list[int], milli: int, expected: Workload) -> int:
    """The device among `options` (shared ones in `left`, or a whole one) for a share of `milli`."""

    def tightest(i: int) -> tuple[int, int]:
        return (left.get(i, WHOLE) - milli, i)

    if len(options) == 1 or not expected:
        return min(options, key=tightest)
    base = [*left.values(), *([WHOLE] * fresh)]
    keys = list(left)

    def grows(i: int) -> tuple[float, int, int]:
        after = list(base)
        after[keys.index(i) if i in left else len(keys)] -= milli
        return (fragmentation(after, expected), *tightest(i))

    return min(options, key=grows)


def _search(room: Devices, shares: Sequence[tuple[str, int]]) -> dict[str, int] | None:
    """Exhaustive packing, largest share first, devices of equal room tried once per share."""
    order = sorted(shares, key=lambda s: (-s[1], s[0]))
    indices = [*room.shared, *room.whole]
    left = [*room.shared.values(), *([WHOLE] * len(room.whole))]
    chosen: list[int] = []
    steps = 0

    def place(k: int) -> bool:
        nonlocal steps
        if k == len(order):
            return True
        steps += 1
        if steps > _SEARCH_STEPS:
            return False
        tried: set[int] = set()
        for d, r in enumerate(left):
            if r >= order[k][1] and r not in tried:
                tried.add(r)
                left[d] -= order[k][1]
                chosen.append(d)
                if place(k + 1):
                    return True
                chosen.pop()
                left[d] += order[k][1]
        return False

    if not place(0):
        return None
    # The whole devices used, renamed to the lowest free indices in order of use (so they open lowest first).
    fresh = iter(room.whole)
    renamed: dict[int, int] = {}
    out = {}
    for (name, _milli), d in zip(order, chosen, strict=True):
        if d >= len(room.shared) and d not in renamed:
            renamed[d] = next(fresh)
        out[name] = renamed.get(d, indices[d])
    return out


# --- in the problem's indices: the stages' placements --------------------------------------------------------


def _node_shares(problem: Problem, counts: Counts) -> dict[int, tuple[int, list[tuple[str, int]], list[int]]]:
    """Per node holding placed shares: (whole GPUs placed, [(pod key, milli)], gangs with shares there)."""
    out: dict[int, tuple[int, list[tuple[str, int]], list[int]]] = {}
    whole: dict[int, int] = defaultdict(int)
    gpu, share = problem.res_index[GPU], problem.res_index[SHARE]
    for g, gang_counts in counts.items():
        for (p, n), k in gang_counts.items():
            cls = problem.parts[g][p].cls
            if problem.demand[cls, gpu]:
                whole[n] += k * int(problem.demand[cls, gpu])
            elif problem.demand[cls, share]:
                milli = share_on(problem.class_pods[cls], problem.nodes[n])
                entry = out.setdefault(n, (0, [], []))
                entry[1].extend((f"{g}/{p}/{i}", milli) for i in range(k))
                entry[2].append(g)
    return {n: (whole[n], pods, gangs) for n, (_w, pods, gangs) in out.items()}


def restore(problem: Problem, free: np.ndarray, n: int, placed: Sequence[tuple[int, int]]) -> bool:
    """Node n's GPUs in `free` (each GPU's room, and the whole GPUs left) as they are with only `placed`
    ((class, pods)) of the pending pods on it: whole-GPU pods on whole GPUs, the shares packed (`pack`). False,
    `free` untouched, when the shares do not pack. The other columns are linear: the caller keeps them."""
    gpu = problem.res_index[GPU]
    node = problem.nodes[n]
    whole = sum(k * int(problem.demand[cls, gpu]) for cls, k in placed)
    asked = [
        (f"{i}/{j}", share_on(problem.class_pods[cls], node))
        for i, (cls, k) in enumerate(placed)
        if problem.share_of[cls]
        for j in range(k)
    ]
    room = devices(node, whole)
    got = pack(room, asked) if asked else {}
    if got is None:
        return False
    left = np.zeros(len(problem.devices), dtype=np.int64)
    for d, r in room.shared.items():
        left[d] = r
    left[list(room.whole)] = WHOLE
    milli = dict(asked)
    for name, d in got.items():
        left[d] -= milli[name]
    free[n, problem.devices] = left
    free[n, gpu] = problem.free[n, gpu] - whole - len(set(got.values()) - set(room.shared))
    return True


def repair(problem: Problem, counts: Counts, order: Sequence[int]) -> Counts:
    """`counts` less the gangs whose shares some node cannot pack on its devices: on such a node, the gang
    latest in `order` (queue order) with shares there goes first, until the node packs."""
    if not problem.shared:
        return counts
    counts = dict(counts)
    rank = {g: i for i, g in enumerate(order)}
    while True:
        failing = [
            gangs
            for n, (whole, pods, gangs) in sorted(_node_shares(problem, counts).items())
            if pack(devices(problem.nodes[n], whole), pods) is None
        ]
        if not failing:
            return counts
        del counts[max(failing[0], key=lambda g: rank.get(g, len(rank)))]


class DeviceVars:
    """Device constraints of a CP-SAT model (cpsat.GangModel) on the nodes where shares may go: y[key, d] of
    each fractional variable x[key] on device d, summing to x; each shared device within its room; each whole
    device within WHOLE if opened (opened in index order), and opened devices plus whole-GPU pods within the
    node's whole devices."""

    def __init__(
        self,
        model: cp_model.CpModel,
        problem: Problem,
        x: Mapping[tuple[int, int, int], cp_model.IntVar],
        ub: Mapping[tuple[int, int, int], int],
    ) -> None:
        self.problem = problem
        self.y: dict[tuple[int, int, int], list[tuple[int, cp_model.IntVar]]] = {}  # key -> [(device, var)]
        self.opened: dict[int, list[tuple[int, cp_model.IntVar]]] = {}  # node -> [(device, var)], in index order
        gpu, share = problem.res_index[GPU], problem.res_index[SHARE]
        per_node: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
        for key in x:
            per_node[key[2]].append(key)
        for n, keys in per_node.items():
            fractional = [
                k for k in keys if problem.demand[self._cls(k), share] and not problem.demand[self._cls(k), gpu]
            ]
            if not fractional:
                continue
            node = problem.nodes[n]
            room = devices(node)
            most = sum(ub[k] for k in fractional)
            whole = room.whole[: min(len(room.whole), most)]
            on: dict[int, list[tuple[cp_model.IntVar, int]]] = defaultdict(list)
            for k in fractional:
                milli = share_on(problem.class_pods[self._cls(k)], node)
                options = [d for d, r in room.shared.items() if r >= milli] + list(whole)
                self.y[k] = [(d, model.new_int_var(0, ub[k], f"y_{k[0]}_{k[1]}_{n}_{d}")) for d in options]
                model.add(cp_model.LinearExpr.sum([v for _d, v in self.y[k]]) == x[k])
                for d, v in self.y[k]:
                    on[d].append((v, milli))
            for d, r in room.shared.items():
                if on.get(d):
                    model.add(cp_model.LinearExpr.weighted_sum(*zip(*on[d], strict=True)) <= r)
            opened: list[tuple[int, cp_model.IntVar]] = []
            for d in whole:
                flag = model.new_bool_var(f"open_{n}_{d}")
                if on.get(d):
                    model.add(cp_model.LinearExpr.weighted_sum(*zip(*on[d], strict=True)) <= WHOLE * flag)
                if opened:
                    model.add(opened[-1][1] >= flag)
                opened.append((d, flag))
            self.opened[n] = opened
            whole_keys = [k for k in keys if problem.demand[self._cls(k), gpu]]
            gpus = [int(problem.demand[self._cls(k), gpu]) for k in whole_keys]
            taken = [x[k] for k in whole_keys]
            model.add(
                cp_model.LinearExpr.weighted_sum([*taken, *(f for _d, f in opened)], [*gpus, *([1] * len(opened))])
                <= len(room.whole)
            )

    def _cls(self, key: tuple[int, int, int]) -> int:
        return self.problem.parts[key[0]][key[1]].cls

    def hint(self, counts: Counts) -> dict[cp_model.IntVar, int]:
        """Values of the device variables for `counts` (a placement every node can pack: see `repair`)."""
        values = {v: 0 for options in self.y.values() for _d, v in options}
        values.update({f: 0 for opened in self.opened.values() for _d, f in opened})
        for n, (whole, pods, _gangs) in _node_shares(self.problem, counts).items():
            if n not in self.opened:
                continue
            got = pack(devices(self.problem.nodes[n], whole), pods)
            if got is None:
                continue  # an infeasible hint: CP-SAT repairs it or the stage keeps the placement
            used = set(got.values())
            for d, flag in self.opened[n]:
                values[flag] = int(d in used)
            for name, d in got.items():
                g, p, _i = (int(part) for part in name.split("/"))
                for option, var in self.y.get((g, p, n), ()):
                    if option == d:
                        values[var] += 1
        return values


# --- on the cluster: the placed pods' devices ----------------------------------------------------------------


def finish(cluster: Cluster, placement: Placement) -> Placement:
    """The placement with every placed fractional pod's device (`shares`), less the pods no device holds (their
    gang too when it falls below its minimum)."""
    pods = {p.name: p for g in cluster.gangs for p in g.pods}
    if not any(pods[p].requests.get(SHARE) for p in placement.bindings if p in pods):
        return placement
    gang_of = {p.name: g for g in cluster.gangs for p in g.pods}
    nodes = {n.name: n for n in cluster.nodes}
    expected = workload(list(pods.values()))
    bindings = dict(placement.bindings)
    dropped: dict[str, str] = {}
    while True:
        by_node: dict[str, list[Pod]] = defaultdict(list)
        for pod, node in bindings.items():
            by_node[node].append(pods[pod])
        chosen: dict[str, Share] = {}
        failed: list[tuple[str, str]] = []  # (pod, node)
        for name, on in sorted(by_node.items()):
            whole = sum(int(p.requests.get(GPU, 0)) for p in on)
            asked = {p.name: share_on(p, nodes[name]) for p in on if p.requests.get(SHARE)}
            if not asked:
                continue
            got = pack(devices(nodes[name], whole), list(asked.items()), expected)
            if got is None:  # the lowest-priority, youngest share goes
                failed.append((max(asked, key=lambda p: (-pods[p].priority, pods[p].order, p)), name))
                continue
            chosen.update({p: Share(name, d, asked[p]) for p, d in got.items()})
        if not failed:
            break
        for pod, node in failed:
            gang = gang_of[pod]
            take_off(bindings, gang, pod)
            dropped.setdefault(gang.name, f"GPU shares: no GPU of {node} has the share left")
    return replace(_without(cluster, placement, bindings, dropped), shares=chosen)


def _without(cluster: Cluster, placement: Placement, bindings: dict[str, str], dropped: Mapping[str, str]) -> Placement:
    """The placement with only `bindings` left (gangs taken off give `dropped` as their reason)."""
    if not dropped:
        return placement
    gangs = []
    for g, result in zip(cluster.gangs, placement.gangs, strict=True):
        count = sum(1 for p in g.pods if p.name in bindings)
        if count != result.placed_pods:
            ok = result.placed if g.need == 0 else count >= g.need
            reason = dropped.get(g.name, result.reason)
            result = GangResult(g.name, ok, result.min_member, result.pods, count, result.priority, reason)
        gangs.append(result)
    lost = sum(1 for before, after in zip(placement.gangs, gangs, strict=True) if before.placed and not after.placed)
    status = "FEASIBLE" if lost and placement.status == "OPTIMAL" else placement.status
    return replace(
        placement, bindings=bindings, gangs=tuple(gangs), objective=placement.objective - lost, status=status
    )
