"""The live cycle with node pools solved apart (`solver-processes`): each pool's gang is placed on its own
nodes, and the metric and log say how many pools the cycle was solved in."""

from __future__ import annotations

import math

import anyio
import pytest

from gangsolve.live.channels import Latest
from gangsolve.live.messages import CycleResult, GangPlan, Resync
from gangsolve.live.metrics import Metrics
from gangsolve.live.store import ClusterStore
from tests.builders import k8s_node, k8s_pod, k8s_pod_group
from tests.live.actors import solver_actor
from tests.live.resources import NODE, POD, XPG


def _store() -> ClusterStore:
    s = ClusterStore()
    s.apply(Resync(NODE, [k8s_node(f"{p}{i}", gpus=8, labels={"pool": p}) for p in "ab" for i in range(2)]))
    pods, groups = [], []
    for job, p in (("ja", "a"), ("jb", "b")):
        group = k8s_pod_group(job, 2)
        group["metadata"]["uid"] = f"uid-{job}"
        groups.append(group)
        pods += [
            k8s_pod(f"{job}-{i}", gpus=8, labels={"scheduling.x-k8s.io/pod-group": job}, nodeSelector={"pool": p})
            for i in range(2)
        ]
    s.apply(Resync(POD, pods))
    s.apply(Resync(XPG, groups))
    return s


async def _cycle(parallel: int) -> tuple[CycleResult, Metrics]:
    metrics = Metrics()
    actor = solver_actor(_store(), metrics, time_limit=1.0, parallel=parallel)
    send, _receive = anyio.create_memory_object_stream[GangPlan](math.inf)
    results: Latest[CycleResult] = Latest()
    await actor.cycle(send, results)
    return await results.take(), metrics


@pytest.mark.asyncio
@pytest.mark.parametrize("parallel", [1, 2])
async def test_each_pool_places_its_gang_and_the_metric_counts_the_pools(parallel):
    result, metrics = await _cycle(parallel)
    bindings = result.placement.bindings
    assert sorted(bindings) == ["default/ja-0", "default/ja-1", "default/jb-0", "default/jb-1"]
    assert {bindings[f"default/ja-{i}"][0] for i in range(2)} == {"a"}
    assert {bindings[f"default/jb-{i}"][0] for i in range(2)} == {"b"}
    assert metrics.registry.get_sample_value("gangsolve_cycle_pools") == parallel
