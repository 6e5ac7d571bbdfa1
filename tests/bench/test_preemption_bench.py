"""The preemption benchmark: gangsolve's victims on the small scenarios are the minimum an exhaustive search over
every set of victims finds; the peers' models behave as kube-scheduler's preemption does (sound placements, a
victim gang broken pod by pod, whole PodGroups evicted by workload-aware preemption); the measures count what
they say; `gangsolve bench --preemption` reports it."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from gangsolve.bench import manifests
from gangsolve.bench.baselines import per_pod_preemption, workload_preemption
from gangsolve.bench.bench_cli import bench_command
from gangsolve.bench.live.live_preemption import _in_flight
from gangsolve.bench.static import preemption_rounds
from gangsolve.solver import SolveConfig, solve, validate
from gangsolve.solver.model import Running
from tests.solver.test_preemption import chosen_key, exhaustive


@pytest.mark.parametrize("name", ["preempt/tfjob", "preempt/gpu-4nodes"])
def test_gangsolve_evicts_the_exhaustive_minimum_on_the_small_scenarios(name):
    cluster = manifests.to_cluster(preemption_rounds.SCENARIOS[name].build())
    (gang,) = cluster.gangs
    best = exhaustive(cluster, gang)
    placement = solve(cluster, SolveConfig(time_limit=5))
    assert best is not None
    assert chosen_key(cluster, placement) == best  # (priority, gangs, PDB violations, GPUs, pods, recency)
    stage = next(s for s in placement.stages if s["name"] == "preemption")
    assert stage["status"] == "OPTIMAL"


@pytest.mark.parametrize("model", [per_pod_preemption, workload_preemption])
@pytest.mark.parametrize("name", ["preempt/tfjob", "preempt/gpu-4nodes", "preempt/gpu-100nodes"])
def test_the_peers_models_bind_soundly_and_evict_only_lower_priority_pods(model, name):
    cluster = manifests.to_cluster(preemption_rounds.SCENARIOS[name].build())
    first = model(cluster, 0)
    assert first.evictions
    # Sound on capacity, taints and selectors; kube-scheduler per pod may bind part of a gang.
    assert not [v for v in validate(cluster, first.bindings) if ": partial gang (" not in v]
    priority = {r.name: r.priority for r in cluster.running}
    gangs = {g.name: g for g in cluster.gangs}
    assert all(priority[e.pod] < gangs[e.preemptor].priority for e in first.evictions)
    result = preemption_rounds.simulate(cluster, _scheduler(model), 2.0)
    assert result["preemptors_placed"] == result["preemptors"]


def _scheduler(model) -> str:
    return "kube-scheduler" if model is per_pod_preemption else "kube-scheduler-wap"


def test_per_pod_preemption_breaks_a_gang_workload_aware_preemption_evicts_it_whole():
    cluster = manifests.to_cluster(preemption_rounds.SCENARIOS["preempt/gpu-4nodes"].build())
    per_pod = preemption_rounds.simulate(cluster, "kube-scheduler", 2.0)
    wap = preemption_rounds.simulate(cluster, "kube-scheduler-wap", 2.0)
    mine = preemption_rounds.simulate(cluster, "gangsolve", 2.0)
    assert per_pod["victim_gangs_broken"] >= 1
    assert wap["victim_gangs_broken"] == 0
    assert mine["victim_gangs_broken"] == 0
    assert mine["gpus_evicted"] <= min(per_pod["gpus_evicted"], wap["gpus_evicted"])


def test_measure_counts_broken_gangs_pdb_violations_and_futile_evictions():
    def pod(name, gang="", pdbs=(), gpus=1):
        return Running("n", {"nvidia.com/gpu": gpus, "pods": 1}, name=name, gang=gang, min_member=2, pdbs=pdbs)

    victims = [pod("a0", "a"), pod("a1", "a"), pod("a2", "a"), pod("b0", "b"), pod("b1", "b"), pod("s", pdbs=("p",))]
    cluster = manifests.to_cluster(preemption_rounds.SCENARIOS["preempt/gpu-4nodes"].build())
    start = replace(cluster, running=tuple(victims), nominated={}, budgets={"p": 0})
    sim = preemption_rounds.Sim(start)
    # Gang a loses two of three (one left, below its minimum of 2): broken. Gang b goes whole: not broken.
    sim.evicted = [(victims[0], "g1"), (victims[1], "g1"), (victims[3], "g2"), (victims[4], "g2"), (victims[5], "g2")]
    sim.placed_round = {"g1": 1}
    m = preemption_rounds.measure(start, sim, [0.1])
    assert (m["pods_evicted"], m["gpus_evicted"], m["victim_gangs"]) == (5, 5, 3)
    assert m["victim_gangs_broken"] == 1
    assert m["pdb_violations"] == 1
    assert m["futile_evictions"] == 3  # g2 never placed


def test_the_bench_command_reports_preemption(tmp_path):
    result = CliRunner().invoke(
        bench_command, ["--preemption", "--scenario", "preempt/gpu-4nodes", "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "results.json").read_text())
    (sc,) = data["preemption"]
    assert [r["scheduler"] for r in sc["runs"]] == ["kube-scheduler", "kube-scheduler-wap", "gangsolve"]
    assert "preemptors placed" in (tmp_path / "results.md").read_text()
    targets = {t["target"] for t in data["targets"]}
    assert "preemption: 0 victim gangs broken, 0 futile evictions" in targets


class _Pods:
    """The one API answer `_in_flight` reads: the scenario namespace's pods."""

    def __init__(self, *pods: dict) -> None:
        self.pods = pods

    def request(self, method: str, path: str) -> dict:
        assert (method, path) == ("GET", f"/api/v1/namespaces/{manifests.NAMESPACE}/pods")
        return {"items": list(self.pods)}


def _pod(deleting: bool = False, nominated: str = "", node: str = "") -> dict:
    metadata = {"name": "p", "deletionTimestamp": "2026-01-01T00:00:00Z"} if deleting else {"name": "p"}
    spec = {"nodeName": node} if node else {}
    return {"metadata": metadata, "spec": spec, "status": {"nominatedNodeName": nominated}}


def test_a_live_run_is_not_idle_while_a_victim_terminates_or_a_nominated_pod_waits():
    assert not _in_flight(_Pods(_pod(), _pod(node="n1"), _pod(nominated="n1", node="n1")))
    assert _in_flight(_Pods(_pod(), _pod(deleting=True, node="n1")))  # its exit will free room
    assert _in_flight(_Pods(_pod(nominated="n1")))  # its scheduler retries it once the victims are gone
