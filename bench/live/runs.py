"""Live mode: the same kwok cluster and workload on the real control plane, once per scheduler.

Schedulers: `kube-scheduler` (the pinned release), `kube-scheduler-gang` (the same with its native gang
scheduling: the GenericWorkload and TopologyAwareWorkloadScheduling gates on, a scheduling.k8s.io/v1beta1
PodGroup per gang with the gang's priority class and, for co-located gangs, a topology constraint) and
`gangsolve` (`gangsolve run`). Each scheduler's users create what that scheduler reads: nothing for plain
kube-scheduler, native PodGroups for its gang scheduling, scheduler-plugins PodGroups for gangsolve. The real
peers (`volcano`, `volcano-gpu-binpack`, `volcano-reclaim`: Volcano's vc-scheduler and controllers; `kueue`:
Kueue admitting and kube-scheduler placing; `kai`: NVIDIA's KAI scheduler and binder; bench/live/peers.py) run where
hack/build-peers.sh built them and the scenario's users can write what they read; their users give each gang a
Volcano PodGroup, Kueue's pod-group labels, or a KAI PodGroup.

Three modes (the first two as scheduler_perf measures):
- **stream**: the scheduler runs, then the pending pods arrive at `rate` pods a second (or as fast as the API
  server takes them): per-gang latency (last member created -> the gang's minimum bound) and whether the
  scheduler keeps up;
- **burst**: every pending pod is created while no scheduler runs, then the scheduler starts: pods bound per
  second from its start to the last binding;
- **timeline** (bench/live/live_timeline.py): the scheduler runs while jobs arrive at their times, run once
  whole and finish, faster than the timeline's clock: waits, completion times and GPU use over time; on the
  tenants timelines, each team's share against its weighted fair share, and the work evictions threw away.

Each run gets a fresh ControlPlane (etcd, kube-apiserver, kube-controller-manager, kwok, kube-scheduler when it
is the scheduler under test), so no run shares capacity, caches or leftovers with another. A run:

1. creates the scenario's Nodes as kwok nodes, its PriorityClasses, PDBs and background pods (bound through
   `spec.nodeName`), and waits until kwok has them all Running;
2. stream: starts the scheduler (gangsolve: waits for /readyz), then creates the gangs (PodGroup first, then
   its pods) at the scenario's rate; burst: creates them all, then starts the scheduler;
3. watches the pending pods and records when each was created, bound and Running;
4. waits until every pending pod is bound or bindings have not changed for `quiet` seconds (the first binding
   gets at least a minute), then reads the final bindings back from the API and measures them with
   `bench.placement_metrics.quality` on the scenario's own Cluster (gangs, partial gangs, stranded GPUs and the
   validator's overcommit check, from real bindings);
5. reads the scheduler process's CPU seconds and peak RSS, and counts its API requests in the API server's
   audit log. Every scheduler runs as kube-scheduler's user (`system:kube-scheduler`; gangsolve gets the few
   read rights kube-scheduler lacks), so all share one API Priority and Fairness flow and one audit identity.

A scenario may say what each scheduler's users create from its objects (`users`: live/topology gives each
its own way of asking for one block and few racks), check the final bindings with an oracle of its own, and
check what the API holds after the run (`api_check`: live/openb-shares counts the GPUs shared past 100%).

Timing is wall clock on a shared machine (the bench process, the control plane and the scheduler share its
cores); compare schedulers measured in the same run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from gangsolve.bench import manifests, placement_metrics, tenants
from gangsolve.bench.devcluster import ControlPlane
from gangsolve.bench.devcluster.gangsolve_process import REPO, GangsolveProcess
from gangsolve.bench.live import REAL_PEERS, live_timeline, peers
from gangsolve.bench.live.live_scenarios import LIVE_SCENARIOS, LiveScenario
from gangsolve.bench.live.measurements import (
    AUDIT_POLICY,
    BindWatch,
    Timing,
    api_requests,
    cpu_seconds,
    decision_times,
    peak_rss_mib,
    summarize,
)
from gangsolve.bench.live.populate import (
    CREATE_CONCURRENCY,
    GANGSOLVE_EXTRA_RBAC,
    NATIVE_GANG_API,
    PENDING_LABEL,
    arrivals,
    arrive,
    collection,
    create_all,
    first_pod_group_served,
    list_pods,
    own_by_tfjobs,
    prepare,
    run_async,
    workload_flags,
)

FIRST_BIND_WAIT = 60.0  # seconds a run waits for its first binding, however short its quiet time
DRA = ("resourceclaims", "resourceslices")  # what a scenario's own check may read besides nodes and pods


def python_env(cache: Path) -> dict[str, str]:
    """The environment `gangsolve run` starts in: its bytecode compiled once and kept in `cache`, as the
    image compiles it at install time (hack/install-image-deps.sh), whatever PYTHONDONTWRITEBYTECODE says
    here; so a run's start is not spent compiling a thousand modules."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    return env


