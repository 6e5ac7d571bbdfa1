"""The upper bound on gangs placed: it must hold for every placement at least as good in priority order, which
the property test checks against every placement of small clusters, enumerated and judged by the validator."""

import itertools
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsolve.solver import Cluster, Gang, SolveConfig, bound, solve, validate
from gangsolve.solver.bound import Relaxation, level_bounds
from gangsolve.solver.cpsat import possible_gangs
from gangsolve.solver.problem import Problem
from tests.builders import gang, node, pod


def bounds_of(cluster, found, mip=False):
    problem = Problem(cluster)
    levels = problem.gang_priority_levels()
    most = {level: sum(1 for g in possible_gangs(problem) if problem.gangs[g].level == level) for level in levels}
    return level_bounds(Relaxation(problem), {level: found.get(level, 0) for level in levels}, most, 10.0, mip)


def test_fragmented_gpus_hold_one_4_gpu_pod_per_node_not_one_and_a_half():
    # Three nodes with 6 of 8 GPUs free: 18 GPUs for two gangs of 2 x 4 GPUs (16), but each node holds one such
    # pod, so only one gang fits. A bound on free totals alone would say 2.
    busy = [node(f"n{i}", gpus=8) for i in range(3)]
    nodes = [type(n)(n.name, n.allocatable, n.labels, used={"nvidia.com/gpu": 2, "pods": 1}) for n in busy]
    cluster = Cluster(tuple(nodes), (gang("a", 2, gpus=4), gang("b", 2, gpus=4)))
    for mip in (False, True):
        bounds, total = bounds_of(cluster, {}, mip)
        assert bounds == {(0, 0, 0): 1}
        assert total == 1


def test_co_located_gangs_compete_for_the_one_domain_that_holds_them():
    # Rack a (2 x 8 GPUs) holds a gang of 3 x 4 GPUs; rack b (2 x 4 GPUs) holds none. Free totals hold both.
    nodes = [node(f"a{i}", gpus=8, labels={"rack": "a"}) for i in range(2)]
    nodes += [node(f"b{i}", gpus=4, labels={"rack": "b"}) for i in range(2)]
    gangs = [gang(name, 3, gpus=4, colocate="rack") for name in ("x", "y")]
    bounds, total = bounds_of(Cluster(tuple(nodes), tuple(gangs)), {})
    assert bounds == {(0, 0, 0): 1}
    assert total == 1


def test_past_the_most_domain_options_the_co_located_rows_are_left_out_and_the_bound_loosens():
    # The clusters of the test above: without the rows of each rack, slot cuts alone hold both gangs (six
    # 4-GPU slots for six pods), a looser bound but still one (the property test checks it both ways).
    nodes = [node(f"a{i}", gpus=8, labels={"rack": "a"}) for i in range(2)]
    nodes += [node(f"b{i}", gpus=4, labels={"rack": "b"}) for i in range(2)]
    gangs = [gang(name, 3, gpus=4, colocate="rack") for name in ("x", "y")]
    with mock.patch.object(bound, "MOST_DOMAIN_OPTIONS", 1):  # two options, one per gang
        bounds, total = bounds_of(Cluster(tuple(nodes), tuple(gangs)), {})
    assert bounds == {(0, 0, 0): 2}
    assert total == 2


def test_levels_below_an_open_one_are_bounded_with_only_the_levels_above_held():
    # Two 4-GPU nodes. High priority: a gang of 2 x 3 GPUs (both nodes). Low: two gangs of 1 x 4 GPUs.
    # Found: nothing high, both low gangs. The high level is open (bound 1), so a placement better in priority
    # order may take the high gang and none of the low ones; the low level is bounded with nothing held: 2.
    nodes = [node("n0", gpus=4), node("n1", gpus=4)]
    gangs = [gang("high", 2, gpus=3, priority=100), gang("l1", 1, gpus=4), gang("l2", 1, gpus=4)]
    bounds, total = bounds_of(Cluster(tuple(nodes), tuple(gangs)), {(100, 0, 0): 0, (0, 0, 0): 2})
    assert bounds == {(100, 0, 0): 1, (0, 0, 0): 2}
    # No placement places the high gang and a low one: the joint bound on both levels is 2, not 3.
    assert total == 2


