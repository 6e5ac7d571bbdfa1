"""The greedy allocator's variants that seed the search."""

import time
from dataclasses import replace
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gangsolve.solver import GPU, Cluster, Queue, Running
from gangsolve.solver.greedy import (
    DomainRooms,
    OutOfTime,
    greedy,
    most_allocated,
    most_allocated_off_gpus,
    node_scores,
    smallest_first_order,
)
from gangsolve.solver.planning import plan
from gangsolve.solver.problem import Problem
from gangsolve.solver.shares import fragmentation_growth
from tests.builders import gang, node
from tests.solver.test_properties import gangs, nodes
from tests.solver.test_shares import shared_clusters


def placed_names(problem, counts):
    return {problem.gangs[g].name for g in counts}


def test_minimum_first_leaves_extras_until_every_gang_had_its_turn():
    # The elastic gang comes first in queue order; with all its pods it takes every GPU and the second gang
    # cannot start. Its minimum (2) leaves room for the second gang; its extras then find no room.
    cluster = Cluster((node("n", gpus=4),), (gang("elastic", 4, min_member=2, gpus=1), gang("other", 2, gpus=1)))
    problem = Problem(cluster)
    assert placed_names(problem, greedy(problem)) == {"elastic"}
    counts = greedy(problem, minimum_first=True)
    assert placed_names(problem, counts) == {"elastic", "other"}
    assert sum(counts[0].values()) == 2


def test_minimum_first_adds_extras_where_room_is_left():
    cluster = Cluster((node("n", gpus=8),), (gang("elastic", 4, min_member=2, gpus=1), gang("other", 2, gpus=1)))
    problem = Problem(cluster)
    counts = greedy(problem, minimum_first=True)
    assert sum(counts[0].values()) == 4  # both gangs at their minimum, then the 2 extras
    assert sum(counts[1].values()) == 2


def test_cpu_pods_keep_off_gpu_nodes_under_most_allocated():
    # MostAllocated alone packs a small cpu pod onto the smaller (GPU) node, taking memory GPU pods need.
    cluster = Cluster((node("gpu", cpu=8, gpus=4), node("cpu", cpu=64)), (gang("ps", 1, cpu=2),))
    problem = Problem(cluster)
    gpu_node, cpu_node = 0, 1
    assert {n for (_p, n) in greedy(problem, scorer=most_allocated)[0]} == {gpu_node}
    assert {n for (_p, n) in greedy(problem, scorer=most_allocated_off_gpus)[0]} == {cpu_node}


def test_already_placed_gangs_keep_their_nodes_and_capacity():
    cluster = Cluster((node("a", gpus=4), node("b", gpus=4)), (gang("kept", 4, gpus=1), gang("new", 4, gpus=1)))
    problem = Problem(cluster)
    b = problem.node_index["b"]
    counts = greedy(problem, placed={0: {(0, b): 4}})
    assert counts[0] == {(0, b): 4}
    assert {n for (_p, n) in counts[1]} == {problem.node_index["a"]}


@settings(max_examples=80, deadline=None)
@given(nodes(), gangs(), st.sampled_from([node_scores, most_allocated, most_allocated_off_gpus]))
def test_the_walk_keeps_scores_as_scoring_anew_would(nodes_, gangs_, scorer):
    """The walk scores again only the nodes whose free capacity changed (`Scored`); with every node scored anew
    for every gang it places the same pods on the same nodes, in each order the hints walk."""
    cluster = Cluster(tuple(nodes_), tuple(gangs_))
    kept = Problem(cluster)
    anew = Problem(cluster)
    for order in (None, smallest_first_order(kept)):
        with mock.patch("gangsolve.solver.greedy._keeps_scores", return_value=True):  # (however many classes)
            with_kept = greedy(kept, order, scorer=scorer)
        with mock.patch("gangsolve.solver.greedy._scored", return_value=None):
            without = greedy(anew, order, scorer=scorer)
        assert with_kept == without


