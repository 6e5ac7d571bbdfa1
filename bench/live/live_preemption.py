"""Live preemption: the preemption scenarios on the real control plane, once per scheduler, with the live mode's
machinery (fresh control plane, kwok nodes, the bind watch, `gangsolve run`).

Schedulers, each configured as its users would:

- `kube-scheduler`: the pinned release, default configuration: DefaultPreemption, pod by pod.
- `kube-scheduler-wap`: the same with workload-aware preemption (KEP-5710; on v1.37.2 part of the beta
  `GenericWorkload` gate, off by default): the gate on the apiserver, scheduler and controller-manager,
  `--runtime-config=scheduling.k8s.io/v1beta1=true`; every gang (running or pending) a `scheduling.k8s.io/v1beta1`
  PodGroup with `schedulingPolicy.gang.minCount` = its minimum, its PriorityClass (`priorityClassName`: a PodGroup's
  priority is what workload-aware preemption compares) and `disruptionMode: {all: {}}` (a gang runs only whole,
  so its users let it be disrupted only whole); each pod points at its PodGroup through `spec.schedulingGroup`.
- `gangsolve`: `gangsolve run`, preemption on (its default).
- `volcano` (`PEERS`, where built): vc-scheduler with the chart's configuration, the `preempt` action added and
  `enqueue` removed, as Volcano's maintainers run their preemption tests (`volcano.with_preempt`: with both, a
  gang that needs a preemption is never admitted to get one); every gang, running or pending, a
  Volcano PodGroup with its minimum and priority class, its pods naming it, and a pod alone a PodGroup of one
  (`peer_objects`).
- `kai-quota` (where built): KAI's scheduler and binder with its default actions (preempt among them) and its
  default queue guaranteed the cluster (KAI runs work of priority 100 or more only within quota, and never
  preempts it); every gang and every pod alone a KAI PodGroup, as its users write them for plain pods, and the
  running work's classes below 100 (`kai_classes`).
- `kueue`, `kueue-tas` (where built): Kueue's manager with kube-scheduler binding (the chart's all-or-nothing
  set-up, or topology-aware scheduling choosing the nodes), one ClusterQueue holding the cluster less the pods
  Kueue does not manage, preempting `withinClusterQueue: LowerPriority`; every pod of the gang scheduler labelled
  for its LocalQueue, a gang of several a pod group. Kueue preempts only what it admitted, so the running work
  goes through it first, kept to its nodes (`admitted_through_kueue`; a gang spread one pod a node, as
  scheduler_perf's are, kept to its nodes' label and spread by anti-affinity: `spread_through_kueue`); where
  that would make a pod group of more pod templates than Kueue admits, or under topology-aware scheduling a
  spread gang, Kueue does not run the scenario (`kueue_not_run`).

A run: the scenario's PriorityClasses (as they are: these may preempt), nodes, PDBs, PodGroups and running pods
(bound through `spec.nodeName`, Running under kwok; Kueue's admitted and bound once it runs); then the pending
gangs, t = 0 at the first create. It ends when every pending pod is bound and Running, or nothing was bound,
started or evicted for `quiet` seconds (at least `RETRY_WAIT`). Victims are the running pods gone (or being
deleted) at the end (kwok deletes a deleted pod at once, or stops it first where Kueue's finalizer holds it, so
eviction is immediate); each is attributed to the gang it made room for from its `Preempted` event
(kube-scheduler names the preemptor pod's or PodGroup's uid, gangsolve the gang; waited for up to `quiet` seconds
more; a peer's victim, which names no preemptor, to the first placed pending gang bound on its node), and
everything is measured by bench/static/preemption_rounds.py's `measure` on the scenario's own cluster, exactly
as in the static mode.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from gangsolve.bench import manifests
from gangsolve.bench.devcluster import ControlPlane, crds, kai, kueue, volcano
from gangsolve.bench.devcluster.gangsolve_process import GangsolveProcess
from gangsolve.bench.live import peers
from gangsolve.bench.live.live_scenarios import LiveScenario
from gangsolve.bench.live.measurements import BindWatch
from gangsolve.bench.live.populate import (
    DEFAULT_SCHEDULER,
    NATIVE_GANG_API,
    PENDING_LABEL,
    create_all,
    list_pods,
    pending_pods,
    prepare,
    run_async,
    scheduler_name,
)
from gangsolve.bench.live.runs import each_scheduler, gangsolve_process, keep_logs, log_name
from gangsolve.bench.static import preemption_rounds
from gangsolve.edge.gangs import POD_GROUP_LABEL
from gangsolve.solver.model import Cluster

LIVE_PREEMPTION_SCENARIOS = {
    f"live/preempt-{name.removeprefix('preempt/')}": preemption_rounds.SCENARIOS[name]
    for name in (
        "preempt/tfjob",
        "preempt/perf-100nodes-1x100-vs-1000pods",
        "preempt/perf-100nodes-1x100-vs-5gangs",
        "preempt/perf-100nodes-10x10-vs-50gangs",
        "preempt/gpu-100nodes",
    )
}
LIVE_PREEMPTION_GRID = list(LIVE_PREEMPTION_SCENARIOS)
# kube-scheduler tries a pod that failed again after a back-off that doubles up to 10 s (podMaxBackoffSeconds);
# preempting pod by pod, its last pods wait that long between evictions. A run is idle only past this, whatever its
# `quiet`, or it can end between two of kube-scheduler's evictions (seen once, with quiet 5 s, on a loaded machine).
RETRY_WAIT = 15.0
WAP_GATE = "--feature-gates=GenericWorkload=true"  # workload-aware preemption (no topology-aware scheduling)
WAP_FLAGS: dict[str, Any] = {
    "extra_apiserver_args": [WAP_GATE, f"--runtime-config={NATIVE_GANG_API}=true"],
    "extra_scheduler_args": [WAP_GATE],
    "extra_controller_manager_args": [WAP_GATE],
}
PEERS = ("volcano", "kai-quota", "kueue", "kueue-tas")  # the real peers that run here, each where it is built
KUEUE = ("kueue", "kueue-tas")  # whose running work is admitted through it first (`admitted_through_kueue`)
KAI_PREEMPTIBLE = 100  # KAI preempts only work whose priority is below this, and runs work at or above it in quota


def native(objs: list[dict]) -> list[dict]:
    """The scenario as a workload-aware preemption user writes it: native PodGroups instead of
    scheduler-plugins' ones, and pods pointing at them."""
    classes = {}
    for o in objs:
        group = (o["metadata"].get("labels") or {}).get(POD_GROUP_LABEL) if o["kind"] == "Pod" else None
        if group and o["spec"].get("priorityClassName"):
            classes[group] = o["spec"]["priorityClassName"]
    out = []
    for o in objs:
        if o["kind"] == "PodGroup":
            name = o["metadata"]["name"]
            spec: dict[str, Any] = {
                "schedulingPolicy": {"gang": {"minCount": o["spec"]["minMember"]}},
                "disruptionMode": {"all": {}},
            }
            if name in classes:
                spec["priorityClassName"] = classes[name]
            out.append(
                {"apiVersion": NATIVE_GANG_API, "kind": "PodGroup", "metadata": dict(o["metadata"]), "spec": spec}
            )
            continue
        if o["kind"] == "Pod":
            group = (o["metadata"].get("labels") or {}).get(POD_GROUP_LABEL)
            if group:
                o = {**o, "spec": {**o["spec"], "schedulingGroup": {"podGroupName": group}}}
        out.append(o)
    return out


