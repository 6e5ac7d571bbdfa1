"""GPU shares live: the store knows which GPU each fractional pod bound or assumed holds (its annotation
`gangsolve.io/gpu-index`, or the GPU the cycle chose), the cycle places shares next to them, and the binder
writes the GPU on the pod before it binds it (a pod whose GPU cannot be written is not bound)."""

from __future__ import annotations

import math

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gangsolve.edge.shares import INDEX
from gangsolve.live.binder import BinderActor
from gangsolve.live.channels import Latest
from gangsolve.live.fence import Unfenced
from gangsolve.live.messages import Bound, CycleResult, Event, GangPlan, Resync
from gangsolve.live.metrics import Metrics
from gangsolve.live.queue import SchedulingQueue
from gangsolve.live.store import ClusterStore
from gangsolve.solver.model import GPU_MEMORY_LABEL, Share
from tests.builders import k8s_node, k8s_pod
from tests.live.actors import solver_actor
from tests.live.fake_kube import FakeKube
from tests.live.resources import NODE, POD


def _pod(name: str, uid: str, **kwargs) -> dict:
    p = k8s_pod(name, **kwargs)
    p["metadata"]["uid"] = uid
    return p


def _store(*pods: dict, gpus: int = 2, labels: dict | None = None) -> ClusterStore:
    s = ClusterStore()
    s.apply(Resync(NODE, [k8s_node("n1", gpus=gpus, labels=labels)]))
    s.apply(Resync(POD, list(pods)))
    return s


def _bound_share(name: str, gpu: str | None, fraction: str = "0.5") -> dict:
    return _bound(name, {"gpu-fraction": fraction, **({INDEX: gpu} if gpu is not None else {})})


def _bound(name: str, annotations: dict[str, str]) -> dict:
    return _pod(name, f"uid-{name}", node_name="n1", phase="Running", annotations=annotations)


# ---------------------------------------------------------------------------------------------- the store


@pytest.mark.parametrize(
    ("pods", "held"),
    [
        ([_bound_share("a", "1")], {1: 500}),
        ([_bound_share("a", "1"), _bound_share("b", "1", "0.25")], {1: 750}),
        # bound by another scheduler without saying which GPU: a GPU of its own, with no room assumed on it
        ([_bound_share("a", None)], {-1: 500}),
        # an index the node does not have: counted the same way, never as free room
        ([_bound_share("a", "7")], {-1: 500}),
        ([_bound("m", {"gpu-memory": "20000", INDEX: "0"})], {0: 250}),  # 20000 MiB of the node's 80000 MiB GPUs
    ],
)
def test_the_store_knows_which_gpus_bound_pods_share(pods, held):
    s = _store(*pods, labels={GPU_MEMORY_LABEL: "80000"})
    view = s.node_view("n1")
    assert view is not None
    assert dict(view.gpu_shares) == held


def test_a_memory_share_whose_node_has_no_memory_label_holds_a_whole_gpu():
    s = _store(_bound("m", {"gpu-memory": "20000", INDEX: "0"}))
    assert dict(s.node_view("n1").gpu_shares) == {-1: 1000}


def test_an_assumed_share_holds_its_gpu_until_bound_and_is_shown_with_its_index():
    s = _store(_pod("p", "u", annotations={"gpu-fraction": "0.5"}))
    s.assume("default/p", [("default/p", "u", "n1")], gpus={"default/p": 1})
    assert dict(s.node_view("n1").gpu_shares) == {1: 500}
    (shown,) = s.view().snapshot.pods
    assert shown["spec"]["nodeName"] == "n1"
    assert shown["metadata"]["annotations"][INDEX] == "1"
    # the binder's patch: a pending pod's GPU index is no news (no cycle for it)
    generation = s.generation
    patched = _pod("p", "u", annotations={"gpu-fraction": "0.5", INDEX: "1"})
    assert not s.apply(Event(POD, "MODIFIED", patched))
    assert s.generation == generation
    # the bind observed: the annotation now says it, the same GPU
    bound = _pod("p", "u", node_name="n1", annotations={"gpu-fraction": "0.5", INDEX: "1"})
    s.apply(Event(POD, "MODIFIED", bound))
    assert not s.is_assumed("default/p")
    assert dict(s.node_view("n1").gpu_shares) == {1: 500}
    # gone: the GPU is whole again
    s.apply(Event(POD, "DELETED", bound))
    assert dict(s.node_view("n1").gpu_shares) == {}


def test_a_forgotten_share_frees_its_gpu():
    s = _store(_pod("p", "u", annotations={"gpu-fraction": "0.5"}))
    s.assume("default/p", [("default/p", "u", "n1")], gpus={"default/p": 0})
    assert s.forget("default/p", "u")
    assert dict(s.node_view("n1").gpu_shares) == {}


