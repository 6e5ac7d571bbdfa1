"""Queue trees (Volcano's `spec.parent`): fair shares divided down the tree, capability at every level, and
reclaim from the nearest queues first. The fair-share oracle is progressive filling written here from the
definition, level by level; the capability oracle is the validator, which walks `parent` on its own."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsolve.solver import GPU, Cluster, Gang, Queue, SolveConfig, solve, validate
from gangsolve.solver.queues import deserved
from tests.builders import node, pod
from tests.solver.test_preemption import running
from tests.solver.test_queues import max_min_fair
from tests.solver.test_reclaim import cluster_of, without

CONFIG = SolveConfig(time_limit=1.0, steps=20)
TREE = {"dept-a": ("a1", "a2"), "dept-b": ("b1", "b2")}
# dept-a over a1 and a2, dept-b over b1: equal weights.
TWO_DEPARTMENTS = (
    Queue("dept-a"),
    Queue("dept-b"),
    Queue("a1", parent="dept-a"),
    Queue("a2", parent="dept-a"),
    Queue("b1", parent="dept-b"),
)


def tree_fair(capacity: float, queues: dict[str, Queue], demand: dict[str, float]) -> dict[str, float]:
    """Fair GPU shares down the tree: departments divide the cluster by weight, each capped by its capability
    and by what its teams ask for together; each department's share is divided among its teams the same way."""

    def capped(q: str, asked: float) -> float:
        return min(asked, queues[q].capability.get(GPU, asked))

    dept_demand = {d: capped(d, sum(capped(t, demand[t]) for t in TREE[d])) for d in TREE}
    out = max_min_fair(capacity, {d: queues[d].weight for d in TREE}, dept_demand)
    for d, teams in TREE.items():
        out |= max_min_fair(out[d], {t: queues[t].weight for t in teams}, {t: capped(t, demand[t]) for t in teams})
    return out


@st.composite
def trees(draw):
    queues = {}
    for dept, teams in TREE.items():
        cap = {GPU: draw(st.integers(0, 32))} if draw(st.booleans()) else {}
        queues[dept] = Queue(dept, weight=draw(st.integers(1, 4)), capability=cap)
        for team in teams:
            cap = {GPU: draw(st.integers(0, 24))} if draw(st.integers(0, 2)) == 0 else {}
            queues[team] = Queue(team, weight=draw(st.integers(1, 4)), capability=cap, parent=dept)
    return queues


@st.composite
def tree_clusters(draw):
    queues = draw(trees())
    nodes = [node(f"n{i}", cpu=64, gpus=8) for i in range(draw(st.integers(1, 5)))]
    gangs = []
    teams = [t for teams in TREE.values() for t in teams]
    for g in range(draw(st.integers(1, 10))):
        team = draw(st.sampled_from(teams))
        size = draw(st.integers(1, 3))
        gpus = draw(st.sampled_from([1, 2, 4, 8]))
        gangs.append(
            Gang(
                f"{team}/g{g}",
                tuple(pod(f"{team}/g{g}-{i}", gpus=gpus, order=g) for i in range(size)),
                size,
                queue=team,
            )
        )
    return Cluster(tuple(nodes), tuple(gangs), queues=tuple(queues.values()))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree_clusters())
def test_fair_shares_are_divided_down_the_tree(cluster):
    queues = {q.name: q for q in cluster.queues}
    demand = dict.fromkeys(queues, 0.0)
    for gang in cluster.gangs:
        demand[gang.queue] += sum(p.requests.get(GPU, 0) for p in gang.pods)
    capacity = sum(n.allocatable.get(GPU, 0) for n in cluster.nodes)
    want = tree_fair(capacity, queues, demand)
    got = deserved(cluster)
    for name in queues:
        assert abs(got[name].get(GPU, 0.0) - want[name]) < 1e-6, name


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree_clusters(), st.booleans())
def test_no_queue_at_any_level_passes_its_capability(cluster, cpsat):
    placement = solve(cluster, replace(CONFIG, use_cpsat=cpsat))
    assert not validate(cluster, placement.bindings)
    for result, gang in zip(placement.gangs, cluster.gangs, strict=True):
        assert result.placed_pods in (0, *range(gang.need, len(gang.pods) + 1))


def test_a_departments_capability_caps_its_teams_together():
    """Each team alone is uncapped; their department may hold 8 GPUs: of two 8-GPU gangs, one starts."""
    queues = (
        Queue("dept", capability={GPU: 8}),
        Queue("t1", parent="dept"),
        Queue("t2", parent="dept"),
    )
    gangs = tuple(Gang(f"{t}/g", (pod(f"{t}/g-0", gpus=8, order=i),), 1, queue=t) for i, t in enumerate(("t1", "t2")))
    cluster = Cluster((node("n0", cpu=64, gpus=8), node("n1", cpu=64, gpus=8)), gangs, queues=queues)
    placement = solve(cluster, CONFIG)
    assert len(placement.bindings) == 1
    assert not validate(cluster, placement.bindings)
    # The validator sees the department's cap whichever team placed: both would pass it.
    both = {"t1/g-0": "n0", "t2/g-0": "n1"}
    assert any("queue dept: nvidia.com/gpu over capability" in v for v in validate(cluster, both))


