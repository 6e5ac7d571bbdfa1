"""GPU shares on devices: a fractional pod takes part of one GPU, never of two; whole-GPU pods take whole GPUs
only; greedy and CP-SAT both keep that, the result names each share's GPU, and the validator (written apart
from the solver) catches what they must avoid. Hypothesis properties for the invariants are at the end."""

from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsolve.solver import Cluster, Gang, Queue, Running, SolveConfig, solve, validate
from gangsolve.solver.cpsat import GangModel
from gangsolve.solver.greedy import greedy, node_scores
from gangsolve.solver.model import GPU, SHARE, Placement, Pod, Share
from gangsolve.solver.problem import Problem
from gangsolve.solver.shares import (
    Devices,
    Kind,
    devices,
    fragmentation,
    fragmentation_growth,
    node_fragmentation,
    pack,
    workload,
)
from tests.builders import node, pod
from tests.solver.test_properties import gangs_placed_per_level

GREEDY = SolveConfig(use_cpsat=False)
EXACT = SolveConfig(time_limit=5, steps=2000)


def frac(name: str, milli: int, order: int = 0, priority: int = 0, cpu: float = 1) -> Pod:
    base = pod(name, cpu=cpu, order=order, priority=priority)
    return replace(base, requests={**base.requests, SHARE: milli})


def alone(p: Pod) -> Gang:
    return Gang(p.name, (p,), 1)


def held(cluster: Cluster, placement: Placement) -> dict[tuple[str, int], int]:
    """Thousandths of each GPU held, bound shares and placed ones, counted here from the placement."""
    out: dict[tuple[str, int], int] = {}
    for n in cluster.nodes:
        for gpu, milli in n.gpu_shares.items():
            out[(n.name, gpu)] = out.get((n.name, gpu), 0) + milli
    for share in placement.shares.values():
        out[(share.node, share.gpu)] = out.get((share.node, share.gpu), 0) + share.milli
    return out


# --- packing one node ---------------------------------------------------------------------------------------


def test_three_shares_of_six_tenths_do_not_pack_on_two_free_gpus():
    assert pack(Devices({}, (0, 1)), [("a", 600), ("b", 600)]) == {"a": 0, "b": 1}
    assert pack(Devices({}, (0, 1)), [("a", 600), ("b", 600), ("c", 600)]) is None


def test_the_exhaustive_search_packs_what_best_fit_leaves_out():
    # Best fit puts both 0.4s on one GPU and strands a 0.3; 0.4+0.3+0.3 on each GPU holds them all.
    shares = [("a", 400), ("b", 400), ("c", 300), ("d", 300), ("e", 300), ("f", 300)]
    got = pack(Devices({}, (0, 1)), shares)
    assert got is not None
    per_gpu = {gpu: sum(m for name, m in shares if got[name] == gpu) for gpu in got.values()}
    assert per_gpu == {0: 1000, 1: 1000}


def test_the_measures_choices_fall_back_to_a_packing_that_holds_every_share():
    shares = [("a", 400), ("b", 400), ("c", 300), ("d", 300), ("e", 300), ("f", 300)]
    for expected in ((), (Kind(300, 1.0),), (Kind(400, 0.5), Kind(1000, 0.5))):
        got = pack(Devices({}, (0, 1)), shares, expected)
        assert got is not None
        assert all(sum(m for name, m in shares if got[name] == gpu) <= 1000 for gpu in (0, 1))


def test_a_share_goes_to_a_shared_gpu_before_a_whole_one_and_whole_gpus_open_lowest_first():
    room = devices(node("n", gpus=4, gpu_shares={1: 700}))
    assert room == Devices({1: 300}, (0, 2, 3))
    assert pack(room, [("a", 200)]) == {"a": 1}
    assert pack(room, [("a", 500), ("b", 500), ("c", 200)]) == {"a": 0, "b": 0, "c": 1}


def test_gpus_whole_pods_hold_and_unnamed_shares_leave_no_room():
    room = devices(node("n", gpus=4, used={GPU: 2}, gpu_shares={-1: 100}))
    assert room == Devices({}, (0,))