def test_a_bound_pods_index_edited_moves_its_share():
    s = _store(_bound_share("a", "0"))
    s.apply(Event(POD, "MODIFIED", _bound_share("a", "1")))
    assert dict(s.node_view("n1").gpu_shares) == {1: 500}


# ---------------------------------------------------------------------------------------------- the cycle


@pytest.mark.asyncio
async def test_a_cycle_places_shares_next_to_the_shares_bound_and_plans_their_gpus():
    """GPU 1 holds a bound half: a pending half goes there (the only way the whole-GPU pod fits too), and the
    plan carries that GPU; the next cycle sees both GPUs taken and places nothing more."""
    s = _store(
        _bound_share("old", "1"),
        _pod("half", "u-half", annotations={"gpu-fraction": "0.5"}),
        _pod("whole", "u-whole", gpus=1),
        _pod("more", "u-more", annotations={"gpu-fraction": "0.6"}),
    )
    actor = solver_actor(s, resync_period=1)
    send, receive = anyio.create_memory_object_stream[GangPlan](math.inf)
    results: Latest[CycleResult] = Latest()
    await actor.cycle(send, results)
    plans = {p.gang: p for p in (receive.receive_nowait() for _ in range(receive.statistics().current_buffer_used))}
    assert set(plans) == {"default/half", "default/whole"}
    assert plans["default/half"].shares == (("default/half", Share("n1", 1, 500)),)
    assert plans["default/whole"].shares == ()
    assert dict(s.node_view("n1").gpu_shares) == {1: 1000}
    await actor.cycle(send, results)
    assert receive.statistics().current_buffer_used == 0  # 0.6 fits on no GPU now
    assert [g.name for g in (await results.take()).cluster.gangs] == ["default/more"]


@pytest.mark.asyncio
async def test_a_bad_share_is_left_out_live_with_its_reason_and_the_rest_scheduled():
    s = _store(
        _pod("bad", "u1", annotations={"gpu-fraction": "2"}), _pod("good", "u2", annotations={"gpu-fraction": "0.5"})
    )
    send, receive = anyio.create_memory_object_stream[GangPlan](math.inf)
    results: Latest[CycleResult] = Latest()
    await solver_actor(s, resync_period=1).cycle(send, results)
    assert [p.gang for p in (receive.receive_nowait(),)] == ["default/good"]
    (skipped,) = (await results.take()).skipped
    assert skipped == (
        "Pod default/bad",
        "Pod default/bad: metadata.annotations.gpu-fraction: expected a share of one GPU in (0, 1] such as '0.5', "
        "got '2'",
    )


# ---------------------------------------------------------------------------------------------- the binder


def _plan(s: ClusterStore, gpus: dict[str, int]) -> GangPlan:
    pods = tuple((f"default/{n}", f"u-{n}", "n1") for n in ("a", "b"))
    s.assume("default/g", pods, gpus={f"default/{k}": v for k, v in gpus.items()})
    shares = tuple((f"default/{k}", Share("n1", v, 500)) for k, v in gpus.items())
    return GangPlan("default/g", pods, 0.0, shares=shares)


def _gang_store(*extra: dict) -> ClusterStore:
    a = _pod("a", "u-a", annotations={"gpu-fraction": "0.5"}, labels={"job": "g"})
    b = _pod("b", "u-b", gpus=1, labels={"job": "g"})
    return _store(a, b, *extra)


@pytest.mark.asyncio
async def test_the_binder_writes_the_gpu_on_the_pod_before_binding_it():
    s, kube = _gang_store(), FakeKube()
    send, receive = anyio.create_memory_object_stream[Bound](math.inf)
    b = BinderActor(kube, s, SchedulingQueue(), Metrics(), Unfenced())
    assert await b.bind_gang(_plan(s, {"a": 1}), send)
    assert sorted(kube.bindings) == [("a", "n1"), ("b", "n1")]
    assert sorted(receive.receive_nowait().pod for _ in range(2)) == ["default/a", "default/b"]
    writes = [(m, p) for m, p, _d in kube.calls if m in ("PATCH", "POST")]
    patch = writes.index(("PATCH", "/api/v1/namespaces/default/pods/a/status"))
    assert patch < writes.index(("POST", "/api/v1/namespaces/default/pods/a/binding"))
    assert kube.patches == [
        ("/api/v1/namespaces/default/pods/a/status", {"metadata": {"uid": "u-a", "annotations": {INDEX: "1"}}})
    ]  # the whole-GPU pod gets no annotation


@pytest.mark.asyncio
async def test_a_pod_whose_gpu_cannot_be_written_is_not_bound():
    s, kube = _gang_store(), FakeKube()
    kube.fail = {"/pods/a": 409}  # the patch (and the bind, never reached) of pod a
    metrics = Metrics()
    b = BinderActor(kube, s, SchedulingQueue(), metrics, Unfenced())
    assert not await b.bind_gang(_plan(s, {"a": 0}), anyio.create_memory_object_stream[Bound](math.inf)[0])
    assert kube.bindings == [("b", "n1")]  # the gang's usual partial failure: the other pod is bound
    assert not any(p.endswith("/a/binding") for _m, p, _d in kube.calls)
    assert not s.is_assumed("default/a")
    assert set(b.queue.backing_off()) == {"default/a"}
    assert metrics.bind_errors.labels("gpu_index_conflict")._value.get() == 1
    assert dict(s.node_view("n1").gpu_shares) == {}  # its GPU is free again