@st.composite
def racked(draw):
    """Racks of a few 4-GPU nodes, some busy; many co-located gangs of a few shapes (so the walk reads the same
    domains' room again after changing nodes), elastic ones among them, some in a queue whose GPU cap trims
    their extras."""
    nodes_ = [
        node(f"n{i}", cpu=16, gpus=4, labels={"rack": f"r{i % draw(st.integers(1, 3))}"}, used={GPU: busy})
        for i, busy in enumerate(draw(st.lists(st.integers(0, 2), min_size=1, max_size=9)))
    ]
    gangs_ = [replace(gang("first", 2, gpus=1, colocate="rack"), queue="b")]  # fits any node: the room is read
    for g in range(draw(st.integers(1, 16))):
        size, gpus = draw(st.sampled_from(((2, 1), (3, 2), (4, 1))))
        made = gang(f"g{g}", size, min_member=draw(st.integers(1, size)), gpus=gpus, colocate="rack")
        gangs_.append(replace(made, queue=draw(st.sampled_from(("a", "b")))))
    return Cluster(tuple(nodes_), tuple(gangs_), queues=(Queue("a", capability={GPU: draw(st.integers(1, 12))}),))


@settings(max_examples=100, deadline=None)
@given(racked())
def test_the_walk_keeps_domain_rooms_as_summing_anew_would(cluster):
    """Co-located gangs read each domain's room from sums the walk keeps up to date on the nodes it changed (a
    node whose pods a queue's cap took off all again is as it was): at every read, each rack's free capacity
    summed from its nodes' labels (every node here may hold every pod: GPUs, no taint, no selector)."""
    original = DomainRooms.of
    reads = []

    def checked(self: DomainRooms, g: int, free) -> tuple:
        room, size = original(self, g, free)
        racks: dict[str, list[int]] = {}
        for n in cluster.nodes:
            racks.setdefault(n.labels["rack"], []).append(self.problem.node_index[n.name])
        expected = sorted((np.maximum(free[rows], 0).sum(axis=0).tolist(), len(rows)) for rows in racks.values())
        assert sorted(zip(room.tolist(), size.tolist(), strict=True)) == expected
        reads.append(g)
        return room, size

    with mock.patch.object(DomainRooms, "of", checked):
        for kwargs in ({}, {"minimum_first": True}, {"gather": True}):
            greedy(Problem(cluster), **kwargs)
        plan(Problem(cluster), 2)
    assert reads  # every gang is co-located


@st.composite
def crowded(draw):
    """Few nodes, many small gangs of a few shapes (most of one pod, some with runtimes) in two queues, one of
    them capped, and pods running with estimated ends, so that the plan holds reservations: gangs of a shape that
    found no room keep coming, and some are held back."""
    nodes_, running = [], []
    for i in range(draw(st.integers(1, 4))):
        n = node(f"n{i}", cpu=draw(st.sampled_from((4, 8))), gpus=draw(st.sampled_from((0, 2, 4))))
        if n.allocatable.get(GPU) and draw(st.booleans()):
            running.append(Running(n.name, {"cpu": 1000, GPU: 1}, end=draw(st.sampled_from((60.0, 600.0)))))
        nodes_.append(n)
    used = {r.node: r.requests for r in running}
    nodes_ = [replace(n, used=used.get(n.name, {})) for n in nodes_]
    gangs_ = []
    for g in range(draw(st.integers(1, 24))):
        cpu, gpus, size = draw(st.sampled_from(((1, 0, 1), (2, 1, 1), (1, 1, 1), (1, 1, 2), (4, 2, 1), (1, 0, 3))))
        need = draw(st.integers(1, size))
        made = gang(f"g{g}", size, min_member=need, cpu=cpu, gpus=gpus, priority=draw(st.sampled_from((0, 10))))
        runtime = draw(st.sampled_from((None, 30.0, 300.0)))
        gangs_.append(replace(made, queue=draw(st.sampled_from(("a", "b"))), runtime=runtime))
    queues = (Queue("a", capability={"cpu": 1000 * draw(st.integers(1, 12))}), Queue("b"))
    return Cluster(tuple(nodes_), tuple(gangs_), tuple(running), queues=queues)


