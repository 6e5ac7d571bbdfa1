"""The incremental view with preemption and DRA: a cycle reads every pod only when it may preempt or holds a
nomination (victims are chosen among all running pods), the room a nomination holds stays its gang's while
its victims leave and their going wakes it, a partial view never preempts, and device capacity and claims the
solver actor allocated reach the nodes a view-based cycle solves on."""

from __future__ import annotations

import copy
import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import anyio
import pytest

from gangsolve.edge.estimates import EXPECTED_RUNTIME_ANNOTATION
from gangsolve.live.channels import Latest
from gangsolve.live.messages import CycleResult, Event, GangPlan, Preemption, Resync
from gangsolve.live.metrics import Metrics
from gangsolve.live.solver_actor import SolverActor
from gangsolve.live.store import ClusterStore
from tests.builders import (
    k8s_claim,
    k8s_device_class,
    k8s_gpu,
    k8s_node,
    k8s_pdb,
    k8s_pod,
    k8s_slice,
    with_claims,
)
from tests.live.actors import solver_actor
from tests.live.resources import CLAIM, CLASS, NODE, PDB, POD, SLICE


def pod(name: str, uid: str, **kw) -> dict:
    p = k8s_pod(name, **kw)
    p["metadata"]["uid"] = uid
    return p


def full_node_store(pending_priority: int) -> ClusterStore:
    """Node n1 (4 GPUs) full of four low-priority pods of another namespace and owner, each started a minute after
    the last; node n2 without GPUs; a pending 2-GPU pod of ours at `pending_priority`."""
    s = ClusterStore()
    s.apply(Resync(NODE, [k8s_node("n1", gpus=4), k8s_node("n2")]))
    running = []
    for i in range(4):
        p = pod(f"low-{i}", f"v{i}", ns="batch", gpus=1, node_name="n1", phase="Running", owner="low", priority=0)
        p["status"]["startTime"] = f"2026-01-01T10:0{i}:00Z"
        running.append(p)
    s.apply(Resync(POD, [*running, pod("high", "h", gpus=2, priority=pending_priority)]))
    return s


def solver(store: ClusterStore, preemption: bool = True, plan_relaxation: float = 0.0) -> SolverActor:
    """The solver actor; reservations held from their earliest starts unless `plan_relaxation` says."""
    return solver_actor(
        store,
        Metrics(),
        scheduler_name="gangsolve",
        group_label=None,
        time_limit=2,
        debounce=0,
        resync_period=3600,
        preemption=preemption,
        plan_relaxation=plan_relaxation,
    )


def streams():
    return anyio.create_memory_object_stream[GangPlan | Preemption](math.inf)


def sent(receive) -> list[GangPlan | Preemption]:
    out = []
    while True:
        try:
            out.append(receive.receive_nowait())
        except anyio.WouldBlock:
            return out


def names(result: CycleResult) -> set[str]:
    return {p["metadata"]["name"] for p in result.snapshot.pods}


@pytest.mark.asyncio
async def test_a_cycle_reads_every_pod_only_when_it_may_preempt():
    # Higher than every pod bound: the cycle reads them all and evicts two of the gang in the way.
    s = full_node_store(pending_priority=100)
    actor, (send, receive), results = solver(s), streams(), Latest[CycleResult]()
    result = await actor.cycle(send, results)
    assert result is not None
    assert actor.whole_views == 1
    assert names(result) == {"high", "low-0", "low-1", "low-2", "low-3"}
    (preemption,) = sent(receive)
    assert isinstance(preemption, Preemption)
    assert sorted(v.pod for v in preemption.victims) == ["batch/low-2", "batch/low-3"]  # the latest started
    assert preemption.nominations == (("default/high", "h", "n1"),)

    # Of the same priority as every pod bound: nothing to preempt, the cycle reads only what is pending.
    s = full_node_store(pending_priority=0)
    actor, (send, receive) = solver(s), streams()
    result = await actor.cycle(send, results)
    assert result is not None
    assert actor.whole_views == 0
    assert names(result) == {"high"}
    assert sent(receive) == []
    assert not result.placement.gangs[0].placed

    # Preemption off: the same.
    s = full_node_store(pending_priority=100)
    actor, (send, receive) = solver(s, preemption=False), streams()
    result = await actor.cycle(send, results)
    assert result is not None
    assert actor.whole_views == 0
    assert names(result) == {"high"}
    assert sent(receive) == []