def peer_objects(objs: list[dict], cluster: Cluster, scheduler: str) -> list[dict]:
    """The scenario as a Volcano or KAI user writes it: scheduler-plugins' PodGroups gone; every gang of the
    gang scheduler's pods, running or pending, the peer's PodGroup (its minimum, its priority class) with its
    pods naming it and the peer's scheduler name, and a pod alone a PodGroup of one (what Volcano's PodGroup
    controller would make for it; KAI schedules no pod without one). Pods of other schedulers stay as they are.
    KAI's users give work they let be preempted a priority below 100, KAI's preemptible range: a class only
    running pods have keeps its order below 100; the pending gangs' classes stay. `cluster`: the objects'
    Cluster (who belongs to which gang)."""
    gang_of = {r.name: (r.gang, r.min_member) for r in cluster.running if r.gang}
    gang_of |= {p.name: (g.name, g.min_member) for g in cluster.gangs for p in g.pods}
    members: dict[tuple[str, int], list[dict]] = defaultdict(list)
    out = []
    for o in objs:
        if o["kind"] == "Pod" and o["spec"].get("schedulerName", manifests.SCHEDULER) == manifests.SCHEDULER:
            name = f"{manifests.NAMESPACE}/{o['metadata']['name']}"
            members[gang_of.get(name, (name, 1))].append(o)
        elif o["kind"] != "PodGroup":
            out.append(o)
    for (gang, minimum), pods in members.items():
        name = "gang-" + gang.split("/", 1)[1]
        if scheduler in KUEUE:  # no object: the LocalQueue label, and a pod group's labels on a gang of several
            out += kueue.label_members(pods, name)
            continue
        if scheduler.startswith("kai"):
            out += [kai.pod_group(name, minimum, pods, manifests.NAMESPACE), *kai.label_members(pods, name)]
            continue
        out += [volcano.pod_group(name, minimum, pods, manifests.NAMESPACE), *volcano.label_members(pods, name)]
    return kai_classes(out) if scheduler.startswith("kai") else out


