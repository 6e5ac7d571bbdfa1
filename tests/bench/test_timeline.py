"""The time-based mode on a tiny cluster: gang schedulers start jobs whole, per-pod ones strand GPUs."""

from __future__ import annotations

from bench_clusters import cluster_objects, gang, gpu_nodes

from gangsolve.bench import objects as k8s
from gangsolve.bench.timeline import PERIOD, simulate


def job(name: str, pods: int, gpus: int, arrival: float, duration: float) -> list[dict]:
    notes = {k8s.ARRIVAL_ANNOTATION: str(int(arrival)), k8s.DURATION_ANNOTATION: str(int(duration))}
    return gang(name, pods, gpus, created=arrival, annotations=notes)


def workload() -> list[dict]:
    # 8 GPUs; two jobs of 3 x 2 GPUs arrive together, then a small one.
    return cluster_objects(
        gpu_nodes(2), job("a", 3, 2, 0, 10 * PERIOD), job("b", 3, 2, 0, 10 * PERIOD), job("c", 1, 1, 2 * PERIOD, PERIOD)
    )


def test_gang_scheduler_runs_jobs_whole_and_drains_the_queue():
    result = simulate(workload(), "greedy-gang", time_limit=1)
    s = result["summary"]
    assert (s["jobs"], s["started"], s["finished"]) == (3, 3, 3)
    assert s["queue_delay_p50"] == 0
    assert s["queue_delay_p95"] > 5 * PERIOD
    for c in result["cycles"]:
        assert c["gpu_useful"] == c["gpu_allocation"] <= 1  # nothing half-placed


def test_per_pod_scheduler_strands_gpus_while_a_job_waits():
    result = simulate(workload(), "per-pod-least", time_limit=1)
    first = result["cycles"][0]
    assert first["gpu_allocation"] == 1.0  # a whole, plus one pod of b holding 2 GPUs
    assert first["gpu_useful"] == 0.75
    assert result["summary"]["finished"] == 3  # b completes once a leaves


def test_gangsolve_in_the_timeline():
    s = simulate(workload(), "gangsolve", time_limit=0.5)["summary"]
    assert (s["started"], s["finished"]) == (3, 3)
    assert s["cycle_p99"] is not None