def test_the_fragmentation_measure_keeps_room_for_the_workload_where_best_fit_does_not():
    """FGD's expected fragmentation: with 0.25 and 0.4 shares to come, a 0.25 share on the GPU with 0.45 left
    (best fit) strands 0.2 for both; on the GPU with 0.6 left, 0.35 is stranded for the 0.4s only."""
    room = Devices({0: 450, 1: 600}, ())
    expected = workload([frac("x", 250), frac("y", 400)])
    assert pack(room, [("a", 250)]) == {"a": 0}
    assert pack(room, [("a", 250)], expected) == {"a": 1}
    assert fragmentation([200, 600], expected) == 200
    assert fragmentation([450, 350], expected) == 175


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 1000), min_size=1, max_size=8), min_size=1, max_size=5),
    st.lists(st.tuples(st.sampled_from((100, 250, 500, 700, 1000, 2000, 8000)), st.integers(1, 5)), min_size=1),
)
def test_the_measure_of_many_nodes_is_the_one_node_measure_where_cpu_and_memory_do_not_bind(rows, asked):
    width = max(len(r) for r in rows)
    left = np.array([r + [0] * (width - len(r)) for r in rows])
    total = sum(k for _m, k in asked)
    expected = tuple(Kind(m, k / total) for m, k in sorted(dict(asked).items()))
    expected = tuple(Kind(kind.milli, kind.p / sum(k.p for k in expected)) for kind in expected)
    plenty = np.full(len(rows), 10**9)
    got = node_fragmentation(left, plenty, plenty, expected)
    assert np.allclose(got, [fragmentation(list(r), expected) for r in left])


def test_a_node_short_of_cpu_strands_its_gpus_for_the_workload():
    expected = (Kind(1000, 1.0, cpu=4000),)
    left = np.array([[1000, 0], [1000, 0]])
    got = node_fragmentation(left, np.array([2000, 4000]), np.array([1, 1]), expected)
    assert got.tolist() == [1000, 0]


def test_fragmentation_keeps_a_cpu_pod_off_the_node_whose_gpu_it_would_strand():
    """A cpu-only pod, then two 1-GPU pods of 4 cpu: best fit puts the cpu pod on the small node and strands its
    GPU (2 cpu left); FGD's choice puts it on the large one and both GPU pods run."""
    nodes = (node("small", cpu=8, gpus=1), node("large", cpu=32, gpus=1))
    pods = [pod("c", cpu=6, order=0), pod("w1", cpu=4, gpus=1, order=1), pod("w2", cpu=4, gpus=1, order=2)]
    pods.append(frac("s", 500, order=3))  # a share pending: the devices and FGD's choice apply
    problem = Problem(Cluster(nodes, tuple(alone(p) for p in pods)))
    order = list(range(len(pods)))
    where = {
        scorer.__name__: {pods[g].name: problem.nodes[n].name for g, c in counts.items() for (_p, n) in c}
        for scorer in (node_scores, fragmentation_growth)
        for counts in [greedy(problem, order, scorer)]
    }
    assert where["node_scores"]["c"] == "small"
    assert not {"w1", "w2"} <= set(where["node_scores"])
    assert where["fragmentation_growth"]["c"] == "large"
    assert {"w1", "w2"} <= set(where["fragmentation_growth"])


# --- the solver ---------------------------------------------------------------------------------------------


def _mixed() -> Cluster:
    """Two 2-GPU nodes, one with 0.5 of GPU 0 held; fractions and a whole-GPU gang compete for them."""
    nodes = (node("n1", gpus=2), node("n2", gpus=2, gpu_shares={0: 500}))
    gangs = tuple(alone(frac(f"f{i}", m, order=i)) for i, m in enumerate([600, 600, 600, 500, 300]))
    gangs += (Gang("w", tuple(pod(f"w{i}", gpus=1, order=10 + i) for i in range(2)), 2),)
    return Cluster(nodes, gangs)


