"""Running schedulers on scenario snapshots, each run in a fresh process so its peak memory is its own.

A run reads the snapshot file exactly as `gangsolve solve` does (read -> build_cluster), then times the
scheduler alone. Every scheduler sees the same file.

The live mode (kwok + a real kube-scheduler or `gangsolve run`) is bench/live/: it needs its own
timing (bindings over wall-clock time), so it is not an entry here, but it measures its final bindings with
the same `placement_metrics.quality`.
"""

from __future__ import annotations

import multiprocessing
import resource
import time
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from gangsolve.bench import placement_metrics, sharing, sharing_reference
from gangsolve.bench.baselines import LEAST_ALLOCATED, MOST_ALLOCATED, per_pod, proportion, tas_best_fit
from gangsolve.bench.manifests import SCHEDULER
from gangsolve.solver.model import DEFAULT_QUEUE, Cluster, SolveConfig

# (cluster, snapshot path, time limit) -> (bindings, solver facts)
Scheduler = Callable[[Cluster, str, float], tuple[dict[str, str], dict]]


def _per_pod(strategy: str) -> Scheduler:
    return lambda cluster, _snapshot, _limit: (per_pod(cluster, strategy), {})


def solve_with(
    use_cpsat: bool, steps: int | None = None, plan_resolution: float = 0.0, settings: Mapping[str, Any] | None = None
) -> Scheduler:
    """gangsolve (or, without CP-SAT, the greedy gang allocator); `steps`: a deterministic budget instead of
    the clock (SolveConfig.steps); `plan_resolution`: seconds between cycles (SolveConfig.plan_resolution);
    `settings`: other SolveConfig fields (the bench's `--set`)."""
    settings = dict(settings or {})

    def run(cluster: Cluster, _snapshot: str, limit: float) -> tuple[dict[str, str], dict]:
        from gangsolve.solver import solve

        if not use_cpsat:  # greedy gang allocation as Volcano does it: a required level, no preferred ones
            gangs = tuple(replace(g, preferred=(), queue=DEFAULT_QUEUE) for g in cluster.gangs)
            cluster = replace(cluster, gangs=gangs, queues=())  # no queues: the proportion peer has them
        # Greedy gang allocation is Volcano's: no reservations, first come first served within a priority.
        reservations = settings.get("reservations", SolveConfig.reservations) * use_cpsat
        order = settings.get("order", SolveConfig.order) if use_cpsat else "arrival"
        config = SolveConfig(
            **{
                **settings,
                "time_limit": limit,
                "use_cpsat": use_cpsat,
                "reservations": reservations,
                "order": order,
                "steps": steps,
                "plan_resolution": plan_resolution,
            }
        )
        placement = solve(cluster, config)
        return dict(placement.bindings), {
            "status": placement.status,
            "objective": placement.objective,
            "best_bound": placement.best_bound if use_cpsat else None,
            "stages": list(placement.stages),
            "reservations": [
                {
                    "gang": r.gang,
                    "nodes": list(r.nodes),
                    "start": r.start,
                    "end": r.end,
                    "gpus": r.gpus,
                    "bindings": dict(r.bindings),
                }
                for r in placement.reservations
            ],
            "forecasts": {r.gang: r.start for r in placement.forecasts if r.start is not None},
            "evictions": [e.pod for e in placement.evictions],
            "nominations": dict(placement.nominations),
            "shares": {pod: [share.node, share.gpu] for pod, share in placement.shares.items()},
        }

    return run


