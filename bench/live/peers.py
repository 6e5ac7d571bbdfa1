"""The real peers in a live run: what each one installs and starts on the run's control plane, when, and what
the run records about it.

- `volcano`, `volcano-gpu-binpack`, `volcano-reclaim`: vc-scheduler and its controllers
  (bench/devcluster/volcano.py), installed and added once the scenario's background runs, started as the
  scheduler under test; where the scenario has teams' Volcano Queues, those too; where its gangs ask for a
  topology level, HyperNodes built from the nodes' labels and the network-topology-aware plugin, as Volcano's
  topology guide sets them up;
- `kueue`, `kueue-unblocked`: Kueue's manager (bench/devcluster/kueue.py) with kube-scheduler placing what it
  admits (where the scenario has teams' Volcano Queues, the teams as ClusterQueues in one cohort with fair
  sharing, `kueue.team_queues`); waitForPodsReady blocking admission until each admitted workload's pods are
  Ready, or not; with topology-aware scheduling at node level (`kueue-tas`: Kueue chooses each pod's node,
  kube-scheduler binds). Its pod
  webhook fails closed, so the manager runs before the first pending pod is created, in both modes; in burst
  mode its ClusterQueue is created held (`stopPolicy: Hold`: the pods are gated and their Workloads made, none
  admitted) and released when the scheduler "starts", together with kube-scheduler; where pending gangs may
  preempt, its ClusterQueue holds what the pods it does not manage leave and preempts lower priorities;
- `kai`, `kai-quota`: NVIDIA's KAI scheduler and its binder (bench/devcluster/kai.py) with the chart's default
  queues (quota 0, as its quick start has them; or, `kai-quota`, guaranteed what the background leaves free) and,
  where the scenario has teams' Volcano Queues, the same teams as KAI queues (`kai.team_queues`), and the
  scheduler configuration KAI's operator writes for the chart's default SchedulingShard (its evicting actions
  off, but where teams share), installed and added once the scenario's background runs, started as the
  scheduler under test; where the scenario's gangs ask for a topology level, a KAI Topology of the nodes' labels.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gangsolve.bench import manifests, tenants
from gangsolve.bench.devcluster import ControlPlane, kai, kueue, volcano
from gangsolve.bench.live import REAL_PEERS, WAP
from gangsolve.bench.live.live_scenarios import LiveScenario
from gangsolve.bench.live.measurements import cpu_seconds, decision_times, peak_rss_mib, session_times

KUEUE_PEERS = ("kueue", "kueue-unblocked", "kueue-tas")
KAI_PEERS = ("kai", "kai-quota")
QUEUE_PEERS = ("volcano-reclaim",)  # set-ups that matter only between teams' queues


def locate(scheduler: str) -> volcano.Volcano | kueue.Kueue | kai.Kai:
    """The peer's build in the cache; PeerMissing (saying how to build it) where there is none."""
    if scheduler in KUEUE_PEERS:
        return kueue.Kueue.locate()
    return kai.Kai.locate() if scheduler in KAI_PEERS else volcano.Volcano.locate()


def not_run(scenario: LiveScenario, scheduler: str) -> str | None:
    """Why a scheduler does not run in `scenario`: one its users cannot ask, or a real peer not built or whose
    objects the users do not write (None: it runs)."""
    if scheduler == WAP:
        return "kube-scheduler's workload-aware preemption runs in the live preemption scenarios only"
    if scenario.only is not None and scheduler not in scenario.only:
        return scenario.only_why or f"only {', '.join(scenario.only)} run it"
    if scheduler in QUEUE_PEERS and not scenario.tenants:
        return "its set-up differs from its family's only between queues: it runs where teams share"
    if scheduler not in REAL_PEERS:
        return None
    if scenario.topology and scheduler in ("kueue", "kueue-unblocked"):
        return "Kueue's users ask for a topology level through its topology-aware scheduling: kueue-tas runs it"
    return not_built(scheduler)


def not_built(peer: str) -> str | None:
    """How to build a real peer that is not in the cache (None: it is built)."""
    try:
        locate(peer)
    except volcano.PeerMissing as missing:
        return str(missing)
    return None


