"""Topology levels: a required level (one label value for the whole gang) and preferred levels, minimized
widest first in the locality tier. Racks and blocks are counted here from the bindings and node labels, not
with the solver's scoring; the required level is checked by the validator."""

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsolve.solver import Cluster, Gang, SolveConfig, solve, validate
from gangsolve.solver.greedy import greedy
from gangsolve.solver.problem import Problem
from tests.builders import node, pod


def rack_node(name: str, rack: str, block: str, free_gpus: int) -> object:
    n = node(name, gpus=8, labels={"rack": rack, "block": block})
    return replace(n, used={"nvidia.com/gpu": 8 - free_gpus})


def spanned(cluster: Cluster, bindings: dict[str, str], gang: str, key: str) -> int:
    labels = {n.name: n.labels for n in cluster.nodes}
    return len({labels[node][key] for pod, node in bindings.items() if pod.startswith(f"{gang}-")})


def four_by_four(preferred: tuple[str, ...]) -> Cluster:
    """Rack a: two nodes with 4 GPUs free each (best fit for 4-GPU pods); rack b: two empty nodes. A gang of
    four 4-GPU pods fits rack b alone."""
    nodes = (
        rack_node("a1", "a", "x", 4),
        rack_node("a2", "a", "x", 4),
        rack_node("b1", "b", "x", 8),
        rack_node("b2", "b", "x", 8),
    )
    pods = tuple(pod(f"g-{i}", gpus=4, order=i) for i in range(4))
    return Cluster(nodes, (Gang("g", pods, 4, preferred=preferred),))


def bindings_of(problem: Problem, counts) -> dict[str, str]:
    out = {}
    for g, gang_counts in counts.items():
        for p, part in enumerate(problem.parts[g]):
            pods = iter(part.pods)
            for (q, n), k in sorted(gang_counts.items()):
                if q == p:
                    for _ in range(k):
                        out[next(pods).name] = problem.nodes[n].name
    return out


def test_a_co_located_gang_with_a_member_bound_stays_in_its_members_rack_in_every_stage():
    """Its pending pods join the rack its bound member runs in, or wait. Here that rack holds 4 of the 5 its
    minimum still needs, while an empty node of another rack holds all 6: the whole-model CP-SAT stage put them
    there (found by the pools property test; the greedy passes and the search kept to the rack)."""
    nodes = (
        node("other", gpus=8, labels={"rack": "r1"}),
        node("mine", gpus=4, labels={"rack": "r0"}),
        node("cordoned", gpus=4, labels={"rack": "r0"}, unschedulable=True),
    )
    # Two pod classes (one pod asks for more cpu): the relaxation then bounds it above 0, so the exact stage runs.
    pods = tuple(pod(f"elastic-{i}", cpu=4 if i == 5 else 1, gpus=1) for i in range(6))
    elastic = Gang("elastic", pods, 6, ("mine",), "rack")
    cluster = Cluster(nodes, (elastic,))
    placement = solve(cluster, SolveConfig(time_limit=1, steps=30))
    assert validate(cluster, placement) == []
    assert placement.bindings == {}
    assert placement.gangs[0].reason.startswith("no single rack value has room for 5 pods together")
    # With room in its rack, it is placed there.
    roomy = Cluster((*nodes[:2], replace(nodes[2], unschedulable=False)), (elastic,))
    placed = solve(roomy, SolveConfig(time_limit=1, steps=30)).bindings
    assert len(placed) >= 5
    assert set(placed.values()) <= {"mine", "cordoned"}


def test_the_extra_pods_of_a_co_located_gang_at_its_minimum_join_its_members_node():
    """g0's minimum is met by its member bound on n0, so its pending pods are extras placed one by one; they may
    go only to n0 (its required level is the hostname), which is cordoned, so they wait. The exact stage placed
    them on n1 (the property tests' example once they drew bound members; other gangs keep its level open)."""
    nodes = (
        node("n0", cpu=8, pods=4, labels={"zone": "z1"}, unschedulable=True),
        node("n1", cpu=8, pods=16, labels={"zone": "z1"}),
    )
    g0 = Gang("g0", tuple(pod(f"g0-{i}", cpu=0.5) for i in range(7)), 1, ("n0",), "kubernetes.io/hostname")
    others = (
        Gang("g1", (pod("g1-0", cpu=0.5),), 1),
        Gang("g2", (pod("g2-0", cpu=0.5),), 1),
        Gang("g3", (pod("g3-0", cpu=0.5),), 2),  # fewer pods than its minimum
        Gang("g4", (pod("g4-0", cpu=0.5),), 1, ("n0",)),  # elastic, not co-located
        Gang("g5", (pod("g5-0", cpu=0.5),), 1),
        Gang("g6", (pod("g6-0", cpu=0.5), pod("g6-1", cpu=0.5)), 2),
    )
    cluster = Cluster(nodes, (g0, *others))
    placement = solve(cluster, SolveConfig(time_limit=1, steps=30))
    assert validate(cluster, placement) == []
    assert not [p for p in placement.bindings if p.startswith("g0-")]


def test_a_co_located_gang_whose_bound_members_disagree_counts_in_no_stage_not_even_the_bound():
    """Its members run in racks r0 and r1 (another scheduler bound them): nothing pending can repair that, so
    every stage leaves it, and the bound must not count it either. It read the first member's rack, so the
    cycle reported a gang more than could ever be placed (and searched for it)."""
    nodes = (
        node("m0", gpus=8, labels={"rack": "r0"}),
        node("m1", gpus=8, labels={"rack": "r1"}),
        node("e0", gpus=8, labels={"rack": "r0"}),
    )
    split = Gang("split", (pod("split-2", gpus=1),), 3, ("m0", "m1"), "rack")
    other = Gang("other", (pod("other-0", gpus=2), pod("other-1", gpus=2)), 2)
    cluster = Cluster(nodes, (split, other))
    placement = solve(cluster, SolveConfig(time_limit=1, steps=30))
    assert validate(cluster, placement) == []
    assert set(placement.bindings) == {"other-0", "other-1"}
    assert placement.best_bound == 1


