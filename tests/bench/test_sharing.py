"""The OpenB GPU-sharing experiment (bench/sharing.py): the paper's workload, its policies on devices, and the
fragmentation measure they are compared by."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gangsolve.bench import openb, sharing, sharing_reference
from gangsolve.bench.report import targets
from gangsolve.bench.scenarios import GRIDS, SCENARIOS
from gangsolve.bench.static.runner import PEERS_ONLY, SCHEDULERS
from gangsolve.solver import Cluster, Gang, SolveConfig, solve
from gangsolve.solver.model import SHARE, Pod, Share
from gangsolve.solver.validate import validate, validate_shares
from tests.builders import node, pod


def frac(name: str, milli: int, order: int) -> Pod:
    base = pod(name, cpu=1, order=order)
    return replace(base, requests={**base.requests, SHARE: milli})


def _cluster(seed: int) -> Cluster:
    rng = np.random.default_rng(seed)
    nodes = tuple(node(f"n{i}", cpu=16, gpus=int(rng.choice([1, 2, 4, 8]))) for i in range(6))
    pods = []
    for i in range(60):
        kind = rng.choice(["share", "share", "whole", "cpu"])
        if kind == "share":
            pods.append(frac(f"p{i}", int(rng.choice([100, 250, 470, 650, 810])), i))
        else:
            pods.append(pod(f"p{i}", cpu=1, gpus=int(rng.choice([1, 2])) if kind == "whole" else 0, order=i))
    return Cluster(nodes, tuple(Gang(p.name, (p,), 1) for p in pods))


def test_the_workload_is_the_whole_trace_drawn_until_the_gpus_asked_reach_the_load():
    kinds = {(a.gpus > 0, a.milli < 1000) for a in sharing.trace()}
    assert kinds == {(False, True), (True, True), (True, False)}  # cpu only, shares, whole GPUs
    assert len(sharing.trace()) == 8152
    capacity = 1000 * sum(int(r["gpu"]) for r in openb.trace_nodes())
    arrived = sharing.arrivals(1.1)
    asked = sum(a.gpu_milli for a in arrived)
    assert 1.1 * capacity <= asked < 1.1 * capacity + 8000
    assert sharing.arrivals(1.0) == arrived[: len(sharing.arrivals(1.0))]  # one draw, read to each load


@pytest.mark.parametrize("policy", sorted(sharing.POLICIES))
def test_every_policy_keeps_each_share_on_one_gpu_never_past_all_of_it(policy):
    for seed in range(3):
        cluster = _cluster(seed)
        bindings, shares, state = sharing.simulate(cluster, sharing.POLICIES[policy])
        assert bindings
        assert (state.left[state.present] >= 0).all()
        assert (state.cpu >= 0).all()
        pods = {p.name: p for gang in cluster.gangs for p in gang.pods}
        by_pod = {p: Share(n, gpu, pods[p].requests[SHARE]) for p, (n, gpu) in shares.items()}
        assert validate_shares(cluster, bindings, by_pod) == []


def test_shares_bound_before_and_whole_gpus_held_leave_the_devices_they_leave():
    cluster = Cluster((node("n", gpus=4, used={"nvidia.com/gpu": 1}, gpu_shares={0: 300}),), ())
    assert sharing.State(cluster).left.tolist() == [[700, 1000, 1000, 0]]


def test_gangsolves_placement_replays_onto_devices_within_them():
    cluster = _cluster(7)
    placement = solve(cluster, SolveConfig(time_limit=2, steps=200))
    shares = {p: (s.node, s.gpu) for p, s in placement.shares.items()}
    state = sharing.replay(cluster, dict(placement.bindings), shares)
    assert (state.left[state.present] >= 0).all()
    metrics = sharing.metrics(state, sharing.arrived(cluster))
    assert 0 < metrics["gpu_allocated_share"] <= 1
    assert metrics["gpus_over"] == 0
    peer = sharing.metrics(sharing.simulate(cluster, sharing.best_fit)[2], sharing.arrived(cluster))
    assert metrics["gpu_arrived"] == peer["gpu_arrived"]


def test_the_scenarios_run_the_papers_policies_and_gangsolve_only():
    names = [n for n in SCENARIOS if n.startswith("openb/sharing")]
    assert names == ["openb/sharing-100", "openb/sharing-110", "openb/sharing-120", "openb/sharing-130"]
    for name in names:
        references = tuple(sharing_reference.PEERS) if name == "openb/sharing-130" else ()
        assert SCENARIOS[name].peers == (*sharing.POLICIES, *references)
        assert SCENARIOS[name].only == ("gangsolve", "greedy-gang")
        assert name not in GRIDS["full"]
    assert set(sharing.POLICIES) <= set(SCHEDULERS)
    assert set(sharing.POLICIES) <= set(PEERS_ONLY)


# --- the reference placement (bench/sharing_reference.py) ----------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_the_reference_placement_holds_on_every_device(seed):
    cluster = _cluster(seed)
    bindings, shares, _facts = sharing_reference.place(cluster)
    pods = {p.name: p for gang in cluster.gangs for p in gang.pods}
    assert validate(cluster, bindings) == []
    by_pod = {p: Share(n, gpu, pods[p].requests[SHARE]) for p, (n, gpu) in shares.items()}
    assert validate_shares(cluster, bindings, by_pod) == []
    assert set(shares) == {p for p in bindings if SHARE in pods[p].requests}
    state = sharing.replay(cluster, bindings, shares)
    assert (state.left[state.present] >= 0).all()
    assert sharing.metrics(state, sharing.arrived(cluster))["gpus_over"] == 0


def test_the_reference_finds_the_configuration_first_fit_misses():
    # One node, 2 cpu, 2 GPUs: a whole-GPU pod needing both cpus is worth 1 GPU, two 0.9 shares 1.8. Largest
    # requests first (and every paper policy, in arrival order) take the whole-GPU pod; the LP prices it out.
    whole = pod("whole", cpu=2, gpus=1, order=0)
    shares = [frac("a", 900, 1), frac("b", 900, 2)]
    cluster = Cluster((node("n", cpu=2, gpus=2),), tuple(Gang(p.name, (p,), 1) for p in (whole, *shares)))
    bindings, placed, _facts = sharing_reference.place(cluster)
    assert sorted(bindings) == ["a", "b"]
    assert {gpu for _node, gpu in placed.values()} == {0, 1}
    first_fit = sharing.simulate(cluster, sharing.best_fit)[0]
    assert sorted(first_fit) == ["whole"]


def test_the_top_load_alone_runs_the_references():
    assert {"config-lp", "config-lp-pods"} <= set(SCENARIOS["openb/sharing-130"].peers)
    for n in (100, 110, 120):
        assert not set(sharing_reference.PEERS) & set(SCENARIOS[f"openb/sharing-{n}"].peers)
    assert set(sharing_reference.PEERS) <= set(SCHEDULERS) & set(PEERS_ONLY)


def test_pods_first_the_reference_places_the_most_pods():
    # 3 cpus, 2 GPUs: the whole-GPU pod (2 cpus) and the 0.9 share hold the most GPU (1.9); the two shares and
    # the cpu-only pod (1 + 1 + 0.5 cpus) are the most pods.
    whole = pod("whole", cpu=2, gpus=1, order=0)
    cluster = Cluster(
        (node("n", cpu=3, gpus=2),),
        tuple(Gang(p.name, (p,), 1) for p in (whole, frac("a", 900, 1), frac("b", 400, 2), pod("c", cpu=0.5, order=3))),
    )
    assert sorted(sharing_reference.place(cluster)[0]) == ["a", "whole"]
    assert sorted(sharing_reference.place(cluster, pods_first=True)[0]) == ["a", "b", "c"]


@pytest.mark.parametrize(("gangsolve", "fgd", "met"), [(0.9517, 0.9396, True), (0.9367, 0.9396, False)])
def test_the_bench_checks_gpus_allocated_against_fgds(gangsolve, fgd, met):
    def run(scheduler: str, share: float) -> dict:
        return {"scheduler": scheduler, "gpu_allocated": share * 6212, "gpu_allocated_share": share}

    sc = {"name": "openb/sharing-130", "runs": [run("gangsolve", gangsolve), run("fgd", fgd)]}
    found = []
    targets.sharing_targets(sc, sc["runs"][0], lambda *t: found.append(t))
    assert found == [("GPUs allocated >= FGD's", "openb/sharing-130", f"{gangsolve:.2%} vs {fgd:.2%}", met)]
