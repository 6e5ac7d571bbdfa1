"""What a cycle reads off its nodes, kept from one cycle to the next.

A live cycle's nodes are the last cycle's but for the few that a bind, an exit or a node event changed (the
store keeps every other node's object), yet building a cycle's arrays read every node again: at 16,384 nodes that
was most of a cycle that places one small gang. `table(nodes)` starts from the last table: the static part
(names, capacity, labels, taints, readiness) is kept while no node's changed, and the rows of what pods hold are
read again only for the nodes whose object changed. What it answers depends only on the nodes it is given.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from operator import is_not

import numpy as np

from gangsolve.solver.model import GPU, Node


def _same_statics(a: Node, b: Node) -> bool:
    """Whether two versions of a node differ at most in what pods hold on it (`used`, `gpu_shares`)."""
    return (
        a.name == b.name
        and (a.allocatable is b.allocatable or a.allocatable == b.allocatable)
        and (a.labels is b.labels or a.labels == b.labels)
        and a.taints == b.taints
        and a.unschedulable == b.unschedulable
        and a.ready == b.ready
        and a.gpu_memory == b.gpu_memory
    )


class Statics:
    """What the nodes' static fields give, computed once for as long as they hold (each part on first use)."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.index = {n.name: i for i, n in enumerate(nodes)}
        self.usable = np.array([n.ready and not n.unschedulable for n in nodes], dtype=bool)  # may take pods
        self.resources = frozenset(r for n in nodes for r in n.allocatable)
        self.gpu_memories = sorted({n.gpu_memory for n in nodes if n.gpu_memory})  # MiB per GPU, each size once
        self.most_gpus = max((n.allocatable.get(GPU, 0) for n in nodes), default=0)  # of the widest node
        # The allocatable of usable nodes, per resource: what fair shares divide.
        self.schedulable: dict[str, int] = {}
        for n, usable in zip(nodes, self.usable.tolist(), strict=True):
            if usable:
                for r, q in n.allocatable.items():
                    self.schedulable[r] = self.schedulable.get(r, 0) + q
        self._nodes = nodes
        self._allocatable: dict[tuple[str, ...], np.ndarray] = {}
        self._signatures: dict[tuple[tuple[str, ...], bool], dict[tuple[object, ...], list[int]]] = {}
        self._domains: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()  # (tables of several threads' cycles may share these)

    def allocatable(self, resources: tuple[str, ...]) -> np.ndarray:
        """allocatable[n, r] of node n and `resources[r]` (read only: copy it to change it)."""
        with self._lock:
            if resources not in self._allocatable:
                column = {r: i for i, r in enumerate(resources)}
                out = np.zeros((len(self._nodes), len(resources)), dtype=np.int64)
                for i, node in enumerate(self._nodes):
                    for r, q in node.allocatable.items():
                        if r in column:
                            out[i, column[r]] = q
                out.flags.writeable = False
                self._allocatable[resources] = out
            return self._allocatable[resources]

    def signatures(self, keys: tuple[str, ...], by_name: bool) -> dict[tuple[object, ...], list[int]]:
        """The nodes grouped by what a static constraint reading labels `keys` (and the node's name, if
        `by_name`) can tell apart: cordon, readiness, taints and those labels."""
        with self._lock:
            if (keys, by_name) not in self._signatures:
                groups: dict[tuple[object, ...], list[int]] = {}
                for i, node in enumerate(self._nodes):
                    sig = (
                        node.unschedulable,
                        node.ready,
                        node.taints,
                        tuple(node.labels.get(k) for k in keys),
                        node.name if by_name else None,
                    )
                    groups.setdefault(sig, []).append(i)
                self._signatures[(keys, by_name)] = groups
            return self._signatures[(keys, by_name)]

    def domains(self, key: str) -> np.ndarray:
        """Per node, an integer id of its value for label `key` (-1 where the node lacks the label)."""
        with self._lock:
            if key not in self._domains:
                values: dict[str, int] = {}
                ids = np.full(len(self._nodes), -1, dtype=np.int64)
                for i, node in enumerate(self._nodes):
                    value = node.labels.get(key)
                    if value is not None:
                        ids[i] = values.setdefault(value, len(values))
                ids.flags.writeable = False
                self._domains[key] = ids
            return self._domains[key]