def test_greedy_and_cpsat_give_each_share_one_gpu_and_reach_the_best_there_is():
    cluster = _mixed()
    greedy = solve(cluster, GREEDY)
    best = solve(cluster, EXACT)
    for placement in (greedy, best):
        assert validate(cluster, placement) == []
        assert all(m <= 1000 for m in held(cluster, placement).values())
        fractional = {p for p in placement.bindings if p.startswith("f")}
        assert set(placement.shares) == fractional
    # Every fraction but one 0.6 (three 0.6 need three GPUs beside the 0.5 held) and not the 2-GPU gang: the
    # greedy pass puts each share on a GPU as it goes, so it finds the best there is too, which CP-SAT proves.
    assert greedy.objective == best.objective == 5
    assert best.status == "OPTIMAL"


def test_a_gpu_holding_a_share_is_never_given_whole():
    cluster = Cluster((node("n", gpus=2, gpu_shares={1: 100}),), (Gang("w", (pod("w0", gpus=2),), 1),))
    assert solve(cluster, EXACT).bindings == {}
    cluster = replace(cluster, gangs=(Gang("w", (pod("w0", gpus=1),), 1),))
    assert solve(cluster, EXACT).bindings == {"w0": "n"}


def test_a_gang_mixing_shares_and_whole_gpus_is_placed_whole_or_not_at_all():
    mixed = Gang("mix", (pod("m0", gpus=1), frac("m1", 500), frac("m2", 500), frac("m3", 500)), 4)
    cluster = Cluster((node("n", gpus=2),), (mixed,))
    assert solve(cluster, EXACT).bindings == {}  # three halves need two GPUs beside the whole one
    cluster = Cluster((node("n", gpus=3),), (mixed,))
    placement = solve(cluster, EXACT)
    assert len(placement.bindings) == 4
    assert validate(cluster, placement) == []


def test_a_memory_request_takes_its_share_of_the_chosen_nodes_gpu():
    asks = replace(frac("e", 250), gpu_memory=20480)  # planned as 20480 of 81920 MiB, at most
    cluster = Cluster((node("small", gpus=1, gpu_memory=24576), node("big", gpus=1, gpu_memory=81920)), (alone(asks),))
    placement = solve(cluster, EXACT)
    share = placement.shares["e"]
    assert share.milli == (834 if share.node == "small" else 250)
    assert validate(cluster, placement) == []


def test_whole_gpu_clusters_get_no_share_column_and_no_device_variables():
    cluster = Cluster((node("n", gpus=4, gpu_shares={0: 500}),), (alone(pod("w", gpus=1)),))
    problem = Problem(cluster)
    assert SHARE not in problem.resources
    assert not problem.shared
    assert int(problem.free[0, problem.res_index[GPU]]) == 3  # the shared GPU is not whole
    model = GangModel(problem, {(0, 0): np.array([0])}, {})
    assert model.devices is None
    shared = Problem(replace(cluster, gangs=(alone(frac("f", 300)),)))
    assert shared.shared
    assert GangModel(shared, {(0, 0): np.array([0])}, {}).devices is not None


def test_a_queues_gpu_capability_counts_its_shares():
    queue = Queue("team", capability={GPU: 1}, allocated={SHARE: 500})
    running = (Running("n", {SHARE: 500}, name="held", queue="team", gpu=0),)
    nodes = (node("n", gpus=4, gpu_shares={0: 500}),)
    gangs = (replace(alone(frac("big", 750)), queue="team"), replace(alone(frac("small", 500, order=1)), queue="team"))
    cluster = Cluster(nodes, gangs, running=running, queues=(queue,))
    placement = solve(cluster, EXACT)
    assert set(placement.bindings) == {"small"}
    assert validate(cluster, placement) == []
    assert validate(cluster, {"small": "n", "big": "n"})[0].startswith("queue team: nvidia.com/gpu over capability")


def test_preemption_frees_the_share_of_the_victims_gpu():
    running = (Running("n", {SHARE: 600, "cpu": 1000, "pods": 1}, name="low", priority=0, gpu=0),)
    cluster = Cluster(
        (node("n", gpus=1, gpu_shares={0: 600}, used={SHARE: 600, "cpu": 1000, "pods": 1}),),
        (alone(frac("high", 600, priority=100)),),
        running=running,
    )
    placement = solve(cluster, EXACT)
    assert [e.pod for e in placement.evictions] == ["low"]
    assert placement.nominations == {"high": "n"}


# --- the validator ------------------------------------------------------------------------------------------


