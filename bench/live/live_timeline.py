"""The live timeline: the time-based mode's jobs on the real control plane, arriving and finishing while the
scheduler under test runs, SPEEDUP times faster than the timeline's own clock.

The bench plays the jobs' side (`Workload`): each gang arrives at its time (its users' group objects, then its
pods), and once the pods it needs are Running it runs for its duration and ends, every pod Succeeded, as a
training job's workers wait for each other and exit together. A gang bound only in part runs nothing and holds
what it was given, as a half-placed job does (kwok could end each pod after a delay of its own, but a pod of a
half-placed job would then finish work it never did). In the synthetic timelines nothing evicts (their
PriorityClasses say `Never`, populate.body_of). In the tenants timelines schedulers reclaim for fair shares: a job
one of whose pods a scheduler deletes starts over, as its training operator restarts it (its other pods deleted,
all created again under new names, the same group), and what it ran is lost.

Figures are in the timeline's seconds (live seconds x SPEEDUP), so they read beside the time-based mode's: each
gang's wait (created -> the pods it needs Running), its completion time (created -> its end) and the GPUs held by
running gangs over the steady window, and the GPU-time of runs later evicted. With queues (the tenants
timelines), each queue's GPUs held by running jobs against its weighted fair share, sampled once a live second
(the time-based mode's cycle), and measured by bench/tenants.py's oracle. A gang that never starts counts as
starting when the run ended; one that fits nowhere even on the idle cluster counts for no scheduler. The
over-time check is independent of every scheduler: from the times each pod was bound and ended, no node ever
holds more GPUs than it has.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import numpy as np

from gangsolve.bench import manifests, placement_metrics, scenarios, tenants
from gangsolve.bench.devcluster.fake_nodes import GPU_RESOURCE
from gangsolve.bench.live.populate import Arrival, create, run_async
from gangsolve.edge.estimates import EXPECTED_RUNTIME_ANNOTATION
from gangsolve.live.kube import ApiError, Kube
from gangsolve.solver.model import DEFAULT_QUEUE, GPU

if TYPE_CHECKING:  # measurements imports the scenarios, which import this module
    from gangsolve.bench.live.measurements import BindWatch

SPEEDUP = 60.0  # timeline seconds per live second: the time-based mode's one-minute cycle is a live second
NODES = 100  # the time-based mode's timeline/synthetic-100nodes
SEEDS = (1, 2, 3)
_PODS = f"/api/v1/namespaces/{manifests.NAMESPACE}/pods"
TICK = 0.05  # live seconds between the workload's looks at the clock
# Live seconds a run may take: the time-based mode's 8 hours (3 of arrivals, 5 of draining), and a margin.
TIMEOUT = 1.2 * scenarios.MAX_CYCLES * scenarios.PERIOD / SPEEDUP
# Live seconds with nothing running and nothing changing after which the gangs still waiting never start.
STUCK = 30.0
SAMPLE = scenarios.PERIOD / SPEEDUP  # live seconds between samples of what each queue holds: one cycle
QUEUE_ANNOTATION = "gangsolve.io/queue"  # the tenants timelines' PodGroups name their queue so


def objects(seed: int, n_nodes: int = NODES) -> list[dict]:
    """timeline/synthetic-100nodes' jobs (seed `seed`) on its idle cluster, runtimes declared (`declared`)."""
    return declared(scenarios.synthetic_timeline(seed, n_nodes))


def tenant_objects(seed: int) -> list[dict]:
    """timeline/tenants' Queues, nodes and jobs (seed `seed`, as the time-based mode draws them), runtimes
    declared (`declared`)."""
    return declared(tenants.tenants_timeline(scenarios.WINDOW * scenarios.PERIOD, seed=10 + seed))


