"""What each scheduler's users create in the live benchmark (no control plane needed): kube-scheduler's native
PodGroups as its users write them (the API shape read from the pinned v1.37.2 API server's OpenAPI,
scheduling.k8s.io/v1beta1), scheduler-plugins PodGroups for gangsolve, nothing extra for plain kube-scheduler;
and the scale scenarios' names and modes."""

from __future__ import annotations

import anyio

from gangsolve.bench import manifests, scenarios
from gangsolve.bench.devcluster.fake_nodes import GPU_RESOURCE as GPU
from gangsolve.bench.live.live_scenarios import LIVE_GRIDS, LIVE_SCENARIOS
from gangsolve.bench.live.populate import arrivals, arrive


def synthetic() -> tuple[list[dict], object]:
    objs = scenarios.synthetic(100, 40, seed=100)
    return objs, manifests.to_cluster(objs)


def test_native_pod_groups_carry_the_pods_priority_and_the_gangs_topology():
    objs, cluster = synthetic()
    gangs = {g.name: g for g in cluster.gangs}
    for arrival in arrivals(objs, cluster, "kube-scheduler-gang"):
        gang = gangs[arrival.gang]
        if len(arrival.pods) < 2:
            assert arrival.groups == []  # a single pod needs no gang
            continue
        (group,) = arrival.groups
        assert group["apiVersion"] == "scheduling.k8s.io/v1beta1"
        spec = group["spec"]
        assert spec["schedulingPolicy"] == {"gang": {"minCount": gang.need}}
        # kube-scheduler fails a PodGroup whose priority differs from its pods' (validatePodGroup, v1.37).
        assert {p["spec"]["priorityClassName"] for p in arrival.pods} == {spec["priorityClassName"]}
        for p in arrival.pods:
            assert p["spec"]["schedulingGroup"] == {"podGroupName": group["metadata"]["name"]}
            assert p["spec"]["schedulerName"] == "default-scheduler"
        if gang.colocate:
            assert spec["schedulingConstraints"] == {"topology": [{"key": gang.colocate}]}
            assert all("affinity" not in p["spec"] for p in arrival.pods)  # the group's constraint instead
        else:
            assert "schedulingConstraints" not in spec


def test_each_scheduler_gets_its_own_group_objects_and_the_same_pods():
    objs, cluster = synthetic()
    by = {s: arrivals(objs, cluster, s) for s in ("kube-scheduler", "kube-scheduler-gang", "gangsolve")}
    assert all(a.groups == [] for a in by["kube-scheduler"])
    assert {g["apiVersion"] for a in by["gangsolve"] for g in a.groups} == {"scheduling.x-k8s.io/v1alpha1"}
    names = {s: [p["metadata"]["name"] for a in arr for p in a.pods] for s, arr in by.items()}
    assert names["kube-scheduler"] == names["kube-scheduler-gang"] == names["gangsolve"]
    assert len(names["gangsolve"]) == sum(len(g.pods) for g in cluster.gangs)
    # Co-located gangs keep their per-pod affinity for plain kube-scheduler (its only way to say it).
    colocated = {g.name for g in cluster.gangs if g.colocate}
    assert colocated
    assert all("affinity" in p["spec"] for a in by["kube-scheduler"] if a.gang in colocated for p in a.pods)


class HeldGroups:
    """A client at the HTTP seam: a PodGroup is answered only once `expected` PodGroups are in flight together
    (a creator that waits for each before the next never gets there, and times out); pods at once. The order of
    answers is kept."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.in_flight: set[str] = set()
        self.all_in = anyio.Event()
        self.answered: list[str] = []

    async def post(self, path: str, body: dict) -> None:
        name = body["metadata"]["name"]
        if body["kind"] == "PodGroup":
            self.in_flight.add(name)
            if len(self.in_flight) == self.expected:
                self.all_in.set()
            with anyio.move_on_after(5):
                await self.all_in.wait()
            # (not a timeout, which the creator retries)
            assert self.all_in.is_set(), f"PodGroup {name} waited alone: the next gang's never came"
        self.answered.append(name)


def test_a_gangs_pods_wait_for_its_pod_group_and_not_for_the_next_gangs():
    objs, cluster = synthetic()
    gangs = [a for a in arrivals(objs, cluster, "gangsolve") if a.groups][:3]
    kube = HeldGroups(len(gangs))
    created: dict[str, float] = {}
    anyio.run(arrive, kube, gangs, None, created, 10_000)  # (concurrency: never the limit here)
    order = {name: i for i, name in enumerate(kube.answered)}
    for gang in gangs:
        group = gang.groups[0]["metadata"]["name"]
        assert all(order[p["metadata"]["name"]] > order[group] for p in gang.pods)
    assert set(created) == {p["metadata"]["name"] for a in gangs for p in a.pods}


def test_scale_scenarios_cover_every_shape_size_and_rate():
    for size in (1000, 5000):
        grid = LIVE_GRIDS[f"scale-{size}"]
        assert {LIVE_SCENARIOS[n].mode for n in grid} == {"burst", "stream"}
        for shape in ("1000x3", "3x1000", "10x500", "synthetic"):
            assert f"live/{size}nodes-{shape}-burst" in grid
        for shape in ("1000x3", "synthetic"):
            assert {LIVE_SCENARIOS[f"live/{size}nodes-{shape}-stream{r}"].rate for r in (100, 300, 1000)} == {
                100,
                300,
                1000,
            }
    # 16,384 nodes: the scheduler_perf shapes only (the synthetic mix's 160,000 background pods are not created).
    frontier = LIVE_GRIDS["scale-16384"]
    assert {n for n in frontier if "synthetic" in n} == set()
    assert {"live/16384nodes-1000x3-burst", "live/16384nodes-3x1000-burst", "live/16384nodes-1000x3-stream300"} <= set(
        frontier
    )
    burst = LIVE_SCENARIOS["live/5000nodes-3x1000-burst"]
    pods = [o for o in burst.build() if o["kind"] == "Pod"]
    assert (burst.nodes, len(pods), burst.client_qps) == (5000, 3000, 5000.0)


def test_volcano_users_give_every_gang_a_volcano_pod_group_with_its_minimum_and_resources():
    objs, cluster = synthetic()
    gangs = {g.name: g for g in cluster.gangs}
    by_name = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Pod"}
    volcano_arrivals = arrivals(objs, cluster, "volcano")
    assert len(volcano_arrivals) == len(cluster.gangs)
    for arrival in volcano_arrivals:
        gang = gangs[arrival.gang]
        (group,) = arrival.groups  # single pods too: vc-scheduler binds no pod without a PodGroup
        assert group["apiVersion"] == "scheduling.volcano.sh/v1beta1"
        assert (group["spec"]["minMember"], group["spec"]["queue"]) == (gang.need, "default")
        gpus = sum(
            int(by_name[p["metadata"]["name"]]["spec"]["containers"][0]["resources"]["requests"].get(GPU, 0))
            for p in arrival.pods
        )
        assert int(group["spec"]["minResources"].get(GPU, "0")) == gpus
        classes = {p["spec"].get("priorityClassName") for p in arrival.pods}
        assert group["spec"].get("priorityClassName") == (classes.pop() if len(classes) == 1 else None)
        for p in arrival.pods:
            assert p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == group["metadata"]["name"]
            assert p["spec"]["schedulerName"] == "volcano"
    plain = [p["metadata"]["name"] for a in arrivals(objs, cluster, "kube-scheduler") for p in a.pods]
    assert [p["metadata"]["name"] for a in volcano_arrivals for p in a.pods] == plain
