"""The time-based mode: a discrete-event simulation over scheduling cycles.

Jobs (gangs) arrive over time, start once their gang reaches its minimum, run for their duration and leave.
Every `PERIOD` seconds while jobs wait, one cycle runs: finished jobs release their capacity, arrived jobs join
the queue, and the scheduler solves the pending set on the current cluster (with an empty queue the clock jumps
to the next arrival). Per-pod schedulers bind pods one by one, so a job's early pods can hold GPUs for many
cycles before the job starts (or for ever, if two half-placed jobs wait on each other); gang schedulers start a
job whole or not at all.

Schedulers see runtime estimates the way the live scheduler does (`gangsolve.edge.estimates`): in mode `exact` every
PodGroup declares its true runtime (annotation gangsolve.io/expected-runtime), in `noisy` a declared runtime
the true one is a log-normal multiple of (actual = estimate x lognormal(0, 1)), in `absent` none, so estimates
come from the history of finished jobs of the same workload, else the default (guesses, which gangsolve's plan
shows but holds nothing on). Running jobs' expected ends come from the same estimates.

Workloads are Kubernetes objects like the static scenarios (every job a PodGroup whose annotations say when it
arrives and how long it runs), so a timeline's jobs can be written out and inspected too.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from gangsolve.bench import manifests, openb, placement_metrics, sharing, tenants
from gangsolve.bench.baselines import conservative_backfill, easy_backfill
from gangsolve.bench.scenarios import (  # the timelines' workloads live beside the static scenarios
    MAX_CYCLES,
    PERIOD,
    WARM_UP,
    WINDOW,
    WORKLOAD_LABEL,
    label_workload,
    poisson_arrivals,
    synthetic_timeline,
    timeline_annotations,
)
from gangsolve.bench.static.runner import SCHEDULERS, Scheduler, solve_with
from gangsolve.edge.estimates import EXPECTED_RUNTIME_ANNOTATION, Estimator, declared_runtime, workload_key
from gangsolve.edge.gangs import POD_GROUP_LABEL, STARVATION_SECONDS, build_cluster, starvation_age
from gangsolve.edge.usage import accrue
from gangsolve.solver.model import (
    GPU,
    ORDERS,
    SHARE,
    WHOLE,
    Cluster,
    Gang,
    Node,
    Queue,
    Reservation,
    Running,
    SolveConfig,
)
from gangsolve.solver.planning import expected_end, overran

ESTIMATES = ("exact", "noisy", "absent")
NOISE_SIGMA = 1.0  # noisy estimates: actual = estimate x lognormal(0, NOISE_SIGMA)
DEFAULT_RUNTIME = 3600.0  # the configured default when a job declares nothing and its workload has no history
SEEDS = (1, 2, 3)
# OpenB with the trace's own times. Its whole-GPU pods offer only about 6 GPUs of work a day, so TRACE_TENANTS
# consecutive windows of TRACE_DAYS are laid over each other (each pod at its own time into its window, for its
# own duration), on the trace's 8-GPU nodes, as many as make the offered GPU load about TRACE_LOAD.
TRACE_START = 9_700_000  # seconds into the trace: arrivals are steady from here on
TRACE_END = 12_900_000  # ... until here (the last pod is created at 12,897,659)
TRACE_DAYS = 2
TRACE_TENANTS = 8
# Seeds 1 to TRACE_SEEDS start on windows 1 to TRACE_SEEDS after TRACE_START, each a different workload whose
# windows all lie inside the steady part (window 0 is nearly empty: arrivals begin at about 9,860,000); the next
# seed starts again at seed 1's.
TRACE_SEEDS = int((TRACE_END - TRACE_START) // (TRACE_DAYS * 86400)) - TRACE_TENANTS
TRACE_LOAD = 0.9


@dataclass(frozen=True)
class Timeline:
    name: str
    build: Callable[[int], list[dict]]  # seed -> objects
    description: str
    window: tuple[float, float]  # steady state (seconds): utilization is measured over it
    max_cycles: int  # cycles with jobs waiting, at most
    peers: tuple[str, ...] = ()  # schedulers run on this timeline only (runner.PEERS_ONLY)


@dataclass
class Job:
    gang: Gang
    arrival: float
    duration: float
    declared: float | None  # the runtime its objects declare (None in mode absent)
    workload: str  # its history key
    bound: dict[str, str] = field(default_factory=dict)  # pod -> node
    start: float | None = None
    end: float | None = None
    estimate: float | None = None  # the scheduler's runtime estimate when it started
    # When its pods were last created: its arrival, or its eviction (the controller creates them again, and a
    # gang's wait for the starvation age counts from its pods' creation, as in the live scheduler).
    created: float = 0.0
    shown: float | None = None  # the first start the scheduler showed it (its planned start, or when it started)
    promised: float | None = None  # the first start it held a reservation for (None: it never held one)

    @property
    def gpus(self) -> float:
        return sum(gpus_in(p.requests) for p in self.gang.pods)

    def waited(self, now: float) -> float:
        """Seconds its pods have been pending at `now` (Gang.waited; what the starvation age counts)."""
        return now - max(self.arrival, self.created)


def gpus_in(amounts: Mapping[str, int]) -> float:
    """The GPUs of requests (or of what a node's pods hold), a share of one GPU as its fraction."""
    return amounts.get(GPU, 0) + amounts.get(SHARE, 0) / WHOLE


def openb_timeline(seed: int = 2023, every: int = 10) -> list[dict]:
    """Every `every`-th OpenB node (the file is sorted by shape, so every shape stays), jobs of trace pods with
    their trace durations (clipped to 1 minute .. 1 hour, so the cluster reaches a steady state in the window)."""
    rng = np.random.default_rng(seed)
    rows = openb.trace_nodes()[::every]
    capacity = sum(int(r["gpu"]) for r in rows)
    jobs = openb.group(rng, openb.sample(rng, 10 * capacity), gangs=True)
    durations = [float(np.clip(job[0].duration, 60, 3600)) for job in jobs]
    work = [d * sum(tp.gpus for tp in job) for job, d in zip(jobs, durations, strict=True)]
    objs = openb.node_objects(rows)
    for j, (job, arrival) in enumerate(zip(jobs, poisson_arrivals(rng, work, capacity), strict=False)):
        job_objs = openb.job_objects(f"job-{j:05d}", job, arrival, timeline_annotations(arrival, durations[j]))
        label_workload(job_objs, f"{len(job)}x{job[0].gpus}")
        objs += job_objs
    return objs


def openb_trace_timeline(seed: int = 1, shares: bool = False) -> list[dict]:
    """The trace's own arrivals and durations: the whole-GPU pods (with `shares`, those asking part of one GPU
    too) created in TRACE_TENANTS consecutive windows of TRACE_DAYS (the seed moves the first window on by a
    window per seed, see TRACE_SEEDS), laid over each other: each pod a job of its own arriving at its creation
    time into its window and running until its deletion time."""
    span = TRACE_DAYS * 86400
    first = TRACE_START + (1 + (seed - 1) % TRACE_SEEDS) * span
    pods = []
    for tenant in range(TRACE_TENANTS):
        begin = first + tenant * span
        pods += [
            (tp.created - begin, tenant, tp) for tp in openb.trace_pods(shares) if begin <= tp.created < begin + span
        ]
    pods.sort(key=lambda e: (e[0], e[1]))
    offered = sum(min(tp.duration, span - t) * tp.gpus * tp.gpu_milli / WHOLE for t, _tenant, tp in pods) / span
    shape = ("G2", "8")  # the trace's most common node: 8 GPUs, 96 cores, 384 GiB
    rows = [r for r in openb.trace_nodes() if (r["model"], r["gpu"]) == shape]
    objs = openb.node_objects(rows[: max(1, round(offered / (TRACE_LOAD * 8)))])
    for j, (t, _tenant, tp) in enumerate(pods):
        job_objs = openb.job_objects(f"job-{j:05d}", [tp], t, timeline_annotations(t, max(1, tp.duration)))
        gpus = f"{tp.gpus}" if tp.gpu_milli == WHOLE else f"{tp.gpu_milli / WHOLE:g}"
        label_workload(job_objs, f"{gpus}gpu-{tp.cpu_milli // 1000}cpu")
        objs += job_objs
    return objs


TIMELINES = {
    t.name: t
    for t in (
        Timeline(
            "timeline/synthetic-100nodes",
            synthetic_timeline,
            "100 synthetic nodes, idle at start; gang mix arriving at 130% GPU load for 3 h",
            (WARM_UP * PERIOD, WINDOW * PERIOD),
            MAX_CYCLES,
        ),
        Timeline(
            "timeline/openb",
            openb_timeline,
            "every 10th OpenB node (122 nodes); trace pods as gangs, trace durations, 130% GPU load for 3 h",
            (WARM_UP * PERIOD, WINDOW * PERIOD),
            MAX_CYCLES,
        ),
        Timeline(
            "timeline/openb-trace",
            openb_trace_timeline,
            f"OpenB's own arrival times and durations: {TRACE_TENANTS} windows of {TRACE_DAYS} days laid over "
            f"each other (the seed picks them), on its 8-GPU nodes sized for {TRACE_LOAD:.0%} mean GPU load",
            (6 * 3600, TRACE_DAYS * 86400),
            2 * TRACE_DAYS * 1440,
        ),
        Timeline(
            "timeline/openb-trace-shares",
            lambda seed: openb_trace_timeline(seed, shares=True),
            f"timeline/openb-trace with the trace's pods asking part of one GPU (`gpu-fraction`) too, on as many "
            f"8-GPU nodes as make {TRACE_LOAD:.0%} of their GPUs the mean load asked",
            (6 * 3600, TRACE_DAYS * 86400),
            2 * TRACE_DAYS * 1440,
            peers=("fgd",),
        ),
        Timeline(
            "timeline/tenants",
            lambda seed: tenants.tenants_timeline(WINDOW * PERIOD, seed=10 + seed),  # seeds 1-3: workloads 11-13
            "16 8-GPU nodes; three tenants, Volcano Queues weighted 1:2:4, each bursting past its share (200% load)",
            (WARM_UP * PERIOD, WINDOW * PERIOD),
            MAX_CYCLES,
            peers=("proportion",),
        ),
        Timeline(
            "timeline/tenants-tree",
            lambda seed: tenants.tenants_timeline(WINDOW * PERIOD, seed=20 + seed, tenants=tenants.DEPARTMENTS),
            "16 8-GPU nodes; a queue tree: two departments of equal weight, two teams each; department B (capped "
            "at 96 GPUs) idle for the first 90 minutes, then busy",
            (WARM_UP * PERIOD, WINDOW * PERIOD),
            MAX_CYCLES,
            peers=("proportion",),
        ),
        Timeline(
            "timeline/tenants-overnight",
            lambda seed: tenants.tenants_timeline(WINDOW * PERIOD, seed=30 + seed, tenants=tenants.OVERNIGHT),
            "16 8-GPU nodes; three teams of equal weight: team-night fills the cluster alone for 90 minutes, "
            "then the two day teams burst past their shares",
            (WARM_UP * PERIOD, WINDOW * PERIOD),
            MAX_CYCLES,
            peers=("proportion", "gangsolve-history"),
        ),
    )
}
TIMELINE_GRIDS = {"quick": ["timeline/synthetic-100nodes"], "full": list(TIMELINES)}


def _easy(cluster: Cluster, _snapshot: str, _limit: float) -> tuple[dict[str, str], dict]:
    return easy_backfill(cluster), {}


def _conservative(cluster: Cluster, _snapshot: str, _limit: float) -> tuple[dict[str, str], dict]:
    return conservative_backfill(cluster), {}


def _fgd(cluster: Cluster, _snapshot: str, _limit: float) -> tuple[dict[str, str], dict]:
    """The paper's FGD each cycle: the pending pods one by one in arrival order, each share on the GPU it chose."""
    bindings, shares, _state = sharing.simulate(cluster, sharing.POLICIES["fgd"])
    return bindings, {"shares": {pod: [node, gpu] for pod, (node, gpu) in shares.items()}}


# The timeline adds a scheduler that only makes sense over time: it needs running jobs' expected ends.
# gangsolve runs on a deterministic budget (SolveConfig.steps) instead of the clock: a run is reproducible
# on a loaded machine, and a seed's result moves only when the policy does. The live scheduler keeps the clock.
TIMELINE_STEPS = 100  # search steps per cycle: about what a 0.5 s cycle makes on these clusters, 2 cores idle


def timeline_gangsolve(settings: Mapping[str, Any] | None = None) -> Scheduler:
    """gangsolve as the timeline runs it (a budget of steps, plan times on the cycles), with `settings`' other
    SolveConfig fields."""
    return solve_with(use_cpsat=True, steps=TIMELINE_STEPS, plan_resolution=PERIOD, settings=settings)


TIMELINE_SCHEDULERS: dict[str, Scheduler] = {
    **SCHEDULERS,
    "gangsolve": timeline_gangsolve(),
    # The same, with fair shares that count each queue's past use (halved every HALF_LIFE seconds).
    "gangsolve-history": timeline_gangsolve(),
    "easy-backfill": _easy,
    "conservative-backfill": _conservative,
    "fgd": _fgd,  # run on the timeline with GPU shares (its peers)
}
# `--set NAME=VALUE` in the time-based mode: gangsolve's SolveConfig fields, and how the timeline marks a gang
# starving (the live scheduler's `starvation-age`; by width: a gang wider than a node starves sooner).
TIMELINE_SETTINGS = {"starvation_age": float, "starvation_by_width": bool}
FIXED_SETTINGS = ("time_limit", "steps", "plan_resolution", "use_cpsat")  # the time-based mode's own


def parse_settings(pairs: Sequence[str]) -> dict[str, Any]:
    """`NAME=VALUE` pairs as typed settings; ValueError naming the pair that is not one."""
    kinds: dict[str, type] = {
        f.name: type(f.default)
        for f in fields(SolveConfig)
        if isinstance(f.default, bool | int | float | str) and f.name not in FIXED_SETTINGS
    }
    kinds.update(TIMELINE_SETTINGS)
    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, text = (part.strip() for part in pair.partition("="))
        kind = kinds.get(name)
        if not sep or kind is None:
            raise ValueError(f"{pair!r}: not NAME=VALUE with NAME one of {', '.join(sorted(kinds))}")
        if name == "order" and text not in ORDERS:
            raise ValueError(f"{pair!r}: {text!r} is not one of {', '.join(ORDERS)}")
        try:
            if kind is bool and text.lower() not in ("true", "false"):
                raise ValueError(text)
            out[name] = text.lower() == "true" if kind is bool else kind(text)
        except ValueError:
            raise ValueError(f"{pair!r}: {text!r} is not a {kind.__name__}") from None
    return out


def with_settings(scheduler: str, settings: Mapping[str, Any]) -> Scheduler:
    """The timeline's `scheduler`, gangsolve with `settings`' SolveConfig fields (the others as they are)."""
    config = {k: v for k, v in settings.items() if k not in TIMELINE_SETTINGS}
    if scheduler in ("gangsolve", "gangsolve-history") and config:
        return timeline_gangsolve(config)
    return TIMELINE_SCHEDULERS[scheduler]


BACKFILL = ("easy-backfill", "conservative-backfill")  # peers of the time-based mode only
USES_ESTIMATES = (*BACKFILL, "gangsolve", "gangsolve-history")  # the others: the same in every estimate mode
HISTORY_ONLY = ("gangsolve-history",)  # run where a timeline names it (its peers)
HALF_LIFE = 3600.0  # seconds: the usage history gangsolve-history's fair shares count (Slurm's PriorityDecayHalfLife)


def jobs_of(
    objects: list[dict], estimates: str = "exact", seed: int = 0
) -> tuple[list[Node], list[Job], tuple[Queue, ...]]:
    """The cluster's nodes, its jobs, each with the runtime it declares in estimate mode `estimates`, and its
    queues."""
    snap = manifests.to_snapshot(objects)
    cluster = build_cluster(snap, manifests.SCHEDULER)
    pods_of: dict[str, list[dict]] = {}
    for pod in snap.pods:
        group = (pod["metadata"].get("labels") or {}).get(POD_GROUP_LABEL)
        pods_of.setdefault(f"{pod['metadata']['namespace']}/{group}", []).append(pod)
    noise = np.random.default_rng([seed, ESTIMATES.index(estimates)])
    jobs = []
    for gang in cluster.gangs:
        ns, name = gang.name.split("/", 1)
        group = dict(snap.pod_groups[("scheduling.x-k8s.io", ns, name)])
        notes = dict(group["metadata"]["annotations"])
        duration = float(notes[manifests.DURATION_ANNOTATION])
        factor = float(noise.lognormal(0.0, NOISE_SIGMA))  # drawn in every mode: the same jobs get the same noise
        if estimates != "absent":
            estimate = duration if estimates == "exact" else duration / factor
            notes[EXPECTED_RUNTIME_ANNOTATION] = f"{max(1, round(estimate))}s"
            group["metadata"] = {**group["metadata"], "annotations": notes}
        pods = pods_of[gang.name]
        jobs.append(
            Job(
                gang,
                float(notes[manifests.ARRIVAL_ANNOTATION]),
                duration,
                declared_runtime(pods, group),
                workload_key(pods[0], WORKLOAD_LABEL),
            )
        )
    return list(cluster.nodes), sorted(jobs, key=lambda j: (j.arrival, j.gang.name)), cluster.queues


def simulate(
    objects: list[dict],
    scheduler: str | Scheduler,
    time_limit: float,
    on_cycle: Callable[[], None] | None = None,
    estimates: str = "exact",
    seed: int = 0,
    timeline: Timeline | None = None,
    settings: Mapping[str, Any] | None = None,
) -> dict:
    """One run of `scheduler` over a timeline's jobs; `settings`: see `parse_settings`."""
    settings = dict(settings or {})
    nodes, jobs, queues = jobs_of(objects, estimates, seed)
    tenants_mode = len(queues) > 1  # queues to share between (a timeline without any has just `default`)
    schedule = with_settings(scheduler, settings) if isinstance(scheduler, str) else scheduler
    starvation = settings.get("starvation_age", STARVATION_SECONDS)
    by_width = settings.get("starvation_by_width", True)
    window = timeline.window if timeline else (WARM_UP * PERIOD, WINDOW * PERIOD)
    max_cycles = timeline.max_cycles if timeline else MAX_CYCLES
    estimator = Estimator(default=DEFAULT_RUNTIME)
    index = {n.name: i for i, n in enumerate(nodes)}
    used: list[dict[str, int]] = [{} for _ in nodes]
    total_gpus = sum(n.allocatable.get(GPU, 0) for n in nodes)
    # The widest node's GPUs, which a gang wider than starves sooner; 0: every gang the same age.
    widest = max((n.allocatable.get(GPU, 0) for n in nodes), default=0) if by_width else 0
    requests = {p.name: p.requests for job in jobs for p in job.gang.pods}
    priority = {p.name: p.priority for job in jobs for p in job.gang.pods}
    queue_of = {p.name: job.gang.queue for job in jobs for p in job.gang.pods}
    held: dict[str, dict[str, int]] = {q.name: {} for q in queues}  # what each queue's bound pods hold
    parents = {q.name: q.parent for q in queues}
    # Each queue's past use (dominant share x seconds, halved every HALF_LIFE), given to schedulers with history.
    usage = dict.fromkeys(parents, 0.0)
    with_history = scheduler == "gangsolve-history"
    violations = 0  # cycles x queues x resources over the queue's capability

    def hold(pod: str, node: str, sign: int) -> None:
        for u in (used[index[node]], held.setdefault(queue_of[pod], {})):
            for r, q in requests[pod].items():
                u[r] = u.get(r, 0) + sign * q

    # GPU shares: what they take of each GPU of each node, and the GPU each running share holds. A binding the
    # node's GPUs cannot hold (past all of a GPU, or a share on a GPU a whole-GPU pod needs) is refused, counted.
    shared = [[0] * int(n.allocatable.get(GPU, 0)) for n in nodes]
    gpu_of: dict[str, int] = {}
    refused = 0

    def take_gpus(pod: str, node: str, chosen: int | None) -> bool:
        """Whether `node`'s GPUs hold `pod`; a share goes on GPU `chosen` (the scheduler's), else the tightest."""
        i, milli = index[node], requests[pod].get(SHARE, 0)
        whole_left = shared[i].count(0) - used[i].get(GPU, 0)  # GPUs free of shares and of whole-GPU pods
        if not milli:
            return whole_left >= requests[pod].get(GPU, 0)
        left = WHOLE - np.array(shared[i], dtype=np.int64)
        if chosen is None and len(left):
            chosen = sharing.tightest(left, milli)
        # (the tightest is a GPU already shared wherever one holds the share: it opens a GPU only if none does)
        if chosen is None or not 0 <= chosen < len(left) or left[chosen] < milli:
            return False
        if left[chosen] == WHOLE and whole_left < 1:
            return False
        shared[i][chosen] += milli
        gpu_of[pod] = chosen
        return True

    def release(job: Job) -> None:
        for pod, node in job.bound.items():
            hold(pod, node, -1)
            if pod in gpu_of:
                shared[index[node]][gpu_of.pop(pod)] -= requests[pod][SHARE]

    arrived = 0
    pending: list[Job] = []
    running: list[Job] = []
    cycles: list[dict] = []
    reserved: dict[str, float] = {}  # gang -> its reservation's start at the last cycle
    promised: tuple[Reservation, ...] = ()  # the last cycle's plan, which the next keeps (Cluster.promised)
    shown: dict[str, float] = {}  # gang -> the first start the scheduler showed it (now, if it started at once)
    promised_at: dict[str, float] = {}  # gang -> the first start it held a reservation for
    later = backfilled = 0
    nominated: dict[str, str] = {}  # pod -> node, from the last cycle's preemptions (their victims are gone)
    lost: list[tuple[float, float, float]] = []  # evicted runs: GPUs, start, eviction (their work is lost)
    now = 0.0
    while len(cycles) < max_cycles:
        for job in [j for j in running if j.end is not None and j.end <= now]:
            running.remove(job)
            estimator.history.record(job.workload, job.duration)
            release(job)
        while arrived < len(jobs) and jobs[arrived].arrival <= now:
            pending.append(jobs[arrived])
            arrived += 1
        if not pending:
            if arrived == len(jobs):
                break
            now = max(now + PERIOD, math.ceil(jobs[arrived].arrival / PERIOD) * PERIOD)
            continue
        gangs = tuple(
            replace(
                j.gang,
                pods=tuple(p for p in j.gang.pods if p.name not in j.bound),
                bound_nodes=tuple(j.bound.values()),
                starving=j.waited(now) > starvation_age(math.ceil(j.gpus), widest, starvation),
                runtime=estimator.choose(j.declared, j.workload),
                guessed=j.declared is None,  # learned or the default, as the live scheduler marks it
                waited=j.waited(now),
            )
            for j in pending
        )
        ends = [
            Running(
                node,
                requests[pod],
                expected_end(j.start or 0.0, j.estimate, now),
                guessed=j.declared is None,
                overran=overran(j.start or 0.0, j.estimate, now),
                name=pod,
                priority=priority[pod],
                gang=j.gang.name,
                min_member=j.gang.min_member,
                started=j.start or 0.0,
                queue=j.gang.queue,
                gpu=gpu_of.get(pod),
            )
            for j in running
            for pod, node in j.bound.items()
        ]
        waiting_pods = {p.name for g in gangs for p in g.pods}
        cluster = Cluster(
            tuple(
                replace(n, used=dict(used[i]), gpu_shares={d: m for d, m in enumerate(shared[i]) if m})
                for i, n in enumerate(nodes)
            ),
            gangs,
            tuple(ends),
            nominated={pod: node for pod, node in nominated.items() if pod in waiting_pods},
            queues=tuple(
                replace(q, allocated=dict(held[q.name]), usage=usage[q.name] if with_history else 0.0) for q in queues
            ),
            now=now,
            promised=promised,
        )
        started = time.perf_counter()
        bindings, facts = schedule(cluster, "", time_limit)
        seconds = time.perf_counter() - started
        by_name = {j.gang.name: j for j in pending}
        owner = {p.name: by_name[g.name] for g in gangs for p in g.pods}
        chosen = {pod: int(gpu) for pod, (_node, gpu) in facts.get("shares", {}).items()}
        for pod, node in bindings.items():
            if not take_gpus(pod, node, chosen.get(pod)):
                refused += 1
                continue
            owner[pod].bound[pod] = node
            hold(pod, node, +1)
        # Evicted jobs are gone before the next cycle (their controllers recreate the pods): they queue again
        # from their arrival and start over; what they ran is lost.
        evicted = set(facts.get("evictions", ()))
        for job in [j for j in running if evicted & set(j.bound)]:
            running.remove(job)
            lost.append((job.gpus, job.start or 0.0, now))
            release(job)
            job.bound, job.start, job.end, job.estimate, job.created = {}, None, None, None, now
            pending.append(job)
        nominated = dict(facts.get("nominations", {}))
        plan = {r["gang"]: r for r in facts.get("reservations", []) if r["start"] is not None}
        promised = tuple(
            Reservation(g, tuple(r["nodes"]), r["start"], r["gpus"], r["bindings"], r["end"]) for g, r in plan.items()
        )
        for g, r in plan.items():
            shown.setdefault(g, r["start"])
            promised_at.setdefault(g, r["start"])
        for g, start in facts.get("forecasts", {}).items():
            shown.setdefault(g, start)
        later += sum(1 for g, r in plan.items() if g in reserved and r["start"] > reserved[g] + PERIOD)
        reserved = {g: r["start"] for g, r in plan.items()}
        reserved_nodes = {n for r in plan.values() for n in r["nodes"]}
        runtime = {g.name: g.runtime for g in gangs}
        for job in [j for j in pending if len(j.bound) >= j.gang.min_member]:
            pending.remove(job)
            job.start, job.end = now, now + job.duration
            job.shown = shown.pop(job.gang.name, now)
            job.promised = promised_at.pop(job.gang.name, None)
            job.estimate = runtime[job.gang.name]
            backfilled += bool(reserved_nodes & set(job.bound.values()))
            running.append(job)
        allocated = sum(gpus_in(u) for u in used)
        useful = sum(gpus_in(requests[p]) for j in running for p in j.bound)
        cycles.append(
            {
                "time": now,
                "seconds": seconds,
                "pending": len(pending),
                "running": len(running),
                "gpu_allocation": allocated / total_gpus,
                "gpu_useful": useful / total_gpus,
                "reserved_gpus": sum(r["gpus"] for r in plan.values()),
            }
        )
        if tenants_mode:
            for q in usage:  # what it held until the next cycle, as the live scheduler accrues it
                usage[q] = accrue(usage[q], held[q].get(GPU, 0) / total_gpus, PERIOD, HALF_LIFE)
            for r in {r for q in queues for r in q.capability}:  # every level: a queue holds what those under it do
                under = tenants.up_the_tree({q: h.get(r, 0) for q, h in held.items()}, parents)
                violations += sum(under[q.name] > q.capability[r] for q in queues if r in q.capability)
            waiting = {q.name: 0 for q in queues}
            for j in pending:
                waiting[j.gang.queue] += sum(p.requests.get(GPU, 0) for p in j.gang.pods if p.name not in j.bound)
            cycles[-1]["held"] = {q: h.get(GPU, 0) for q, h in held.items()}
            # What a tenant could hold: GPUs held and asked for, at most its queue's capability (a hard cap).
            cap = {q.name: q.capability.get(GPU, total_gpus) for q in queues}
            cycles[-1]["demand"] = {q: min(h.get(GPU, 0) + waiting[q], cap.get(q, total_gpus)) for q, h in held.items()}
        if on_cycle:
            on_cycle()
        if arrived == len(jobs) and not running and pending and not bindings:
            break  # stuck: nothing runs that could free capacity and nothing new arrives
        now += PERIOD
    summary = summarize(jobs, cycles, window, total_gpus, now, nodes, lost)
    summary.update(reservations_pushed_later=later, backfilled=backfilled, bindings_refused=refused)
    if scheduler == "gangsolve":
        for job in pending:  # never started: the first start each was shown, to be counted against the run's end
            job.shown, job.promised = shown.get(job.gang.name), promised_at.get(job.gang.name)
        summary["promises"] = promise_accuracy(jobs, now)
    if tenants_mode:
        weights = {q.name: q.weight for q in queues}
        caps = {q.name: float(q.capability[GPU]) for q in queues if GPU in q.capability}
        summary.update(
            fairness=tenants.fairness(cycles, weights, total_gpus, window, parents, caps),
            tenant_delay_p95=tenants.tenant_delays(jobs, {j.gang.name: j.gang.queue for j in jobs}),
            capability_violations=violations,
            gpus=total_gpus,
            half_life=HALF_LIFE if with_history else 0.0,  # the usage history its fair shares counted (0: none)
        )
    return {
        "scheduler": scheduler if isinstance(scheduler, str) else "custom",
        "estimates": estimates,
        "seed": seed,
        "time_limit": time_limit if scheduler == "gangsolve" else None,
        "settings": settings,
        "summary": summary,
        "cycles": cycles,
    }


SIZES = {"1 GPU": (0, 1), "2-8 GPUs": (2, 8), ">8 GPUs": (9, 1 << 30)}
BSLD_FLOOR = 10.0  # seconds: bounded slowdown's threshold for very short jobs (the usual 10 s)


def promise_accuracy(jobs: list[Job], end: float) -> dict:
    """How each job's start compared with the first start it was shown (a reservation's or a forecast's, or now
    if it started at once), and, for the jobs that held a reservation, with the first start it held: the
    distributions of actual minus expected (negative: sooner), how many started later by more than one cycle
    period (a planned start between two cycles is kept at the next one), and how many never started though the
    start shown had come. Such a job counts as starting at the run's `end` (as its queue delay does: a lower
    bound), so a plan that starves a job it showed a start is not judged on the jobs it did start alone; one
    whose start shown is still to come at the end is not judged."""

    def distribution(expected: list[tuple[float | None, float]]) -> dict:
        came = [(start, first) for start, first in expected if start is not None or first < end]
        late = [(end if start is None else start) - first for start, first in came]
        return {
            "jobs": len(late),
            "p5": placement_metrics.percentile(late, 5),
            "p50": placement_metrics.percentile(late, 50),
            "p95": placement_metrics.percentile(late, 95),
            "max": max(late, default=None),
            "late": sum(1 for d in late if d > PERIOD),
            "unstarted": sum(1 for start, _first in came if start is None),
        }

    shown = [(j.start, j.shown) for j in jobs if j.shown is not None]
    held = [(j.start, j.promised) for j in jobs if j.promised is not None]
    return {**distribution(shown), "held": distribution(held)}


def summarize(
    jobs: list[Job],
    cycles: list[dict],
    window: tuple[float, float],
    total_gpus: int,
    end: float,
    nodes: list[Node],
    lost: Sequence[tuple[float, float, float]] = (),
) -> dict:
    """Queueing, completion and slowdown per job, and GPU use over the steady-state window from the jobs' own
    start and end times. Jobs that could not run even on the idle cluster count for no scheduler; a job never
    started counts as starting when the simulation ended (its wait and completion time are at least that), so a
    scheduler that starves a job for ever does not look better for leaving it out. `lost`: runs evicted (GPUs,
    start, eviction), allocated but not useful."""
    fits = set(placement_metrics.runnable(nodes, [j.gang for j in jobs]))
    counted = [j for j in jobs if j.gang.name in fits]
    started = [j for j in jobs if j.start is not None]
    begun = {j.gang.name: j.start if j.start is not None else max(end, j.arrival) for j in counted}
    delays = [begun[j.gang.name] - j.arrival for j in counted]
    jct = [begun[j.gang.name] + j.duration - j.arrival for j in counted]
    slowdown = [max(1.0, (begun[j.gang.name] - j.arrival + j.duration) / max(j.duration, BSLD_FLOOR)) for j in counted]
    lo, hi = window
    span = max(hi - lo, PERIOD) * max(total_gpus, 1)
    useful = sum(
        j.gpus * max(0.0, min(j.start + j.duration, hi) - max(j.start, lo)) for j in started if j.start is not None
    )
    stranded = sum(
        (c["gpu_allocation"] - c["gpu_useful"]) * total_gpus * PERIOD for c in cycles if lo <= c["time"] < hi
    )
    wasted = sum(gpus * max(0.0, min(stop, hi) - max(begin, lo)) for gpus, begin, stop in lost)
    seconds = [c["seconds"] for c in cycles]
    by_size = {}
    for label, (small, big) in SIZES.items():
        d = [delay for j, delay in zip(counted, delays, strict=True) if small <= j.gpus <= big]
        by_size[label] = {
            "jobs": len(d),
            "p50": placement_metrics.percentile(d, 50),
            "p95": placement_metrics.percentile(d, 95),
            "mean": float(np.mean(d)) if d else None,
        }
    return {
        "jobs": len(counted),
        "never_runnable": len(jobs) - len(counted),
        "started": len(started),
        "queue_delay_p50": placement_metrics.percentile(delays, 50),
        "queue_delay_p95": placement_metrics.percentile(delays, 95),
        "queue_delay_p99": placement_metrics.percentile(delays, 99),
        "queue_delay_mean": float(np.mean(delays)) if delays else None,
        "jct_mean": float(np.mean(jct)) if jct else None,
        "jct_p95": placement_metrics.percentile(jct, 95),
        "bounded_slowdown_mean": float(np.mean(slowdown)) if slowdown else None,
        "gpu_useful_mean": useful / span,
        "gpu_allocation_mean": (useful + stranded + wasted) / span,
        "gpu_lost_mean": wasted / span,  # held by runs later evicted (preemption, reclaim)
        "evictions": len(lost),
        "queue_delay_by_size": by_size,
        "cycles": len(cycles),
        "cycle_p50": placement_metrics.percentile(seconds, 50),
        "cycle_p99": placement_metrics.percentile(seconds, 99),
    }
