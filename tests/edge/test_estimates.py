"""Runtime estimates from objects, the workload history, and the reservation texts people read."""

import contextlib
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gangsolve.edge.errors import InputError
from gangsolve.edge.estimates import (
    EXPECTED_RUNTIME_ANNOTATION,
    Estimator,
    RuntimeHistory,
    declared_runtime,
    with_estimates,
    workload_key,
)
from gangsolve.edge.gangs import build_cluster
from gangsolve.edge.quantity import parse_duration
from gangsolve.edge.reservations import WAITING_FOR_ESTIMATE, figures, message, pending_message
from gangsolve.edge.snapshot import Snapshot
from gangsolve.solver.model import Placement, Reservation
from tests.builders import k8s_node, k8s_pod, k8s_pod_group

# --- Go durations ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90m", 5400.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("45s", 45.0),
        ("300ms", 0.3),
        ("2h45m30.5s", 9930.5),
        ("0", 0.0),
        ("-5m", -300.0),
        ("+1h", 3600.0),
        (".5h", 1800.0),
        ("1µs", 1e-6),
    ],
)
def test_go_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "1", "h", "1d", "1h 30m", "1.h.", "--1h", "1hm", "5 minutes", ".h"])
def test_not_go_durations(text):
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


@given(st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(["h", "m", "s", "ms"])), min_size=1, max_size=4))
def test_a_written_duration_reads_back(parts):
    text = "".join(f"{n}{unit}" for n, unit in parts)
    expected = sum(n * {"h": 3600, "m": 60, "s": 1, "ms": 0.001}[unit] for n, unit in parts)
    assert parse_duration(text) == pytest.approx(expected)


@given(st.text(max_size=20))
def test_any_text_parses_or_raises_value_error(text):
    with contextlib.suppress(ValueError):
        parse_duration(text)


# --- declared runtimes -----------------------------------------------------------------------------------------


def with_runtime(obj: dict, value: str) -> dict:
    obj["metadata"].setdefault("annotations", {})[EXPECTED_RUNTIME_ANNOTATION] = value
    return obj


def test_the_pods_annotation_then_the_podgroups_then_the_owners_then_active_deadline():
    pod = k8s_pod("p", activeDeadlineSeconds=600)
    group = k8s_pod_group("g", 1)
    owner = {"kind": "TFJob", "metadata": {"name": "train", "annotations": {EXPECTED_RUNTIME_ANNOTATION: "3h"}}}
    assert declared_runtime([pod], group, owner) == 3 * 3600
    with_runtime(group, "2h")
    assert declared_runtime([pod], group, owner) == 2 * 3600
    with_runtime(pod, "1h")
    assert declared_runtime([pod], group, owner) == 3600
    assert declared_runtime([k8s_pod("q", activeDeadlineSeconds=600), k8s_pod("r", activeDeadlineSeconds=300)]) == 300
    assert declared_runtime([k8s_pod("s")]) is None


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        (with_runtime(k8s_pod("p"), "later"), f"metadata.annotations.{EXPECTED_RUNTIME_ANNOTATION}"),
        (with_runtime(k8s_pod("p"), "-1h"), f"metadata.annotations.{EXPECTED_RUNTIME_ANNOTATION}"),
        (k8s_pod("p", activeDeadlineSeconds="600"), "spec.activeDeadlineSeconds"),
        (k8s_pod("p", activeDeadlineSeconds=0), "spec.activeDeadlineSeconds"),
    ],
)
def test_bad_declarations_name_the_object_and_field(obj, field):
    with pytest.raises(InputError) as err:
        declared_runtime([obj])
    assert str(err.value).startswith(f"Pod default/p: {field}: ")


# --- the history -----------------------------------------------------------------------------------------------


def test_runs_of_one_job_template_share_a_workload_key():
    a = k8s_pod("train-worker-0", owner="resnet-7d9f8")
    b = k8s_pod("train-worker-1", owner="resnet-x2k4q")
    assert workload_key(a) == workload_key(b) == "default/Job:resnet"
    assert workload_key(k8s_pod("job-00042")) == workload_key(k8s_pod("job-00043")) == "default/Pod:job"
    labelled = k8s_pod("x", labels={"app": "bert"}, owner="resnet-7d9f8")
    assert workload_key(labelled, "app") == "default/label:bert"
    assert workload_key(labelled) == "default/Job:resnet"


