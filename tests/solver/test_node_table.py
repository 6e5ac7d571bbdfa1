"""The node table carried from cycle to cycle answers exactly as one read afresh from the same nodes, whatever
changed in between: what pods hold, labels, taints, cordons, readiness, nodes added or gone."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gangsolve.solver import GPU, Cluster, Gang, Node, Taint, node_table
from gangsolve.solver.node_table import NodeTable
from gangsolve.solver.problem import Problem
from tests.builders import node, pod

RESOURCES = ("cpu", "memory", GPU, "pods")


def changed(base: Node, kind: int, amount: int) -> Node:
    """`base` after one event of `kind`."""
    if kind == 0:
        return replace(base, used={"cpu": amount * 100, GPU: amount % 3, "pods": amount % 5})
    if kind == 1:
        return replace(base, labels={**base.labels, "rack": f"r{amount % 3}"})
    if kind == 2:
        return replace(base, taints=(Taint("dedicated", str(amount % 2)),))
    if kind == 3:
        return replace(base, unschedulable=not base.unschedulable)
    if kind == 4:
        return replace(base, ready=not base.ready)
    if kind == 5:
        return replace(base, gpu_shares={0: amount * 40} if amount else {})
    return replace(base, allocatable={**base.allocatable, GPU: amount % 9})


events = st.lists(
    st.lists(st.tuples(st.integers(0, 11), st.integers(0, 6), st.integers(0, 20)), max_size=4), min_size=1, max_size=6
)


def expected_used(nodes: tuple[Node, ...]) -> np.ndarray:
    return np.array([[n.used.get(r, 0) for r in RESOURCES] for n in nodes], dtype=np.int64).reshape(-1, len(RESOURCES))


@settings(max_examples=60, deadline=None)
@given(events, st.booleans())
def test_a_carried_table_reads_as_a_fresh_one(cycles, resize):
    nodes = tuple(node(f"n{i}", gpus=8, labels={"rack": f"r{i % 2}"}) for i in range(12))
    carried = NodeTable(nodes)
    carried.used(RESOURCES)
    carried.shared()
    for cycle, edits in enumerate(cycles):
        out = list(nodes)
        for i, kind, amount in edits:
            out[i % len(out)] = changed(out[i % len(out)], kind, amount)
        if resize and cycle % 2:
            out = out[:-1]
        nodes = tuple(out)
        carried = carried.successor(nodes)
        fresh = NodeTable(nodes)
        assert np.array_equal(carried.used(RESOURCES), expected_used(nodes))
        assert np.array_equal(carried.shared(), fresh.shared())
        assert carried.statics.index == {n.name: i for i, n in enumerate(nodes)}
        assert np.array_equal(carried.statics.allocatable(RESOURCES), fresh.statics.allocatable(RESOURCES))
        assert np.array_equal(carried.statics.usable, [n.ready and not n.unschedulable for n in nodes])
        assert np.array_equal(carried.statics.domains("rack"), fresh.statics.domains("rack"))
        assert carried.statics.signatures(("rack",), False) == fresh.statics.signatures(("rack",), False)
        assert carried.statics.schedulable == fresh.statics.schedulable


@settings(max_examples=30, deadline=None)
@given(events)
def test_a_cycle_after_others_builds_the_problem_a_first_cycle_would(cycles):
    """Problem reads the table the last cycle left: its free capacity and eligibility are those a process that
    never ran a cycle before builds from the same cluster."""
    nodes = tuple(node(f"n{i}", gpus=8, labels={"rack": f"r{i % 2}"}) for i in range(12))
    gang = Gang("ns/g", tuple(pod(f"p{i}", gpus=2, node_selector={"rack": "r1"}) for i in range(3)), 3)
    for edits in cycles:
        out = list(nodes)
        for i, kind, amount in edits:
            out[i % len(out)] = changed(out[i % len(out)], kind, amount)
        nodes = tuple(out)
        warm = Problem(Cluster(nodes, (gang,)))
        node_table._last = None  # as in a new process
        cold = Problem(Cluster(nodes, (gang,)))
        assert warm.resources == cold.resources
        assert np.array_equal(warm.free, cold.free)
        assert np.array_equal(warm.allocatable, cold.allocatable)
        assert np.array_equal(warm.eligible, cold.eligible)
        assert np.array_equal(warm.fit, cold.fit)