class VolcanoRun:
    """vc-scheduler (the chart's configuration; GPUs binpacked for volcano-gpu-binpack, the reclaim action added
    for volcano-reclaim) and its controllers."""

    def __init__(self, cp: ControlPlane, scheduler: str, scenario: LiveScenario) -> None:
        self.cp, self.scheduler, self.scenario = cp, scheduler, scenario
        self.peer = volcano.Volcano.locate()
        self.conf: dict[str, Any] = {}
        self.hypernodes: list[dict] = []
        self.processes: volcano.VolcanoProcesses | None = None

    def before_pods(self, objs: list[dict], burst: bool) -> None:
        conf = self.peer.chart_scheduler_conf(self.cp.binaries.helm)
        self.conf = volcano.with_gpu_binpack(conf) if self.scheduler == "volcano-gpu-binpack" else conf
        self.conf = volcano.with_reclaim(conf) if self.scheduler == "volcano-reclaim" else self.conf
        volcano.install(self.cp, self.peer)
        for queue in tenants.queues_of(objs):  # the teams' Queues, as the scenario has them
            self.cp.request("POST", f"/apis/{volcano.POD_GROUP_API}/queues", queue)
        if self.scenario.preemption:  # as Volcano's maintainers test it: "allocate, preempt, backfill"
            self.conf = volcano.with_preempt(self.conf)
        if self.scenario.topology:  # the topology guide's set-up: HyperNodes and the plugin that reads them
            self.conf = volcano.with_network_topology(self.conf)
            self.hypernodes = volcano.hypernodes([o for o in objs if o["kind"] == "Node"], self.scenario.topology)
            for hypernode in self.hypernodes:
                self.cp.request("POST", f"/apis/{volcano.HYPERNODE_API}/hypernodes", hypernode)
        self.processes = volcano.add(self.cp, self.peer, self.conf, qps=self.scenario.client_qps)

    def cpu_at_start(self) -> float:
        return 0.0  # not running yet

    def start(self) -> int:
        assert self.processes is not None
        return volcano.start(self.cp, self.processes)

    def record(self) -> dict[str, Any]:
        return {"version": self.peer.version, "scheduler_conf": self.conf, "hypernodes": len(self.hypernodes)}

    def decisions(self) -> dict[str, Any] | None:
        """Its sessions (open, every action, close), from its log: its session histogram counts only sessions
        that closed, and in a burst it binds inside one session that may outlast the run."""
        assert self.processes is not None
        log = self.processes.scheduler.log_path.read_text(errors="replace")
        year = datetime.now().year
        return session_times("vc-scheduler log", volcano.session_marks(log, year), volcano.last_logged(log, year))


class KueueRun:
    """Kueue's manager, its queues over the scenario's free capacity, and kube-scheduler."""

    def __init__(self, cp: ControlPlane, scheduler: str, scenario: LiveScenario) -> None:
        self.cp, self.scheduler, self.scenario = cp, scheduler, scenario
        self.peer = kueue.Kueue.locate()
        self.process: kueue.KueueProcess | None = None
        self.queues: list[dict] = []
        self.held = False
        self.pid = 0  # the manager's, once started
        self.scheduler_cpu0 = 0.0

    def before_pods(self, objs: list[dict], burst: bool) -> None:
        port = kueue.free_port()
        certs = kueue.install(self.cp, self.peer, port)
        block = self.scheduler == "kueue"  # with TAS Kueue fits gangs to nodes itself: no need to admit one by one
        teams = tenants.queues_of(objs)
        if self.scenario.preemption:  # its pods (the running work goes through it) count within the quota
            objs = [o for o in objs if not kueue.queued(o)]
        self.process = kueue.add(
            self.cp, self.peer, certs, port, qps=self.scenario.client_qps, block_admission=block, fair=bool(teams)
        )
        self.pid = kueue.start(self.cp, self.process)
        if teams:  # the teams as ClusterQueues in one cohort, fair sharing on (kueue.team_queues)
            cpu, memory, pools = kueue.free_capacity(objs)
            weights = {q["metadata"]["name"]: str(q["spec"].get("weight", 1)) for q in teams}
            caps = {
                q["metadata"]["name"]: int(q["spec"]["capability"][kueue.GPU])
                for q in teams
                if kueue.GPU in (q["spec"].get("capability") or {})
            }
            self.queues = kueue.team_queues(weights, cpu, memory, pools, namespace=manifests.NAMESPACE, caps=caps)
        elif self.scheduler == "kueue-tas":
            self.queues = kueue.tas_queues_for(objs, manifests.NAMESPACE)
        else:
            self.queues = kueue.queues_for(objs, manifests.NAMESPACE)
        if self.scenario.preemption:
            self.queues = kueue.with_preemption(self.queues)
        self.held = burst
        kueue.create_queues(self.cp, [kueue.held(q) if burst else q for q in self.queues])

    def cpu_at_start(self) -> float:
        return cpu_seconds(self.pid)  # it has been gating pods and making Workloads

    def start(self) -> int:
        self.cp.start_scheduler()
        self.scheduler_cpu0 = cpu_seconds(self.cp.pids()["kube-scheduler"])
        if self.held:
            kueue.release(self.cp, self.queues)
        return self.pid

    def record(self) -> dict[str, Any]:
        assert self.process is not None
        pid = self.cp.pids().get("kube-scheduler")
        placer = (
            {"cpu_seconds": cpu_seconds(pid) - self.scheduler_cpu0, "peak_rss_mib": peak_rss_mib(pid)} if pid else {}
        )
        return {
            "version": self.peer.version,
            "manager_config": self.process.config,
            "queues": self.queues,
            "kube_scheduler": placer,
        }

    def decisions(self) -> dict[str, Any] | None:
        """kube-scheduler's, which places what Kueue admits: the manager's own metrics are not served here."""
        return kube_scheduler_decisions(self.cp)