def admitted_through_kueue(pod: dict, node_labels: dict[str, dict[str, str]]) -> dict:
    """A running pod as its Kueue user created it: pending, for Kueue to admit and kube-scheduler to bind, kept to
    the node the scenario has it on by a node selector (Kueue preempts only workloads it admitted). The selector
    names the node's GPU model too, as a user of that model writes it: Kueue picks a GPU flavor by the pod's
    selector, and another model's flavor would send the pod where its node is not."""
    node = pod["spec"]["nodeName"]
    model = {k: v for k, v in node_labels[node].items() if k in kueue.GPU_POOL_LABELS}
    spec = {k: v for k, v in pod["spec"].items() if k != "nodeName"}
    spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **model, kueue.HOSTNAME_LABEL: node}
    return {**pod, "spec": {**spec, "schedulerName": DEFAULT_SCHEDULER}}


KUEUE_ROLES = 8  # Kueue admits a pod group of at most this many distinct pod templates ("roles")
SPREAD_LABEL = "spread.bench.gangsolve.io/"  # + a gang's name: on the nodes its pods are spread over


def spread_gangs(objs: list[dict], cluster: Cluster) -> dict[str, list[str]]:
    """The running gangs Kueue cannot admit kept pod by pod to their nodes (more than KUEUE_ROLES nodes, so as
    many pod templates) whose pods are alike but for their node, one a node: scheduler_perf's spread gangs
    (hostPorts spread them there). Their users write one template, kept to the gang's nodes by a label and
    spread one a node by pod anti-affinity (`spread_through_kueue`). Each gang's pod names, in order."""
    spec_of = _pod_specs(objs)
    members: dict[str, list[str]] = defaultdict(list)
    for r in cluster.running:
        if r.gang:
            members[r.gang].append(r.name)
    out = {}
    for gang, names in members.items():
        nodes = [spec_of[n]["nodeName"] for n in names]
        alike = {json.dumps({k: v for k, v in spec_of[n].items() if k != "nodeName"}, sort_keys=True) for n in names}
        if len(set(nodes)) > KUEUE_ROLES and len(set(nodes)) == len(nodes) and len(alike) == 1:
            out[gang] = names
    return out


def spread_through_kueue(pod: dict, gang: str, node_labels: dict[str, dict[str, str]]) -> dict:
    """A running pod of a spread gang as its Kueue user created it: `admitted_through_kueue`'s pod kept to the
    gang's nodes by their label (`SPREAD_LABEL` + the gang's name, which `spread_labels` puts on them) instead of
    its one node, and one a node by a required pod anti-affinity on its pod group, so every pod of the gang is
    alike (one template, one role)."""
    admitted = admitted_through_kueue(pod, node_labels)
    spec = admitted["spec"]
    selector = {k: v for k, v in spec["nodeSelector"].items() if k != kueue.HOSTNAME_LABEL}
    group = pod["metadata"]["labels"][kueue.POD_GROUP_NAME_LABEL]
    apart = {"labelSelector": {"matchLabels": {kueue.POD_GROUP_NAME_LABEL: group}}, "topologyKey": kueue.HOSTNAME_LABEL}
    affinity = {
        **(spec.get("affinity") or {}),
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [apart]},
    }
    return {
        **admitted,
        "spec": {**spec, "nodeSelector": {**selector, SPREAD_LABEL + _short(gang): "true"}, "affinity": affinity},
    }


