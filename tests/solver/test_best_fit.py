"""The greedy allocator's placement of one gang is best fit pod by pod: each pod to the node the scorer ranks
first among those that hold it, the gang's own nodes before any other. The allocator gets there in batches
and sorts (it scores the nodes with the fewest free GPUs first, and fills a node at once); this oracle walks
every node for every pod, as the rule reads."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsolve.solver import Cluster
from gangsolve.solver.explain import _fits_in
from gangsolve.solver.greedy import most_allocated_off_gpus, node_scores, place_colocated, place_gang
from gangsolve.solver.problem import Problem
from tests.solver.test_properties import gangs, nodes


def best_fit(problem: Problem, g: int, free: np.ndarray, scorer) -> dict | None:
    """Pod by pod: the nodes that hold the pod (eligible, every requested resource free), the gang's nodes
    first, then the lowest score, then the lowest index."""
    counts: dict[tuple[int, int], int] = {}
    used: set[int] = set()
    parts = sorted(enumerate(problem.parts[g]), key=lambda ip: (-ip[1].pods[0].priority, ip[0]))
    for p, part in parts:
        demand = problem.demand[part.cls]
        for _pod in part.pods:
            holding = [
                n for n in range(len(problem.nodes)) if problem.eligible[part.cls, n] and (free[n] >= demand).all()
            ]
            if not holding:
                break
            n = min(holding, key=lambda n: (n not in used, float(scorer(problem, part.cls, free, [n])[0]), n))
            free[n] -= demand
            used.add(n)
            counts[(p, n)] = counts.get((p, n), 0) + 1
    return counts if sum(counts.values()) >= max(problem.gangs[g].need, 1) else None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes(), gangs(), st.sampled_from((node_scores, most_allocated_off_gpus)))
def test_each_gang_is_placed_best_fit_pod_by_pod(node_list, gang_list, scorer):
    problem = Problem(Cluster(tuple(node_list), tuple(gang_list)))
    free = problem.free.copy()  # gangs one after another, as a greedy pass takes them
    for g in range(len(problem.gangs)):
        before = free.copy()
        expected_free = free.copy()
        expected = best_fit(problem, g, expected_free, scorer)
        placed = place_gang(problem, g, free, scorer=scorer)
        assert placed == expected
        # A gang that does not fit takes nothing; one that does takes what its pods ask for.
        assert (free == (before if expected is None else expected_free)).all()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes(), gangs(), st.data())
def test_telling_whether_a_gang_fits_alone_answers_as_placing_it_would(node_list, gang_list, data):
    """A waiting gang's reason says whether it fits the free capacity on its own; counts decide it where they
    can (the reason costs a placement per gang otherwise), with the answer placing it gives."""
    problem = Problem(Cluster(tuple(node_list), tuple(gang_list)))
    room = problem.free.copy()
    for g in range(len(problem.gangs)):  # the room of a pass that placed some gangs already, too
        placed = (place_colocated if problem.gangs[g].colocate else place_gang)(problem, g, room.copy())
        assert _fits_in(problem, g, room) == (placed is not None)
        assert _fits_in(problem, g, problem.free, problem.fit) == _fits_in(problem, g, problem.free)
        if placed is not None and data.draw(st.booleans()):
            room = room.copy()
            place_gang(problem, g, room)
