"""The live tenants timeline at its smallest on a real control plane, under `gangsolve run`: two teams' Volcano
Queues of equal weight on one 8-GPU kwok node. Team-a's two jobs take the whole node; when team-b's arrives,
gangsolve reclaims one of them for team-b's fair share (half the node; team-a keeps its own half: team-a's
jobs declare no runtime, so waiting for one to end may be waiting for ever, docs/queues.md), and the
bench's workload restarts the evicted job as its training operator would (its pods created again under new
names). Asserts what the API and the jobs' times show: one eviction, every job run whole to its end, the evicted
one again from the start, and no node ever holding more GPUs than it has."""

from __future__ import annotations

import pytest

from gangsolve.bench import manifests, scenarios, tenants
from gangsolve.bench.live import live_timeline
from gangsolve.bench.live.live_scenarios import LiveScenario
from gangsolve.bench.live.runs import run_live
from gangsolve.edge.estimates import EXPECTED_RUNTIME_ANNOTATION

pytestmark = pytest.mark.e2e

SPEEDUP = live_timeline.SPEEDUP
# name -> (queue, arrival, duration) in the timeline's seconds, and its pods' GPUs
JOBS = {
    "first": ("team-a", 0, 900, [4]),  # half the node each, for 15 s live
    "second": ("team-a", 0, 900, [4]),
    "fair": ("team-b", 180, 300, [4]),  # team-b's fair share, 3 s live after team-a's jobs started
}


def objects() -> list[dict]:
    objs = [tenants.queue_object("team-a", 1), tenants.queue_object("team-b", 1)]
    objs.append(manifests.node("node-0", 32000, 256 * 1024, 8))
    for name, (queue, arrival, duration, gpus) in JOBS.items():
        notes = {
            manifests.ARRIVAL_ANNOTATION: str(arrival),
            manifests.DURATION_ANNOTATION: str(duration),
            live_timeline.QUEUE_ANNOTATION: queue,
        }
        if queue == "team-b":
            notes[EXPECTED_RUNTIME_ANNOTATION] = f"{duration / SPEEDUP:g}s"
        pods = [("worker", 4000, 8 * 1024, g) for g in gpus]
        objs += scenarios.gang_objects(name, arrival, pods, len(pods), "", annotations=notes)
    return objs


TINY = LiveScenario(
    "live/tenants-tiny",
    1,
    objects,
    "two teams' jobs on one 8-GPU node",
    mode="timeline",
    timeout=120.0,
    gangsolve_settings={"starvation-age": 30.0},
)


@pytest.fixture(scope="module")
def run(binaries, tmp_path_factory) -> dict:
    logs = tmp_path_factory.mktemp("live-logs")
    return run_live(TINY, "gangsolve", log_dir=logs, log=lambda m: print(f"[live] {m}", flush=True))


def test_a_reclaimed_job_starts_over_and_both_run_whole_to_their_end(run):
    assert "error" not in run, run.get("error")
    t = run["timeline"]
    assert t["workload_error"] is None
    assert (t["jobs"], t["started"], t["finished"]) == (3, 3, 3)
    assert t["evictions"] == 1
    assert t["overcommitted"] == []
    per_job = t["per_job"]
    # `fair` did not wait for team-a's jobs to end (at 900 s): team-b got its share by reclaim.
    assert per_job["bench/fair"]["wait"] < 900 - 180
    # The evicted job ran again from the start once `fair` had ended: its completion is at least `fair`'s end
    # and its whole runtime; the other ran through.
    jct = sorted(per_job[f"bench/{name}"]["jct"] for name in ("first", "second"))
    assert jct[0] < 900 + 2 * SPEEDUP
    assert jct[1] >= 180 + 300 + 900 - 2 * SPEEDUP
    # The evicted run's pod is gone; the other runs' ended Succeeded.
    assert t["phases"] == {"Succeeded": 3}


def test_the_queues_shares_are_measured_from_the_samples(run):
    fairness = run["timeline"]["fairness"]["tenants"]
    assert set(fairness) == {"team-a", "team-b"}
    assert run["timeline"]["capability_violations"] == 0