def declared(objs: list[dict]) -> list[dict]:
    """Each PodGroup declaring its runtime (exact estimates) in live seconds; its arrival and duration
    annotations stay in the timeline's."""
    for obj in objs:
        if obj["kind"] == "PodGroup":
            notes = obj["metadata"]["annotations"]
            live = max(1.0, float(notes[manifests.DURATION_ANNOTATION]) / SPEEDUP)
            notes[EXPECTED_RUNTIME_ANNOTATION] = f"{live:g}s"
    return objs


@dataclass
class Job:
    """One gang as the workload runs it; times are time.monotonic() but `ends`."""

    arrival: Arrival
    at: float  # live seconds after t0 at which it arrives
    duration: float  # live seconds it runs once started
    need: int
    created: float | None = None
    start: float | None = None
    end: float | None = None
    gpus: int = 0  # held while it ran: its pods Running at its start
    ends: dict[str, float] = field(default_factory=dict)  # running pod -> when it ends (time.time())
    queue: str = DEFAULT_QUEUE
    restarts: int = 0  # times it started over, evicted
    retired: list[dict] = field(default_factory=list)  # the pods of the runs it started over from

    @property
    def asked(self) -> int:
        """GPUs its pods ask for."""
        return sum(_gpus(p) for p in self.arrival.pods)


def jobs_of(objs: list[dict], gangs: list[Arrival], need: dict[str, int]) -> list[Job]:
    """The gangs in arrival order, each with its arrival and duration in live seconds (from its scenario
    PodGroup's annotations)."""
    notes = {
        f"{o['metadata']['namespace']}/{o['metadata']['name']}": o["metadata"]["annotations"]
        for o in objs
        if o["kind"] == "PodGroup"
    }
    out = [
        Job(
            a,
            float(notes[a.gang][manifests.ARRIVAL_ANNOTATION]) / SPEEDUP,
            float(notes[a.gang][manifests.DURATION_ANNOTATION]) / SPEEDUP,
            max(need[a.gang], 1),
            queue=notes[a.gang].get(QUEUE_ANNOTATION, DEFAULT_QUEUE),
        )
        for a in gangs
    ]
    return sorted(out, key=lambda j: j.at)


def _succeeded(pod: dict) -> dict:
    """The status a finished pod's kubelet writes: phase Succeeded, its containers terminated with exit code 0."""
    return {
        "status": {
            "phase": "Succeeded",
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "PodCompleted"},
                {"type": "ContainersReady", "status": "False", "reason": "PodCompleted"},
            ],
            "containerStatuses": [
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "ready": False,
                    "restartCount": 0,
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
                }
                for c in pod["spec"]["containers"]
            ],
        }
    }