class NodeTable:
    """One cycle's nodes: their statics, and per resource list the amounts pods hold (`used`)."""

    def __init__(self, nodes: Sequence[Node], statics: Statics | None = None) -> None:
        self.nodes = tuple(nodes)
        self.statics = statics or Statics(self.nodes)
        self._used: tuple[tuple[str, ...], np.ndarray] | None = None
        self._shared: np.ndarray | None = None
        self._lock = threading.Lock()

    def used(self, resources: tuple[str, ...]) -> np.ndarray:
        """used[n, r]: what bound pods hold of `resources[r]` on node n (read only)."""
        with self._lock:
            if self._used is None or self._used[0] != resources:
                self._used = (resources, _used_rows(self.nodes, resources, range(len(self.nodes)), None))
            return self._used[1]

    def shared(self) -> np.ndarray:
        """Per node, how many of its GPUs fractional pods hold part of (read only)."""
        with self._lock:
            if self._shared is None:
                self._shared = _shared_rows(self.nodes, range(len(self.nodes)), None)
            return self._shared

    def successor(self, nodes: tuple[Node, ...]) -> NodeTable:
        """The table of `nodes`, from this one where they are the same nodes: only the rows of node objects
        that changed are read again, and the statics kept unless one of those changed them."""
        if nodes is self.nodes:
            return self
        if len(nodes) != len(self.nodes):
            return NodeTable(nodes)
        changed = np.flatnonzero(np.fromiter(map(is_not, nodes, self.nodes), dtype=bool, count=len(nodes))).tolist()
        if not all(_same_statics(nodes[i], self.nodes[i]) for i in changed):
            return NodeTable(nodes)
        return self._copy(nodes, changed)

    def _copy(self, nodes: tuple[Node, ...], changed: list[int]) -> NodeTable:
        table = NodeTable(nodes, self.statics)
        with self._lock:
            if self._used is not None:
                resources, used = self._used
                table._used = (resources, _used_rows(nodes, resources, changed, used))
            if self._shared is not None:
                table._shared = _shared_rows(nodes, changed, self._shared)
        return table


def _used_rows(
    nodes: Sequence[Node], resources: tuple[str, ...], rows: Sequence[int], base: np.ndarray | None
) -> np.ndarray:
    """`base` (or zeros) with the rows `rows` read from the nodes' `used`."""
    if base is not None and not rows:
        return base
    column = {r: i for i, r in enumerate(resources)}
    out = np.zeros((len(nodes), len(resources)), dtype=np.int64) if base is None else base.copy()
    for i in rows:
        row = out[i]
        row[:] = 0
        for r, q in nodes[i].used.items():
            if r in column:
                row[column[r]] = q
    out.flags.writeable = False
    return out


def _shared_rows(nodes: Sequence[Node], rows: Sequence[int], base: np.ndarray | None) -> np.ndarray:
    """`base` (or zeros) with the rows `rows` read from the nodes' `gpu_shares`: how many GPUs hold shares."""
    if base is not None and not rows:
        return base
    out = np.zeros(len(nodes), dtype=np.int64) if base is None else base.copy()
    for i in rows:
        out[i] = len(nodes[i].gpu_shares)
    out.flags.writeable = False
    return out


_last: NodeTable | None = None
_last_lock = threading.Lock()


def _unlocked() -> None:
    """A forked child (pools.py) starts with no lock held: another thread of its parent may have held it."""
    global _last_lock
    _last_lock = threading.Lock()


os.register_at_fork(after_in_child=_unlocked)


def table(nodes: Sequence[Node]) -> NodeTable:
    """The table of `nodes`, from the last one asked for (the last cycle's) where they share nodes."""
    global _last
    nodes = tuple(nodes)
    with _last_lock:
        last = _last
    current = NodeTable(nodes) if last is None else last.successor(nodes)
    with _last_lock:
        _last = current
    return current


def schedulable(nodes: Sequence[Node]) -> dict[str, int]:
    """The allocatable of nodes that can take pods (Ready, not cordoned), per resource: what fair shares divide
    (read only: every cycle on the same nodes shares it)."""
    return table(nodes).statics.schedulable