def warm_bytecode(cache: Path) -> None:
    """Compile what `gangsolve run` imports into `cache`: its own modules and the solver's it loads at start."""
    code = "import gangsolve.live.run; from gangsolve import cycle; cycle.load_solver()"
    subprocess.run([sys.executable, "-c", code], env=python_env(cache), check=True, cwd=REPO)


def gangsolve_process(
    cp: ControlPlane, time_limit: float, log_path: Path, settings: dict[str, Any]
) -> GangsolveProcess:
    """`gangsolve run` as the bench runs it, not started: as kube-scheduler's user (granted the few reads that
    user lacks), `settings` in a config file beside its log, its bytecode cached (python_env)."""
    for obj in GANGSOLVE_EXTRA_RBAC:
        cp.request("POST", collection(obj), obj)
    config = log_path.with_suffix(".yaml")
    config.write_text(yaml.safe_dump(settings))
    return GangsolveProcess(
        cp.scheduler_kubeconfig,
        manifests.SCHEDULER,
        log_path,
        "--config",
        str(config),
        "--time-limit",
        str(time_limit),
        env=python_env(log_path.parent / "pycache"),
    )


def log_name(scenario: str) -> str:
    """A scenario's name as the start of its log files' names."""
    return scenario.replace("/", "__")


def scheduler_config(scenario: LiveScenario) -> dict | None:
    """kube-scheduler's configuration: its defaults, with the scenario's client-side limits."""
    if scenario.client_qps is None:
        return None
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"qps": scenario.client_qps, "burst": int(scenario.client_qps)},
    }


def keep_logs(cp: ControlPlane, into: Path) -> None:
    """The control plane's component logs (not the audit log) outlive its temporary directory."""
    if cp.workdir is None:
        return
    into.mkdir(parents=True, exist_ok=True)
    for path in (cp.workdir / "logs").glob("*.log"):
        if path.name != "audit.log":
            shutil.copy(path, into / path.name)