def test_the_validator_catches_a_gpu_past_all_of_it_a_whole_gpu_shared_and_shares_out_of_place():
    cluster = Cluster(
        (node("n", gpus=3, gpu_shares={0: 600}), node("m", gpus=1)),
        (alone(frac("a", 500)), alone(frac("b", 300)), alone(pod("w", gpus=1))),
    )
    ok = Placement({"a": "n", "w": "n"}, (), "GREEDY", 0, 0, 0.0, shares={"a": Share("n", 1, 500)})
    assert validate(cluster, ok) == []

    def broken(bindings, shares):
        return validate(cluster, replace(ok, bindings=bindings, shares=shares))

    assert broken({"a": "n"}, {"a": Share("n", 0, 500)}) == ["n: GPU 0 shared past all of it (1100 thousandths)"]
    assert broken({"a": "n", "b": "n", "w": "n"}, {"a": Share("n", 1, 500), "b": Share("n", 1, 300)}) == []
    assert broken({"a": "n", "b": "m", "w": "n"}, {"a": Share("n", 1, 500), "b": Share("m", 0, 300)}) == []
    assert "a whole GPU shared" in broken({"a": "m", "w": "m"}, {"a": Share("m", 0, 500)})[0]
    assert broken({"a": "n"}, {"a": Share("m", 0, 500)}) == ["a: GPU share on m, pod placed on n"]
    assert broken({"a": "n"}, {}) == ["a: placed on n without a GPU for its share"]
    assert broken({"a": "n"}, {"a": Share("n", 1, 400)}) == ["a: given 400 thousandths of a GPU, asks for 500"]
    assert broken({"a": "n"}, {"a": Share("n", 3, 500)}) == ["a: GPU 3 of n, which has 3"]
    assert broken({"w": "n"}, {"w": Share("n", 1, 500)}) == ["w: given a GPU share it does not ask for"]


# --- properties ---------------------------------------------------------------------------------------------


@st.composite
def shared_clusters(draw):
    nodes = []
    for i in range(draw(st.integers(1, 6))):
        gpus = draw(st.sampled_from((0, 1, 2, 4, 8)))
        shares = {}
        for gpu in range(gpus):
            if draw(st.integers(0, 3)) == 0:
                shares[gpu] = draw(st.sampled_from((100, 250, 500, 750, 1000)))
        whole = draw(st.integers(0, gpus - len(shares))) if gpus > len(shares) else 0
        used = {GPU: whole} if whole else {}
        if shares:
            used[SHARE] = sum(shares.values())  # as the edge counts bound pods' requests
        nodes.append(node(f"n{i}", cpu=draw(st.sampled_from((4, 16, 64))), gpus=gpus, used=used, gpu_shares=shares))
    gangs = []
    for g in range(draw(st.integers(1, 10))):
        size = draw(st.integers(1, 4))
        pods = []
        for i in range(size):
            kind = draw(st.sampled_from(("share", "share", "whole", "cpu")))
            order, priority = g * 10 + i, draw(st.sampled_from((0, 0, 10)))
            if kind == "share":
                milli = draw(st.sampled_from((50, 100, 250, 300, 500, 600, 750, 1000)))
                pods.append(frac(f"g{g}-{i}", milli, order=order, priority=priority))
            else:
                pods.append(pod(f"g{g}-{i}", gpus=draw(st.sampled_from((1, 2))) if kind == "whole" else 0, order=order))
        gangs.append(Gang(f"g{g}", tuple(pods), draw(st.integers(1, size))))
    return Cluster(tuple(nodes), tuple(gangs))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shared_clusters())
def test_shares_never_pass_a_gpu_and_the_placement_is_never_worse_than_greedy(cluster):
    """No GPU past all of it, no whole GPU shared, each share on one GPU of its pod's node, all or nothing per
    gang (the validator), and never fewer gangs per level than the greedy allocator."""
    greedy = solve(cluster, GREEDY)
    best = solve(cluster, SolveConfig(time_limit=2, steps=300))
    for placement in (greedy, best):
        assert validate(cluster, placement) == []
        assert all(m <= 1000 for m in held(cluster, placement).values())
    assert gangs_placed_per_level(cluster, best.bindings) >= gangs_placed_per_level(cluster, greedy.bindings)


