"""Metrics on hand-made placements."""

from __future__ import annotations

import pytest
from bench_clusters import cluster_objects, gang, gpu_nodes

from gangsolve.bench import manifests
from gangsolve.bench.placement_metrics import gap, percentile, priority_key, quality


def test_partial_gang_strands_its_gpus():
    cluster = manifests.to_cluster(cluster_objects(gpu_nodes(2), gang("a", 4, 2), gang("b", 2, 1)))
    bindings = {
        "bench/a-worker-0": "n0",
        "bench/a-worker-1": "n1",  # a: 2 of 4 pods, 4 GPUs stranded
        "bench/b-worker-0": "n0",
        "bench/b-worker-1": "n0",  # b: placed whole on one node
    }
    q = quality(cluster, bindings)
    assert q["gangs"] == 2
    assert q["gangs_placed"] == 1
    assert q["partial_gangs"] == 1
    assert q["stranded_gpus"] == 4
    assert q["pods_placed"] == 4
    assert q["gpus_placed"] == 6
    assert q["gpu_allocation"] == pytest.approx(6 / 8)
    assert q["gpu_useful"] == pytest.approx(2 / 8)
    assert q["nodes_per_gang"] == 1.0
    assert q["violations"] == []


def test_elastic_gang_counts_as_placed_at_its_minimum():
    cluster = manifests.to_cluster(cluster_objects(gpu_nodes(2), gang("e", 4, 1, min_member=2)))
    q = quality(cluster, {"bench/e-worker-0": "n0", "bench/e-worker-1": "n1"})
    assert (q["gangs_placed"], q["partial_gangs"], q["nodes_per_gang"]) == (1, 0, 2.0)


def test_running_pods_count_towards_allocation_and_violations_are_reported():
    nodes = gpu_nodes(1)
    running = manifests.pod("running", 1000, 1024, 3, node_name="n0", scheduler_name="default-scheduler")
    cluster = manifests.to_cluster(cluster_objects(nodes, [running], gang("g", 1, 2)))
    q = quality(cluster, {"bench/g-worker-0": "n0"})
    assert q["gpus_running"] == 3
    assert q["gpu_allocation"] == pytest.approx(5 / 4)
    assert any("overcommitted" in v for v in q["violations"])


def test_placed_by_priority_and_its_order():
    cluster = manifests.to_cluster(
        cluster_objects(
            gpu_nodes(1),
            gang("h", 1, 1, priority="high"),
            gang("l", 1, 1, priority="low"),
            gang("l2", 1, 1, priority="low"),
        )
    )
    q = quality(cluster, {"bench/l-worker-0": "n0", "bench/l2-worker-0": "n0"})
    assert q["placed_by_priority"] == {"1000": 0, "0": 2}
    assert priority_key(q) == (0, 2)
    assert priority_key(quality(cluster, {"bench/h-worker-0": "n0"})) > priority_key(q)


def test_gap_and_percentile():
    assert gap(99, 100) == pytest.approx(0.01)
    assert gap(5, 0) is None
    assert gap(5, None) is None
    assert percentile([1.0, 2.0, 3.0], 50) == 2.0
    assert percentile([], 99) is None
