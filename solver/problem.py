"""One scheduling cycle as arrays: free capacity per node, pod classes, and where each class may go.

Pods of a gang with the same requests and constraints are one *pod class*; the solver decides how many pods of
a class go to a node, never which pod, which keeps the model small. Static constraints (cordon, readiness,
taints, selectors, affinity) are evaluated once per distinct node signature, not per pod x node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TypeAlias

import numpy as np

from gangsolve.solver import node_table, queues
from gangsolve.solver.constraints.affinity import affinity_holds, label_keys, reads_node_name, selector_mismatch
from gangsolve.solver.constraints.taints import untolerated
from gangsolve.solver.model import (
    GPU,
    GPU_MEMORY_LABEL,
    PODS,
    SHARE,
    WHOLE,
    Cluster,
    Gang,
    Level,
    Node,
    Pod,
    SolveConfig,
)

DEVICE = "gangsolve.io/device-gpu"  # + index: a column of what is left on that GPU of each node (Problem._shares)

# Node rows an array operation reads: all of them, or some.
Rows: TypeAlias = slice | Sequence[int] | np.ndarray


def rows_of(values: np.ndarray, rows: Rows) -> np.ndarray:
    """values[rows]: take() gathers rows several times faster than indexing with them."""
    return values[rows] if isinstance(rows, slice) else values.take(rows, axis=0)


# A placement in the problem's indices: gang_counts[(part, node)] = pods of that gang part on that node;
# counts[gang] = that gang's gang_counts.
GangCounts: TypeAlias = dict[tuple[int, int], int]
Counts: TypeAlias = dict[int, GangCounts]


@dataclass(frozen=True)
class Devices:
    """One node's devices for new shares: shared ones (index -> milli left) and the indices of whole free
    ones, lowest first."""

    shared: Mapping[int, int]
    whole: tuple[int, ...]


def devices(node: Node, whole_now: int = 0) -> Devices:
    """`node`'s devices once `whole_now` whole GPUs more are taken. Devices whole-GPU pods hold are counted, not
    named; the free ones are the lowest indices holding no share. A share on an unnamed device (a negative
    index) leaves no room: its device cannot be named to a new pod."""
    gpus = int(node.allocatable.get(GPU, 0))
    taken = node.gpu_shares
    free = gpus - int(node.used.get(GPU, 0)) - len(taken) - whole_now
    whole = tuple(i for i in range(gpus) if i not in taken)[: max(free, 0)]
    return Devices({i: WHOLE - t for i, t in taken.items() if i >= 0 and t < WHOLE}, whole)


def exclusion(pod: Pod, node: Node) -> str | None:
    """Why `node` can never take `pod` whatever its free capacity, or None when it can."""
    if node.unschedulable:
        return "cordoned"
    if not node.ready:
        return "not Ready"
    taint = untolerated(pod.tolerations, node.taints)
    if taint is not None:
        return f"taint {taint}"
    mismatch = selector_mismatch(pod.node_selector, node.labels)
    if mismatch is not None:
        return f"nodeSelector {mismatch}"
    if not affinity_holds(pod.affinity, node.name, node.labels):
        return "required node affinity"
    if pod.gpu_memory and node.gpu_memory < pod.gpu_memory:
        return f"GPU memory below {pod.gpu_memory} MiB" if node.gpu_memory else f"no label {GPU_MEMORY_LABEL}"
    return None


def eligibility(
    statics: node_table.Statics, nodes: Sequence[Node], pods: Sequence[Pod]
) -> tuple[np.ndarray, list[dict[str, list[int]]]]:
    """Per pod of `pods` (one per class), the nodes its static constraints let it use (`eligible[c, n]`), and
    the nodes each constraint excluded (`excluded[c][reason]`). Evaluated once per node signature."""
    eligible = np.zeros((len(pods), len(nodes)), dtype=bool)
    excluded: list[dict[str, list[int]]] = []
    for c, pod in enumerate(pods):
        keys = tuple(
            sorted(label_keys(pod.node_selector, pod.affinity) | ({GPU_MEMORY_LABEL} if pod.gpu_memory else set()))
        )
        by_reason: dict[str, list[int]] = {}
        for members in statics.signatures(keys, reads_node_name(pod.affinity)).values():
            why = exclusion(pod, nodes[members[0]])
            if why is None:
                eligible[c, members] = True
            else:
                by_reason.setdefault(why, []).extend(members)
        excluded.append(by_reason)
    return eligible, excluded


def eligible_to_any(eligible: np.ndarray, classes: Iterable[int], rows: Rows = slice(None)) -> np.ndarray:
    """The nodes (of `rows`) that a pod of any of `classes` may use: those rows of `eligible` (class x node),
    or'ed."""
    picked = np.fromiter(classes, dtype=np.int64)
    # Only the rows and nodes asked for are gathered (the walk asks for a few changed nodes at a time).
    sub = eligible[picked][:, rows] if isinstance(rows, slice) else eligible[np.ix_(picked, np.asarray(rows))]
    return np.asarray(sub.any(axis=0))


