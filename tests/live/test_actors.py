"""The solver and binder actors on a fake API: assume -> bind all -> forget on failure, never bind twice."""

import anyio
import pytest

from gangsolve.live.binder import BinderActor
from gangsolve.live.cache import ClusterCache
from gangsolve.live.kube import ApiError
from gangsolve.live.metrics import Metrics
from gangsolve.live.solver_actor import GangPlan, SolverActor
from gangsolve.live.watchers import RESOURCES, Resync
from tests.builders import k8s_node, k8s_pdb, k8s_pod

POD, NODE, PDB = RESOURCES[0], RESOURCES[1], RESOURCES[2]


class FakeKube:
    def __init__(self, fail: dict[str, int] | None = None) -> None:
        self.fail = fail or {}
        self.bindings: list[tuple[str, str]] = []

    async def post(self, path: str, body: dict) -> dict:
        name = body["metadata"]["name"]
        await anyio.sleep(0)
        if name in self.fail:
            raise ApiError(self.fail[name], b'{"reason":"Conflict","message":"nope"}', "POST", path)
        self.bindings.append((name, body["target"]["name"]))
        return {}


def cluster_cache(n_pods=3, gpus=4) -> ClusterCache:
    c = ClusterCache()
    c.apply(Resync(NODE, [k8s_node("n1", gpus=gpus)]))
    pods = []
    for i in range(n_pods):
        p = k8s_pod(f"w{i}", gpus=1, labels={"job": "j"})
        p["metadata"]["uid"] = f"u{i}"
        pods.append(p)
    c.apply(Resync(POD, pods))
    c.apply(Resync(PDB, [k8s_pdb("j", n_pods, {"job": "j"})]))
    return c


def plan_of(c: ClusterCache, n: int) -> GangPlan:
    for i in range(n):
        c.assume(f"default/w{i}", "n1", f"u{i}", "default/j")
    return GangPlan("default/j", tuple((f"default/w{i}", f"u{i}", "n1") for i in range(n)), 0.0)


@pytest.mark.asyncio
async def test_binder_binds_the_whole_gang_and_keeps_assumptions_until_the_watch_confirms():
    c, kube = cluster_cache(), FakeKube()
    bound = []
    b = BinderActor(kube, c, Metrics(), on_bound=lambda *a: bound.append(a))
    assert await b.bind_gang(plan_of(c, 3))
    assert sorted(kube.bindings) == [("w0", "n1"), ("w1", "n1"), ("w2", "n1")]
    assert len(bound) == 3
    assert set(c.assumed) == {"default/w0", "default/w1", "default/w2"}
    assert not await b.bind_gang(plan_of(c, 3))  # a plan naming pods bound already: nothing is bound again
    assert len(kube.bindings) == 3


@pytest.mark.asyncio
async def test_a_failed_bind_forgets_that_pod_and_plans_again():
    c, kube = cluster_cache(), FakeKube(fail={"w1": 409})
    metrics = Metrics()
    b = BinderActor(kube, c, metrics)
    plan = plan_of(c, 3)
    v = c.version
    assert not await b.bind_gang(plan)
    assert "default/w1" not in c.assumed
    assert c.version > v
    assert metrics.bind_errors.labels("conflict")._value.get() == 1


@pytest.mark.asyncio
async def test_a_gang_that_lost_a_pod_is_not_bound_at_all():
    c, kube = cluster_cache(), FakeKube()
    plan = plan_of(c, 3)
    c.objects["Pod"].pop(("", "default", "w2"))  # deleted while the solver ran
    b = BinderActor(kube, c, Metrics())
    assert not await b.bind_gang(plan)
    assert kube.bindings == []
    assert c.assumed == {}


@pytest.mark.asyncio
async def test_nothing_is_bound_without_leadership():
    c, kube = cluster_cache(), FakeKube()
    b = BinderActor(kube, c, Metrics(), may_bind=lambda: False)
    assert not await b.bind_gang(plan_of(c, 3))
    assert kube.bindings == []


def solver_actor(cache):
    """A SolverActor whose plans and cycle results are collected in lists."""
    plans, results = [], []

    async def placed(plan):
        plans.append(plan)

    actor = SolverActor(
        cache,
        Metrics(),
        scheduler_name="gangsolve",
        group_label=None,
        time_limit=1,
        debounce=0,
        resync_period=1,
        on_placed=placed,
        on_result=results.append,
    )
    return actor, plans, results


@pytest.mark.asyncio
async def test_a_cycle_assumes_placed_gangs_and_the_next_cycle_does_not_place_them_again():
    c = cluster_cache(n_pods=3, gpus=4)
    actor, plans, results = solver_actor(c)
    await actor.cycle()
    (plan,) = plans
    assert sorted(k for k, _u, _n in plan.pods) == ["default/w0", "default/w1", "default/w2"]
    assert {u for _k, u, _n in plan.pods} == {"u0", "u1", "u2"}
    assert set(c.assumed) == {"default/w0", "default/w1", "default/w2"}
    await actor.cycle()
    assert len(plans) == 1  # assumed pods count as bound: nothing planned twice
    assert results[-1].cluster.gangs == ()


@pytest.mark.asyncio
async def test_a_gang_that_does_not_fit_is_reported_not_planned():
    c = cluster_cache(n_pods=5, gpus=4)
    actor, plans, results = solver_actor(c)
    await actor.cycle()
    assert plans == []
    (gang,) = results[0].placement.gangs
    assert not gang.placed
    assert "nvidia.com/gpu" in gang.reason


def test_an_unreadable_object_is_left_out_and_the_rest_still_scheduled():
    from gangsolve.live.solver_actor import plan
    from gangsolve.snapshot import Snapshot
    from tests.builders import k8s_pod_group

    bad = k8s_pod_group("bad", "many")
    snap = Snapshot(
        nodes=[k8s_node("n1", gpus=4)],
        pods=[k8s_pod("ok", gpus=1), k8s_pod("b", gpus=1, labels={"scheduling.x-k8s.io/pod-group": "bad"})],
        pod_groups={("scheduling.x-k8s.io", "default", "bad"): bad},
    )
    skipped = []
    cluster, placement = plan(snap, "gangsolve", None, 1, skipped)
    assert [str(e) for e in skipped] == ["PodGroup default/bad: spec.minMember: expected a whole number, got 'many'"]
    assert placement.bindings == {"default/ok": "n1"}  # b waits for a readable PodGroup

    from gangsolve.live.cache import ClusterCache
    from gangsolve.live.feedback import Feedback
    from gangsolve.live.solver_actor import CycleResult

    fb = Feedback(None, ClusterCache(), Metrics(), identity="t", scheduler_name="gangsolve")
    result = CycleResult(snap, cluster, placement, tuple((e.obj, str(e)) for e in skipped))
    assert fb._waiting_for_pod_group(result) == {
        "default/b": (
            "PodGroup default/bad (scheduling.x-k8s.io) cannot be read: "
            "PodGroup default/bad: spec.minMember: expected a whole number, got 'many'"
        )
    }