class Workload(threading.Thread):
    """The jobs' side of a live timeline (module docstring), from what `watch` sees of the pods, writing through
    its own API client. Each pod of a started job ends its duration after the start time the API shows for it
    (status.startTime, to the second), so a scheduler's exact estimate ends it exactly when the pod ends.
    `created` gets each pod's create time, as the other live modes record it."""

    def __init__(self, kubeconfig: Path, jobs: list[Job], watch: BindWatch, created: dict[str, float]) -> None:
        super().__init__(daemon=True, name="workload")
        self.kubeconfig = kubeconfig
        self.jobs = jobs
        self.watch = watch
        self.created = created
        self.stop = threading.Event()
        self.t0 = 0.0
        self.ended: dict[str, float] = {}  # pod -> when the workload ended it (time.monotonic())
        self.error: str | None = None
        self.last_change = time.monotonic()  # an arrival, a start or an end
        self.lost: list[tuple[int, float, float]] = []  # evicted runs: GPUs, start, eviction (time.monotonic())
        self._deletions_seen = 0  # the watch's deletions looked at for evictions so far
        # Once a SAMPLE: the time (timeline seconds) and per queue the GPUs running jobs hold and those the
        # arrived jobs not running ask for.
        self.samples: list[dict] = []

    @property
    def arrived(self) -> bool:
        return all(j.created is not None for j in self.jobs)

    @property
    def busy(self) -> bool:
        """Some gang is running (started, not ended)."""
        return any(j.start is not None and j.end is None for j in self.jobs)

    @property
    def done(self) -> bool:
        return all(j.end is not None for j in self.jobs)

    def run(self) -> None:
        self.t0 = time.monotonic()
        try:
            run_async(self.kubeconfig, self._run)
        except Exception as exc:  # reported with the run, which then ends
            self.error = f"{type(exc).__name__}: {exc}"[:2000]

    async def _run(self, kube: Kube) -> None:
        while not self.stop.is_set() and not self.done:
            now = time.monotonic()
            await self.step(kube, now)
            if now - self.t0 >= SAMPLE * len(self.samples):
                self.sample(now)
            await anyio.sleep(TICK)

    def sample(self, now: float) -> None:
        """What each queue's running pods hold and its waiting jobs ask for, now (`samples`). A job's pods end
        one by one, and a scheduler may give a pod's GPUs to the next job before its siblings end: counted by
        the job, a queue would seem to hold both."""
        held: dict[str, int] = {}
        waiting: dict[str, int] = {}
        for job in self.jobs:
            held.setdefault(job.queue, 0)
            waiting.setdefault(job.queue, 0)
            if job.start is not None and job.end is None:
                running = (p for p in job.arrival.pods if p["metadata"]["name"] in job.ends)
                held[job.queue] += sum(_gpus(p) for p in running if p["metadata"]["name"] not in self.ended)
            elif job.created is not None and job.start is None:
                waiting[job.queue] += job.asked
        self.samples.append({"time": SPEEDUP * (now - self.t0), "held": held, "waiting": waiting})

    async def step(self, kube: Kube, now: float) -> None:
        """Every job whose time has come arrives, starts (its pods running) or ends; one a scheduler evicted
        starts over."""
        evicted = self._evicted()
        for job in self.jobs:
            if job.arrival.gang in evicted:
                await self.restart(kube, job, now)
                continue
            if job.created is None and now - self.t0 >= job.at:
                for obj in (*job.arrival.groups, *job.arrival.pods):
                    await create(kube, obj)
                    if obj["kind"] == "Pod":
                        self.created[obj["metadata"]["name"]] = time.monotonic()
                job.created = self.last_change = time.monotonic()
            elif job.created is not None and job.start is None:
                with self.watch.lock:
                    started = {
                        p["metadata"]["name"]: self.watch.started[p["metadata"]["name"]]
                        for p in job.arrival.pods
                        if p["metadata"]["name"] in self.watch.started
                    }
                if len(started) >= job.need:
                    job.start, self.last_change = now, now
                    job.ends = {pod: at + job.duration for pod, at in started.items()}
                    job.gpus = sum(_gpus(p) for p in job.arrival.pods if p["metadata"]["name"] in started)
            elif job.start is not None and job.end is None:
                await self.finish(kube, job, time.time())

    def _evicted(self) -> set[str]:
        """The jobs (gangs) under way a pod of whose current run was deleted, and not by the workload; looked for only
        when the watch has seen a deletion since the last look (this runs every TICK)."""
        with self.watch.lock:
            if len(self.watch.gone) == self._deletions_seen:
                return set()
            self._deletions_seen = len(self.watch.gone)
            gone = set(self.watch.gone)
        return {
            job.arrival.gang
            for job in self.jobs
            if job.created is not None
            and job.end is None
            and any(p["metadata"]["name"] in gone and p["metadata"]["name"] not in self.ended for p in job.arrival.pods)
        }

    async def restart(self, kube: Kube, job: Job, now: float) -> None:
        """The job starts over as its training operator restarts it: what it ran is lost, its other pods are
        deleted and all are created again, renamed, in the same group; it waits again from its arrival."""
        if job.start is not None:
            self.lost.append((job.gpus, job.start, now))
        with self.watch.lock:
            gone = dict(self.watch.gone)
        for pod in job.arrival.pods:
            name = pod["metadata"]["name"]
            self.ended[name] = gone.get(name, now)
            if name not in gone:
                with contextlib.suppress(ApiError):  # already gone
                    await kube.delete(f"{_PODS}/{name}")
        job.retired += job.arrival.pods
        job.restarts += 1
        first = job.retired[: len(job.arrival.pods)]
        pods = [{**p, "metadata": {**p["metadata"], "name": f"{p['metadata']['name']}-r{job.restarts}"}} for p in first]
        for pod in pods:
            await create(kube, pod)
            self.created[pod["metadata"]["name"]] = time.monotonic()
        job.arrival = replace(job.arrival, pods=pods)
        job.start, job.ends, job.gpus = None, {}, 0
        self.last_change = time.monotonic()

    async def finish(self, kube: Kube, job: Job, wall: float) -> None:
        """The job's pods whose time (`wall`, time.time()) has come end Succeeded; once all have, one never bound
        is deleted (the job is done without it) and the job has ended."""
        for pod in job.arrival.pods:
            name = pod["metadata"]["name"]
            if name in job.ends and name not in self.ended and job.ends[name] <= wall:
                self.ended[name] = time.monotonic()  # before the request: nothing can take its place sooner
                await kube.patch(f"{_PODS}/{name}/status", _succeeded(pod))
        if any(name not in self.ended for name in job.ends):
            return
        for pod in job.arrival.pods:
            name = pod["metadata"]["name"]
            if name not in job.ends:
                self.ended[name] = time.monotonic()
                with contextlib.suppress(ApiError):  # already gone
                    await kube.delete(f"{_PODS}/{name}")
        job.end = self.last_change = time.monotonic()