def static_key(pod: Pod) -> tuple[object, ...]:
    """What `exclusion` reads of a pod: pods alike in it may use the same nodes."""
    return (tuple(sorted(pod.node_selector.items())), pod.affinity, pod.tolerations, pod.gpu_memory)


def _class_key(pod: Pod) -> tuple[object, ...]:
    return (tuple(sorted(pod.requests.items())), *static_key(pod))


@dataclass(frozen=True)
class GangPart:
    """The pending pods of one gang that share a pod class, in the order they should be placed."""

    cls: int
    pods: tuple[Pod, ...]


class Problem:
    """Arrays for one cycle. `free[n, r]` is node n's free amount of `resources[r]`; `demand[c, r]` one pod of
    class c's request; `eligible[c, n]` whether class c may use node n at all; `fit[c, n]` how many pods of
    class c node n holds on its own."""

    def __init__(self, cluster: Cluster, order: str = SolveConfig.order) -> None:
        self.cluster = cluster
        self.order = order  # how gangs of one level and fair share are ordered (SolveConfig.order)
        self.nodes: Sequence[Node] = cluster.nodes
        self.gangs: Sequence[Gang] = queues.rank(cluster)  # with their fair-share tier set
        self.table = node_table.table(self.nodes)
        self.node_index = self.table.statics.index
        self.shared = False  # some pending pod asks for a GPU share (the SHARE column; shares.py's devices)
        self.devices = np.zeros(0, dtype=np.int64)  # the columns of the GPUs of each node (with shares pending)
        self._members: dict[str, list[np.ndarray]] = {}  # label key -> nodes per value id
        self._grouped: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # label key -> (nodes by value id, starts)
        self._positions: dict[str, np.ndarray] = {}  # label key -> each node's index in its grouped order
        self._nested: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}  # (outer, inner) -> see `nested`
        self._fitting: dict[int, np.ndarray] = {}
        # Per (pod class, scorer): what the greedy walk's nodes hold and score, kept up to date by it (greedy.py).
        self.scored: dict[tuple[int, object], object] = {}

        names = {PODS, GPU, *cluster.gpus, *self.table.statics.resources}
        for gang in self.gangs:
            for pod in gang.pods:
                names.update(pod.requests)
        # With shares pending, one column per GPU of a node (the most any node has): what is left on it.
        gpus = max((int(n.allocatable.get(GPU, 0)) for n in self.nodes), default=0) if SHARE in names else 0
        names.update(f"{DEVICE}{d}" for d in range(gpus))
        self.resources = sorted(names)
        self.res_index = {r: i for i, r in enumerate(self.resources)}
        # 1 on the resources counted as GPUs: `x @ gpus` is the GPUs in a row of any per-resource array.
        self.gpus = np.zeros(len(self.resources), dtype=np.int64)
        self.gpus[[self.res_index[r] for r in {GPU, *cluster.gpus}]] = 1

        shape = (len(self.nodes), len(self.resources))
        # (SHARE is in the resources only when a pending pod asks for one; else the GPU column counts it)
        self.allocatable: np.ndarray = self.table.statics.allocatable(tuple(self.resources)).copy()
        self.free: np.ndarray = self.allocatable - self.table.used(tuple(self.resources))
        if SHARE in self.res_index:
            self._shares()
        elif self.table.shared().any():
            # A GPU that fractional pods hold part of is not whole: whole-GPU pods never take it.
            self.free[:, self.res_index[GPU]] -= self.table.shared()
        self.inv_allocatable = np.divide(1.0, self.allocatable, out=np.zeros(shape), where=self.allocatable > 0)

        # Pod classes, shared across gangs; parts keep each gang's pods per class in placement order.
        index: dict[tuple[object, ...], int] = {}
        self.class_pods: list[Pod] = []  # a representative pod per class
        self.parts: list[tuple[GangPart, ...]] = []
        for gang in self.gangs:
            by_class: dict[int, list[Pod]] = {}
            for pod in gang.pods:
                key = _class_key(pod)
                if key not in index:
                    index[key] = len(self.class_pods)
                    self.class_pods.append(pod)
                by_class.setdefault(index[key], []).append(pod)
            self.parts.append(
                tuple(
                    GangPart(c, tuple(sorted(ps, key=lambda p: (-p.priority, p.order, p.name))))
                    for c, ps in sorted(by_class.items())
                )
            )

        self.demand = np.zeros((len(self.class_pods), len(self.resources)), dtype=np.int64)
        for c, pod in enumerate(self.class_pods):
            for r, q in pod.requests.items():
                self.demand[c, self.res_index[r]] = q
            self.demand[c, self.res_index[PODS]] = max(1, pod.requests.get(PODS, 1))
        self.share_of = np.zeros(len(self.class_pods), dtype=np.int64)  # a fractional pod's share, per class
        if SHARE in self.res_index:  # a whole GPU is all of a device's share
            gpu, share = self.res_index[GPU], self.res_index[SHARE]
            self.share_of = np.where(self.demand[:, gpu] == 0, self.demand[:, share], 0)
            self.demand[:, share] += WHOLE * self.demand[:, gpu]
        # Per class, the columns its pod asks for (never none: every pod takes a pod slot) and how much of each.
        self._asked = [(np.flatnonzero(d), d[np.flatnonzero(d)]) for d in self.demand]
        # Per class, the nodes each static constraint excluded (`excluded[c][reason]`), which explanations read.
        self.eligible, self.excluded = eligibility(self.table.statics, self.nodes, self.class_pods)
        self.floor = self._floors()
        self._caps(cluster)
        self.gpu_demand = self.demand @ self.gpus  # per class
        self.gpu_allocatable = self.allocatable @ self.gpus  # per node
        self.gpu_columns = np.flatnonzero(self.gpus)
        # Per class, the resource its pod asks most of relative to what nodes have: one column that rules out
        # most full nodes before the whole check (`candidates`).
        mean = np.maximum(self.allocatable.mean(axis=0), 1) if len(self.nodes) else np.ones(len(self.resources))
        self.scarcest = np.argmax(self.demand / mean, axis=1) if self.class_pods else np.zeros(0, dtype=np.int64)
        self.fit = (
            np.stack([self.fits(c, self.free) for c in range(len(self.class_pods))])
            if self.class_pods
            else (np.zeros((0, len(self.nodes)), dtype=np.int64))
        )

    def _shares(self) -> None:
        """Pending pods ask for GPU shares: column SHARE is milli-GPU, what whole GPUs and shares take together.
        Per node: the GPU column counts whole devices (those holding no share), SHARE the whole devices' milli
        plus what is left on the shared ones. A share taking part of one device, never of two, is the device
        model's (solver/shares.py); these two columns are what every stage sees of it."""
        gpu, share = self.res_index[GPU], self.res_index[SHARE]
        self.free[:, gpu] -= self.table.shared()
        left = [sum(max(WHOLE - t, 0) for d, t in node.gpu_shares.items() if d >= 0) for node in self.nodes]
        self.allocatable[:, share] = WHOLE * self.allocatable[:, gpu]
        self.free[:, share] = WHOLE * np.maximum(self.free[:, gpu], 0) + np.array(left, dtype=np.int64)
        self.shared = True
        # What is left on each GPU, so that the greedy passes put each share on one GPU (`take`): a shared GPU
        # its room, a whole free one WHOLE, a GPU whole-GPU pods hold (or whose share is unnamed) 0.
        gpus = sum(1 for r in self.resources if r.startswith(DEVICE))
        self.devices = np.array([self.res_index[f"{DEVICE}{d}"] for d in range(gpus)], dtype=np.int64)
        for i, node in enumerate(self.nodes):
            room = devices(node)
            for d, r in room.shared.items():
                self.allocatable[i, self.devices[d]] = WHOLE
                self.free[i, self.devices[d]] = r
            for d in room.whole:
                self.allocatable[i, self.devices[d]] = self.free[i, self.devices[d]] = WHOLE

    def _caps(self, cluster: Cluster) -> None:
        """Rows of `cap_left`, what may still be taken per resource: one per queue (capability less what it and
        the queues under it hold), then one per priority of gangs that would borrow (the free capacity less the
        minimums of the possible gangs within their queue's fair share at that priority or above: capacity a
        queue below its share waits for is not lent, but a higher priority is never held back for a lower one).
        A borrowing gang draws from its priority's row and those above it (what it takes is gone for them too).
        `queue_rows[g]`: the rows of gang g's queue and every queue above it; `cap_rows[g]`: the rows gang g
        draws from."""
        self.queue_names, by_queue = queues.capability_left(cluster, self.gangs, self.resources)
        row = {name: i for i, name in enumerate(self.queue_names)}
        self.queue_of = np.array([row[g.queue] for g in self.gangs], dtype=np.int64)
        tree = queues.Tree(queues.queues_of(cluster))
        self.queue_rows = [
            tuple(row[q] for q in reversed(tree.path(g.queue)) if q in row) or (row[g.queue],) for g in self.gangs
        ]
        self.borrow_row = len(self.queue_names)  # the first row of borrowing gangs
        borrowing = sorted({gang.priority for gang in self.gangs if not gang.fair})
        borrow = np.full((max(len(borrowing), 1), len(self.resources)), queues.UNLIMITED, dtype=np.int64)
        if borrowing:
            free = np.maximum(self.free[self.table.statics.usable], 0).sum(axis=0)
            owed = [g for g, gang in enumerate(self.gangs) if gang.fair and gang.need > 0 and self._may_fit(g)]
            for i, priority in enumerate(borrowing):
                borrow[i] = free - self.floor[[g for g in owed if self.gangs[g].priority >= priority]].sum(axis=0)
        self.cap_left = np.vstack([by_queue, borrow])
        self.capped: np.ndarray = np.any(self.cap_left < queues.UNLIMITED, axis=1)
        self.cap_rows = [
            self.queue_rows[g]
            if gang.fair
            else (*self.queue_rows[g], *(self.borrow_row + i for i, p in enumerate(borrowing) if p >= gang.priority))
            for g, gang in enumerate(self.gangs)
        ]

    def _may_fit(self, g: int) -> bool:
        """Whether gang g's eligible nodes, were they empty, would hold its minimum (so it is worth waiting for)."""
        room = sum(int(np.minimum(self.fits(p.cls, self.allocatable), len(p.pods)).sum()) for p in self.parts[g])
        return room >= self.gangs[g].need

    @cached_property
    def alone(self) -> np.ndarray:
        """Per gang, the pods its eligible nodes hold of it in the cycle's free capacity, node by node and part
        by part (each node counted for each part, so an upper bound on what it can place)."""
        held: dict[tuple[int, int], int] = {}  # (class, pods) -> what the nodes hold: gangs share their parts' shapes
        for parts in self.parts:
            for p in parts:
                if (p.cls, len(p.pods)) not in held:
                    held[(p.cls, len(p.pods))] = int(np.minimum(self.fit[p.cls], len(p.pods)).sum())
        return np.array([sum(held[(p.cls, len(p.pods))] for p in parts) for parts in self.parts], dtype=np.int64)

    def fitting(self, cls: int) -> np.ndarray:
        """The nodes that hold a pod of class `cls` with nothing else placed (free capacity only shrinks)."""
        if cls not in self._fitting:
            self._fitting[cls] = np.flatnonzero(self.fit[cls] > 0)
        return self._fitting[cls]

    def candidates(self, cls: int, free: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The nodes of `rows` with room for a pod of class `cls` in its scarcest resource: a superset of those
        that hold one, found reading one column (a busy cluster's nodes are mostly full)."""
        r = self.scarcest[cls]
        room: np.ndarray = rows[free[rows, r] >= self.demand[cls, r]]
        return room

    def bindings(self, g: int, counts: Mapping[tuple[int, int], int]) -> dict[str, str]:
        """Pod -> node for gang g, from pods per (part, node): each part's pods in order (highest priority
        first) onto its nodes in order."""
        out = {}
        for p, part in enumerate(self.parts[g]):
            pods = iter(part.pods)
            for n in sorted(n for (q, n) in counts if q == p):
                for _ in range(counts[(p, n)]):
                    out[next(pods).name] = self.nodes[n].name
        return out

    def fits(self, cls: int, free: np.ndarray, rows: Rows = slice(None)) -> np.ndarray:
        """How many pods of class `cls` each node (of `rows`) holds given `free`; 0 where not eligible."""
        asked, need = self._asked[cls]
        # Rows first, then columns: gathering a few columns of thousands of rows this way is twice as fast.
        sub = rows_of(free, rows)
        count = (np.maximum(sub[:, asked], 0) // need).min(axis=1)
        if self.shared and self.share_of[cls]:  # each share on one GPU: what fits GPU by GPU
            count = np.minimum(count, (np.maximum(sub[:, self.devices], 0) // self.share_of[cls]).sum(axis=1))
        return np.where(self.eligible[cls][rows], count, 0)

    def take(self, cls: int, free: np.ndarray, n: int, k: int) -> None:
        """Take k pods of class `cls` from node n's `free`; with shares pending, on its GPUs too: each share on
        the tightest GPU that holds it (a whole GPU opened for it is no longer whole), whole-GPU pods on whole
        GPUs."""
        free[n] -= self.demand[cls] * k
        if not self.shared:
            return
        gpus, milli = int(self.demand[cls, self.res_index[GPU]]), int(self.share_of[cls])
        left = free[n, self.devices]
        for _ in range(k * (gpus if gpus else bool(milli))):
            room = np.where(left >= (milli or WHOLE), left, WHOLE + 1)
            d = int(np.argmin(room) if milli else np.argmax(left == WHOLE))
            if left[d] == WHOLE and milli:
                free[n, self.res_index[GPU]] -= 1
            left[d] -= milli or WHOLE
        free[n, self.devices] = left

    def _floors(self) -> np.ndarray:
        """floor[g, r]: the least of resource r any placement of gang g's minimum consumes (per resource, the
        `need` smallest requests among its pending pods). Summed over placed gangs it cannot exceed the free
        total, which gives the model knapsack cuts and the solver a cheap upper bound."""
        floor = np.zeros((len(self.gangs), len(self.resources)), dtype=np.int64)
        for g, gang in enumerate(self.gangs):
            if not gang.pods or gang.need == 0:
                continue
            if len(self.parts[g]) == 1:  # one class: its request times the pods the minimum takes
                part = self.parts[g][0]
                floor[g] = self.demand[part.cls] * min(gang.need, len(part.pods))
                continue
            rows = np.concatenate(
                [np.repeat(self.demand[part.cls][None, :], len(part.pods), axis=0) for part in self.parts[g]]
            )
            floor[g] = np.sort(rows, axis=0)[: gang.need].sum(axis=0)
        return floor

    def members(self, key: str) -> list[np.ndarray]:
        """Per value id of label `key` (`domains`), its nodes in ascending order."""
        if key not in self._members:
            order, starts = self.grouped(key)
            self._members[key] = np.split(order, starts[1:]) if len(order) else []
        return self._members[key]

    def grouped(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """The nodes labelled `key`, by value id (ascending within each), and where each value's nodes start:
        per-domain sums over any node array are one `np.add.reduceat`."""
        if key not in self._grouped:
            ids = self.domains(key)
            order = np.argsort(ids, kind="stable")
            order = order[ids[order] >= 0]
            starts = np.searchsorted(ids[order], np.arange(int(ids.max(initial=-1)) + 1))
            self._grouped[key] = (order, starts)
        return self._grouped[key]

    def grouped_position(self, key: str) -> np.ndarray:
        """Per node, its index in `grouped(key)`'s order of nodes (-1 where it lacks the label)."""
        if key not in self._positions:
            order, _starts = self.grouped(key)
            position = np.full(len(self.nodes), -1, dtype=np.int64)
            position[order] = np.arange(len(order))
            self._positions[key] = position
        return self._positions[key]

    def nested(self, outer: str, inner: str) -> tuple[np.ndarray, np.ndarray]:
        """The domains of label `inner` within each domain of `outer`: per node, the id of its (outer, inner)
        pair (-1 where the node lacks `outer`; a node without `inner` is a pair of its own), and per pair id,
        its `outer` value id. Per-pair sums over any node array are one `np.bincount`."""
        if (outer, inner) not in self._nested:
            out, ins = self.domains(outer), self.domains(inner)
            ins = np.where(ins >= 0, ins, int(ins.max(initial=-1)) + 1 + np.arange(len(ins)))
            labelled = out >= 0
            pairs, pair_of = np.unique(np.stack([out[labelled], ins[labelled]]), axis=1, return_inverse=True)
            node_pair = np.full(len(self.nodes), -1, dtype=np.int64)
            node_pair[labelled] = pair_of.ravel()
            self._nested[(outer, inner)] = (node_pair, pairs[0])
        return self._nested[(outer, inner)]

    def domains(self, key: str) -> np.ndarray:
        """Per node, an integer id of its value for label `key` (-1 where the node lacks the label)."""
        return self.table.statics.domains(key)

    def members_domain(self, g: int) -> int | None:
        """The domain of co-located gang g's required level its bound members run in, which its pending pods
        must join: None where none of its members' nodes is in the cluster (any one domain will do), -1 where
        they already disagree or run on a node without the label (nothing pending can repair that)."""
        gang = self.gangs[g]
        domain = self.domains(gang.colocate or "")
        fixed = {int(domain[self.node_index[n]]) for n in gang.bound_nodes if n in self.node_index}
        if not fixed:
            return None
        return fixed.pop() if len(fixed) == 1 else -1

    def domains_holding(self, g: int, within: np.ndarray | None = None) -> np.ndarray:
        """The domains of co-located gang g's required level whose nodes (of `within`, a node mask; all when None)
        hold its minimum, pods counted node by node; only its bound members' domain where it has one."""
        gang = self.gangs[g]
        domain = self.domains(gang.colocate or "")
        labelled = domain >= 0 if within is None else within & (domain >= 0)
        size = int(domain.max()) + 1 if labelled.any() else 0
        room = np.zeros(size)
        for part in self.parts[g]:
            room += np.bincount(
                domain[labelled], np.minimum(self.fit[part.cls, labelled], len(part.pods)), minlength=size
            )
        ids = np.flatnonzero(room >= gang.need)
        fixed = self.members_domain(g)  # -1 (members that disagree) matches no domain
        return ids if fixed is None else ids[ids == fixed]

    def gang_priority_levels(self) -> list[Level]:
        """Every gang's level (priority, fair-share tier, starving), highest first."""
        return sorted({g.level for g in self.gangs}, reverse=True)