class KaiRun:
    """KAI's scheduler and binder, the chart's default queues (with kai-quota: guaranteed the free capacity),
    the operator's configuration for the chart's default shard with the evicting actions off."""

    def __init__(self, cp: ControlPlane, scheduler: str, scenario: LiveScenario) -> None:
        self.cp, self.scheduler, self.scenario = cp, scheduler, scenario
        self.peer = kai.Kai.locate()
        self.shard: dict[str, Any] = {}
        self.conf: dict[str, Any] = {}
        self.queues: list[dict] = []
        self.topology: dict[str, Any] | None = None
        self.processes: kai.KaiProcesses | None = None

    def before_pods(self, objs: list[dict], burst: bool) -> None:
        chart = kai.install(self.cp, self.peer)
        self.queues = kai.default_queues(chart)
        if self.scheduler == "kai-quota":
            # What the background leaves free; where pending gangs may preempt, the background is the work they
            # may take the place of, and the queue is guaranteed the whole cluster.
            preemptible = self.scenario.preemption
            cpu, memory, pools = kueue.free_capacity(
                [o for o in objs if not (preemptible and o["kind"] == "Pod" and o["spec"].get("nodeName"))]
            )
            self.queues = kai.with_quota(self.queues, cpu, memory, sum(p.gpus for p in pools))
        teams = tenants.queues_of(objs)
        self.queues += kai.team_queues(teams)
        kai.create_queues(self.cp, self.queues)
        levels = kai_levels(self.scenario.topology, objs)
        if levels:  # the topology guide's Topology, from the nodes' labels
            made = kai.topology(levels)
            self.cp.request("POST", f"/apis/{kai.TOPOLOGY_API}/topologies", made)
            self.topology = made["spec"]
        # Tenants reclaim from each other, and the tenants timelines restart what is evicted: KAI's default
        # actions, evictions included. Elsewhere no controller would recreate an evicted pod (kai.NO_EVICTIONS).
        shard = kai.default_shard(chart)
        self.shard = shard if teams or self.scenario.preemption else kai.without_evictions(shard)
        self.conf = kai.scheduler_conf(self.shard)
        self.processes = kai.add(self.cp, self.peer, self.conf, qps=self.scenario.client_qps)

    def cpu_at_start(self) -> float:
        return 0.0  # not running yet

    def start(self) -> int:
        assert self.processes is not None
        return kai.start(self.processes)

    def record(self) -> dict[str, Any]:
        assert self.processes is not None
        binder = self.processes.binder.pid
        return {
            "version": self.peer.version,
            "shard": self.shard,
            "scheduler_conf": self.conf,
            "queues": [{"name": q["metadata"]["name"], **q["spec"]} for q in self.queues],
            **({"topology": self.topology} if self.topology else {}),
            "args": self.processes.args,
            # Started with the scheduler: its CPU seconds from 0. The two together are the scheduler under test.
            "binder": {"cpu_seconds": cpu_seconds(binder), "peak_rss_mib": peak_rss_mib(binder)} if binder else {},
        }

    def decisions(self) -> dict[str, Any] | None:
        """Its sessions, from the scheduler's log: its latency metric is a gauge of the last session only."""
        assert self.processes is not None
        log = self.processes.scheduler.log_path.read_text(errors="replace")
        return session_times("kai-scheduler log", kai.session_marks(log), kai.last_logged(log))


PeerRun = VolcanoRun | KueueRun | KaiRun


def kube_scheduler_decisions(cp: ControlPlane) -> dict[str, Any] | None:
    """kube-scheduler's scheduling algorithm (filter and score, not the binding it waits for): a pod group's where
    it scheduled pod groups (native gang scheduling), else a pod's."""
    text = cp.component_metrics("kube-scheduler")
    return decision_times(text, "scheduler_podgroup_scheduling_algorithm_duration_seconds") or decision_times(
        text, "scheduler_scheduling_algorithm_duration_seconds"
    )


def kai_levels(declared: tuple[str, ...], objs: list[dict]) -> tuple[str, ...]:
    """The levels of the Topology KAI's users build: the scenario's own, widest first, then each node label a gang
    must stay within (its definition's co-location) that those leave out. KAI's users keep a gang in one rack with
    a PodGroup topology constraint on the Topology, not with pod affinity (`populate.arrivals`)."""
    kept = {
        (o["metadata"].get("annotations") or {}).get(manifests.COLOCATE_ANNOTATION)
        for o in objs
        if o["kind"] == "PodGroup"
    }
    return (*declared, *sorted(k for k in kept if k and k not in declared))


def peer_run(cp: ControlPlane, scheduler: str, scenario: LiveScenario) -> PeerRun:
    if scheduler in KUEUE_PEERS:
        return KueueRun(cp, scheduler, scenario)
    return KaiRun(cp, scheduler, scenario) if scheduler in KAI_PEERS else VolcanoRun(cp, scheduler, scenario)