def _gpus(pod: dict) -> int:
    return sum(
        int((c.get("resources") or {}).get("requests", {}).get(GPU_RESOURCE, 0)) for c in pod["spec"]["containers"]
    )


def measure(
    workload: Workload,
    bound: dict[str, tuple[float, str]],
    nodes: Sequence[dict],
    end: float,
    runnable: set[str],
    queues: Sequence[dict] = (),
) -> dict:
    """The run's figures in timeline seconds (module docstring); `bound`: the BindWatch's pod -> (when, node);
    `end`: when the run ended; `runnable`: the gangs that fit the idle cluster, the only ones counted (as in the
    time-based mode); `queues`: the scenario's Volcano Queues (none: no fairness figures). A job that has not
    started counts as starting at `end`, one that has not ended as ending its duration after its start; an
    evicted one waits from its arrival to its last start."""
    counted = [j for j in workload.jobs if j.arrival.gang in runnable]
    per_job: dict[str, dict[str, float]] = {}
    for j in counted:
        if j.created is None:
            continue
        start = j.start if j.start is not None else end
        finish = j.end if j.end is not None else start + j.duration
        per_job[j.arrival.gang] = {"wait": SPEEDUP * (start - j.created), "jct": SPEEDUP * (finish - j.created)}
    waits = [f["wait"] for f in per_job.values()]
    jct = [f["jct"] for f in per_job.values()]
    t0 = workload.t0
    lo, hi = (t0 + w / SPEEDUP for w in (scenarios.WARM_UP * scenarios.PERIOD, scenarios.WINDOW * scenarios.PERIOD))
    capacity = sum(int(n["status"]["allocatable"].get(GPU_RESOURCE, 0)) for n in nodes)
    useful = sum(
        j.gpus * max(0.0, min(j.end if j.end is not None else end, hi) - max(j.start, lo))
        for j in workload.jobs
        if j.start is not None
    )
    lost = sum(gpus * max(0.0, min(stop, hi) - max(begin, lo)) for gpus, begin, stop in workload.lost)
    figures = {
        "jobs": len(counted),
        "never_runnable": len(workload.jobs) - len(counted),
        "arrived": len(per_job),
        "started": sum(1 for j in counted if j.start is not None),
        "finished": sum(1 for j in counted if j.end is not None),
        "speedup": SPEEDUP,
        "queue_delay_p50": placement_metrics.percentile(waits, 50),
        "queue_delay_p95": placement_metrics.percentile(waits, 95),
        "queue_delay_mean": float(np.mean(waits)) if waits else None,
        "jct_mean": float(np.mean(jct)) if jct else None,
        "gpu_useful_mean": useful / ((hi - lo) * capacity) if capacity else None,
        "gpu_lost_mean": lost / ((hi - lo) * capacity) if capacity else None,  # held by runs later evicted
        "evictions": len(workload.lost),
        "overcommitted": overcommitted(workload, bound, nodes, end),
        "per_job": per_job,
        "workload_error": workload.error,
    }
    if queues:
        figures |= shares(workload, queues, capacity, {j.arrival.gang: j.queue for j in counted}, per_job)
    return figures


