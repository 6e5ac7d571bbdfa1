"""Solver invariants on random clusters (hypothesis): whatever the input, a placement never overcommits a
node, never violates a taint, selector, affinity or co-location, never places part of a gang, and is never
worse than the greedy gang allocator (priority levels first, then gangs placed, then resources)."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsolve.solver import (
    Cluster,
    Gang,
    Requirement,
    SelectorTerm,
    SolveConfig,
    Taint,
    Toleration,
    score,
    solve,
    validate,
)
from gangsolve.solver.greedy import Counts, greedy
from gangsolve.solver.problem import Problem
from tests.builders import node, pod

MODELS = ("a100", "v100", "t4")
ZONES = ("z1", "z2")
DEDICATED = Taint("dedicated", "gpu", "NoSchedule")


@st.composite
def nodes(draw):
    out = []
    for i in range(draw(st.integers(1, 12))):
        gpus = draw(st.sampled_from((0, 4, 8)))
        labels = {"zone": draw(st.sampled_from(ZONES))}
        if gpus:
            labels["gpu-model"] = draw(st.sampled_from(MODELS))
        taints = (DEDICATED,) if gpus and draw(st.booleans()) else ()
        out.append(
            node(
                f"n{i}",
                cpu=draw(st.sampled_from((8, 16, 32))),
                gpus=gpus,
                pods=draw(st.sampled_from((4, 16, 110))),
                labels=labels,
                taints=taints,
                unschedulable=draw(st.integers(0, 9)) == 0,
            )
        )
    return out


@st.composite
def gangs(draw):
    out = []
    for g in range(draw(st.integers(0, 10))):
        size = draw(st.integers(1, 8))
        priority = draw(st.sampled_from((0, 0, 10)))
        gpus = draw(st.sampled_from((0, 1, 2, 4)))
        constraint = draw(st.sampled_from(("none", "selector", "affinity", "tolerates")))
        kw = {}
        if constraint == "selector":
            kw["node_selector"] = {"gpu-model": draw(st.sampled_from(MODELS))}
        elif constraint == "affinity":
            kw["affinity"] = (SelectorTerm((Requirement("zone", "In", (draw(st.sampled_from(ZONES)),)),)),)
        elif constraint == "tolerates":
            kw["tolerations"] = (Toleration("dedicated", "Equal", "gpu"),)
        pods = tuple(
            pod(
                f"g{g}-{i}",
                cpu=draw(st.sampled_from((0.5, 1, 4))),
                gpus=gpus,
                priority=priority,
                order=g * 10 + i,
                **kw,
            )
            for i in range(size)
        )
        colocate = draw(st.sampled_from((None, None, "kubernetes.io/hostname", "zone")))
        out.append(Gang(f"g{g}", pods, draw(st.integers(1, size + 1)), colocate=colocate))
    return out


def counts_of(problem: Problem, bindings) -> Counts:
    where = {p.name: (g, i) for g, parts in enumerate(problem.parts) for i, part in enumerate(parts) for p in part.pods}
    counts: Counts = {}
    for pod_name, node_name in bindings.items():
        g, i = where[pod_name]
        key = (i, problem.node_index[node_name])
        counts.setdefault(g, {})[key] = counts.get(g, {}).get(key, 0) + 1
    return counts


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes(), gangs())
def test_placement_is_sound_and_never_worse_than_greedy(node_list, gang_list):
    cluster = Cluster(tuple(node_list), tuple(gang_list))
    placement = solve(cluster, SolveConfig(time_limit=0.5))

    assert validate(cluster, placement) == []

    problem = Problem(cluster)
    scale = score.gpu_scale(problem)
    ours = score.rank(problem, counts_of(problem, placement.bindings), scale)
    baseline = score.rank(problem, greedy(problem), scale)
    assert ours >= baseline

    for result, gang in zip(placement.gangs, cluster.gangs, strict=True):
        assert result.placed_pods in (0, *range(gang.need, len(gang.pods) + 1))
        if result.placed_pods < len(gang.pods):
            assert result.reason, f"{gang.name} left pods pending without a reason"
    assert placement.objective <= placement.best_bound


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes(), gangs())
def test_validator_catches_what_the_solver_must_avoid(node_list, gang_list):
    """The validator is the oracle above, so it must itself reject broken placements."""
    cluster = Cluster(tuple(node_list), tuple(gang_list))
    everything_on_first = {p.name: node_list[0].name for g in gang_list for p in g.pods}
    violations = validate(cluster, everything_on_first)
    problem = Problem(cluster)
    fits = problem.fit[:, 0] if len(problem.class_pods) else []
    if any(f == 0 for f in fits) and everything_on_first:
        assert violations