@pytest.mark.asyncio
async def test_a_partial_view_never_preempts():
    """A view of what is pending holds some running pods (here every pod of a namespace with a PDB, which may
    group them) but not every possible victim: a cycle on it must not choose among them."""
    s = ClusterStore()
    s.apply(Resync(NODE, [k8s_node("n1", gpus=4)]))
    s.apply(Resync(PDB, [k8s_pdb("other", 1, {"app": "other"})]))
    running = [
        pod(f"low-{i}", f"v{i}", gpus=1, node_name="n1", phase="Running", owner="low", priority=0) for i in range(4)
    ]
    s.apply(Resync(POD, [*running, pod("high", "h", gpus=2, priority=100)]))
    view = s.view("gangsolve")
    assert view.partial
    assert {p["metadata"]["name"] for p in view.snapshot.pods} == {"high", "low-0", "low-1", "low-2", "low-3"}
    actor = solver(s)
    prepared = await actor.prepare()
    assert prepared is not None
    assert prepared.cluster.running
    # Were the store to say nothing bound is of lower priority, the cycle would take the partial view as it is.
    prepared = replace(prepared, view=replace(prepared.view, lowest_bound=math.inf))
    send, receive = streams()
    result = await actor.cycle(send, Latest[CycleResult](), prepared)
    assert result is not None
    assert actor.whole_views == 0
    assert [p for p in sent(receive) if isinstance(p, Preemption)] == []


@pytest.mark.asyncio
async def test_the_room_a_nomination_holds_stays_its_own_while_its_victims_leave_and_their_going_wakes_it():
    s = full_node_store(pending_priority=100)
    actor, (send, receive), results = solver(s), streams(), Latest[CycleResult]()
    await actor.cycle(send, results)
    (preemption,) = sent(receive)
    assert isinstance(preemption, Preemption)
    # The partial view shows the nomination in flight, the full one the victims leaving.
    (high,) = [p for p in s.view("gangsolve").snapshot.pods if p["metadata"]["name"] == "high"]
    assert high["status"]["nominatedNodeName"] == "n1"
    leaving = {p["metadata"]["name"] for p in s.view().snapshot.pods if p["metadata"].get("deletionTimestamp")}
    assert leaving == {"low-2", "low-3"}

    # The watch: one victim gone, the other still terminating. Room freed: a cycle solves everything.
    freed = s.freed
    s.apply(Event(POD, "DELETED", s.pod("batch/low-3")))
    assert s.freed > freed
    terminating = copy.deepcopy(s.pod("batch/low-2"))
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T11:00:00Z"
    s.apply(Event(POD, "MODIFIED", terminating))
    result = await actor.cycle(send, results)
    assert result is not None
    assert sent(receive) == []
    # A new pod, of the victims' priority, would fit in the GPU freed; but that room is held for the gang.
    late = pod("late", "l", gpus=1, priority=0)
    s.apply(Event(POD, "ADDED", late))
    freed, whole = s.freed, actor.whole_views
    result = await actor.cycle(send, results)
    assert result is not None
    assert "default/late" not in result.placement.bindings
    assert sent(receive) == []
    # No room was made, so not every gang was solved: the new one, and the nominated one beside it (so that its
    # hold applies), on every pod (those leaving its node decide whether it still fits).
    assert s.freed == freed
    solved = {g.name for g in result.cluster.gangs[: len(result.cluster.gangs) - result.carried]}
    assert solved == {"default/high", "default/late"}
    assert actor.whole_views == whole + 1

    # The last victim gone: the gang binds on its nominated node.
    s.apply(Event(POD, "DELETED", s.pod("batch/low-2")))
    await actor.cycle(send, results)
    plans = [p for p in sent(receive) if isinstance(p, GangPlan)]
    assert [(p.gang, sorted(n for *_, n in p.pods)) for p in plans] == [("default/high", ["n1"])]


