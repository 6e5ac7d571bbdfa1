"""A live timeline at its smallest on real control planes: three jobs arriving and finishing on two 4-GPU kwok
nodes, under `gangsolve run` and under kube-scheduler's native gang scheduling. Asserts what the jobs' times and
the API show (every job runs once, whole, for its runtime; the one that needs the whole cluster waits for the
first to end; every pod ends Succeeded; no node ever holds more GPUs than it has), never how long anything took
beyond what the jobs' own runtimes force."""

from __future__ import annotations

import pytest

from gangsolve.bench import manifests, scenarios
from gangsolve.bench.live import live_timeline
from gangsolve.bench.live.live_scenarios import LiveScenario
from gangsolve.bench.live.runs import run_live
from gangsolve.edge.estimates import EXPECTED_RUNTIME_ANNOTATION

pytestmark = pytest.mark.e2e

SPEEDUP = live_timeline.SPEEDUP
# name -> (arrival, duration) in the timeline's seconds, and its pods' GPUs
JOBS = {
    "first": (0, 600, [2, 2]),  # half the cluster for 10 s live
    "whole": (60, 300, [4, 4]),  # all of it: it cannot start before `first` ends
    "small": (120, 240, [2]),  # fits beside `first` at once
}


def objects() -> list[dict]:
    objs = [*scenarios.PRIORITY_CLASSES]
    objs += [manifests.node(f"node-{i}", 32000, 256 * 1024, 4) for i in range(2)]
    for name, (arrival, duration, gpus) in JOBS.items():
        notes = {
            manifests.ARRIVAL_ANNOTATION: str(arrival),
            manifests.DURATION_ANNOTATION: str(duration),
            EXPECTED_RUNTIME_ANNOTATION: f"{duration / SPEEDUP:g}s",
        }
        pods = [("worker", 4000, 8 * 1024, g) for g in gpus]
        objs += scenarios.gang_objects(name, arrival, pods, len(pods), scenarios.NORMAL, annotations=notes)
    return objs


TINY = LiveScenario(
    "live/timeline-tiny",
    2,
    objects,
    "three jobs on two 4-GPU nodes",
    mode="timeline",
    timeout=120.0,
    gangsolve_settings={"starvation-age": 30.0},
)


@pytest.fixture(scope="module")
def runs(binaries, tmp_path_factory) -> dict[str, dict]:
    logs = tmp_path_factory.mktemp("live-logs")
    return {
        s: run_live(TINY, s, log_dir=logs, log=lambda m: print(f"[live] {m}", flush=True))
        for s in ("gangsolve", "kube-scheduler-gang")
    }


@pytest.mark.parametrize("scheduler", ["gangsolve", "kube-scheduler-gang"])
def test_every_job_runs_whole_for_its_runtime_and_the_wide_one_waits_for_room(runs, scheduler):
    r = runs[scheduler]
    assert "error" not in r, r.get("error")
    t = r["timeline"]
    assert t["workload_error"] is None
    assert (t["jobs"], t["started"], t["finished"]) == (3, 3, 3)
    assert t["overcommitted"] == []
    per_job = t["per_job"]
    for name, (_arrival, duration, _gpus) in JOBS.items():
        job = per_job[f"{manifests.NAMESPACE}/{name}"]
        # It ran its runtime from the start the API shows, which is to the second (a live second is SPEEDUP of
        # the timeline's), and the watch saw it start a moment later: never cut short by more than that.
        assert job["jct"] >= job["wait"] + duration - 2 * SPEEDUP
    # `whole` arrived 60 s after `first` and needs all 8 GPUs: it starts only once `first` has ended.
    assert per_job["bench/whole"]["wait"] >= 600 - 60 - SPEEDUP
    # Every pod ran, was bound once and ended Succeeded, as the API shows after the run.
    assert t["phases"] == {"Succeeded": 5}
    assert len(r["bound_over_time"]) == 5
