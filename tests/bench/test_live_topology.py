"""live/topology without a control plane: the oracle's counts on hand-made bindings, and what each scheduler's
users are given to create."""

from __future__ import annotations

import pytest

from gangsolve.bench import manifests
from gangsolve.bench.live import live_topology
from gangsolve.bench.live.live_scenarios import LIVE_SCENARIOS
from gangsolve.bench.report import tables, targets

RACK, BLOCK = manifests.RACK_LABEL, manifests.BLOCK_LABEL


def cluster() -> list[dict]:
    """Two blocks of two racks of two 8-GPU nodes: n0..n7, n<i> in rack i // 2, block i // 4."""
    nodes = [
        manifests.node(f"n{i}", 96_000, 1024 * 1024, 8, {RACK: f"r{i // 2}", BLOCK: f"b{i // 4}"}) for i in range(8)
    ]
    return [
        *nodes,
        *manifests.upstream_gang("a", 0, 4, 1000, 1024, 8, "high", BLOCK, (RACK,)),
        *manifests.upstream_gang("b", 0, 3, 1000, 1024, 8, "low", BLOCK, (RACK,)),
        *manifests.upstream_gang("c", 0, 1, 1000, 1024, 8, "normal", BLOCK, (RACK,)),
    ]


def test_a_gang_across_two_blocks_is_a_violation():
    got = live_topology.oracle(cluster(), {"a-0": "n0", "a-1": "n1", "a-2": "n2", "a-3": "n4"})  # n4 is in block b1
    assert got["required_violations"] == 1
    assert got["gangs_placed"] == 1  # placed (all 4 bound), and in breach of its required level
    assert got["blocks_per_gang"] == 2
    assert got["racks_per_gang"] == 3


def test_one_block_is_no_violation_and_spans_are_counted():
    bindings = {"a-0": "n0", "a-1": "n0", "a-2": "n1", "a-3": "n2", "b-0": "n4", "b-1": "n5", "b-2": "n5"}
    got = live_topology.oracle(cluster(), bindings)
    assert got["required_violations"] == 0
    assert got["gangs_placed"] == 2
    assert got["placed_by_class"] == {"high": 1, "low": 1}
    assert got["racks_per_gang"] == 1.5  # a: r0 and r1; b: r2
    assert got["blocks_per_gang"] == 1.0
    assert got["pods_bound"] == 7
    assert got["pods"] == 8


def test_a_partial_gang_counts_as_partial_and_can_still_violate():
    got = live_topology.oracle(cluster(), {"b-0": "n0", "b-1": "n7", "c-0": "n3"})
    assert got["partial_gangs"] == 1  # b: 2 of 3
    assert got["gangs_placed"] == 1  # c, a gang of one
    assert got["required_violations"] == 1  # b's two pods are in b0 and b1
    assert got["racks_per_gang"] is None  # no placed gang of more than one pod


def test_a_node_without_the_required_label_is_a_violation():
    objs = [*cluster(), manifests.node("bare", 96_000, 1024 * 1024, 8)]
    got = live_topology.oracle(objs, {"b-0": "n0", "b-1": "n0", "b-2": "bare"})
    assert got["required_violations"] == 1


def test_time_to_place_is_when_the_min_count_th_pod_was_bound():
    bindings = {"a-0": "n0", "a-1": "n0", "a-2": "n1", "a-3": "n1", "c-0": "n2"}
    got = live_topology.oracle(cluster(), bindings, {"a-0": 0.5, "a-1": 3.0, "a-2": 1.0, "a-3": 2.0, "c-0": 0.2})
    assert got["time_to_place_max"] == 3.0
    assert got["time_to_place_p50"] == pytest.approx(1.6)  # median of 0.2 and 3.0


def test_each_scheduler_gets_the_constraint_as_its_users_write_it():
    objs = live_topology.objects()
    groups = [o for o in objs if o["kind"] == "PodGroup"]
    assert all(g["spec"]["schedulingConstraints"] == {"topology": [{"key": BLOCK}]} for g in groups)

    native = live_topology.for_scheduler(objs, "kube-scheduler-gang")
    native_groups = [o for o in native if o["kind"] == "PodGroup"]
    assert [g["spec"] for g in native_groups] == [g["spec"] for g in groups]  # priority class and topology kept
    assert not any(g["metadata"].get("annotations") for g in native_groups)  # no gangsolve annotation
    assert groups[0]["metadata"]["annotations"] == {manifests.PREFERRED_ANNOTATION: RACK}  # the scenario is untouched

    per_pod = live_topology.for_scheduler(objs, "kube-scheduler")
    assert not any(o["kind"] == "PodGroup" for o in per_pod)
    pending = [o for o in per_pod if o["kind"] == "Pod" and not o["spec"].get("nodeName")]
    assert pending
    assert all("schedulingGroup" not in p["spec"] for p in pending)
    first = pending[0]
    job = first["metadata"]["labels"][live_topology.JOB_LABEL]
    affinity = first["spec"]["affinity"]["podAffinity"]
    assert affinity["requiredDuringSchedulingIgnoredDuringExecution"] == [
        {"labelSelector": {"matchLabels": {live_topology.JOB_LABEL: job}}, "topologyKey": BLOCK}
    ]
    (preferred,) = affinity["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred["podAffinityTerm"]["topologyKey"] == RACK
    assert sum(o["kind"] == "Pod" for o in per_pod) == sum(o["kind"] == "Pod" for o in objs)

    assert live_topology.for_scheduler(objs, "gangsolve") == objs


def test_the_scenario_is_registered_with_its_gates_and_oracle():
    scenario = LIVE_SCENARIOS["live/topology-seed1"]
    assert scenario.native_gates == ("GenericWorkload", "TopologyAwareWorkloadScheduling")
    assert scenario.oracle is live_topology.oracle
    assert scenario.users is live_topology.for_scheduler
    nodes = [o for o in scenario.build() if o["kind"] == "Node"]
    assert len(nodes) == scenario.nodes
    assert len({n["metadata"]["labels"][BLOCK] for n in nodes}) == 4
    assert len({n["metadata"]["labels"][RACK] for n in nodes}) == 12


def test_the_report_shows_the_oracle_and_checks_the_topology_target():
    def run(scheduler: str, placed: int, racks: float, violations: int = 0) -> dict:
        oracle = live_topology.oracle(cluster(), {})
        oracle.update(gangs_placed=placed, racks_per_gang=racks, required_violations=violations)
        return {"scheduler": scheduler, "oracle": oracle}

    live = [{"name": "live/topology-seed1", "runs": [run("kube-scheduler-gang", 2, 2.0), run("gangsolve", 3, 1.5)]}]
    rows = tables.live_topology_rows(live)
    assert [r[1] for r in rows] == ["kube-scheduler-gang", "gangsolve"]
    assert rows[1][2] == "3/3"
    assert rows[1][7] == "1.50 / -"
    (target,) = targets.check_targets({"scenarios": [], "live": live})
    assert target["met"]
    live[0]["runs"][1] = run("gangsolve", 3, 1.5, violations=1)
    (target,) = targets.check_targets({"scenarios": [], "live": live})
    assert not target["met"]
