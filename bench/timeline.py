"""The time-based mode: a discrete-event simulation over scheduling cycles.

Jobs (gangs) arrive over time, start once their gang reaches its minimum, run for their duration and leave.
Every `period` seconds one cycle runs: finished jobs release their capacity, arrived jobs join the queue, and
the scheduler solves the pending set on the current cluster. Per-pod schedulers bind pods one by one, so a
job's early pods can hold GPUs for many cycles before the job starts (or for ever, if two half-placed jobs
wait on each other); gang schedulers start a job whole or not at all.

Workloads are Kubernetes objects like the static scenarios (every job a PodGroup whose annotations say when it
arrives and how long it runs), so a timeline's jobs can be written out and inspected too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from gangsolve.bench import metrics, openb, tenants
from gangsolve.bench import objects as k8s
from gangsolve.bench.runner import SCHEDULERS
from gangsolve.bench.scenarios import PRIORITY_CLASSES, synthetic_gangs, synthetic_nodes
from gangsolve.gangs import STARVATION_SECONDS, build_cluster
from gangsolve.solver.model import GPU, Cluster, Gang, Node, Queue

PERIOD = 60.0  # seconds of simulated time between cycles
WINDOW = 180  # cycles during which jobs arrive
WARM_UP = 60  # cycles before the cluster reaches its steady state (jobs run up to an hour)
MAX_CYCLES = 300  # then the queue drains for at most this long
LOAD = 1.3  # offered GPU load over the window, as a share of the cluster's GPUs


@dataclass(frozen=True)
class Timeline:
    name: str
    build: Callable[[], list[dict]]
    description: str
    peers: tuple[str, ...] = ()  # schedulers run on this timeline only (runner.PEERS_ONLY)


@dataclass
class Job:
    gang: Gang
    arrival: float
    duration: float
    bound: dict[str, str] = field(default_factory=dict)  # pod -> node
    start: float | None = None
    end: float | None = None


def _arrivals(rng: np.random.Generator, work: list[float], capacity: int) -> list[float]:
    """Poisson arrival times over the window such that the offered GPU-seconds are LOAD x capacity."""
    horizon = WINDOW * PERIOD
    rate = len(work) / (sum(work) / (LOAD * capacity))  # jobs per second
    times = np.cumsum(rng.exponential(1 / rate, size=len(work)))
    return [float(t) for t in times if t < horizon]


def _annotate(arrival: float, duration: float) -> dict[str, str]:
    return {k8s.ARRIVAL_ANNOTATION: str(int(arrival)), k8s.DURATION_ANNOTATION: str(int(duration))}


def synthetic_timeline(n_nodes: int = 100, seed: int = 7) -> list[dict]:
    """The synthetic gang mix on an idle synthetic cluster; durations log-normal, median 15 minutes, at most 1 h."""
    rng = np.random.default_rng(seed)
    nodes, shapes = synthetic_nodes(n_nodes)
    capacity = sum(s.gpus for s in shapes)
    gangs = synthetic_gangs(rng, 4 * n_nodes, gpu_cap=max(8, capacity // 4))
    durations = np.clip(rng.lognormal(np.log(900), 1.0, size=len(gangs)), 300, 3600)
    work = [
        d * sum(int(p["spec"]["containers"][0]["resources"]["requests"].get(GPU, 0)) for p in g[1:])
        for g, d in zip(gangs, durations, strict=True)
    ]
    objs = [*PRIORITY_CLASSES, *nodes]
    for gang, arrival, duration in zip(gangs, _arrivals(rng, work, capacity), durations, strict=False):
        gang[0]["metadata"].setdefault("annotations", {}).update(_annotate(arrival, duration))
        for pod in gang[1:]:
            pod["metadata"]["creationTimestamp"] = k8s.timestamp(arrival)
        objs += gang
    return objs


def openb_timeline(every: int = 10, seed: int = 2023) -> list[dict]:
    """Every `every`-th OpenB node (the file is sorted by shape, so every shape stays), jobs of trace pods with
    their trace durations (clipped to 1 minute .. 1 hour, so the cluster reaches a steady state in the window)."""
    rng = np.random.default_rng(seed)
    rows = openb.trace_nodes()[::every]
    capacity = sum(int(r["gpu"]) for r in rows)
    jobs = openb.group(rng, openb.sample(rng, 10 * capacity), gangs=True)
    durations = [float(np.clip(job[0].duration, 60, 3600)) for job in jobs]
    work = [d * sum(tp.gpus for tp in job) for job, d in zip(jobs, durations, strict=True)]
    objs = openb.node_objects(rows)
    for j, (job, arrival) in enumerate(zip(jobs, _arrivals(rng, work, capacity), strict=False)):
        objs += openb.job_objects(f"job-{j:05d}", job, arrival, _annotate(arrival, durations[j]))
    return objs


TIMELINES = {
    t.name: t
    for t in (
        Timeline(
            "timeline/synthetic-100nodes",
            synthetic_timeline,
            "100 synthetic nodes, idle at start; gang mix arriving at 130% GPU load for 3 h",
        ),
        Timeline(
            "timeline/openb",
            openb_timeline,
            "every 10th OpenB node (122 nodes); trace pods as gangs, trace durations, 130% GPU load for 3 h",
        ),
        Timeline(
            "timeline/tenants",
            lambda: tenants.tenants_timeline(WINDOW * PERIOD),
            "16 8-GPU nodes; three tenants, Volcano Queues weighted 1:2:4, each bursting past its share (200% load)",
            peers=("proportion",),
        ),
    )
}
TIMELINE_GRIDS = {"quick": ["timeline/synthetic-100nodes"], "full": list(TIMELINES)}


def jobs_of(objects: list[dict]) -> tuple[list[Node], list[Job], tuple[Queue, ...]]:
    snap = k8s.to_snapshot(objects)
    cluster = build_cluster(snap, k8s.SCHEDULER)
    jobs = []
    for gang in cluster.gangs:
        ns, name = gang.name.split("/", 1)
        notes = snap.pod_groups[("scheduling.x-k8s.io", ns, name)]["metadata"]["annotations"]
        jobs.append(Job(gang, float(notes[k8s.ARRIVAL_ANNOTATION]), float(notes[k8s.DURATION_ANNOTATION])))
    return list(cluster.nodes), sorted(jobs, key=lambda j: (j.arrival, j.gang.name)), cluster.queues


def simulate(
    objects: list[dict], scheduler: str, time_limit: float, on_cycle: Callable[[], None] | None = None
) -> dict:
    nodes, jobs, queues = jobs_of(objects)
    tenants_mode = len(queues) > 1  # queues to share between (a timeline without any has just `default`)
    schedule = SCHEDULERS[scheduler]
    index = {n.name: i for i, n in enumerate(nodes)}
    used: list[dict[str, int]] = [{} for _ in nodes]
    total_gpus = sum(n.allocatable.get(GPU, 0) for n in nodes)
    requests = {p.name: p.requests for job in jobs for p in job.gang.pods}
    queue_of = {p.name: job.gang.queue for job in jobs for p in job.gang.pods}
    held: dict[str, dict[str, int]] = {q.name: {} for q in queues}  # what each queue's bound pods hold
    violations = 0  # cycles x queues x resources over the queue's capability

    def hold(pod: str, node: str, sign: int) -> None:
        for u in (used[index[node]], held.setdefault(queue_of[pod], {})):
            for r, q in requests[pod].items():
                u[r] = u.get(r, 0) + sign * q

    arrived = 0
    pending: list[Job] = []
    running: list[Job] = []
    cycles: list[dict] = []
    for cycle in range(MAX_CYCLES):
        now = cycle * PERIOD
        for job in [j for j in running if j.end is not None and j.end <= now]:
            running.remove(job)
            for pod, node in job.bound.items():
                hold(pod, node, -1)
        while arrived < len(jobs) and jobs[arrived].arrival <= now:
            pending.append(jobs[arrived])
            arrived += 1
        gangs = tuple(
            Gang(
                j.gang.name,
                tuple(p for p in j.gang.pods if p.name not in j.bound),
                j.gang.min_member,
                tuple(j.bound.values()),
                j.gang.colocate,
                starving=now - j.arrival > STARVATION_SECONDS,
                queue=j.gang.queue,
            )
            for j in pending
        )
        cluster = Cluster(
            tuple(replace(n, used=dict(used[i])) for i, n in enumerate(nodes)),
            gangs,
            queues=tuple(replace(q, allocated=dict(held[q.name])) for q in queues),
        )
        started = time.perf_counter()
        bindings, _facts = schedule(cluster, "", time_limit) if gangs else ({}, {})
        seconds = time.perf_counter() - started
        by_name = {j.gang.name: j for j in pending}
        owner = {p.name: by_name[g.name] for g in gangs for p in g.pods}
        for pod, node in bindings.items():
            owner[pod].bound[pod] = node
            hold(pod, node, +1)
        for job in [j for j in pending if len(j.bound) >= j.gang.min_member]:
            pending.remove(job)
            job.start, job.end = now, now + job.duration
            running.append(job)
        allocated = sum(u.get(GPU, 0) for u in used)
        useful = sum(requests[p].get(GPU, 0) for j in running for p in j.bound)
        cycles.append(
            {
                "time": now,
                "seconds": seconds,
                "pending": len(pending),
                "running": len(running),
                "gpu_allocation": allocated / total_gpus,
                "gpu_useful": useful / total_gpus,
            }
        )
        if tenants_mode:
            violations += sum(held[q.name].get(r, 0) > cap for q in queues for r, cap in q.capability.items())
            waiting = {q.name: 0 for q in queues}
            for j in pending:
                waiting[j.gang.queue] += sum(p.requests.get(GPU, 0) for p in j.gang.pods if p.name not in j.bound)
            cycles[-1]["held"] = {q: h.get(GPU, 0) for q, h in held.items()}
            cycles[-1]["demand"] = {q: h.get(GPU, 0) + waiting[q] for q, h in held.items()}
        if on_cycle:
            on_cycle()
        if arrived == len(jobs) and not running and (not pending or not bindings):
            break  # drained, or stuck: nothing runs that could free capacity and nothing new arrives
    summary = summarize(jobs, cycles)
    if tenants_mode:
        weights = {q.name: q.weight for q in queues}
        steady = (WARM_UP * PERIOD, WINDOW * PERIOD)
        summary.update(
            fairness=tenants.fairness(cycles, weights, total_gpus, steady),
            tenant_delay_p95=tenants.tenant_delays(jobs, {j.gang.name: j.gang.queue for j in jobs}),
            capability_violations=violations,
            gpus=total_gpus,
        )
    return {
        "scheduler": scheduler,
        "time_limit": time_limit if scheduler == "gangsolve" else None,
        "summary": summary,
        "cycles": cycles,
    }


def summarize(jobs: list[Job], cycles: list[dict]) -> dict:
    started = [(j, j.start) for j in jobs if j.start is not None]
    ends = [(j, j.end) for j, _s in started if j.end is not None and j.end <= cycles[-1]["time"]]
    delays = [start - j.arrival for j, start in started]
    jct = [end - j.arrival for j, end in ends]
    # Utilization in the steady state: after the warm-up, while jobs still arrive.
    window = [c for c in cycles if WARM_UP * PERIOD <= c["time"] < WINDOW * PERIOD] or cycles
    seconds = [c["seconds"] for c in cycles]
    return {
        "jobs": len(jobs),
        "started": len(started),
        "finished": len(ends),
        "queue_delay_p50": metrics.percentile(delays, 50),
        "queue_delay_p95": metrics.percentile(delays, 95),
        "jct_p50": metrics.percentile(jct, 50),
        "jct_p95": metrics.percentile(jct, 95),
        "gpu_allocation_mean": float(np.mean([c["gpu_allocation"] for c in window])),
        "gpu_useful_mean": float(np.mean([c["gpu_useful"] for c in window])),
        "cycles": len(cycles),
        "cycle_p50": metrics.percentile(seconds, 50),
        "cycle_p99": metrics.percentile(seconds, 99),
    }
