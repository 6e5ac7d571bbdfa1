"""The per-pod baseline filters like kube-scheduler, and binds pods independently (partial gangs)."""

from __future__ import annotations

import pytest
from bench_clusters import cluster_objects, gang, gpu_nodes

from gangsolve.bench import manifests
from gangsolve.bench.baselines import LEAST_ALLOCATED, MOST_ALLOCATED, per_pod, tas_best_fit
from gangsolve.bench.placement_metrics import quality
from gangsolve.bench.scenarios import SCENARIOS
from gangsolve.solver import validate

STRATEGIES = [LEAST_ALLOCATED, MOST_ALLOCATED]


def hard(cluster, bindings):
    return [v for v in validate(cluster, bindings) if ": partial gang (" not in v]


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("name", ["synthetic/100nodes", "synthetic/1000nodes", "openb/gangs"])
def test_respects_capacity_taints_selectors_and_colocation(name, strategy):
    cluster = manifests.to_cluster(SCENARIOS[name].build())
    bindings = per_pod(cluster, strategy)
    assert bindings
    assert hard(cluster, bindings) == []


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_produces_partial_gangs_when_contended(strategy):
    # 8 GPUs, two gangs of 3 x 2 GPUs: one fits, the other gets a pod that cannot run.
    cluster = manifests.to_cluster(
        cluster_objects(gpu_nodes(2), gang("a", 3, 2, created=0), gang("b", 3, 2, created=1))
    )
    bindings = per_pod(cluster, strategy)
    assert len(bindings) == 4
    q = quality(cluster, bindings)
    assert (q["gangs_placed"], q["partial_gangs"], q["stranded_gpus"]) == (1, 1, 2)
    assert any("partial gang" in v for v in validate(cluster, bindings))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_partial_gangs_on_the_synthetic_contended_scenario(strategy):
    cluster = manifests.to_cluster(SCENARIOS["synthetic/100nodes"].build())
    assert quality(cluster, per_pod(cluster, strategy))["partial_gangs"] > 0


def test_taints_and_selectors_filter_nodes():
    tainted = manifests.node(
        "tainted", 32_000, 65536, 8, {"pool": "a"}, [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]
    )
    other = manifests.node("other-model", 32_000, 65536, 8, {"pool": "b"})
    wanted = manifests.node("wanted", 32_000, 65536, 1, {"pool": "a"})
    cluster = manifests.to_cluster(cluster_objects([tainted, other, wanted], gang("g", 2, 1, selector={"pool": "a"})))
    bindings = per_pod(cluster)
    assert list(bindings.values()) == ["wanted"]  # one pod fits the only eligible node, the other waits


def test_queue_order_is_priority_then_creation():
    cluster = manifests.to_cluster(
        cluster_objects(
            gpu_nodes(1, gpus=1),
            gang("early-low", 1, 1, priority="low", created=0),
            gang("late-high", 1, 1, priority="high", created=5),
        )
    )
    assert list(per_pod(cluster)) == ["bench/late-high-worker-0"]


def test_least_allocated_spreads_and_most_allocated_packs():
    cluster = manifests.to_cluster(cluster_objects(gpu_nodes(2, gpus=8), gang("g", 2, 1)))
    assert len(set(per_pod(cluster, LEAST_ALLOCATED).values())) == 2
    assert len(set(per_pod(cluster, MOST_ALLOCATED).values())) == 1


def test_colocated_gang_stays_in_the_first_pods_rack():
    nodes = [manifests.node(f"n{i}", 32_000, 65536, 2, {manifests.RACK_LABEL: f"r{i % 2}"}) for i in range(4)]
    cluster = manifests.to_cluster(cluster_objects(nodes, gang("g", 4, 1, colocate=manifests.RACK_LABEL)))
    bindings = per_pod(cluster, LEAST_ALLOCATED)
    assert len(bindings) == 4
    assert len({cluster.nodes[int(n[1:])].labels[manifests.RACK_LABEL] for n in bindings.values()}) == 1
    assert hard(cluster, bindings) == []


def test_tas_best_fit_keeps_the_required_block_places_whole_gangs_and_prefers_few_racks():
    cluster = manifests.to_cluster(SCENARIOS["topology/1024nodes"].build())
    bindings = tas_best_fit(cluster)
    assert hard(cluster, bindings) == []  # the validator checks the required level (one block per gang)
    result = quality(cluster, bindings)
    assert result["partial_gangs"] == 0
    assert result["gangs_placed"] > 0
    assert result["blocks_per_gang_p95"] == 1
    # BestFit takes a single rack whenever one holds the gang: most gangs of 128 GPUs or less fit one.
    assert result["racks_per_gang"] < 2
