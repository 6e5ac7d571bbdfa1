"""Scenarios are deterministic, valid snapshots that `gangsolve solve` reads back unchanged."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner

from gangsolve.bench import manifests
from gangsolve.bench.scenarios import GRIDS, SCENARIOS, shape_counts
from gangsolve.bench.timeline.simulation import TIMELINE_GRIDS, TIMELINES
from gangsolve.cli import cli
from gangsolve.edge.gangs import build_cluster
from gangsolve.edge.snapshot import read
from gangsolve.solver import validate
from gangsolve.solver.model import GPU, PODS

SMALL = ["synthetic/10nodes", "synthetic/100nodes", "kube-perf/100nodes-20x3", "openb/gangs"]


def test_grids_name_registered_scenarios():
    for grid in GRIDS.values():
        assert set(grid) <= set(SCENARIOS)
    for grid in TIMELINE_GRIDS.values():
        assert set(grid) <= set(TIMELINES)
    assert set(GRIDS["quick"]) < set(GRIDS["full"])
    assert {"synthetic/5000nodes", "kube-perf/5000nodes-1000x3", "kube-perf/5000nodes-3x1000"} <= set(GRIDS["full"])


@pytest.mark.parametrize("name", SMALL)
def test_generation_is_deterministic(name):
    assert manifests.dumps(SCENARIOS[name].build()) == manifests.dumps(SCENARIOS[name].build())


@pytest.mark.parametrize("name", SMALL)
def test_snapshot_round_trips_through_the_solve_edge(name, tmp_path):
    objs = SCENARIOS[name].build()
    path = tmp_path / "snapshot.json"
    path.write_bytes(manifests.dumps(objs))
    cluster = build_cluster(read(str(path)), manifests.SCHEDULER)

    assert len(cluster.nodes) == SCENARIOS[name].nodes
    assert all(n.allocatable.get(PODS, 0) > 0 and n.ready for n in cluster.nodes)
    pending = [o for o in objs if o["kind"] == "Pod" and "nodeName" not in o["spec"]]
    assert sum(len(g.pods) for g in cluster.gangs) == len(pending) > 0
    groups = {o["metadata"]["name"]: o["spec"]["minMember"] for o in objs if o["kind"] == "PodGroup"}
    for gang in cluster.gangs:
        if gang.name.split("/")[1] in groups:
            assert gang.min_member == groups[gang.name.split("/")[1]]
    # Running background pods fit their nodes: nothing starts overcommitted.
    for node in cluster.nodes:
        for r, q in node.used.items():
            assert q <= node.allocatable.get(r, 0), (node.name, r)


def test_synthetic_cluster_has_the_issue_ingredients():
    objs = SCENARIOS["synthetic/100nodes"].build()
    cluster = manifests.to_cluster(objs)
    gpus = {n.allocatable.get(GPU, 0) for n in cluster.nodes}
    assert gpus == {0, 4, 8}
    assert len({n.labels.get(manifests.GPU_MODEL_LABEL) for n in cluster.nodes if n.allocatable.get(GPU)}) >= 3
    assert any(n.taints for n in cluster.nodes)
    assert any(n.used.get(GPU) for n in cluster.nodes)  # background load
    pods = [p for g in cluster.gangs for p in g.pods]
    assert any(p.node_selector for p in pods)
    assert any(p.tolerations for p in pods)
    assert len({p.priority for p in pods}) == 3
    assert any(g.colocate for g in cluster.gangs)
    assert any(
        any(GPU not in p.requests for p in g.pods) and any(GPU in p.requests for p in g.pods) for g in cluster.gangs
    )  # TFJob: parameter servers without GPUs, GPU workers
    sizes = {len(g.pods) for g in cluster.gangs}
    assert min(sizes) <= 2
    assert max(sizes) >= 16


def test_shape_counts_cover_every_shape_even_at_ten_nodes():
    assert sum(shape_counts(10)) == 10
    assert min(shape_counts(10)) >= 1
    assert sum(shape_counts(5000)) == 5000


def test_kube_perf_shapes():
    cluster = manifests.to_cluster(SCENARIOS["kube-perf/100nodes-20x3"].build())
    assert len(cluster.gangs) == 20
    assert {len(g.pods) for g in cluster.gangs} == {3}
    assert {g.min_member for g in cluster.gangs} == {3}


def test_gangsolve_solve_reads_a_written_snapshot(tmp_path):
    objs = SCENARIOS["synthetic/10nodes"].build()
    path = tmp_path / "s.json"
    path.write_bytes(manifests.dumps(objs))
    result = CliRunner().invoke(cli, ["solve", str(path), "-o", "json", "--time-limit", "1"])
    assert result.exit_code == 0, result.output
    plan = orjson.loads(result.stdout)
    assert plan["bindings"]
    assert validate(manifests.to_cluster(objs), plan["bindings"]) == []


def test_pools_scenarios_are_node_pools_that_the_solver_splits():
    """Four node pools, each the synthetic mix with its own gangs selecting it: names stay unique, every pending
    pod selects its pool, and a cycle splits into pools that share no node."""
    from gangsolve.bench.scenarios import POOL_LABEL, pools
    from gangsolve.edge.snapshot import of_documents
    from gangsolve.solver import pools as solver_pools

    objs = pools(400, 40, seed=7)
    names = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objs]
    assert len(names) == len(set(names))
    cluster = build_cluster(of_documents(objs), manifests.SCHEDULER)
    pool_of = {n.name: n.labels[POOL_LABEL] for n in cluster.nodes}
    assert sorted(set(pool_of.values())) == ["pool-0", "pool-1", "pool-2", "pool-3"]
    assert all(len([p for p in pool_of.values() if p == f"pool-{i}"]) == 100 for i in range(4))
    pending = [pod for gang in cluster.gangs for pod in gang.pods]
    assert pending
    assert all(POOL_LABEL in pod.node_selector for pod in pending)
    groups = solver_pools.groups(cluster, 2)
    assert groups is not None
    assert len(groups) == 2
    for group in groups:
        chosen = {pod.node_selector[POOL_LABEL] for gang in group.cluster.gangs for pod in gang.pods}
        assert {pool_of[n.name] for n in group.cluster.nodes} == chosen
