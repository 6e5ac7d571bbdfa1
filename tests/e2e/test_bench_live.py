"""The live benchmark mode on tiny scenarios: the users' two TFJobs (12 GPUs asked, 8 there; pods arriving while
the scheduler runs), once on a plane with kube-scheduler, once with its native gang scheduling
(GenericWorkload), once with `gangsolve run`; and a burst (every pod created, then the scheduler started).
Asserts what the bindings read back from the API show and that every measurement is taken, never how long
anything took."""

from __future__ import annotations

import pytest

from gangsolve.bench.live import LIVE_SCHEDULERS
from gangsolve.bench.live.live_scenarios import LIVE_SCENARIOS
from gangsolve.bench.live.runs import run_scenarios
from gangsolve.bench.report import tables, targets
from tests.e2e.live_helpers import bench_runs

pytestmark = pytest.mark.e2e

DECISIONS = {
    "kube-scheduler": "scheduler_scheduling_algorithm_duration_seconds",
    "kube-scheduler-gang": "scheduler_podgroup_scheduling_algorithm_duration_seconds",
    "gangsolve": "gangsolve_scheduling_cycle_duration_seconds",
}


@pytest.fixture(scope="module")
def live_results(binaries, tmp_path_factory) -> list[dict]:
    return run_scenarios(
        ["live/tfjob"],
        list(LIVE_SCHEDULERS),
        tmp_path_factory.mktemp("live-logs"),
        quiet=5,
        log=lambda m: print(f"[live] {m}", flush=True),
    )


def runs(live_results: list[dict]) -> dict[str, dict]:
    (scenario,) = live_results
    out = {r["scheduler"]: r for r in scenario["runs"]}
    for r in out.values():
        assert "error" not in r, r["error"]
    return out


def test_kube_scheduler_half_places_a_tfjob(live_results):
    ks = runs(live_results)["kube-scheduler"]
    # Pod by pod it binds both parameter servers and a worker per GPU: 8 workers + 2 ps of 14 pods, and the two
    # jobs (7 + 5 GPU workers) cannot both be whole on 8 GPUs, so at least one is left partial, holding GPUs.
    assert ks["pods_placed"] == 10
    assert ks["gpus_placed"] == 8
    assert ks["partial_gangs"] >= 1
    assert ks["stranded_gpus"] >= 1
    assert ks["gangs_complete"] + ks["partial_gangs"] == 2
    assert ks["violations"] == []
    assert ks["background_pods_lost"] == 0
    assert len(ks["bound_over_time"]) == ks["pods_placed"]  # the watch saw every binding the API holds


def test_gangsolve_runs_one_tfjob_whole(live_results):
    gs = runs(live_results)["gangsolve"]
    assert gs["partial_gangs"] == 0
    assert gs["stranded_gpus"] == 0
    assert gs["gangs_complete"] == gs["gangs_placed"] == 1
    assert gs["pods_placed"] in (8, 6)  # one job whole: mnist (7 workers + ps) or resnet (5 + ps)
    assert gs["violations"] == []
    assert gs["background_pods_lost"] == 0
    assert len(gs["bound_over_time"]) == gs["pods_placed"]
    assert gs["all_placeable_running_seconds"] is not None  # kwok started every pod of the placed job
    assert gs["gangsolve_metrics"]["gangsolve_pods_bound_total"] == gs["pods_placed"]
    # The PDBs exist before the pods, so the definition grace adds nothing here, and the report says so.
    assert gs["gangsolve_metrics"]["gangsolve_definition_wait_seconds_count"] == 0


def test_native_gang_scheduling_never_half_places(live_results):
    # kube-scheduler with GenericWorkload on and a scheduling.k8s.io PodGroup (gang, minCount) per job.
    native = runs(live_results)["kube-scheduler-gang"]
    assert native["partial_gangs"] == 0
    assert native["stranded_gpus"] == 0
    assert native["gangs_complete"] == 1
    assert native["violations"] == []
    assert native["background_pods_lost"] == 0


def test_every_run_measures_latency_cpu_memory_and_api_requests(live_results):
    for name, r in runs(live_results).items():
        assert len(r["gang_latencies"]) == r["gangs_complete"]  # one per gang that ran whole
        if name != "kube-scheduler":  # (pod by pod, it may leave both TFJobs partial)
            assert r["gangs_complete"] == 1
            assert r["gang_latency_p99"] >= r["gang_latency_p50"] >= 0
        assert isinstance(r["keeps_up"], bool)
        assert r["cpu_seconds"] > 0
        assert r["peak_rss_mib"] > 0
        # Every scheduler runs as kube-scheduler's user; the audit log counts its requests, bindings included.
        assert r["api_requests"]["create pods/binding"] >= r["pods_placed"]
        assert r["api_requests_per_pod"] >= 1
        # Its decisions, from its own histogram: gangsolve's cycles, kube-scheduler's scheduling algorithm (a pod
        # group's where it scheduled pod groups).
        decided = r["decisions"]
        assert decided["metric"] == DECISIONS[name]
        assert decided["count"] >= 1
        assert decided["mean_seconds"] > 0
        assert decided["total_seconds"] == pytest.approx(decided["mean_seconds"] * decided["count"])


def test_report_and_target_read_the_live_runs(live_results):
    results = {"scenarios": [], "timeline": [], "live": live_results}
    rows = tables.live_rows(live_results, "stream")
    assert [r[1] for r in rows] == list(LIVE_SCHEDULERS)
    assert "live/tfjob" in tables.markdown(results)
    assert tables.definition_waits(live_results) == ["live/tfjob: definition grace: no pod waited"]
    (target,) = targets.check_targets(results)
    assert target["scenario"] == "live/tfjob"
    assert "not the slowest" in target["target"]
    assert LIVE_SCENARIOS["live/tfjob"].nodes == live_results[0]["objects"]["nodes"]


@pytest.fixture(scope="module")
def burst(binaries, tmp_path_factory) -> dict[str, dict]:
    return bench_runs(
        run_scenarios, "live/10nodes-10x3-burst", ["kube-scheduler", "gangsolve"], tmp_path_factory.mktemp("live-logs")
    )


def test_a_burst_is_bound_whole_after_the_scheduler_starts(burst):
    for r in burst.values():
        assert r["mode"] == "burst"
        assert r["pods_placed"] == r["pending_pods"] == 30
        assert r["gangs_complete"] == 10
        assert r["partial_gangs"] == 0
        assert r["violations"] == []
        # Times count from the scheduler's start: every pod existed before it, none was bound before it ran.
        assert 0 < r["first_bind_seconds"] <= r["last_bind_seconds"]
        assert r["pods_per_second"] == pytest.approx(30 / r["last_bind_seconds"])
        assert r["cpu_seconds"] > 0
    assert burst["gangsolve"]["api_requests"]["create pods/binding"] == 30  # each pod bound once