def test_capacity_freed_by_an_eviction_a_cleared_nomination_or_a_released_device_counts():
    s = full_node_store(pending_priority=100)
    freed = s.freed
    s.evict([("batch/low-3", "v3")])  # chosen as a victim: it holds its capacity until it is gone
    terminating = copy.deepcopy(s.pod("batch/low-3"))
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T11:00:00Z"
    s.apply(Event(POD, "MODIFIED", terminating))
    assert s.freed == freed
    assert s.apply(Event(POD, "DELETED", terminating))
    assert s.freed == freed + 1

    freed = s.freed
    s.nominate([("default/high", "h", "n1")])
    assert s.freed == freed  # a nomination made frees nothing
    s.nominate([("default/high", "h", None)])
    assert s.freed == freed + 1  # one cleared releases the room it held
    s.forget_nomination("default/high", "h")  # (the clearing was not written; the API server has none)
    freed = s.freed
    nominated = copy.deepcopy(s.pod("default/high"))
    nominated["status"]["nominatedNodeName"] = "n1"
    s.apply(Event(POD, "MODIFIED", nominated))
    assert s.freed == freed
    s.apply(Event(POD, "MODIFIED", s.pod("default/high") | {"status": {"phase": "Pending"}}))
    assert s.freed == freed + 1  # cleared, as the watch shows it
    s.apply(Event(POD, "MODIFIED", nominated))
    bound = copy.deepcopy(nominated)
    bound["spec"]["nodeName"] = "n1"
    freed = s.freed
    s.apply(Event(POD, "MODIFIED", bound))
    assert s.freed == freed  # bound where it was nominated: that room is its own now

    claim = k8s_claim("c")
    s.apply(Event(CLAIM, "ADDED", claim))
    freed = s.freed
    allocated = copy.deepcopy(claim)
    allocated["status"] = {"allocation": {"devices": {"results": [{"driver": "d", "pool": "n1", "device": "g0"}]}}}
    s.apply(Event(CLAIM, "MODIFIED", allocated))
    assert s.freed == freed  # allocated: nothing freed
    s.apply(Event(CLAIM, "MODIFIED", claim))
    assert s.freed == freed + 1  # deallocated
    s.apply(Event(SLICE, "ADDED", k8s_slice("n1", [k8s_gpu("g0")])))
    assert s.freed == freed + 2  # devices added