def test_the_last_check_refuses_a_share_whose_gpu_was_taken_meanwhile():
    s = _gang_store()
    plan = _plan(s, {"a": 0})
    b = BinderActor(FakeKube(), s, SchedulingQueue(), Metrics(), Unfenced())
    assert b.last_check(plan) is None  # its own assumption does not count against it
    s.apply(Event(POD, "ADDED", _bound_share("other", "0", "0.75")))
    assert b.last_check(plan) == "n1: GPU 0 shared past all of it (1250 thousandths)"


# ---------------------------------------------------------------------------------------------- the model

share_ops = st.lists(
    st.tuples(
        st.sampled_from(["add", "bind", "assume", "confirm", "forget", "delete", "reindex", "read"]),
        st.integers(0, 4),  # which pod
        st.sampled_from(["n1", "n2"]),
        st.sampled_from([None, "0", "1"]),  # the GPU index a bind or a reindex writes
        st.sampled_from(["0.25", "0.5", "0.1"]),  # the fraction of a new pod
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(share_ops)
def test_what_each_gpu_holds_follows_the_definition(steps):
    """The definition, from scratch: a GPU holds the shares of the pods bound on its node whose annotation
    names it, and of the pods assumed there with it chosen; a bound share whose annotation names none holds a
    GPU of its own. Checked through node_view (as the binder reads it) and the cycle's view after every step."""
    s = ClusterStore()
    s.apply(Resync(NODE, [k8s_node(n, gpus=2) for n in ("n1", "n2")]))
    pods: dict[str, dict] = {}  # name -> {"fraction", "uid", "node", "index"}
    assumed: dict[str, tuple[str, int]] = {}  # name -> (node, gpu)

    def emit(name: str) -> None:
        p = pods[name]
        marks = {"gpu-fraction": p["fraction"], **({INDEX: p["index"]} if p["index"] is not None else {})}
        s.apply(Event(POD, "MODIFIED", _pod(name, p["uid"], node_name=p["node"], annotations=marks)))

    def model(node: str) -> tuple[dict[int, int], list[int]]:
        named: dict[int, int] = {}
        unnamed = []
        for name, p in pods.items():
            milli = round(float(p["fraction"]) * 1000)
            if p["node"] == node:
                if p["index"] is None:
                    unnamed.append(milli)
                else:
                    named[int(p["index"])] = named.get(int(p["index"]), 0) + milli
            elif not p["node"] and assumed.get(name, ("",))[0] == node:
                gpu = assumed[name][1]
                named[gpu] = named.get(gpu, 0) + milli
        return named, sorted(unnamed)

    def seen(held) -> tuple[dict[int, int], list[int]]:
        return {d: m for d, m in held.items() if d >= 0}, sorted(m for d, m in held.items() if d < 0)

    for i, (op, which, node, index, fraction) in enumerate(steps):
        name = f"p{which}"
        if op == "add" and name not in pods:
            pods[name] = {"fraction": fraction, "uid": f"{name}-{i}", "node": None, "index": None}
            emit(name)
        elif name not in pods:
            continue
        elif op == "bind" and not pods[name]["node"] and name not in assumed:
            pods[name].update(node=node, index=index)  # bound by another scheduler, with or without an index
            emit(name)
        elif op == "assume" and not pods[name]["node"] and name not in assumed:
            gpu = int(index or 0)
            s.assume("g", [(f"default/{name}", pods[name]["uid"], node)], gpus={f"default/{name}": gpu})
            assumed[name] = (node, gpu)
        elif op == "confirm" and name in assumed:
            target, gpu = assumed.pop(name)
            pods[name].update(index=str(gpu))
            emit(name)  # the binder's patch, then the bind
            pods[name].update(node=target)
            emit(name)
        elif op == "forget" and name in assumed:
            s.forget(f"default/{name}", pods[name]["uid"])
            del assumed[name]
        elif op == "delete":
            p = pods.pop(name)
            assumed.pop(name, None)
            s.apply(Event(POD, "DELETED", _pod(name, p["uid"], node_name=p["node"])))
        elif op == "reindex" and pods[name]["node"]:
            pods[name].update(index=index)
            emit(name)
        elif op == "read":
            s.node_view(node)  # as the binder's last check does between cycles
        views = {n.name: n for n in s.view().nodes}
        for n in ("n1", "n2"):
            assert seen(views[n].gpu_shares) == model(n), (op, n)
            assert seen(s.node_view(n).gpu_shares) == model(n), (op, n)