def spread_labels(nodes: list[dict], spread: dict[str, list[str]], objs: list[dict]) -> list[dict]:
    """`nodes` with the label of each spread gang whose pods the scenario has on them."""
    spec_of = _pod_specs(objs)
    extra: dict[str, dict[str, str]] = defaultdict(dict)
    for gang, names in spread.items():
        for n in names:
            extra[spec_of[n]["nodeName"]][SPREAD_LABEL + _short(gang)] = "true"
    return [
        {
            **o,
            "metadata": {
                **o["metadata"],
                "labels": {**(o["metadata"].get("labels") or {}), **extra[o["metadata"]["name"]]},
            },
        }
        if o["kind"] == "Node" and o["metadata"]["name"] in extra
        else o
        for o in nodes
    ]


def _short(gang: str) -> str:
    """A gang's or pod's name without its namespace (a label key's name part, an object's name)."""
    return gang.split("/", 1)[-1]


def _pod_specs(objs: list[dict]) -> dict[str, dict]:
    """Each pod's spec by its namespaced name, as the scenario's Cluster names pods."""
    return {f"{manifests.NAMESPACE}/{o['metadata']['name']}": o["spec"] for o in objs if o["kind"] == "Pod"}


def kueue_not_run(objs: list[dict], cluster: Cluster, scheduler: str = "kueue") -> str | None:
    """Why Kueue cannot run a scenario as laid out (None: it can): each running pod goes through Kueue kept to
    its node by a node selector, so a running gang has a pod template per node (and per role), and Kueue refuses
    a group of more than its limit ("pod group can't include more than 8 roles"), unless its pods are spread one
    a node (`spread_gangs`: one template). Kueue's topology-aware scheduling chooses every pod's node itself and
    reads no pod anti-affinity, so under `kueue-tas` a spread gang cannot be kept one a node."""
    spread = spread_gangs(objs, cluster)
    if spread and scheduler == "kueue-tas":
        return (
            f"its running gangs are spread one pod a node ({len(spread)} of them), and Kueue's topology-aware "
            "scheduling, which picks every pod's node, reads no pod anti-affinity to keep them so"
        )
    spec_of = _pod_specs(objs)
    roles: dict[str, set[str]] = defaultdict(set)
    for r in cluster.running:
        if r.gang and r.gang not in spread:
            roles[r.gang].add(json.dumps(spec_of[r.name], sort_keys=True))  # its node included
    widest = max((len(templates) for templates in roles.values()), default=0)
    if widest <= KUEUE_ROLES:
        return None
    return (
        f"kept to their nodes, a running gang's pods make up to {widest} pod templates, more than the "
        f"{KUEUE_ROLES} Kueue admits in one pod group"
    )


