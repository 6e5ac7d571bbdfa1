"""Solver invariants on random clusters (hypothesis): whatever the input, a placement never overcommits a
node, never violates a taint, selector, affinity or co-location, never places part of a gang, and is never
worse than the greedy gang allocator (gangs placed per priority level, compared in order). The checks share
no code with the solver: the validator is written from Kubernetes' rules, and gangs placed are counted here
from the bindings."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsolve.solver import (
    GPU,
    Cluster,
    Gang,
    Node,
    Pod,
    Requirement,
    SelectorTerm,
    SolveConfig,
    Taint,
    Toleration,
    solve,
    validate,
)
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
        # Some elastic gangs already have a member bound (to a node that may not exist any more).
        bound = (f"n{draw(st.integers(0, 12))}",) if draw(st.integers(0, 5)) == 0 else ()
        # How long it has waited and is expected to run: the expansion order (the default) sorts by them.
        waited = draw(st.sampled_from((0.0, 60.0, 900.0, 7200.0)))
        runtime = draw(st.sampled_from((None, 300.0, 3600.0)))
        minimum = draw(st.integers(1, size + len(bound) + 1))
        out.append(Gang(f"g{g}", pods, minimum, bound, colocate, runtime=runtime, waited=waited))
    return out


def gangs_placed_per_level(cluster: Cluster, bindings) -> tuple[int, ...]:
    """Counted from the bindings alone: per level (priority, then starving), highest first, the gangs deciding
    all-or-nothing this cycle (pods pending, minimum not yet reached by bound members) that reached it."""
    placed_pods: dict[str, int] = {}
    gang_of = {p.name: g.name for g in cluster.gangs for p in g.pods}
    for pod_name in bindings:
        placed_pods[gang_of[pod_name]] = placed_pods.get(gang_of[pod_name], 0) + 1
    per_level: dict[tuple[int, bool], int] = {}
    for g in cluster.gangs:
        level = (max(p.priority for p in g.pods) if g.pods else 0, g.starving)
        deciding = g.pods and g.min_member > len(g.bound_nodes)
        reached = placed_pods.get(g.name, 0) + len(g.bound_nodes) >= g.min_member
        per_level.setdefault(level, 0)
        per_level[level] += int(bool(deciding) and reached)
    return tuple(per_level[level] for level in sorted(per_level, reverse=True))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes(), gangs())
def test_placement_is_sound_and_never_worse_than_greedy(node_list, gang_list):
    cluster = Cluster(tuple(node_list), tuple(gang_list))
    placement = solve(cluster, SolveConfig(time_limit=0.5))

    # No overcommit, no taint/selector/affinity/co-location violation, all or nothing per gang.
    assert validate(cluster, placement) == []

    greedy = solve(cluster, SolveConfig(use_cpsat=False))  # the greedy gang allocator alone
    assert greedy.status == "GREEDY"
    assert gangs_placed_per_level(cluster, placement.bindings) >= gangs_placed_per_level(cluster, greedy.bindings)

    for result, gang in zip(placement.gangs, cluster.gangs, strict=True):
        assert result.placed_pods in (0, *range(gang.need, len(gang.pods) + 1))
        if result.placed_pods < len(gang.pods):
            assert result.reason, f"{gang.name} left pods pending without a reason"
    assert placement.objective <= placement.best_bound


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes(), gangs(), st.data())
def test_validator_catches_what_the_solver_must_avoid(node_list, gang_list, data):
    """The validator is the oracle above, so it must itself reject broken placements: take a sound one and
    break it in a way whose violation is known without the validator's logic."""
    cluster = Cluster(tuple(node_list), tuple(gang_list))
    bindings = dict(solve(cluster, SolveConfig(use_cpsat=False)).bindings)
    by_name = {n.name: n for n in node_list}
    gang_of = {p.name: g for g in gang_list for p in g.pods}
    pods = {p.name: p for g in gang_list for p in g.pods}

    # A gang placed at exactly its minimum loses a member: partial.
    exact = [g for g in gang_list if g.need >= 2 and sum(gang_of[p] is g for p in bindings) == g.need]
    if exact:
        g = data.draw(st.sampled_from(exact))
        victim = next(p for p in bindings if gang_of[p] is g)
        broken = {p: n for p, n in bindings.items() if p != victim}
        assert any(v.startswith(f"{g.name}: partial gang") for v in validate(cluster, broken))

    # A placed pod moves to a cordoned node, or a GPU pod to a node without GPUs.
    if bindings:
        moved = data.draw(st.sampled_from(sorted(bindings)))
        gpus = pods[moved].requests.get(GPU, 0)
        for target in node_list:
            if target.unschedulable:
                expected = f"{moved} on {target.name}: cordoned"
            elif gpus and not target.allocatable.get(GPU, 0):
                expected = f"{target.name}: {GPU} overcommitted"
            else:
                continue
            violations = validate(cluster, {**bindings, moved: target.name})
            assert any(v.startswith(expected) for v in violations), (expected, violations)

    # Every pending GPU pod on one node: more GPUs than it has free is an overcommit.
    gpu_pods = [p for p in pods.values() if p.requests.get(GPU, 0)]
    target = by_name[node_list[0].name]
    if sum(p.requests[GPU] for p in gpu_pods) > target.free(GPU):
        violations = validate(cluster, {p.name: target.name for p in gpu_pods})
        assert any(v.startswith(f"{target.name}: {GPU} overcommitted") for v in violations)


def test_quantities_up_to_the_edges_maximum_do_not_overflow_the_solver():
    """At the edge's maximum (2**46 base units) the resource tier's weights (a GPU weighs all pending cpu)
    pass int64: the CP-SAT stage that would overflow fails alone, and the cycle keeps its placement."""
    most = 2**46
    big = Node("n", {"cpu": most, GPU: most, "pods": 110})
    pod_ = Pod("p", {"cpu": most, GPU: most, "pods": 1})
    placement = solve(Cluster((big,), (Gang("g", (pod_,), 1),)), SolveConfig(time_limit=0.5))
    assert placement.bindings == {"p": "n"}