def test_the_report_gives_each_queue_its_parent_and_what_its_subtree_holds():
    queues = (Queue("dept", weight=1), Queue("t1", parent="dept", weight=3), Queue("t2", parent="dept"), Queue("other"))
    gangs = (
        Gang("t1/g", tuple(pod(f"t1/g-{i}", gpus=8, order=i) for i in range(2)), 2, queue="t1"),
        Gang("t2/g", tuple(pod(f"t2/g-{i}", gpus=8, order=i) for i in range(2)), 2, queue="t2"),
        Gang("other/g", tuple(pod(f"other/g-{i}", gpus=8, order=i) for i in range(4)), 4, queue="other"),
    )
    cluster = Cluster(tuple(node(f"n{i}", cpu=64, gpus=8) for i in range(4)), gangs, queues=queues)
    placement = solve(cluster, CONFIG)
    report = {q.name: q for q in placement.queues}
    assert (report["t1"].parent, report["dept"].parent) == ("dept", "")
    # dept and other split 32 GPUs evenly; dept's 16 go 12 / 4 by weight 3:1 (t2 asks 16, so 4 is its share).
    assert [report[q].fair_share for q in ("dept", "other", "t1", "t2")] == [0.5, 0.5, 0.375, 0.125]
    assert report["dept"].allocated.get(GPU, 0) == report["t1"].allocated.get(GPU, 0) + report["t2"].allocated.get(
        GPU, 0
    )


def sibling_or_cousin() -> Cluster:
    """Three 8-GPU nodes; dept-a (a1, a2) and dept-b (b1), equal weights. a2 holds two nodes as 8-GPU gangs
    (past a's and a2's shares), b1 holds one (its share); a1 asks for 8 GPUs: a1's sibling a2 gives one back."""
    nodes = [node(f"n{i}", cpu=64, gpus=8) for i in range(3)]
    pods = [
        running("a2/r0", "n0", gpus=8, gang="a2/r0", started=0, queue="a2"),
        running("a2/r1", "n1", gpus=8, gang="a2/r1", started=1, queue="a2"),
        running("b1/r0", "n2", gpus=8, gang="b1/r0", started=2, queue="b1"),
    ]
    want = Gang("a1/x", (pod("a1/x-0", gpus=8),), 1, queue="a1")
    queues = list(TWO_DEPARTMENTS)
    return cluster_of(nodes, pods, [want], queues)


def test_reclaim_takes_from_a_sibling_and_never_takes_a_cousin_below_its_departments_share():
    cluster = sibling_or_cousin()
    placement = solve(cluster, CONFIG)
    assert [e.pod for e in placement.evictions] == ["a2/r1"]  # the most recent of the sibling's
    assert "reclaimed from queue a2" in placement.evictions[0].reason
    assert not validate(Cluster(without(cluster, {"a2/r1"}), cluster.gangs), placement.nominations)
    # Four nodes, two held by each department (each at its share): a1 still takes from its sibling a2.
    more = cluster_of(
        [node(f"n{i}", cpu=64, gpus=8) for i in range(4)],
        [
            running("a2/r0", "n0", gpus=8, gang="a2/r0", started=0, queue="a2"),
            running("a2/r1", "n1", gpus=8, gang="a2/r1", started=1, queue="a2"),
            running("b1/r0", "n2", gpus=8, gang="b1/r0", started=2, queue="b1"),
            running("b1/r1", "n3", gpus=8, gang="b1/r1", started=3, queue="b1"),
        ],
        [Gang("a1/x", (pod("a1/x-0", gpus=8),), 1, queue="a1")],
        list(TWO_DEPARTMENTS),
    )
    assert [e.pod for e in solve(more, CONFIG).evictions] == ["a2/r1"]


def test_a_cousin_gives_back_only_what_its_department_holds_past_its_share():
    """dept-a's a1 holds nothing and asks for 8; dept-b's b1 holds all three nodes. dept-a's share is 12 and
    a1's 12 (a2 asks for nothing): b1 gives back one node, not two (dept-b keeps its 12, as 16)."""
    nodes = [node(f"n{i}", cpu=64, gpus=8) for i in range(3)]
    pods = [running(f"b1/r{i}", f"n{i}", gpus=8, gang=f"b1/r{i}", started=i, queue="b1") for i in range(3)]
    gangs = [Gang("a1/x", tuple(pod(f"a1/x-{i}", gpus=8, order=i) for i in range(2)), 1, queue="a1")]
    queues = list(TWO_DEPARTMENTS)
    placement = solve(cluster_of(nodes, pods, gangs, queues), CONFIG)
    assert len(placement.evictions) == 1
    assert "reclaimed from queue b1" in placement.evictions[0].reason


def test_past_use_lowers_a_queues_fair_share_by_slurms_factor():
    """Equal weights; `night` used everything lately (U = 1 of S = 1/2: factor 2^-2), `day` nothing (factor 1):
    of 10 GPUs night's fair share is 10 x 0.25 / 1.25 = 2, day's 8. No use recorded: 5 and 5."""
    gangs = tuple(
        Gang(f"{q}/g", tuple(pod(f"{q}/g-{i}", gpus=1, order=i) for i in range(10)), 1, queue=q)
        for q in ("night", "day")
    )
    nodes = (node("n0", cpu=64, gpus=8), node("n1", cpu=64, gpus=2))
    fresh = Cluster(nodes, gangs, queues=(Queue("night"), Queue("day")))
    assert {q: s[GPU] for q, s in deserved(fresh).items()} == {"night": 5.0, "day": 5.0}
    used = replace(fresh, queues=(Queue("night", usage=3600.0), Queue("day")))
    got = {q: s[GPU] for q, s in deserved(used).items()}
    assert abs(got["night"] - 2.0) < 1e-6
    assert abs(got["day"] - 8.0) < 1e-6
    # Each placed gang takes one GPU: the day queue's gangs rank within its share first.
    placement = solve(replace(used, gangs=gangs), CONFIG)
    assert sum(1 for p in placement.bindings if p.startswith("day/")) == 8