def test_the_history_learns_a_high_quantile_of_recent_runs():
    history = RuntimeHistory(window=4, quantile=0.75)
    assert history.estimate("w") is None
    for seconds in (100, 200, 300, 400, 10_000):  # the first run falls out of the window
        history.record("w", seconds)
    assert history.estimate("w") == pytest.approx(400 + 0.25 * (10_000 - 400))  # of 200, 300, 400, 10,000
    assert history.estimate("other") is None


def test_declared_then_learned_then_default():
    estimator = Estimator(default=3600.0)
    assert estimator.estimate([k8s_pod("job-1")])[0] == 3600.0
    estimator.history.record(workload_key(k8s_pod("job-1")), 120.0)
    assert estimator.estimate([k8s_pod("job-2")])[0] == 120.0
    assert estimator.estimate([with_runtime(k8s_pod("job-3"), "10m")])[0] == 600.0
    assert Estimator(default=None).estimate([k8s_pod("job-4")])[0] is None
    # Only a declared runtime is held to; the plan shows learned and default ones but holds nothing on them.
    assert estimator.estimate([with_runtime(k8s_pod("job-3"), "10m")]) == (600.0, False)
    assert estimator.estimate([k8s_pod("job-2")]) == (120.0, True)
    assert estimator.estimate([k8s_pod("other-1")]) == (3600.0, True)
    assert Estimator(default=None).estimate([k8s_pod("job-4")]) == (None, False)


# --- a cluster with estimates ----------------------------------------------------------------------------------


def test_running_pods_get_expected_ends_and_pending_gangs_runtimes():
    snap = Snapshot()
    for obj in (
        k8s_node("n0", gpus=4),
        with_runtime(
            k8s_pod("done-soon", gpus=2, node_name="n0", phase="Running", created="2026-01-01T00:00:00Z"), "1h"
        ),
        with_runtime(
            k8s_pod("overran", gpus=1, node_name="n0", phase="Running", created="2026-01-01T00:00:00Z"), "10m"
        ),
        k8s_pod(
            "service", node_name="n0", phase="Running", scheduler="default-scheduler", created="2026-01-01T00:00:00Z"
        ),
        k8s_pod("ours", node_name="n0", phase="Running", created="2026-01-01T00:00:00Z"),
        with_runtime(k8s_pod("pending", gpus=1, created="2026-01-01T00:30:00Z"), "20m"),
    ):
        snap.add(obj)
    now = datetime(2026, 1, 1, 0, 40, tzinfo=UTC)
    cluster = with_estimates(snap, build_cluster(snap, now=now), now, Estimator(default=7200.0))
    start = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    assert cluster.now == now.timestamp()
    assert [r.end for r in cluster.running] == [
        start + 3600,  # as declared
        now.timestamp() + 1200,  # outran 10 minutes: expected to run on for half its 40 minutes
        None,  # another scheduler's service declares nothing: never assumed to end
        start + 7200,  # ours, the default
    ]
    assert [g.runtime for g in cluster.gangs] == [1200.0]
    assert [r.guessed for r in cluster.running] == [False, False, False, True]  # only the default is a guess
    assert [r.overran for r in cluster.running] == [False, True, False, False]  # its end extended: reclaim's guess
    assert [g.guessed for g in cluster.gangs] == [False]
    unknown = with_estimates(snap, build_cluster(snap, now=now), now, Estimator(default=None))
    assert [r.guessed for r in unknown.running] == [False] * 4  # no end at all is no guessed end


def test_a_kubernetes_podgroups_declared_runtime_is_its_pods():
    group = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "default", "annotations": {EXPECTED_RUNTIME_ANNOTATION: "90m"}},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
    }
    snap = Snapshot()
    for obj in (
        k8s_node("n0", gpus=4),
        group,
        *(k8s_pod(f"w{i}", gpus=1, schedulingGroup={"podGroupName": "train"}) for i in range(2)),
        k8s_pod(
            "running",
            gpus=1,
            node_name="n0",
            phase="Running",
            created="2026-01-01T00:00:00Z",
            schedulingGroup={"podGroupName": "train"},
        ),
    ):
        snap.add(obj)
    now = datetime(2026, 1, 1, 0, 10, tzinfo=UTC)
    cluster = with_estimates(snap, build_cluster(snap, now=now), now, Estimator(default=None))
    assert [g.runtime for g in cluster.gangs] == [5400.0]
    [running] = cluster.running  # a member already running: expected to end as declared, not by the default
    assert running.end == datetime(2026, 1, 1, 1, 30, tzinfo=UTC).timestamp()