def test_greedy_packs_a_gang_into_the_fewest_preferred_domains():
    for preferred, racks in (((), 2), (("rack",), 1)):  # best fit alone takes rack a's two half-free nodes
        cluster = four_by_four(preferred)
        problem = Problem(cluster)
        assert spanned(cluster, bindings_of(problem, greedy(problem)), "g", "rack") == racks


def test_solve_minimizes_preferred_domains_before_nodes():
    cluster = four_by_four(("rack",))
    placement = solve(cluster, SolveConfig(time_limit=2))
    assert len(placement.bindings) == 4
    assert spanned(cluster, dict(placement.bindings), "g", "rack") == 1
    assert validate(cluster, placement.bindings) == []


def test_required_block_then_fewest_racks():
    # Block x has more room in total but only across racks; block y holds the gang in one rack.
    nodes = [rack_node(f"x{r}{i}", f"x{r}", "x", 4) for r in range(3) for i in range(2)]
    nodes += [rack_node(f"y{i}", "y0", "y", 8) for i in range(2)] + [rack_node("y2", "y1", "y", 2)]
    pods = tuple(pod(f"g-{i}", gpus=4, order=i) for i in range(4))
    cluster = Cluster(tuple(nodes), (Gang("g", pods, 4, colocate="block", preferred=("rack",)),))
    placement = solve(cluster, SolveConfig(time_limit=2))
    assert spanned(cluster, dict(placement.bindings), "g", "block") == 1
    assert spanned(cluster, dict(placement.bindings), "g", "rack") == 1
    assert validate(cluster, placement.bindings) == []


def tight_block_across_racks() -> Cluster:
    """Block x holds the gang with nothing to spare, but only across its two racks; block y has more room and
    holds it in one rack."""
    nodes = [rack_node(f"x{r}{i}", f"x{r}", "x", 4) for r in range(2) for i in range(2)]
    nodes += [rack_node(f"y{i}", "y0", "y", 8) for i in range(2)] + [rack_node("y2", "y1", "y", 8)]
    pods = tuple(pod(f"g-{i}", gpus=4, order=i) for i in range(4))
    return Cluster(tuple(nodes), (Gang("g", pods, 4, colocate="block", preferred=("rack",)),))


def test_gathering_prefers_the_block_where_one_rack_holds_the_gang():
    cluster = tight_block_across_racks()
    for gather, block, racks in ((False, "x", 2), (True, "y", 1)):
        problem = Problem(cluster)
        bindings = bindings_of(problem, greedy(problem, gather=gather))
        assert {n.labels["block"] for n in cluster.nodes if n.name in bindings.values()} == {block}
        assert spanned(cluster, bindings, "g", "rack") == racks


def test_a_gang_alone_goes_where_one_rack_holds_it_not_to_the_tightest_block():
    # A cycle that sees one arriving gang: every greedy pass places it, so racks decide between them.
    cluster = tight_block_across_racks()
    placement = solve(cluster, SolveConfig(time_limit=2))
    assert len(placement.bindings) == 4
    assert spanned(cluster, dict(placement.bindings), "g", "rack") == 1
    assert validate(cluster, placement.bindings) == []


@st.composite
def rack_clusters(draw):
    nodes = []
    for b in range(draw(st.integers(1, 3))):
        for r in range(draw(st.integers(1, 3))):
            for i in range(draw(st.integers(1, 4))):
                free = draw(st.sampled_from((0, 2, 4, 8)))
                nodes.append(rack_node(f"n{b}{r}{i}", f"r{b}{r}", f"b{b}", free))
    gangs = []
    for j in range(draw(st.integers(1, 6))):
        size, gpus = draw(st.integers(1, 6)), draw(st.sampled_from((1, 2, 4, 8)))
        colocate = draw(st.sampled_from((None, "block")))
        preferred = draw(st.sampled_from(((), ("rack",), ("block", "rack"))))
        pods = tuple(pod(f"g{j}-{i}", gpus=gpus, priority=j % 2, order=j) for i in range(size))
        gangs.append(Gang(f"g{j}", pods, size, colocate=colocate, preferred=preferred))
    return Cluster(tuple(nodes), tuple(gangs))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rack_clusters())
def test_never_breaks_the_required_level_and_never_spans_more_racks_for_nothing(cluster):
    placement = solve(cluster, SolveConfig(time_limit=0.5))
    assert validate(cluster, placement.bindings) == []
    problem = Problem(cluster)
    base = bindings_of(problem, greedy(problem))

    def placed(bindings):
        per = {}
        for g in cluster.gangs:
            got = sum(1 for p in g.pods if p.name in bindings)
            per.setdefault(g.priority, 0)
            per[g.priority] += got >= g.min_member
        return tuple(per[p] for p in sorted(per, reverse=True))

    def gpus(bindings):
        return sum(p.requests.get("nvidia.com/gpu", 0) for g in cluster.gangs for p in g.pods if p.name in bindings)

    def racks(bindings):
        return sum(spanned(cluster, bindings, g.name, "rack") for g in cluster.gangs if "rack" in g.preferred)

    mine = (placed(placement.bindings), gpus(placement.bindings), len(placement.bindings))
    theirs = (placed(base), gpus(base), len(base))
    assert mine >= theirs
    if mine == theirs and all(g.preferred in ((), ("rack",)) for g in cluster.gangs):
        assert racks(placement.bindings) <= racks(base)