def test_below_the_first_open_level_only_the_levels_down_to_it_are_held():
    # Three 4-GPU nodes. Found: nothing at the top (its gang fits: open), the middle gang on two nodes, one low
    # gang. Placing the top gang is better whatever follows, and then all three low gangs may fit: the low
    # level's bound must not hold the middle level at its count (that would say 1).
    nodes = [node(f"n{i}", gpus=4) for i in range(3)]
    gangs = [
        gang("top", 1, gpus=4, priority=100),
        gang("mid", 2, gpus=4, priority=50),
        *(gang(f"low{i}", 1, gpus=4) for i in range(3)),
    ]
    found = {(100, 0, 0): 0, (50, 0, 0): 1, (0, 0, 0): 1}
    bounds, total = bounds_of(Cluster(tuple(nodes), tuple(gangs)), found)
    assert bounds == {(100, 0, 0): 1, (50, 0, 0): 1, (0, 0, 0): 3}
    assert total == 3  # three nodes, one node per gang at least


# --- the property: against every placement of small clusters ---------------------------------------------------


@st.composite
def small_clusters(draw):
    nodes = []
    for i in range(draw(st.integers(1, 3))):
        labels = {"rack": draw(st.sampled_from(("a", "b")))}
        if draw(st.booleans()):
            labels["model"] = "t4"
        nodes.append(
            node(f"n{i}", cpu=draw(st.sampled_from((4, 8))), gpus=draw(st.sampled_from((2, 4))), labels=labels)
        )
    gangs = []
    pods_left = 5
    for g in range(draw(st.integers(1, 4))):
        size = draw(st.integers(1, min(3, pods_left)))
        pods_left -= size
        priority = draw(st.sampled_from((0, 10, 20)))
        selector = {"model": "t4"} if draw(st.integers(0, 3)) == 0 else {}
        pods = tuple(
            pod(
                f"g{g}-{i}",
                cpu=draw(st.sampled_from((1, 2, 4))),
                gpus=draw(st.sampled_from((0, 1, 2))),
                priority=priority,
                node_selector=selector,
            )
            for i in range(size)
        )
        colocate = draw(st.sampled_from((None, None, "rack")))
        gangs.append(Gang(f"g{g}", pods, draw(st.integers(1, size)), colocate=colocate))
        if pods_left == 0:
            break
    return Cluster(tuple(nodes), tuple(gangs))


def every_placement(cluster):
    """Every assignment of pods to a node or to none that the validator accepts, as gangs placed per level."""
    pods = [(p.name, gang) for gang in cluster.gangs for p in gang.pods]
    choices = [None, *(n.name for n in cluster.nodes)]
    for assignment in itertools.product(choices, repeat=len(pods)):
        bindings = {name: where for (name, _g), where in zip(pods, assignment, strict=True) if where is not None}
        if validate(cluster, bindings):
            continue
        per_level = {}
        for g in cluster.gangs:
            if any(p.name in bindings for p in g.pods):
                level = (max(p.priority for p in g.pods), 0, int(g.starving))
                per_level[level] = per_level.get(level, 0) + 1
        yield per_level


def at_least_as_good(per_level, found, levels):
    """Strict priority order: the first level (highest first) where the counts differ decides."""
    mine = tuple(per_level.get(level, 0) for level in levels)
    theirs = tuple(found.get(level, 0) for level in levels)
    return mine >= theirs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_clusters(), st.integers(0, 10**6), st.booleans(), st.sampled_from((0, bound.MOST_DOMAIN_OPTIONS)))
def test_no_placement_as_good_in_priority_order_passes_the_bounds(cluster, pick, mip, most_options):
    levels = sorted({(max(p.priority for p in g.pods), 0, int(g.starving)) for g in cluster.gangs}, reverse=True)
    placements = list(every_placement(cluster))
    # The relaxation, for any placement reached (not only an optimal one: then bounds are easy), with the
    # co-located gangs' domain rows and without them
    found = placements[pick % len(placements)]
    with mock.patch.object(bound, "MOST_DOMAIN_OPTIONS", most_options):
        relaxed, relaxed_total = bounds_of(cluster, found, mip)
    for per_level in placements:
        if at_least_as_good(per_level, found, levels):
            assert sum(per_level.values()) <= relaxed_total
            for level, count in per_level.items():
                assert count <= relaxed[level]
    # What solve() reports, for the placement it returns
    placement = solve(cluster, SolveConfig(time_limit=2))
    found = {_level(lv): lv["placed"] for lv in placement.levels}
    reported = {_level(lv): lv["bound"] for lv in placement.levels}
    for per_level in placements:
        if at_least_as_good(per_level, found, levels):
            assert sum(per_level.values()) <= placement.best_bound
            for level, count in per_level.items():
                assert count <= reported.get(level, 0)


def _level(reported: dict) -> tuple[int, int, int]:
    return (reported["priority"], reported["fairShareTier"], int(reported["starving"]))