WALK_SCORERS = [node_scores, most_allocated, most_allocated_off_gpus, fragmentation_growth]


@settings(max_examples=120, deadline=None)
@given(st.one_of(crowded(), shared_clusters()), st.sampled_from(WALK_SCORERS))
def test_the_walk_skips_only_gangs_that_would_not_fit(cluster, scorer):
    """A gang of one pod class that finds too little room makes the walk pass over the later gangs of its class
    and size without looking: the same placement and plan as looking at every gang."""

    def walk() -> tuple[object, ...]:
        problem = Problem(cluster)
        counts, planned = plan(problem, 2)
        return greedy(problem, scorer=scorer), greedy(problem, minimum_first=True), counts, planned.reservations

    skipping = walk()
    with mock.patch("gangsolve.solver.greedy._shape", return_value=None):  # no gang is ever passed over
        assert walk() == skipping


@settings(max_examples=120, deadline=None)
@given(st.one_of(crowded(), shared_clusters()), st.sampled_from(WALK_SCORERS))
def test_the_walk_places_one_pod_gangs_as_the_gang_machinery_would(cluster, scorer):
    """Gangs of one pod take the best-scoring node that holds them, counted and scored again only where the walk
    changed a node: the same placement and plan as placing every gang with place_within."""

    def walk() -> tuple[object, ...]:
        problem = Problem(cluster)
        counts, planned = plan(problem, 2)
        order = smallest_first_order(problem)
        return greedy(problem, scorer=scorer), greedy(problem, order, scorer, True), counts, planned.reservations

    kept = walk()
    with mock.patch("gangsolve.solver.greedy.OnePodWalk.takes", return_value=False):
        assert walk() == kept


def test_a_pod_takes_the_best_fit_a_pod_of_another_class_left():
    """b1 takes the tighter node (n1: 10 cpu), a1 (9 cpu) only fits on n0 and leaves it 3 cpu: b2 then fits best
    on n0, whose score changed since pods like b2 last looked."""
    cluster = Cluster(
        (node("n0", cpu=12), node("n1", cpu=10)),
        (gang("b1", 1, cpu=2), gang("a1", 1, cpu=9), gang("b2", 1, cpu=2)),
    )
    problem = Problem(cluster)
    where = {problem.gangs[g].name: n for g, c in greedy(problem, [0, 1, 2]).items() for (_p, n) in c}
    assert where == {"b1": 1, "a1": 0, "b2": 0}


def test_a_gang_fills_the_first_of_identical_nodes_in_order():
    """Identical nodes all tie: the pods go to the first ones, each filled before the next (2 pods of 3 cpu fit
    on an 8-cpu node), however many nodes tie."""
    problem = Problem(Cluster(tuple(node(f"n{i}", cpu=8) for i in range(6)), (gang("g", 5, cpu=3),)))
    counts = greedy(problem)[0]
    assert {problem.nodes[n].name: k for (_part, n), k in counts.items()} == {"n0": 2, "n1": 2, "n2": 1}


def test_a_walk_past_its_time_is_abandoned_whole():
    """A pass given a clock reading already past is abandoned before it places anything: the cycle does not
    overrun for a hint, and no half-walked placement is mistaken for one."""
    cluster = Cluster((node("n", gpus=8),), tuple(gang(f"g{i}", 1, gpus=1) for i in range(4)))
    problem = Problem(cluster)
    free = problem.free.copy()
    with pytest.raises(OutOfTime):
        greedy(problem, free=free, until=time.perf_counter() - 1)
    assert (free == problem.free).all()
    assert len(greedy(problem, until=time.perf_counter() + 60)) == 4