def kai_classes(objs: list[dict]) -> list[dict]:
    """`objs` with the PriorityClasses only running pods name moved below KAI_PREEMPTIBLE, in their order."""
    pending = {o["spec"].get("priorityClassName") for o in objs if o["kind"] == "Pod" and not o["spec"].get("nodeName")}
    victims = sorted(
        (o for o in objs if o["kind"] == "PriorityClass" and o["metadata"]["name"] not in pending),
        key=lambda o: o["value"],
    )
    value = {o["metadata"]["name"]: (i + 1) * KAI_PREEMPTIBLE // (len(victims) + 1) for i, o in enumerate(victims)}
    return [
        {**o, "value": value[o["metadata"]["name"]]}
        if o["kind"] == "PriorityClass" and o["metadata"]["name"] in value
        else o
        for o in objs
    ]


def create_classes(cp: ControlPlane, objs: list[dict]) -> None:
    """The PriorityClasses exactly as the users' objects have them (populate.py's `body_of` makes them Never)."""
    for o in objs:
        if o["kind"] == "PriorityClass":
            cp.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", o)


def create_groups(cp: ControlPlane, groups: list[dict]) -> None:
    """The running and pending gangs' PodGroups, scheduler-plugins' CRD first (`prepare` makes it only for objects
    that include such PodGroups, and these come after it)."""
    if any(o["apiVersion"].startswith("scheduling.x-k8s.io/") for o in groups):
        crds.install(cp, crds.pod_group_crd())
    if groups:
        run_async(cp.kubeconfig, lambda kube: create_all(kube, groups))


def run_live(
    scenario: preemption_rounds.PreemptionScenario,
    scheduler: str,
    *,
    log_dir: Path,
    quiet: float = 10.0,
    timeout: float = 300.0,
    time_limit: float | None = None,
    log: Callable[[str], None] = lambda _m: None,
) -> dict:
    objs = scenario.build()
    cluster = manifests.to_cluster(objs)
    name_of = {r.name.split("/", 1)[1]: r for r in cluster.running}
    shaped = native(objs) if scheduler == "kube-scheduler-wap" else objs
    shaped = peer_objects(objs, cluster, scheduler) if scheduler in PEERS else shaped
    pending = pending_pods(shaped, scheduler_name(scheduler))
    rest = [
        o for o in shaped if o["kind"] != "PriorityClass" and not (o["kind"] == "Pod" and not o["spec"].get("nodeName"))
    ]
    # Kueue preempts only workloads it admitted: its users' running work goes through it once it runs.
    labels = {o["metadata"]["name"]: o["metadata"].get("labels") or {} for o in objs if o["kind"] == "Node"}
    spread = spread_gangs(objs, cluster) if scheduler in KUEUE else {}
    spread_gang = {_short(name): gang for gang, names in spread.items() for name in names}
    admitted = [
        spread_through_kueue(o, spread_gang[o["metadata"]["name"]], labels)
        if o["metadata"]["name"] in spread_gang
        else admitted_through_kueue(o, labels)
        for o in rest
        if scheduler in KUEUE and kueue.queued(o)
    ]
    rest = spread_labels([o for o in rest if not (scheduler in KUEUE and kueue.queued(o))], spread, objs)
    log_dir.mkdir(parents=True, exist_ok=True)
    flags = WAP_FLAGS if scheduler == "kube-scheduler-wap" else {}
    gs: GangsolveProcess | None = None
    peer: peers.PeerRun | None = None
    placer = scheduler in KUEUE  # Kueue admits, kube-scheduler binds: started with Kueue (`peer.start`)
    with ControlPlane(
        scheduler=scheduler.startswith("kube-scheduler") or placer, defer_scheduler=placer, log=log, **flags
    ) as cp:
        try:
            create_classes(cp, shaped)
            prepare(cp, [o for o in rest if o["kind"] != "PodGroup"], scheduler, log)
            if scheduler in PEERS:  # its CRDs, queues and processes, then its users' PodGroups; then it starts
                asks = LiveScenario(
                    scenario.name, scenario.nodes, scenario.build, scenario.description, preemption=True
                )
                peer = peers.peer_run(cp, scheduler, asks)
                peer.before_pods(shaped, burst=False)
            create_groups(cp, [o for o in rest if o["kind"] == "PodGroup"])
            if peer is not None:
                peer.start()
            if admitted:
                run_async(cp.kubeconfig, lambda kube: create_all(kube, admitted))
                cp.wait_for(
                    lambda: _on_their_nodes(cp, admitted),
                    timeout=timeout,
                    interval=1.0,
                    what="the running work admitted through Kueue, bound and Running",
                    component="kueue",
                )
                if spread:  # a spread gang's pods are alike: each is measured on the node it took
                    cluster, name_of = _as_bound(cp, objs, admitted)
            if scheduler == "gangsolve":
                limit = time_limit or scenario.time_limit
                gs = gangsolve_process(cp, limit, log_dir / f"{log_name(scenario.name)}-gangsolve.log", {}).start()
            watch = BindWatch(cp, list_pods(cp, "?limit=1")["metadata"]["resourceVersion"])
            watch.start()
            t0 = time.monotonic()
            run_async(cp.kubeconfig, lambda kube: create_all(kube, pending))
            watch.last_change = max(watch.last_change, time.monotonic())
            pods, evicting_since = _pod_count(cp), time.monotonic()
            while True:
                time.sleep(0.5)
                cp.check_alive()
                if gs is not None:
                    gs.check_alive()
                now = time.monotonic()
                count = _pod_count(cp)
                if count != pods:  # evictions are progress too: a scheduler may take a while to make them
                    pods, evicting_since = count, now
                with watch.lock:
                    settled = len(watch.bound) == len(pending) and len(watch.running) == len(pending)
                    idle = now - max(watch.last_change, evicting_since)
                if settled or now - t0 >= timeout:
                    break
                if idle >= max(quiet, RETRY_WAIT) and not _in_flight(cp):
                    break
            watch.stop.set()
            final = list_pods(cp, f"?labelSelector={PENDING_LABEL}%3Dtrue")["items"]
            # A pod Kueue deleted stays until Kueue drops its finalizer: being deleted, it is gone.
            left = {
                p["metadata"]["name"]
                for p in list_pods(cp, f"?labelSelector=!{PENDING_LABEL}")["items"]
                if not p["metadata"].get("deletionTimestamp")
            }
            uids = {p["metadata"]["uid"]: p for p in final}
            group_uids = {}
            if scheduler == "kube-scheduler-wap":
                for pg in cp.request("GET", f"/apis/{NATIVE_GANG_API}/namespaces/{manifests.NAMESPACE}/podgroups")[
                    "items"
                ]:
                    group_uids[pg["metadata"]["uid"]] = f"{manifests.NAMESPACE}/{pg['metadata']['name']}"
            events = _preempted_events(cp, set(name_of) - left, quiet if peer is None else 0.0)
            peer_record = peer.record() if peer is not None else None
        finally:
            if gs is not None:
                gs.stop()
            keep_logs(cp, log_dir / f"{log_name(scenario.name)}-{scheduler}")
    pod_gang = {p.name: g.name for g in cluster.gangs for p in g.pods}

    def gang_of(ref: str) -> str:
        """The gang a Preempted event names: a gang (gangsolve), a pod's or a PodGroup's uid (kube-scheduler)."""
        if ref in uids:
            return pod_gang.get(f"{manifests.NAMESPACE}/{uids[ref]['metadata']['name']}", ref)
        return group_uids.get(ref, ref)

    blamed: dict[str, str] = {}
    for e in events:
        words = (e.get("note") or "").split()
        if e.get("reason") == "Preempted" and len(words) >= 4:
            blamed[e["regarding"]["name"]] = gang_of(words[3])
    sim = preemption_rounds.Sim(cluster)
    bound_at: dict[str, float] = {}
    node_of: dict[str, str] = {}
    for p in final:
        if p["spec"].get("nodeName"):
            full = f"{manifests.NAMESPACE}/{p['metadata']['name']}"
            bound_at[full] = watch.bound.get(p["metadata"]["name"], (float("nan"), ""))[0] - t0
            node_of[full] = p["spec"]["nodeName"]
    seconds = 0.0
    for g in cluster.gangs:
        got = [bound_at[p.name] for p in g.pods if p.name in bound_at]
        if len(got) >= g.need:
            sim.placed_round[g.name] = 1
            seconds = max(seconds, sorted(got)[g.need - 1])
    # A peer's evictions name no preemptor: a victim made room for the first placed gang bound on its node.
    room_for = {
        node_of[p.name]: g.name
        for g in sorted(cluster.gangs, key=lambda g: g.name, reverse=True)
        if g.name in sim.placed_round
        for p in g.pods
        if p.name in node_of
    }
    for name, r in name_of.items():
        if name not in left:
            sim.evicted.append((r, room_for.get(r.node, "") if peer_record else blamed.get(name, "")))
    result = {"scheduler": scheduler, **preemption_rounds.measure(cluster, sim, [])}
    result.update(
        rounds=None,
        rounds_to_placement=None,
        seconds_to_placement=seconds if sim.placed_round else None,
        unattributed_evictions=sum(1 for _v, why in sim.evicted if not why),
        pods_bound=len(bound_at),
        pending_pods=len(pending),
        time_limit=(time_limit or scenario.time_limit) if scheduler == "gangsolve" else None,
    )
    result.pop("cycle_seconds", None)
    if peer_record is not None:
        result["peer"] = peer_record
    return result


def _on_their_nodes(cp: ControlPlane, pods: list[dict]) -> bool:
    """Whether every pod of `pods` is Running on a node its selector allows (the one node it names, or one of its
    spread gang's nodes: anti-affinity keeps those one a node)."""
    running = {p["metadata"]["name"]: p for p in list_pods(cp, "?fieldSelector=status.phase%3DRunning")["items"]}
    nodes = {
        o["metadata"]["name"]: o["metadata"].get("labels") or {} for o in cp.request("GET", "/api/v1/nodes")["items"]
    }

    def where(pod: dict) -> bool:
        node = (running.get(pod["metadata"]["name"]) or {"spec": {}})["spec"].get("nodeName")
        return node is not None and all(nodes[node].get(k) == v for k, v in pod["spec"]["nodeSelector"].items())

    return all(where(p) for p in pods)


def _as_bound(cp: ControlPlane, objs: list[dict], admitted: list[dict]) -> tuple[Cluster, dict]:
    """The scenario's cluster with the admitted pods on the nodes they took, and its running pods by name."""
    took = {
        p["metadata"]["name"]: p["spec"]["nodeName"] for p in list_pods(cp, "")["items"] if p["spec"].get("nodeName")
    }
    names = {p["metadata"]["name"] for p in admitted}
    moved = [
        {**o, "spec": {**o["spec"], "nodeName": took[o["metadata"]["name"]]}}
        if o["kind"] == "Pod" and o["metadata"]["name"] in names
        else o
        for o in objs
    ]
    cluster = manifests.to_cluster(moved)
    return cluster, {r.name.split("/", 1)[1]: r for r in cluster.running}


def _preempted_events(cp: ControlPlane, victims: set[str], wait: float) -> list[dict]:
    """The namespace's events, once every victim has its Preempted event or `wait` seconds have passed: a
    scheduler writes them after the evictions, and a thousand of them take a while."""
    deadline = time.monotonic() + wait
    while True:
        events = cp.request("GET", f"/apis/events.k8s.io/v1/namespaces/{manifests.NAMESPACE}/events")["items"]
        named = {e["regarding"]["name"] for e in events if e.get("reason") == "Preempted"}
        if victims <= named or time.monotonic() >= deadline:
            return events
        time.sleep(0.5)


def _in_flight(cp: ControlPlane) -> bool:
    """Whether a scheduler's move is under way: a victim still terminating, or a pending pod nominated to a
    node (its victims chosen) and not bound yet. A run is not idle then, however long since the last change:
    the scheduler waits on the pods' exits, or on its own retry of the pod, and both come."""
    for p in list_pods(cp, "")["items"]:
        if p["metadata"].get("deletionTimestamp"):
            return True
        if (p.get("status") or {}).get("nominatedNodeName") and not (p.get("spec") or {}).get("nodeName"):
            return True
    return False


def _pod_count(cp: ControlPlane) -> int:
    """Pods in the scenario's namespace: one page, the server counts the rest (it does not count for a list
    with a label selector, so this is all of them; pending pods are only created, so a change is an eviction)."""
    page = list_pods(cp, "?limit=1")
    return len(page["items"]) + int(page["metadata"].get("remainingItemCount") or 0)


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
    not_run = {s: why for s in schedulers if s in PEERS and (why := peers.not_built(s))}
    for name in names:
        scenario = LIVE_PREEMPTION_SCENARIOS[name]
        kueues = [s for s in KUEUE if s in schedulers]
        objs = scenario.build() if kueues else []
        cluster = manifests.to_cluster(objs)
        cannot = {s: reason for s in kueues if (reason := kueue_not_run(objs, cluster, s))}
        skipped = {**cannot, **not_run}  # not built says more than cannot run
        runs = each_scheduler(
            name,
            [s for s in schedulers if s not in skipped],
            partial(run_live, scenario, log_dir=log_dir, quiet=quiet, time_limit=time_limit, log=log),
            on_run,
        )
        result = {"name": name, "description": scenario.description, "nodes": scenario.nodes, "runs": runs}
        results.append({**result, **({"not_run": skipped} if skipped else {})})
    return results
