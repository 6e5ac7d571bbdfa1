"""The live mode's scenarios: what each one creates on a fresh control plane, how its pods arrive (stream, burst,
or a timeline of jobs arriving and finishing) and what its users give each scheduler (bench/live/runs.py runs
them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from gangsolve.bench import manifests, scenarios, tenants
from gangsolve.bench.live import live_sharing, live_timeline, live_topology
from gangsolve.edge.gangs import STARVATION_SECONDS
from gangsolve.solver import SolveConfig

# scheduler_perf's client (test/integration/scheduler_perf/util.go): QPS 5000, burst 5000. The scale scenarios
# give every scheduler this client-side limit, as a user of a large cluster raises the default 50/100.
PERF_QPS = 5000.0


@dataclass(frozen=True)
class LiveScenario:
    name: str
    nodes: int
    build: Callable[[], list[dict]]
    description: str
    time_limit: float = SolveConfig.time_limit  # gangsolve run's --time-limit (its default)
    mode: str = "stream"  # stream | burst | timeline (module docstring)
    rate: float | None = None  # stream: pods created a second; None: as fast as the API server takes them
    client_qps: float | None = None  # every scheduler's client-side QPS and burst; None: each one's default
    scale: bool = False  # a large cluster: no node Leases (ControlPlane(node_leases=False))
    timeout: float = 300.0  # the run ends at the latest this long after t = 0
    # Seconds after the pending pods that their gang definitions (PDBs, PodGroups) are created, the pods owned
    # by TFJobs, as a training operator making separate calls creates them; 0: definitions first.
    late_definitions: float = 0.0
    # The objects each scheduler's users create from the scenario's (objects, scheduler); None: the scenario's
    # own, plus a native PodGroup per gang for kube-scheduler-gang.
    users: Callable[[list[dict], str], list[dict]] | None = None
    # The feature gates of a plane that serves scheduling.k8s.io PodGroups (kube-scheduler-gang's, and any whose
    # users create such PodGroups): API server, controller manager, and kube-scheduler where it runs.
    native_gates: tuple[str, ...] = ("GenericWorkload", "TopologyAwareWorkloadScheduling")
    # An independent check of the final bindings: (the scenario's objects, pod -> node, pod -> seconds bound).
    oracle: Callable[[list[dict], dict[str, str], dict[str, float]], dict] | None = None
    # An independent check of what the API holds after the run: its nodes, pods, resourceclaims and
    # resourceslices (by those names) -> measures.
    api_check: Callable[[dict[str, list[dict]]], dict] | None = None
    # The schedulers whose users can ask for what the scenario asks (None: every one), and why the others cannot.
    only: tuple[str, ...] | None = None
    only_why: str = ""
    # gangsolve's settings beside the scenario's client limits (a timeline scales its starvation age with time).
    gangsolve_settings: dict[str, Any] = field(default_factory=dict)
    tenants: bool = False  # teams share the cluster through queues (set-ups for queues only run here)
    # The nodes' topology labels, widest first, where gangs ask for a level on their definitions (not by pod
    # affinity): each real peer's users build its own topology objects from them and ask in its own API.
    topology: tuple[str, ...] = ()
    # Pending gangs may preempt (the live preemption scenarios): each real peer runs with its preempting actions on.
    preemption: bool = False


def tfjob_objects(name: str, workers: int, created: float, selector: dict[str, str]) -> list[dict]:
    """A TFJob as its operator creates it: a parameter server and 1-GPU workers, grouped by a PDB with
    minAvailable = all of them (the kube-batch convention), no PodGroup."""
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": manifests.NAMESPACE},
        "spec": {"minAvailable": workers + 1, "selector": {"matchLabels": {"tf-job-name": name}}},
    }
    pods = [
        manifests.pod(
            f"{name}-ps-0",
            2000,
            4096,
            created=created,
            labels={"tf-job-name": name, "tf-replica-type": "ps"},
            node_selector=selector,
        )
    ]
    pods += [
        manifests.pod(
            f"{name}-worker-{i}",
            2000,
            4096,
            1,
            created=created,
            labels={"tf-job-name": name, "tf-replica-type": "worker"},
            node_selector=selector,
        )
        for i in range(workers)
    ]
    return [pdb, *pods]


def users_tfjob() -> list[dict]:
    """The users' cluster (a tainted GPU-less control-plane node, two 4-GPU nodes) and two TFJobs asking for
    12 GPUs of its 8: one fits, the other must wait whole."""
    master = manifests.node(
        "master",
        24000,
        128 * 1024,
        labels={"node-role.kubernetes.io/master": ""},
        taints=[{"key": "node-role.kubernetes.io/master", "value": "", "effect": "NoSchedule"}],
    )
    gpu = [manifests.node(f"gpu-{i}", 28000, 128 * 1024, 4, labels={"gpu": "yes"}) for i in range(2)]
    selector = {"gpu": "yes"}
    return [master, *gpu, *tfjob_objects("mnist", 7, 0, selector), *tfjob_objects("resnet", 5, 1, selector)]


# Gang shapes at scale: scheduler_perf's GangScheduling workloads (gangs x pods: 1,000 x 3 and 3 x 1,000 on its
# 4-cpu nodes; test/integration/scheduler_perf/podgroup/gangscheduling), 10 x 500 between them, and the
# synthetic GPU mix (the static mode's synthetic clusters: shapes, taints, background load, priorities).
SHAPES = {"1000x3": (1000, 3), "3x1000": (3, 1000), "10x500": (10, 500)}
STREAM_RATES = (100, 300, 1000)
# As the static synthetic/<n>nodes scenarios. Not at 16,384 nodes: its background is 160,000 running pods, which
# the bench would create one by one through an API server that takes about 250 a second here (over ten minutes).
SYNTHETIC_GANGS = {1000: 200, 5000: 1000}


def _scale_scenarios(nodes: int) -> list[LiveScenario]:
    out = []
    builds: dict[str, tuple[Callable[[], list[dict]], str]] = {
        shape: (
            partial(scenarios.kube_perf, nodes, gangs, size),
            f"{nodes} scheduler_perf nodes (4 cpu, 32Gi), {gangs} gangs x {size} pods (100m, 100Mi)",
        )
        for shape, (gangs, size) in SHAPES.items()
    }
    if nodes in SYNTHETIC_GANGS:
        builds["synthetic"] = (
            partial(scenarios.synthetic, nodes, SYNTHETIC_GANGS[nodes], seed=nodes),
            f"synthetic/{nodes}nodes: GPU nodes and background load, {SYNTHETIC_GANGS[nodes]} gangs of the GPU mix",
        )
    streamed = ("1000x3", "synthetic")  # the latency-sensitive shape, and the contended mix
    timeout = 300.0 if nodes <= 1000 else 600.0
    for shape, (build, description) in builds.items():
        common: dict[str, Any] = {"client_qps": PERF_QPS, "scale": True, "timeout": timeout}
        name = f"live/{nodes}nodes-{shape}"
        out.append(LiveScenario(f"{name}-burst", nodes, build, f"{description}; burst", mode="burst", **common))
        if shape in streamed:
            out += [
                LiveScenario(
                    f"{name}-stream{rate}",
                    nodes,
                    build,
                    f"{description}; {rate} pods/s",
                    mode="stream",
                    rate=rate,
                    **common,
                )
                for rate in STREAM_RATES
            ]
    return out


LIVE_SCENARIOS: dict[str, LiveScenario] = {
    s.name: s
    for s in (
        LiveScenario(
            "live/tfjob",
            3,
            users_tfjob,
            "the users' cluster: tainted control-plane node + 2x 4-GPU nodes; TFJobs of 8 and 6 pods "
            "(7 + 5 GPUs) grouped by PDB",
            time_limit=1.0,
        ),
        LiveScenario(
            "live/tfjob-late-pdb",
            3,
            users_tfjob,
            "the users' TFJobs owned by TFJob objects, their PDBs created 2 s after the pods (separate calls, "
            "as a training operator makes them): the race a gang scheduler must not lose",
            time_limit=1.0,
            late_definitions=2.0,
        ),
        *(
            LiveScenario(
                f"live/pools-1000nodes-burst{suffix}",
                1000,
                partial(scenarios.pools, 1000, SYNTHETIC_GANGS[1000], seed=1000),
                f"1,000 nodes in 4 node pools, each the synthetic mix with its own {SYNTHETIC_GANGS[1000] // 4} "
                f"gangs selecting it; burst; gangsolve solving cycles in {processes} process(es)",
                mode="burst",
                client_qps=PERF_QPS,
                scale=True,
                gangsolve_settings={"solver-processes": processes},
            )
            for suffix, processes in (("", 1), ("-2processes", 2))
        ),
        LiveScenario(
            "live/synthetic-100nodes",
            100,
            lambda: scenarios.synthetic(100, 40, seed=100),
            "synthetic/100nodes' cluster and background, 40 pending gangs",
            time_limit=1.0,
        ),
        *(
            LiveScenario(
                f"live/topology-seed{seed}",
                live_topology.NODES,
                partial(live_topology.objects, seed=seed),
                f"{live_topology.NODES} 8-GPU nodes in racks of 8, blocks of 3 racks, about a quarter held; "
                f"scheduling.k8s.io PodGroups of 8-64 GPUs asking {live_topology.LOAD:.0%} of the free GPUs, "
                f"required block, preferred rack (seed {seed})",
                users=live_topology.for_scheduler,
                native_gates=live_topology.TOPOLOGY_GATES,
                oracle=live_topology.oracle,
                topology=live_topology.LEVELS,
            )
            for seed in live_topology.SEEDS
        ),
        LiveScenario(
            "live/openb-shares",
            live_sharing.NODES,
            live_sharing.objects,
            f"{live_sharing.NODES} GPU nodes drawn from the OpenB trace's; its fractional pods (part of one GPU: "
            f"`gpu-fraction`, or for kube-scheduler a ResourceClaim on shareable DRA devices) drawn until they ask "
            f"{live_sharing.LOAD:.0%} of those GPUs; burst",
            mode="burst",
            users=live_sharing.for_scheduler,
            api_check=live_sharing.devices,
            only=("gangsolve", "kube-scheduler"),
            only_why="its users have no way to ask for part of one GPU here",
        ),
        LiveScenario(
            "live/openb-shares-dra",
            live_sharing.NODES,
            live_sharing.objects,
            "live/openb-shares with every scheduler's users asking the same DRA consumable capacity: each pod a "
            "ResourceClaim on shareable DRA devices, identical objects for all; burst",
            mode="burst",
            users=live_sharing.as_dra,
            api_check=live_sharing.devices,
            only=("gangsolve", "kube-scheduler"),
            only_why="it reads no DRA consumable capacity",
        ),
        LiveScenario(
            "live/10nodes-10x3-burst",
            10,
            lambda: scenarios.kube_perf(10, 10, 3),
            "scheduler_perf's 10Nodes_3Gangs shape with 10 gangs x 3 pods; burst (the e2e test's)",
            mode="burst",
            client_qps=PERF_QPS,
            scale=True,
        ),
        *(
            LiveScenario(
                f"live/timeline-synthetic-seed{seed}",
                live_timeline.NODES,
                partial(live_timeline.objects, seed),
                f"timeline/synthetic-100nodes (seed {seed}, exact estimates) live, {live_timeline.SPEEDUP:g} times "
                "faster: jobs arrive at 130% GPU load for 3 minutes and finish after their runtimes",
                mode="timeline",
                timeout=live_timeline.TIMEOUT,
                # The default age, on the timeline's clock: the policy the time-based mode measures.
                gangsolve_settings={"starvation-age": STARVATION_SECONDS / live_timeline.SPEEDUP},
            )
            for seed in live_timeline.SEEDS
        ),
        *(
            LiveScenario(
                f"live/tenants-seed{seed}",
                tenants.NODES,
                partial(live_timeline.tenant_objects, seed),
                f"timeline/tenants (seed {seed}, exact estimates) live, {live_timeline.SPEEDUP:g} times faster: three "
                "teams' Queues weighted 1:2:4 (team-a capped at 24 GPUs) on 16 8-GPU nodes, each team bursting "
                "past its share; evicted jobs start over",
                mode="timeline",
                timeout=live_timeline.TIMEOUT,
                gangsolve_settings={"starvation-age": STARVATION_SECONDS / live_timeline.SPEEDUP},
                tenants=True,
            )
            for seed in live_timeline.SEEDS
        ),
        *_scale_scenarios(1000),
        *_scale_scenarios(5000),
        *_scale_scenarios(16384),
    )
}
LIVE_GRIDS = {
    "small": ["live/tfjob", "live/synthetic-100nodes"],
    "timeline": [n for n in LIVE_SCENARIOS if n.startswith("live/timeline-")],
    "tenants": [n for n in LIVE_SCENARIOS if n.startswith("live/tenants-")],
    "topology": [n for n in LIVE_SCENARIOS if n.startswith("live/topology-")],
    "scale-1000": [n for n in LIVE_SCENARIOS if n.startswith("live/1000nodes-")],
    "scale-5000": [n for n in LIVE_SCENARIOS if n.startswith("live/5000nodes-")],
    "scale-16384": [n for n in LIVE_SCENARIOS if n.startswith("live/16384nodes-")],
    # One shape at every size: each scheduler's cost against the nodes (the report's scale curve).
    "scale-curve": [f"live/{n}nodes-1000x3-burst" for n in (1000, 5000, 16384)],
}