def shares(workload: Workload, queues: Sequence[dict], capacity: int, queue_of: dict[str, str], per_job: dict) -> dict:
    """How fairly the queues shared the GPUs (bench/tenants.py's oracle, on the workload's samples: a queue's
    demand is what it holds and asks for, at most its capability), each queue's p95 wait, and the samples in
    which a queue (with those under it) held more GPUs than its capability."""
    weights = {q["metadata"]["name"]: int(q["spec"].get("weight", 1)) for q in queues}
    parents = {q["metadata"]["name"]: q["spec"].get("parent", "") for q in queues}
    caps = {
        q["metadata"]["name"]: float(q["spec"]["capability"][GPU])
        for q in queues
        if GPU in (q["spec"].get("capability") or {})
    }
    cycles = [
        {
            "time": s["time"],
            "held": s["held"],
            "demand": {q: min(h + s["waiting"].get(q, 0), caps.get(q, capacity)) for q, h in s["held"].items()},
        }
        for s in workload.samples
    ]
    window = (scenarios.WARM_UP * scenarios.PERIOD, scenarios.WINDOW * scenarios.PERIOD)
    waits: dict[str, list[float]] = {}
    for gang, f in per_job.items():
        waits.setdefault(queue_of[gang], []).append(f["wait"])
    violations = sum(
        held > caps[q] for c in cycles for q, held in tenants.up_the_tree(c["held"], parents).items() if q in caps
    )
    return {
        "fairness": tenants.fairness(cycles, weights, capacity, window, parents, caps),
        "tenant_delay_p95": {q: placement_metrics.percentile(w, 95) for q, w in waits.items()},
        "capability_violations": violations,
        "gpus": capacity,
        "cycles": cycles,
    }


def overcommitted(
    workload: Workload, bound: dict[str, tuple[float, str]], nodes: Sequence[dict], end: float
) -> list[str]:
    """Nodes that at some instant held more GPUs than they have, from each pod's bind and end times alone (a pod
    holds its node from its binding until it ended; one still running at the run's end, until then)."""
    gpus = {p["metadata"]["name"]: _gpus(p) for j in workload.jobs for p in (*j.retired, *j.arrival.pods)}
    has = {n["metadata"]["name"]: int(n["status"]["allocatable"].get(GPU_RESOURCE, 0)) for n in nodes}
    changes: dict[str, list[tuple[float, int]]] = {}
    for pod, (when, node) in bound.items():
        if gpus.get(pod):
            changes.setdefault(node, []).append((when, gpus[pod]))
            changes[node].append((workload.ended.get(pod, end), -gpus[pod]))
    out = []
    for node, events in changes.items():
        held = 0
        for _when, change in sorted(events):  # at one instant an end (negative) comes before a start
            held += change
            if held > has.get(node, 0):
                out.append(node)
                break
    return sorted(out)