def run_live(
    scenario: LiveScenario,
    scheduler: str,
    *,
    log_dir: Path,
    quiet: float = 10.0,
    timeout: float | None = None,
    time_limit: float | None = None,
    log: Callable[[str], None] = lambda _m: None,
) -> dict:
    """One scheduler on a fresh control plane: the measured run as a dict (see the module docstring)."""
    scenario_objs = scenario.build()
    cluster = manifests.to_cluster(scenario_objs)  # gangs as the scenario defines them, whatever each scheduler reads
    objs = scenario.users(scenario_objs, scheduler) if scenario.users else scenario_objs
    limit = time_limit or scenario.time_limit
    timeout = timeout or scenario.timeout
    gangs = arrivals(objs, cluster, scheduler, native_groups=scenario.users is None, topology=scenario.topology)
    pending = sum(len(a.pods) for a in gangs)
    log_dir.mkdir(parents=True, exist_ok=True)
    native = scheduler == "kube-scheduler-gang"
    # Kueue admits, kube-scheduler places: it runs under Kueue too.
    kube_scheduler = scheduler.startswith("kube-scheduler") or scheduler in peers.KUEUE_PEERS
    flags: dict[str, Any] = {}
    if native or any(o["apiVersion"] == NATIVE_GANG_API for o in objs):
        flags = workload_flags(scenario.native_gates, kube_scheduler)
    burst = scenario.mode == "burst"
    timeline = scenario.mode == "timeline"
    workload: live_timeline.Workload | None = None
    gs: GangsolveProcess | None = None
    peer: peers.PeerRun | None = None
    with ControlPlane(
        scheduler=kube_scheduler,
        defer_scheduler=True,
        scheduler_config=scheduler_config(scenario),
        node_leases=not scenario.scale,
        audit_policy=AUDIT_POLICY,
        log=log,
        **flags,
    ) as cp:
        try:
            late = scenario.late_definitions
            prepare(cp, objs, scheduler, log, definitions=not late)
            definitions: list[dict] = []
            if late:  # the PDBs and PodGroups come `late` seconds after the pods
                definitions = [o for o in objs if o["kind"] == "PodDisruptionBudget"]
                definitions += [g for a in gangs for g in a.groups]
                gangs = [replace(a, groups=[]) for a in own_by_tfjobs(cp, gangs)]
            if scheduler == "gangsolve":
                settings: dict[str, Any] = dict(scenario.gangsolve_settings)
                if scenario.client_qps:
                    settings |= {"kube-api-qps": scenario.client_qps, "kube-api-burst": int(scenario.client_qps)}
                gs = gangsolve_process(cp, limit, log_dir / f"{log_name(scenario.name)}-gangsolve.log", settings)
            if scheduler in REAL_PEERS:
                peer = peers.peer_run(cp, scheduler, scenario)
                peer.before_pods(objs, burst)

            def start_scheduler() -> int:
                if peer is not None:
                    return peer.start()
                if gs is not None:
                    gs.start()
                    assert gs.proc is not None
                    return gs.proc.pid
                cp.start_scheduler()
                return cp.pids()["kube-scheduler"]

            rv = list_pods(cp, "?limit=1")["metadata"]["resourceVersion"]
            watch = BindWatch(cp, rv)
            watch.start()
            concurrency = CREATE_CONCURRENCY if scenario.rate or burst else 8
            created: dict[str, float] = {}
            if burst:
                log(f"{scheduler}: creating {pending} pending pods, then starting the scheduler")
                run_async(cp.kubeconfig, lambda kube: arrive(kube, gangs, None, created, CREATE_CONCURRENCY))
                wall0 = datetime.now(UTC)
                timing = Timing(time.monotonic(), created, cpu_start=peer.cpu_at_start() if peer else 0.0)
                pid = start_scheduler()
            elif timeline:
                pid = start_scheduler()
                log(f"{scheduler}: {len(gangs)} jobs arriving and finishing, {live_timeline.SPEEDUP:g} times faster")
                wall0 = datetime.now(UTC)
                timing = Timing(time.monotonic(), created, cpu_start=cpu_seconds(pid))
                jobs = live_timeline.jobs_of(scenario_objs, gangs, {g.name: g.need for g in cluster.gangs})
                workload = live_timeline.Workload(cp.kubeconfig, jobs, watch, created)
                workload.start()
            else:
                pid = start_scheduler()
                log(f"{scheduler}: creating {pending} pending pods at {scenario.rate or 'full'} pods/s")
                wall0 = datetime.now(UTC)
                timing = Timing(time.monotonic(), created, cpu_start=cpu_seconds(pid))
                run_async(cp.kubeconfig, lambda kube: arrive(kube, gangs, scenario.rate, created, concurrency))
            if definitions:
                time.sleep(late)
                run_async(cp.kubeconfig, lambda kube: create_all(kube, definitions))
            with watch.lock:
                watch.last_change = max(watch.last_change, time.monotonic())
            while True:
                time.sleep(0.25)
                cp.check_alive()
                if gs is not None:
                    gs.check_alive()
                now = time.monotonic()
                if workload is not None:
                    # A timeline ends when every job has, or when nothing runs and nothing has changed for a while:
                    # the jobs still waiting would wait for ever.
                    with watch.lock:
                        idle = now - max(watch.last_change, workload.last_change)
                    stuck = workload.arrived and not workload.busy and idle >= live_timeline.STUCK
                    if workload.done or stuck or workload.error or now - timing.t0 >= timeout:
                        break
                    continue
                with watch.lock:
                    settled = len(watch.bound) == pending and len(watch.running) == pending
                    idle = now - watch.last_change
                # A scheduler gets FIRST_BIND_WAIT to bind anything at all: starting up (caches synced, a
                # first cycle) is not being idle, and on a loaded machine it takes longer than `quiet`.
                waited = quiet if watch.bound else max(quiet, FIRST_BIND_WAIT)
                if idle >= waited and not settled and watch.catch_up():
                    continue  # the watch had fallen behind (seen at 5,000 nodes): the scheduler was not idle
                if settled or idle >= waited or now - timing.t0 >= timeout:
                    break
            watch.stop.set()
            if workload is not None:
                workload.stop.set()
                workload.join(timeout=30)
            usage = {"cpu_seconds": cpu_seconds(pid) - timing.cpu_start, "peak_rss_mib": peak_rss_mib(pid)}
            final = {
                f"{manifests.NAMESPACE}/{p['metadata']['name']}": p["spec"]["nodeName"]
                for p in list_pods(cp, f"?labelSelector={PENDING_LABEL}%3Dtrue")["items"]
                if p["spec"].get("nodeName")
            }
            api: dict[str, list[dict]] = {}  # for the scenario's own check
            if scenario.api_check is not None:
                for path in ("/api/v1/nodes", "/api/v1/pods", *(f"/apis/resource.k8s.io/v1/{r}" for r in DRA)):
                    api[path.rsplit("/", 1)[1]] = cp.request("GET", path)["items"]
            figures = None
            if workload is not None:
                nodes = cp.request("GET", "/api/v1/nodes")["items"]
                fits = set(placement_metrics.runnable(cluster.nodes, cluster.gangs))
                queues = tenants.queues_of(scenario_objs)
                with watch.lock:
                    figures = live_timeline.measure(workload, dict(watch.bound), nodes, now, fits, queues)
                pods = list_pods(cp, f"?labelSelector={PENDING_LABEL}%3Dtrue")["items"]
                figures["phases"] = dict(Counter(p.get("status", {}).get("phase", "?") for p in pods))
            background = len(list_pods(cp, f"?labelSelector=!{PENDING_LABEL}")["items"])
            gs_metrics = gs.metrics() if gs is not None else {}
            if gs is not None:
                decisions = decision_times(gs.get("/metrics")[1], "gangsolve_scheduling_cycle_duration_seconds")
            else:
                decisions = peer.decisions() if peer is not None else peers.kube_scheduler_decisions(cp)
            peer_record = peer.record() if peer is not None else None
            requests = api_requests(cp, wall0)
            served = first_pod_group_served(cp)
        finally:
            if gs is not None:
                gs.stop()
            keep_logs(cp, log_dir / f"{log_name(scenario.name)}-{scheduler}")
    result = summarize(
        scenario,
        scheduler,
        cluster,
        gangs,
        final,
        watch,
        timing,
        gs_metrics,
        timed_out=now - timing.t0 >= timeout,
        time_limit=limit if scheduler == "gangsolve" else None,
        timeline=figures,
    )
    result.update(usage, decisions=decisions)
    # Kueue admits and kube-scheduler places; KAI's scheduler decides and its binder binds: each pair together is
    # the scheduler under test.
    placer = (peer_record or {}).get("kube_scheduler") or (peer_record or {}).get("binder")
    if placer:
        result["cpu_seconds"] += placer["cpu_seconds"]
        if result["peak_rss_mib"] is not None and placer["peak_rss_mib"] is not None:
            result["peak_rss_mib"] += placer["peak_rss_mib"]
    result["api_requests"] = requests
    total = sum(requests.values())
    result["api_requests_per_pod"] = total / len(final) if final else None
    # The metrics assume the background still holds its capacity: say so if anything evicted some of it.
    result["background_pods_lost"] = (
        sum(1 for o in objs if o["kind"] == "Pod" and o["spec"].get("nodeName")) - background
    )
    if served is not None:
        result["pod_group_served"] = served
    if peer_record is not None:
        result["peer"] = peer_record
    if scenario.api_check is not None:
        result["api_check"] = scenario.api_check(api)
    if scenario.oracle is not None:
        bound_at = {pod: t - timing.t0 for pod, (t, _node) in watch.bound.items()}
        result["oracle"] = scenario.oracle(scenario_objs, {k.split("/", 1)[1]: v for k, v in final.items()}, bound_at)
    return result