@pytest.mark.asyncio
async def test_a_view_based_cycle_counts_devices_and_the_claims_it_allocated():
    """Two gangs of one pod, each with a claim of one device, on a node with one device: the first is placed
    with its claim's allocation assumed; the second then waits for devices, not for cpu, and is placed once the
    first claim's device is released."""
    s = ClusterStore()
    s.apply(Resync(NODE, [k8s_node("n1")]))
    s.apply(Resync(CLASS, [k8s_device_class()]))
    s.apply(Resync(SLICE, [k8s_slice("n1", [k8s_gpu("gpu-0")])]))
    s.apply(Resync(CLAIM, [k8s_claim("c0")]))
    s.apply(Resync(POD, [with_claims(pod("a", "ua", created="2026-01-01T00:00:00Z"), "c0")]))
    actor, (send, receive), results = solver(s), streams(), Latest[CycleResult]()
    result = await actor.cycle(send, results)
    assert result is not None
    (node,) = result.cluster.nodes
    devices = {r: q for r, q in node.allocatable.items() if r.startswith("dra/")}
    assert list(devices.values()) == [1]  # the device reached the node the solver saw
    (plan,) = sent(receive)
    assert isinstance(plan, GangPlan)
    assert [w.claim for w in plan.claims] == ["default/c0"]

    s.apply(Event(CLAIM, "ADDED", k8s_claim("c1")))
    s.apply(Event(POD, "ADDED", with_claims(pod("b", "ub", created="2026-01-01T00:00:01Z"), "c1")))
    result = await actor.cycle(send, results)
    assert result is not None
    assert [g.name for g in result.cluster.gangs] == ["default/b"]
    (resource,) = devices
    assert result.cluster.nodes[0].used.get(resource) == 1  # the allocation assumed counts as used
    assert sent(receive) == []
    assert not result.placement.gangs[0].placed

    # The watch shows a bound and its claim allocated: the device is still taken.
    a = s.pod("default/a")
    assert a is not None
    a_bound = copy.deepcopy(a)
    a_bound["spec"]["nodeName"] = "n1"
    s.apply(Event(POD, "MODIFIED", a_bound))
    c0 = copy.deepcopy(s.claim("default/c0"))
    assert c0 is not None
    c0["status"] = {"allocation": plan.claims[0].allocation}
    s.apply(Event(CLAIM, "MODIFIED", c0))
    assert s.counts()["assumed"] == s.counts()["assumed_claims"] == 0
    result = await actor.cycle(send, results)
    assert result is not None
    assert result.cluster.nodes[0].used.get(resource) == 1
    assert sent(receive) == []
    # a finishes, its claim is released: the device is free, and b is placed at once.
    freed = s.freed
    s.apply(Event(POD, "DELETED", a_bound))
    s.apply(Event(CLAIM, "MODIFIED", {**c0, "status": {}}))
    assert s.freed > freed
    await actor.cycle(send, results)
    plans = [p for p in sent(receive) if isinstance(p, GangPlan)]
    assert [(p.gang, [w.claim for w in p.claims]) for p in plans] == [("default/b", ["default/c1"])]


@pytest.mark.asyncio
async def test_a_starving_gang_reserves_from_every_running_pod_and_is_solved_every_cycle():
    """Reservations are planned from the expected ends of the pods running: a cycle that solves a starving gang
    reads every pod even when nothing may be preempted (all of one priority), and the gang is solved in every
    cycle, so a gang arriving later backfills only around its reservation."""
    now = datetime.now(UTC).replace(microsecond=0)
    s = ClusterStore()
    s.apply(Resync(NODE, [k8s_node("n1", gpus=4)]))
    long = pod(
        "long",
        "ul",
        ns="batch",
        gpus=3,
        node_name="n1",
        phase="Running",
        owner="train",
        priority=0,
        annotations={EXPECTED_RUNTIME_ANNOTATION: "30m"},
    )
    long["status"]["startTime"] = (now - timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    big = pod("big", "ub", gpus=4, priority=0, created=(now - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ"))
    s.apply(Resync(POD, [long, big]))
    actor, (send, receive), results = solver(s), streams(), Latest[CycleResult]()
    result = await actor.cycle(send, results)
    assert result is not None
    (reservation,) = result.placement.reservations
    assert (reservation.gang, reservation.nodes) == ("default/big", ("n1",))
    assert reservation.start == (now + timedelta(minutes=20)).timestamp()
    assert actor.whole_views == 1
    # A one-GPU gang expected to run an hour arrives: the free GPU is the reservation's, so it waits.
    late = pod("late", "ulate", gpus=1, priority=0, annotations={EXPECTED_RUNTIME_ANNOTATION: "1h"})
    s.apply(Event(POD, "ADDED", late))
    result = await actor.cycle(send, results)
    assert result is not None
    assert result.carried == 0  # the starving gang was solved again beside the new one
    assert actor.whole_views == 2
    assert "default/late" not in result.placement.bindings
    assert [p for p in sent(receive) if isinstance(p, GangPlan)] == []
