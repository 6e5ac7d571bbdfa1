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