def run_scenarios(
    names: list[str],
    schedulers: list[str],
    log_dir: Path,
    time_limit: float | None = None,
    quiet: float = 10.0,
    log: Callable[[str], None] = lambda _m: None,
    on_run: Callable[[str, str], None] = lambda _s, _r: None,
) -> list[dict]:
    results = []
    if "gangsolve" in schedulers:
        log_dir.mkdir(parents=True, exist_ok=True)
        warm_bytecode(log_dir / "pycache")
    for name in names:
        scenario = LIVE_SCENARIOS[name]
        objs = scenario.build()
        kinds = [o["kind"] for o in objs]
        not_run = {s: why for s in schedulers if (why := peer_not_run(scenario, s))}
        for scheduler, why in not_run.items():
            log(f"{name}: {scheduler} not run: {why}")
        runs = each_scheduler(
            name,
            [s for s in schedulers if s not in not_run],
            partial(run_live, scenario, log_dir=log_dir, quiet=quiet, time_limit=time_limit, log=log),
            on_run,
        )
        results.append(
            {
                "name": name,
                "description": scenario.description,
                "nodes": scenario.nodes,
                "mode": scenario.mode,
                "rate": scenario.rate,
                "late_definitions": scenario.late_definitions,
                "objects": {
                    "nodes": kinds.count("Node"),
                    "pods": kinds.count("Pod"),
                    "pending_pods": sum(1 for o in objs if o["kind"] == "Pod" and not o["spec"].get("nodeName")),
                    "podgroups": kinds.count("PodGroup"),
                    "pdbs": kinds.count("PodDisruptionBudget"),
                },
                "runs": runs,
                **({"not_run": not_run} if not_run else {}),
            }
        )
    return results


peer_not_run = peers.not_run


def each_scheduler(
    name: str, schedulers: list[str], run: Callable[[str], dict], on_run: Callable[[str, str], None]
) -> list[dict]:
    """`run(scheduler)` for each scheduler in turn; a run that fails is a result to report, not the end of the
    benchmark."""
    runs = []
    for scheduler in schedulers:
        on_run(name, scheduler)
        try:
            runs.append(run(scheduler))
        except Exception as exc:
            runs.append({"scheduler": scheduler, "error": f"{type(exc).__name__}: {exc}"[:4000]})
    return runs