def test_preempting_a_whole_gpu_pod_frees_all_of_its_gpu_for_a_share():
    running = (Running("n", {GPU: 1, "cpu": 1000, "pods": 1}, name="low", priority=0),)
    cluster = Cluster(
        (node("n", gpus=1, used={GPU: 1, "cpu": 1000, "pods": 1}),),
        (alone(frac("high", 700, priority=100)),),
        running=running,
    )
    placement = solve(cluster, EXACT)
    assert [e.pod for e in placement.evictions] == ["low"]
    assert placement.nominations == {"high": "n"}


def packs(room: list[int], shares: list[int]) -> bool:
    """Whether `shares` (milli) go onto GPUs with `room` milli left each, one GPU per share: every assignment
    tried, written apart from the solver's packing."""
    if not shares:
        return True
    first, rest = shares[0], shares[1:]
    for d, r in enumerate(room):
        if r >= first:
            room[d] -= first
            ok = packs(room, rest)
            room[d] += first
            if ok:
                return True
    return False


@st.composite
def crowded_shares(draw):
    """Few GPUs, many shares that do not divide a GPU evenly: where columns of totals and GPUs differ most."""
    nodes = tuple(node(f"n{i}", cpu=64, gpus=draw(st.sampled_from((1, 2, 4)))) for i in range(draw(st.integers(1, 3))))
    gangs = []
    for g in range(draw(st.integers(3, 10))):
        if draw(st.integers(0, 3)):
            gangs.append(alone(frac(f"g{g}", draw(st.sampled_from((300, 400, 600, 700))), order=g)))
        else:
            gangs.append(alone(pod(f"g{g}", gpus=1, order=g)))
    return Cluster(nodes, tuple(gangs))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(crowded_shares(), shared_clusters()), st.integers(0, 3))
def test_every_search_step_places_only_what_the_gpus_hold(cluster, seed):
    """The search moves pods on the problem's columns; with shares pending it keeps each GPU's room too, so
    after every step each node's whole-GPU pods and shares fit its GPUs (counted here from the cluster)."""
    from gangsolve.solver.greedy import greedy
    from gangsolve.solver.lns import Search

    problem = Problem(cluster)
    search = Search(problem, greedy(problem), seed=seed, nodes=1, extra=3)
    levels = set(problem.gang_priority_levels())
    for _ in range(30):
        if search.step(levels) is None:
            break
        for n, on in enumerate(cluster.nodes):
            pods = [
                problem.class_pods[problem.parts[g][p].cls]
                for g, c in search.counts.items()
                for (p, m), k in c.items()
                if m == n
                for _ in range(k)
            ]
            whole = sum(int(p.requests.get(GPU, 0)) for p in pods)
            milli = sorted(
                (int(p.requests[SHARE]) for p in pods if p.requests.get(SHARE) and not p.requests.get(GPU)),
                reverse=True,
            )
            free = int(on.allocatable.get(GPU, 0)) - int(on.used.get(GPU, 0)) - len(on.gpu_shares) - whole
            assert free >= 0, f"{on.name}: {whole} whole GPUs placed, {free + whole} free"
            room = [1000 - t for d, t in on.gpu_shares.items() if d >= 0] + [1000] * free
            assert packs(room, milli), f"{on.name}: shares {milli} on GPUs with {room} left"


def test_a_search_step_puts_shares_back_oldest_first_so_large_ones_keep_their_gpus():
    """Two 0.8 shares and a 0.2 hold two GPUs; a pending 0.2 fits beside them. Smallest first, the 0.2s would
    open both GPUs and a 0.8 would find none; oldest first every share goes back and the pending one joins."""
    from gangsolve.solver.lns import Search

    pods = [
        frac(name, milli, order=i) for i, (name, milli) in enumerate([("a", 800), ("b", 800), ("c", 200), ("d", 200)])
    ]
    problem = Problem(Cluster((node("n", gpus=2),), tuple(alone(p) for p in pods)))
    search = Search(problem, greedy(problem, [0, 1, 2]), nodes=1, extra=0)
    step = search.step(set(problem.gang_priority_levels()))
    assert step is not None
    assert step.improved
    assert sorted(search.counts) == [0, 1, 2, 3]