# --- what people read ------------------------------------------------------------------------------------------


def test_reservation_messages():
    at = datetime(2026, 1, 1, 14, 5, tzinfo=UTC).timestamp()
    few = Reservation("default/big", ("a", "b", "c"), at, 24)
    assert message(few, now=at - 600) == "expected to start at about 14:05 UTC on nodes a, b, c (24 GPUs held)"
    assert (
        message(few, now=at - 86_400)
        == "expected to start at about 2026-01-01 14:05 UTC on nodes a, b, c (24 GPUs held)"
    )
    many = Reservation("default/big", tuple(f"n{i}" for i in range(8)), at, 64)
    assert message(many, now=at).endswith("14:05 UTC on nodes n0, n1, n2, n3, n4, 3 more (64 GPUs held)")
    # Relaxed: held later than its room frees, so that gangs that end by then start on it now.
    relaxed = replace(few, earliest=at - 300)
    assert message(relaxed, now=at - 600) == (
        "expected to start at about 14:05 UTC on nodes a, b, c (24 GPUs held; its room frees at about 14:00 UTC, "
        "and gangs that end by 14:05 UTC may use it first)"
    )
    waiting = Reservation("default/big", (), None)
    assert message(waiting) == WAITING_FOR_ESTIMATE
    forecast = Reservation("default/big", ("a",), at, 8, held=False)
    assert message(forecast, now=at).endswith("on node a (a forecast: nothing is held for it yet)")
    guessed = replace(forecast, guessed=True)
    assert message(guessed, now=at).endswith(
        "on node a (a forecast on runtimes nobody declared: nothing is held for it; declare "
        "gangsolve.io/expected-runtime to have it held)"
    )
    assert pending_message("needs 24 nvidia.com/gpu, 8 free", few, at).startswith(
        "needs 24 nvidia.com/gpu, 8 free; expected to start"
    )
    assert pending_message("why", None) == "why"


def test_figures_for_the_metrics():
    placement = Placement(
        {},
        (),
        "OPTIMAL",
        0,
        0,
        0.0,
        reservations=(
            Reservation("a", ("n0",), 10.0, 8),
            Reservation("b", ("n1", "n2"), 20.0, 16),
            Reservation("c", (), None),
        ),
        backfilled=("d",),
    )
    assert figures(placement) == {
        "reservations": 2,
        "reserved_gpus": 24,
        "waiting_for_estimate": 1,
        "backfilled_gangs": 1,
    }


def finished(name: str, uid: str, start: str, end: str, owner: str = "resnet-7d9f8") -> dict:
    pod = k8s_pod(name, owner=owner, phase="Succeeded")
    pod["metadata"]["uid"] = uid
    pod["status"].update(
        startTime=start, containerStatuses=[{"name": "main", "state": {"terminated": {"finishedAt": end}}}]
    )
    return pod


def test_the_history_learns_from_succeeded_pods_once_each_and_again_after_a_restart():
    pods = [
        finished("a", "u1", "2026-01-01T00:00:00Z", "2026-01-01T00:30:00Z"),
        finished("b", "u2", "2026-01-01T01:00:00Z", "2026-01-01T01:10:00Z"),
        k8s_pod("running", owner="resnet-7d9f8", phase="Running"),
    ]
    history = RuntimeHistory(quantile=1.0)
    history.learn(pods)
    history.learn(pods)  # every cycle sees the same pods: each counts once
    assert list(history.runs["default/Job:resnet"]) == [1800.0, 600.0]
    restarted = RuntimeHistory(quantile=1.0)
    restarted.learn(pods)
    assert restarted.estimate("default/Job:resnet") == 1800.0
    bad = finished("c", "u3", "2026-01-01T00:00:00Z", "yesterday")
    with pytest.raises(InputError, match="finishedAt"):
        restarted.learn([bad])