SCHEDULERS: dict[str, Scheduler] = {
    "per-pod-least": _per_pod(LEAST_ALLOCATED),  # kube-scheduler defaults
    "per-pod-most": _per_pod(MOST_ALLOCATED),  # kube-scheduler configured to bin-pack
    "greedy-gang": solve_with(use_cpsat=False),  # kube-batch / Volcano allocate
    "gangsolve": solve_with(use_cpsat=True),
    # Kueue's topology-aware scheduling (BestFit), with the node level last: run on topology scenarios only.
    "tas-bestfit": lambda cluster, _snapshot, _limit: (tas_best_fit(cluster), {}),
    # Volcano's proportion plugin (queues by weight) with greedy gang allocation: run on queue timelines only.
    "proportion": lambda cluster, _snapshot, _limit: (proportion(cluster), {}),
    # The GPU-sharing policies of "Beware of Fragmentation" (bench/sharing.py): run on openb/sharing-* only.
    **{name: sharing.peer(name) for name in sharing.POLICIES},
    # Not schedulers: how many GPUs (or pods, then GPUs) the top sharing load allows, approached offline.
    **sharing_reference.PEERS,
}
# Run where a scenario or timeline names them (Scenario.peers, Timeline.peers), not by default.
PEERS_ONLY = ("tas-bestfit", "proportion", *sharing.POLICIES, *sharing_reference.PEERS)


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def run_one(
    snapshot: str, scheduler: str, time_limit: float, repeat: int = 1, settings: Mapping[str, Any] | None = None
) -> dict:
    """Load `snapshot`, schedule it `repeat` times (cycle times), measure the last placement. `settings`:
    gangsolve's other SolveConfig fields (the bench's `--set`)."""
    from gangsolve.edge.gangs import build_cluster
    from gangsolve.edge.snapshot import read

    started = time.perf_counter()
    cluster = build_cluster(read(snapshot), SCHEDULER)
    load_seconds = time.perf_counter() - started
    rss_loaded = _rss_mib()
    cycles = []
    schedule = (
        solve_with(use_cpsat=True, settings=settings)
        if scheduler == "gangsolve" and settings
        else SCHEDULERS[scheduler]
    )
    for _ in range(max(1, repeat)):
        started = time.perf_counter()
        bindings, facts = schedule(cluster, snapshot, time_limit)
        cycles.append(time.perf_counter() - started)
    if "shares" in facts and sharing.arrived(cluster):  # GPUs allocated and stranded, as the peers report them
        shares = {pod: (node, gpu) for pod, (node, gpu) in facts.pop("shares").items()}
        facts.update(sharing.metrics(sharing.replay(cluster, bindings, shares), sharing.arrived(cluster)))
    return {
        "scheduler": scheduler,
        "time_limit": time_limit if scheduler == "gangsolve" else None,
        **({"settings": dict(settings)} if scheduler == "gangsolve" and settings else {}),
        "cycle_seconds": cycles,
        "cycle_p50": placement_metrics.percentile(cycles, 50),
        "cycle_p99": placement_metrics.percentile(cycles, 99),
        "load_seconds": load_seconds,
        "rss_loaded_mib": rss_loaded,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # KiB on Linux
        # The largest of the processes it forked to solve node pools apart (SolveConfig.parallel); 0: none.
        "peak_rss_pools_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "nodes": len(cluster.nodes),
        **placement_metrics.quality(cluster, bindings),
        **facts,
    }


class Runner:
    """One child process per run, one run at a time (runs must not compete for the cores they are timed on)."""

    def __init__(self) -> None:
        # A fork server that has imported the solver already: each run starts in milliseconds, not seconds,
        # and still with a fresh heap (its peak RSS counts the imports once, as a scheduler process would).
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(
            [
                "gangsolve.bench.static.runner",
                "gangsolve.edge.gangs",
                "gangsolve.edge.snapshot",
                "gangsolve.solver.pipeline",
            ]
        )
        self.pool = ProcessPoolExecutor(max_workers=1, mp_context=context, max_tasks_per_child=1)

    def run(
        self, snapshot: Path, scheduler: str, time_limit: float, repeat: int, settings: Mapping[str, Any] | None = None
    ) -> dict:
        try:
            return self.pool.submit(run_one, str(snapshot), scheduler, time_limit, repeat, settings).result()
        except Exception as exc:  # a crash in one run is a result to report, not the end of the benchmark
            return {"scheduler": scheduler, "error": "".join(traceback.format_exception_only(exc)).strip()}

    def close(self) -> None:
        self.pool.shutdown()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def add_gaps(runs: list[dict]) -> None:
    """Optimality gap of every scheduler's gangs placed against gangsolve's bound on the same snapshot."""
    bound = next((r.get("best_bound") for r in runs if r.get("scheduler") == "gangsolve"), None)
    for r in runs:
        if "error" not in r:
            r["bound"] = bound
            r["gap"] = placement_metrics.gap(r["gangs_placed"], bound)
