"""Planning in time in the live scheduler, on the fake client: the solver actor's estimator and its workload
history (learned from the succeeded pods a watcher sends), reservations in pod conditions, PodGroup status and
metrics, and reservations rebuilt from the cluster by a fresh actor."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import anyio
import pytest

from gangsolve.edge.estimates import EXPECTED_RUNTIME_ANNOTATION, Estimator
from gangsolve.edge.reservations import WAITING_FOR_ESTIMATE
from gangsolve.live.channels import Latest
from gangsolve.live.feedback import Feedback
from gangsolve.live.fence import Unfenced
from gangsolve.live.messages import CycleResult, Event, GangPlan, Resync
from gangsolve.live.metrics import Metrics
from gangsolve.live.solver_actor import SolverActor
from gangsolve.live.store import ClusterStore
from gangsolve.live.watchers import succeeded_pods
from gangsolve.solver import SolveConfig
from tests.builders import k8s_node, k8s_pod, k8s_pod_group
from tests.live.actors import solver_actor
from tests.live.fake_kube import FakeKube
from tests.live.resources import NODE, POD, XPG

SUCCEEDED = succeeded_pods("gangsolve")
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
NOW = datetime.now(UTC).replace(microsecond=0)


@pytest.fixture(autouse=True)
def _clock_now() -> None:
    """The actor reads the wall clock, so each test builds its cluster around the time it starts: in a long
    suite the module is imported half an hour before its tests run, and a pod expected to end 15 minutes after
    import has ended by then."""
    global NOW
    NOW = datetime.now(UTC).replace(microsecond=0)


def stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def running(name: str, gpus: int, started: datetime, runtime: str | None = None, owner: str | None = None) -> dict:
    """A pod of ours already running on n1 since `started`, declaring `runtime` (or nothing)."""
    annotations = {EXPECTED_RUNTIME_ANNOTATION: runtime} if runtime else {}
    pod = k8s_pod(name, gpus=gpus, node_name="n1", phase="Running", annotations=annotations, owner=owner)
    pod["metadata"]["uid"] = f"uid-{name}"
    pod["status"]["startTime"] = stamp(started)
    return pod


def big_gang(waited: timedelta, gpus: int = 4) -> list[dict]:
    """A PodGroup gang of one pod needing the whole node, pending for `waited`."""
    pod = k8s_pod("big-0", gpus=gpus, labels={GROUP_LABEL: "big"}, created=stamp(NOW - waited))
    pod["metadata"]["uid"] = "uid-big-0"
    return [pod]


def store_with(pods: list[dict], gpus: int = 4) -> ClusterStore:
    s = ClusterStore()
    s.apply(Resync(NODE, [k8s_node("n1", gpus=gpus)]))
    s.apply(Resync(POD, pods))
    group = k8s_pod_group("big", 1)
    group["metadata"]["uid"] = "uid-pg-big"
    s.apply(Resync(XPG, [group]))
    return s


def actor(s: ClusterStore, metrics: Metrics | None = None, **kw) -> SolverActor:
    """The solver actor, holding reservations from their earliest starts unless `plan_relaxation` says."""
    return solver_actor(
        s,
        metrics or Metrics(),
        scheduler_name="gangsolve",
        group_label=None,
        time_limit=0.5,
        debounce=0,
        resync_period=1,
        **{"plan_relaxation": 0.0, **kw},
    )


async def one_cycle(a: SolverActor) -> CycleResult:
    send, _receive = anyio.create_memory_object_stream[GangPlan](math.inf)
    results: Latest[CycleResult] = Latest()
    await a.cycle(send, results)
    return await results.take()


def value(metrics: Metrics, name: str) -> float | None:
    return metrics.registry.get_sample_value(name)


@pytest.mark.asyncio
async def test_a_starving_gang_holds_a_reservation_that_its_pods_podgroup_and_metrics_show():
    started = NOW - timedelta(minutes=10)
    s = store_with([running("long", 3, started, "30m"), *big_gang(timedelta(hours=2))])
    metrics, kube = Metrics(), FakeKube()
    result = await one_cycle(actor(s, metrics))

    (reservation,) = result.placement.reservations
    assert (reservation.gang, reservation.nodes, reservation.gpus) == ("default/big", ("n1",), 4)
    assert reservation.start == (started + timedelta(minutes=30)).timestamp()
    assert value(metrics, "gangsolve_reservations") == 1
    assert value(metrics, "gangsolve_reserved_gpus") == 4
    assert value(metrics, "gangsolve_waiting_for_estimate") == 0

    fb = Feedback(kube, s, metrics, Unfenced(), identity="t", scheduler_name="gangsolve")
    await fb.apply(result)
    when = (started + timedelta(minutes=30)).astimezone(UTC)
    expected = f"expected to start at about {when:%H:%M} UTC on node n1 (4 GPUs held)"
    if when.date() != NOW.date():  # a start past midnight also gives the date
        expected = f"expected to start at about {when:%Y-%m-%d %H:%M} UTC on node n1 (4 GPUs held)"
    (condition,) = [b["status"]["conditions"][0] for p, b in kube.patches if p.endswith("/big-0/status")]
    assert condition["message"].endswith("; " + expected)
    assert condition["message"].startswith("needs 4 nvidia.com/gpu, 1 free")
    (status,) = [b["status"] for p, b in kube.patches if "/podgroups/big/status" in p]
    assert status["conditions"][0]["message"] == condition["message"]
    assert [e["note"] for e in kube.events] == [condition["message"]]


@pytest.mark.asyncio
async def test_by_default_a_reservation_is_relaxed_and_its_pod_shows_the_later_start():
    """The cycle's default relaxation reaches the live scheduler: `big` could start when `long` ends in 20 minutes,
    and is held from 20 minutes after that (twice its wait; its runtime, 1 hour, is longer)."""
    started = NOW - timedelta(minutes=10)
    big = big_gang(timedelta(hours=2))
    big[0]["metadata"]["annotations"] = {EXPECTED_RUNTIME_ANNOTATION: "1h"}
    s = store_with([running("long", 3, started, "30m"), *big])
    result = await one_cycle(actor(s, plan_relaxation=SolveConfig.plan_relaxation))
    (reservation,) = result.placement.reservations
    earliest = (started + timedelta(minutes=30)).timestamp()
    assert reservation.earliest == earliest
    assert earliest + 20 * 60 - 30 <= reservation.start <= earliest + 20 * 60  # the wait read on the wall clock
    kube = FakeKube()
    await Feedback(kube, s, Metrics(), Unfenced(), identity="t", scheduler_name="gangsolve").apply(result)
    (condition,) = [b["status"]["conditions"][0] for p, b in kube.patches if p.endswith("/big-0/status")]
    when = datetime.fromtimestamp(reservation.start, UTC)
    room = datetime.fromtimestamp(earliest, UTC)
    assert f"{when:%H:%M} UTC on node n1 (4 GPUs held; its room frees at about {room:%H:%M} UTC" in condition["message"]


@pytest.mark.asyncio
async def test_a_gang_behind_pods_that_declare_no_end_waits_for_an_estimate():
    s = store_with([running("long", 3, NOW - timedelta(minutes=10)), *big_gang(timedelta(hours=2))])
    metrics = Metrics()
    result = await one_cycle(actor(s, metrics))
    (reservation,) = result.placement.reservations
    assert reservation.start is None
    assert value(metrics, "gangsolve_waiting_for_estimate") == 1
    assert value(metrics, "gangsolve_reserved_gpus") == 0
    reasons = Feedback(FakeKube(), s, metrics, Unfenced(), identity="t", scheduler_name="gangsolve").reasons(result)
    assert reasons["default/big-0"].endswith("; " + WAITING_FOR_ESTIMATE)

    # A configured default gives the running pod an end, so the gang gets a time; a guessed one, so it is shown
    # that time and holds nothing.
    result = await one_cycle(actor(s, metrics, estimator=Estimator(default=3600.0)))
    assert result.placement.reservations == ()
    assert [r.start for r in result.placement.forecasts] == [(NOW + timedelta(minutes=50)).timestamp()]
    assert value(metrics, "gangsolve_reserved_gpus") == 0
    reasons = Feedback(FakeKube(), s, metrics, Unfenced(), identity="t", scheduler_name="gangsolve").reasons(result)
    assert reasons["default/big-0"].endswith("declare gangsolve.io/expected-runtime to have it held)")


@pytest.mark.asyncio
async def test_a_gang_gets_its_planned_start_at_once_and_no_reservation_outlives_its_gang():
    """Every pending gang that cannot start is planned, starving or not (a gang pending five minutes here)."""
    s = store_with([running("long", 3, NOW - timedelta(minutes=10), "30m"), *big_gang(timedelta(minutes=5))])
    metrics = Metrics()
    (reservation,) = (await one_cycle(actor(s, metrics))).placement.reservations
    assert reservation.start == (NOW + timedelta(minutes=20)).timestamp()
    s.apply(Event(POD, "DELETED", s.pod("default/big-0")))
    assert (await one_cycle(actor(s, metrics, starvation=60.0))).placement.reservations == ()
    assert value(metrics, "gangsolve_reserved_gpus") == 0


@pytest.mark.asyncio
async def test_a_fresh_actor_rebuilds_the_same_reservation_from_the_cluster():
    """After a restart (or a new leader) nothing is remembered but the cluster: the same reservation."""
    s = store_with([running("long", 3, NOW - timedelta(minutes=10), "30m"), *big_gang(timedelta(hours=2))])
    first = (await one_cycle(actor(s))).placement.reservations
    again = (await one_cycle(actor(s))).placement.reservations
    assert first == again
    assert first[0].start is not None


@pytest.mark.asyncio
async def test_cycles_with_reservations_turned_off_hold_none_and_backfilled_gangs_are_counted():
    short = k8s_pod("short-0", gpus=1, annotations={EXPECTED_RUNTIME_ANNOTATION: "5m"})
    short["metadata"]["uid"] = "uid-short-0"
    pods = [running("long", 3, NOW - timedelta(minutes=10), "30m"), *big_gang(timedelta(hours=2)), short]
    metrics = Metrics()
    result = await one_cycle(actor(store_with(pods), metrics))
    assert result.placement.bindings == {"default/short-0": "n1"}  # it ends before the reservation starts
    assert result.placement.backfilled == ("default/short-0",)
    assert value(metrics, "gangsolve_backfilled_gangs_total") == 1
    assert (await one_cycle(actor(store_with(pods), reservations=0))).placement.reservations == ()


def succeeded(name: str, uid: str, started: datetime, minutes: float, owner: str) -> dict:
    pod = k8s_pod(name, gpus=1, owner=owner, phase="Succeeded", node_name="n1")
    pod["metadata"]["uid"] = uid
    end = started + timedelta(minutes=minutes)
    pod["status"].update(
        startTime=stamp(started),
        containerStatuses=[{"name": "main", "state": {"terminated": {"finishedAt": stamp(end)}}}],
    )
    return pod


@pytest.mark.asyncio
async def test_the_history_learns_from_succeeded_pods_the_watcher_sends_once_each():
    """Runs of the Job template `train-*` took 20 minutes: the running one, started 5 minutes ago and declaring
    nothing, is expected to end 15 minutes from now, and the waiting gang is shown that start (a learned runtime
    is a guess: nothing is held on it)."""
    started = NOW - timedelta(minutes=5)
    s = store_with([running("train-run", 3, started, owner="train-x1y2z"), *big_gang(timedelta(hours=2))])
    metrics = Metrics()
    a = actor(s, metrics)
    send, receive = anyio.create_memory_object_stream[Event | Resync](math.inf)
    a._succeeded = receive  # as run() sets it

    first, second = (
        succeeded(f"train-{i}", f"done-{i}", NOW - timedelta(hours=3 - i), 20, "train-a1b2c") for i in range(2)
    )
    bad = succeeded("train-bad", "done-bad", NOW - timedelta(hours=1), 20, "train-a1b2c")
    bad["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = "yesterday"
    send.send_nowait(Resync(SUCCEEDED, [first]))
    send.send_nowait(Event(SUCCEEDED, "ADDED", second))
    send.send_nowait(Event(SUCCEEDED, "ADDED", bad))  # logged and skipped, never the cycle
    send.send_nowait(Resync(SUCCEEDED, [first, second]))  # a relist: nothing counts twice
    result = await one_cycle(a)

    assert list(a.estimator.history.runs["default/Job:train"]) == [1200.0, 1200.0]
    assert [r.start for r in result.placement.forecasts] == [(started + timedelta(minutes=20)).timestamp()]
    assert metrics.registry.get_sample_value("gangsolve_held_objects", {"kind": "runtime_history"}) == 2


@pytest.mark.asyncio
async def test_the_next_cycle_keeps_the_start_it_showed_and_a_gang_that_starts_sooner_says_by_how_much():
    """The actor feeds each cycle the last one's plan: a gang arriving later fits beside the planned one now, but
    would still run at its start, so it is planned after it; when the running pod ends early the planned gang
    starts at once, and the metrics say how much sooner than it was shown."""
    (pending,) = big_gang(timedelta(minutes=5))
    pending["metadata"]["annotations"] = {EXPECTED_RUNTIME_ANNOTATION: "2h"}
    s = store_with([running("long", 3, NOW - timedelta(minutes=10), "30m"), pending])
    metrics = Metrics()
    a = actor(s, metrics)
    (big,) = (await one_cycle(a)).placement.reservations
    promised = NOW + timedelta(minutes=20)
    assert big.start == promised.timestamp()
    assert value(metrics, "gangsolve_plan_horizon_seconds") == pytest.approx(20 * 60, abs=5)

    small = k8s_pod("small-0", gpus=1, annotations={EXPECTED_RUNTIME_ANNOTATION: "1h"}, created=stamp(NOW))
    small["metadata"]["uid"] = "uid-small-0"
    s.apply(Event(POD, "ADDED", small))
    second = await one_cycle(a)
    assert second.placement.bindings == {}  # one GPU is free, but it would still run at big's start
    assert {r.gang: r.start for r in second.placement.reservations} == {
        "default/big": promised.timestamp(),
        "default/small-0": (promised + timedelta(hours=2)).timestamp(),  # after big's estimated 2 hours
    }

    s.apply(Event(POD, "DELETED", s.pod("default/long")))  # ends 20 minutes early
    third = await one_cycle(a)
    assert third.placement.bindings == {"default/big-0": "n1"}
    assert value(metrics, "gangsolve_start_after_expected_seconds_count") == 1
    # 20 minutes sooner (no sum: a histogram of negative values has none).
    bucket = "gangsolve_start_after_expected_seconds_bucket"
    assert metrics.registry.get_sample_value(bucket, {"le": "-600.0"}) == 1
    assert metrics.registry.get_sample_value(bucket, {"le": "-3600.0"}) == 0
