"""Live mode: the same kwok cluster and workload on the real control plane, once per scheduler.

Schedulers: `kube-scheduler` (the pinned release, default configuration), `kube-scheduler-gang` (the same with
its native gang scheduling: GenericWorkload gate on, a scheduling.k8s.io/v1beta1 PodGroup with a gang policy
per gang, pods pointing at it through spec.schedulingGroup) and `gangsolve` (`gangsolve run`).

Each run gets a fresh ControlPlane (etcd, kube-apiserver, kube-controller-manager, kwok; kube-scheduler only
when it is the scheduler under test), so no run shares capacity, caches or leftovers with another. A run:

1. creates the scenario's Nodes as kwok nodes, its PriorityClasses, PDBs and PodGroups, and its background
   pods (already bound through `spec.nodeName`), and waits until kwok has them all Running;
2. for `gangsolve`, starts `gangsolve run` as a subprocess on the plane's kubeconfig and waits for /readyz;
3. starts a watch on the namespace's pods, then creates the pending pods with `spec.schedulerName` set for the
   scheduler under test (t = 0 is the first create), and records when each is bound and Running;
4. waits until every pending pod is bound or bindings have not changed for `quiet` seconds, then reads the
   final bindings back from the API and measures them with `bench.metrics.quality` on the scenario's own
   Cluster (so gangs, partial gangs, stranded GPUs and the validator's overcommit check are computed exactly
   as in the static mode, but from real bindings).

A scenario may say what each scheduler's users create from its objects (`users`: live/topology gives each
its own way of asking for one block and few racks) and check the final bindings with an oracle of its own.

Timing is wall clock on a shared machine (the bench process, the control plane and the scheduler share its
cores); compare schedulers measured in the same run.
"""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from gangsolve.bench import live_topology, metrics
from gangsolve.bench import objects as k8s
from gangsolve.bench import scenarios as sc
from gangsolve.bench.devcluster import ApiError, ControlPlane, NodeSpec
from gangsolve.bench.devcluster.controlplane import GPU_RESOURCE, _tls_context, free_port

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SCHEDULER = "default-scheduler"
PENDING_LABEL = "bench.gangsolve.io/pending"  # marks the pods under test (not the background)


# --- scenarios ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LiveScenario:
    name: str
    nodes: int
    build: Callable[[], list[dict]]
    description: str
    time_limit: float = 1.0  # gangsolve run's --time-limit
    # Seconds after the pending pods that their gang definitions (PDBs, PodGroups) are created, the pods owned
    # by TFJobs, as a training operator making separate calls creates them; 0: definitions first.
    late_definitions: float = 0.0
    # The objects each scheduler's users create from the scenario's (objects, scheduler); None: the scenario's
    # own, plus a native PodGroup per gang for kube-scheduler-gang.
    users: Callable[[list[dict], str], list[dict]] | None = None
    # The feature gates of a plane that serves scheduling.k8s.io PodGroups (kube-scheduler-gang's, and any whose
    # users create such PodGroups): API server, controller manager, and kube-scheduler where it runs.
    native_gates: tuple[str, ...] = ("GenericWorkload",)
    # An independent check of the final bindings: (the scenario's objects, pod -> node, pod -> seconds bound).
    oracle: Callable[[list[dict], dict[str, str], dict[str, float]], dict] | None = None


def tfjob_objects(name: str, workers: int, created: float, selector: dict[str, str]) -> list[dict]:
    """A TFJob as its operator creates it: a parameter server and 1-GPU workers, grouped by a PDB with
    minAvailable = all of them (the kube-batch convention), no PodGroup."""
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": k8s.NAMESPACE},
        "spec": {"minAvailable": workers + 1, "selector": {"matchLabels": {"tf-job-name": name}}},
    }
    pods = [
        k8s.pod(
            f"{name}-ps-0",
            2000,
            4096,
            created=created,
            labels={"tf-job-name": name, "tf-replica-type": "ps"},
            node_selector=selector,
        )
    ]
    pods += [
        k8s.pod(
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
    master = k8s.node(
        "master",
        24000,
        128 * 1024,
        labels={"node-role.kubernetes.io/master": ""},
        taints=[{"key": "node-role.kubernetes.io/master", "value": "", "effect": "NoSchedule"}],
    )
    gpu = [k8s.node(f"gpu-{i}", 28000, 128 * 1024, 4, labels={"gpu": "yes"}) for i in range(2)]
    selector = {"gpu": "yes"}
    return [master, *gpu, *tfjob_objects("mnist", 7, 0, selector), *tfjob_objects("resnet", 5, 1, selector)]


LIVE_SCENARIOS: dict[str, LiveScenario] = {
    s.name: s
    for s in (
        LiveScenario(
            "live/tfjob",
            3,
            users_tfjob,
            "the users' cluster: tainted control-plane node + 2x 4-GPU nodes; TFJobs of 8 and 6 pods "
            "(7 + 5 GPUs) grouped by PDB",
        ),
        LiveScenario(
            "live/tfjob-late-pdb",
            3,
            users_tfjob,
            "the users' TFJobs owned by TFJob objects, their PDBs created 2 s after the pods (separate calls, "
            "as a training operator makes them): the race a gang scheduler must not lose",
            late_definitions=2.0,
        ),
        LiveScenario(
            "live/synthetic-100nodes",
            100,
            lambda: sc.synthetic(100, 40, seed=100),
            "synthetic/100nodes' cluster and background, 40 pending gangs",
            1.0,
        ),
        *(
            LiveScenario(
                f"live/topology-seed{seed}",
                live_topology.NODES,
                partial(live_topology.objects, seed=seed),
                f"{live_topology.NODES} 8-GPU nodes in racks of 8, blocks of 3 racks, about a quarter held; "
                f"scheduling.k8s.io PodGroups of 8-64 GPUs asking {live_topology.LOAD:.0%} of the free GPUs, "
                f"required block, preferred rack (seed {seed})",
                2.0,
                users=live_topology.for_scheduler,
                native_gates=live_topology.TOPOLOGY_GATES,
                oracle=live_topology.oracle,
            )
            for seed in live_topology.SEEDS
        ),
    )
}
LIVE_GRID = ["live/tfjob", "live/synthetic-100nodes"]


# --- the control plane side -----------------------------------------------------------------------------------


def node_spec(node: dict) -> NodeSpec:
    alloc = node["status"]["allocatable"]
    labels = {k: v for k, v in node["metadata"].get("labels", {}).items() if k != "kubernetes.io/hostname"}
    return NodeSpec(
        node["metadata"]["name"],
        cpu=alloc["cpu"],
        memory=alloc["memory"],
        pods=int(alloc.get("pods", 110)),
        gpus=int(alloc.get(GPU_RESOURCE, 0)),
        labels=labels,
        taints=list(node.get("spec", {}).get("taints") or []),
    )


def pod_group_crd() -> dict:
    """scheduler-plugins' PodGroup CRD (scheduling.x-k8s.io), schema-less, with the status subresource."""
    return _crd("scheduling.x-k8s.io", "v1alpha1", "PodGroup", "podgroups", ["pg"])


def tfjob_crd() -> dict:
    """Kubeflow's TFJob CRD, schema-less: only owners for the pods, no operator runs."""
    return _crd("kubeflow.org", "v1", "TFJob", "tfjobs", [])


def _crd(group: str, version: str, kind: str, plural: str, short: list[str]) -> dict:
    names: dict[str, Any] = {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()}
    if short:
        names["shortNames"] = short
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": names,
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }


def own_by_tfjobs(cp: ControlPlane, pods: list[dict]) -> list[dict]:
    """`pods` owned by a TFJob each (one per `tf-job-name` label, created here), as the operator creates them."""
    cp.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", tfjob_crd())
    cp.wait_for(lambda: _served(cp, "/apis/kubeflow.org/v1/tfjobs"), timeout=60, what="the TFJob API")
    uids: dict[str, str] = {}
    out = []
    for pod in pods:
        name = (pod["metadata"].get("labels") or {}).get("tf-job-name")
        if name is None:
            out.append(pod)
            continue
        if name not in uids:
            job = {
                "apiVersion": "kubeflow.org/v1",
                "kind": "TFJob",
                "metadata": {"name": name, "namespace": k8s.NAMESPACE},
                "spec": {},
            }
            uids[name] = create(cp, job)["metadata"]["uid"]
        owner = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": name, "uid": uids[name], "controller": True}
        out.append({**pod, "metadata": {**pod["metadata"], "ownerReferences": [owner]}})
    return out


PLURALS = {
    "Pod": "pods",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "PodGroup": "podgroups",
    "PriorityClass": "priorityclasses",
    "TFJob": "tfjobs",
}


def create(cp: ControlPlane, obj: dict) -> dict:
    api, kind = obj["apiVersion"], obj["kind"]
    base = "/api/v1" if api == "v1" else f"/apis/{api}"
    ns = obj["metadata"].get("namespace")
    path = f"{base}/namespaces/{ns}/{PLURALS[kind]}" if ns else f"{base}/{PLURALS[kind]}"
    body = {k: v for k, v in obj.items() if k != "status"}
    if kind == "PriorityClass":
        # Placement scenarios measure placement: no scheduler may preempt (gangsolve reads the class's policy as
        # kube-scheduler does), or background pods would be evicted and the runs would not place onto the same
        # free capacity. Preemption has its own scenarios (live_preemption.py).
        body["preemptionPolicy"] = "Never"
    body["metadata"] = {k: v for k, v in obj["metadata"].items() if k != "creationTimestamp"}
    if kind == "Pod":
        body["spec"] = with_gpu_limits(obj["spec"])
    for attempt in range(20):
        try:
            return cp.request("POST", path, body)
        except ApiError as e:  # 429 while a new CRD's storage starts, or apiserver load
            if e.status not in (429, 500, 503) or attempt == 19:
                raise
            time.sleep(0.25)
    raise AssertionError("unreachable")


def with_gpu_limits(spec: dict) -> dict:
    """The API requires limits = requests for extended resources (GPUs); snapshots may carry requests only."""
    containers = []
    for c in spec["containers"]:
        res = c.get("resources") or {}
        gpu = (res.get("requests") or {}).get(GPU_RESOURCE)
        if gpu and GPU_RESOURCE not in (res.get("limits") or {}):
            c = {**c, "resources": {**res, "limits": {**(res.get("limits") or {}), GPU_RESOURCE: gpu}}}
        containers.append(c)
    return {**spec, "containers": containers}


def create_all(cp: ControlPlane, objs: list[dict], threads: int = 8) -> None:
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda o: create(cp, o), objs))


def list_pods(cp: ControlPlane, query: str = "") -> dict:
    return cp.request("GET", f"/api/v1/namespaces/{k8s.NAMESPACE}/pods{query}")


DEFINITIONS = ("PodDisruptionBudget", "PodGroup")


def prepare(cp: ControlPlane, objs: list[dict], log: Callable[[str], None], definitions: bool = True) -> None:
    """Everything but the pending pods: nodes, priority classes, PDBs and PodGroups (unless `definitions` is
    false: they come later), background pods Running."""
    cp.create_namespace(k8s.NAMESPACE)
    if any(o["apiVersion"] == "scheduling.x-k8s.io/v1alpha1" for o in objs):
        cp.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", pod_group_crd())
        cp.wait_for(
            lambda: _served(cp, "/apis/scheduling.x-k8s.io/v1alpha1/podgroups"), timeout=60, what="the PodGroup API"
        )
    nodes = [o for o in objs if o["kind"] == "Node"]
    log(f"creating {len(nodes)} kwok nodes")
    cp.add_nodes([node_spec(n) for n in nodes], timeout=180)
    # Classes before the definitions: admission refuses a PodGroup whose priority class does not exist yet.
    create_all(cp, [o for o in objs if o["kind"] == "PriorityClass"])
    if definitions:
        create_all(cp, [o for o in objs if o["kind"] in DEFINITIONS])
    background = [o for o in objs if o["kind"] == "Pod" and o["spec"].get("nodeName")]
    if background:
        log(f"creating {len(background)} background pods")
        create_all(cp, background)
        cp.wait_for(
            lambda: _all_running(cp, len(background)),
            timeout=300,
            interval=1.0,
            what="background pods Running",
            component="kwok",
        )


def _served(cp: ControlPlane, path: str) -> bool:
    try:
        return cp.get(path) is not None
    except ApiError:
        return False


def _all_running(cp: ControlPlane, count: int) -> bool:
    return len(list_pods(cp, "?fieldSelector=status.phase%3DRunning")["items"]) >= count


def pending_pods(objs: list[dict], scheduler_name: str) -> list[dict]:
    out = []
    for o in objs:
        if o["kind"] == "Pod" and not o["spec"].get("nodeName"):
            labels = {**o["metadata"].get("labels", {}), PENDING_LABEL: "true"}
            out.append(
                {
                    **o,
                    "metadata": {**o["metadata"], "labels": labels},
                    "spec": {**o["spec"], "schedulerName": scheduler_name},
                }
            )
    return out


# --- watching bindings ----------------------------------------------------------------------------------------


class BindWatch(threading.Thread):
    """Watches the pending pods (by label) and records, per pod, when it was first seen bound and Running."""

    def __init__(self, cp: ControlPlane, resource_version: str) -> None:
        super().__init__(daemon=True, name="bind-watch")
        self.cp = cp
        self.rv = resource_version
        self.ctx: ssl.SSLContext = _tls_context(cp.ca.cert, cp.admin_cert)
        self.t0 = time.monotonic()
        self.bound: dict[str, tuple[float, str]] = {}  # pod -> (seconds since t0, node)
        self.running: dict[str, float] = {}
        self.last_change = time.monotonic()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.errors = 0

    def _see(self, pod: dict) -> None:
        name = pod["metadata"]["name"]
        node = pod.get("spec", {}).get("nodeName")
        now = time.monotonic()
        with self.lock:
            if node and name not in self.bound:
                self.bound[name] = (now - self.t0, node)
                self.last_change = now
            if pod.get("status", {}).get("phase") == "Running" and name not in self.running:
                self.running[name] = now - self.t0
                self.last_change = now

    def _relist(self) -> None:
        listing = list_pods(self.cp, f"?labelSelector={PENDING_LABEL}%3Dtrue")
        for pod in listing["items"]:
            self._see(pod)
        self.rv = listing["metadata"]["resourceVersion"]

    def run(self) -> None:
        while not self.stop.is_set():
            url = (
                f"{self.cp.server}/api/v1/namespaces/{k8s.NAMESPACE}/pods?watch=1&allowWatchBookmarks=true"
                f"&labelSelector={PENDING_LABEL}%3Dtrue&resourceVersion={self.rv}&timeoutSeconds=5"
            )
            try:
                with urllib.request.urlopen(url, timeout=15, context=self.ctx) as resp:
                    for line in resp:
                        event = json.loads(line)
                        obj = event.get("object", {})
                        if event.get("type") == "ERROR":  # 410 Gone: list again
                            self._relist()
                            break
                        self.rv = obj.get("metadata", {}).get("resourceVersion", self.rv)
                        if event.get("type") in ("ADDED", "MODIFIED"):
                            self._see(obj)
                        if self.stop.is_set():
                            break
            except (urllib.error.URLError, OSError, ValueError):
                self.errors += 1
                time.sleep(0.2)
                with contextlib.suppress(Exception):  # the apiserver is busy: try the watch again
                    self._relist()


# --- one run --------------------------------------------------------------------------------------------------


class GangsolveRun:
    """`python -m gangsolve run` on the plane, its log in `log_path`, /metrics on a free port."""

    def __init__(self, cp: ControlPlane, time_limit: float, log_path: Path) -> None:
        self.port = free_port()
        self.log_path = log_path
        self.args = [
            sys.executable,
            "-m",
            "gangsolve",
            "run",
            "--kubeconfig",
            str(cp.kubeconfig),
            "--scheduler-name",
            k8s.SCHEDULER,
            "--metrics-addr",
            f"127.0.0.1:{self.port}",
            "--time-limit",
            str(time_limit),
        ]
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60) -> None:
        env = dict(os.environ)
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        deadline = time.monotonic() + timeout
        while self.get("/readyz")[0] != 200:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gangsolve run exited with {self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"gangsolve run not ready after {timeout:.0f}s:\n{self.log_tail()}")
            time.sleep(0.2)

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, ""
        except OSError:
            return 0, ""

    def metrics(self) -> dict[str, float]:
        """The unlabelled samples and histogram sums/counts of /metrics, by name."""
        out = {}
        for line in self.get("/metrics")[1].splitlines():
            if line and not line.startswith("#") and "{" not in line:
                name, _, value = line.rpartition(" ")
                with contextlib.suppress(ValueError):
                    out[name] = float(value)
        return out

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


# kube-scheduler's own gang scheduling (KEP-4671; beta and off by default in the pinned v1.37): the
# scheduling.k8s.io/v1beta1 PodGroup API and its GangScheduling plugin, both behind the GenericWorkload gate.
NATIVE_GANG_GATE = "--feature-gates=GenericWorkload=true"
NATIVE_GANG_API = "scheduling.k8s.io/v1beta1"


def workload_flags(gates: tuple[str, ...], scheduler: bool) -> dict[str, list[str]]:
    """The control plane's flags for the PodGroup API with `gates` on (and kube-scheduler's, if it runs)."""
    gate = "--feature-gates=" + ",".join(f"{g}=true" for g in gates)
    return {
        "extra_apiserver_args": [gate, f"--runtime-config={NATIVE_GANG_API}=true"],
        "extra_scheduler_args": [gate] if scheduler else [],
        "extra_controller_manager_args": [gate],
    }


LIVE_SCHEDULERS = ("kube-scheduler", "kube-scheduler-gang", "gangsolve")


def native_pod_groups(cluster, pending: list[dict]) -> list[dict]:
    """kube-scheduler's native PodGroup (gang policy, minCount = the gang's minimum) for every gang of more than
    one pod, and each pending pod pointed at its group through spec.schedulingGroup (changes `pending`)."""
    groups, pod_group = [], {}
    for gang in cluster.gangs:
        if len(gang.pods) < 2:
            continue
        name = "gang-" + gang.name.split("/", 1)[1]
        groups.append(
            {
                "apiVersion": NATIVE_GANG_API,
                "kind": "PodGroup",
                "metadata": {"name": name, "namespace": k8s.NAMESPACE},
                "spec": {"schedulingPolicy": {"gang": {"minCount": gang.need}}, "preemptionPolicy": "Never"},
            }
        )
        pod_group.update({p.name.split("/", 1)[1]: name for p in gang.pods})
    for pod in pending:
        name = pod_group.get(pod["metadata"]["name"])
        if name:
            pod["spec"] = {**pod["spec"], "schedulingGroup": {"podGroupName": name}}
    return groups


def first_pod_group_served(cp: ControlPlane) -> dict | None:
    """The spec of a scheduling.k8s.io PodGroup as the API server stored it (a field whose feature gate is off is
    dropped or refused, not kept), or None if there is none."""
    listing = cp.get(f"/apis/{NATIVE_GANG_API}/namespaces/{k8s.NAMESPACE}/podgroups?limit=1")
    items = (listing or {}).get("items") or []
    return items[0]["spec"] if items else None


def run_live(
    scenario: LiveScenario,
    scheduler: str,
    *,
    log_dir: Path,
    quiet: float = 10.0,
    timeout: float = 300.0,
    time_limit: float | None = None,
    log: Callable[[str], None] = lambda _m: None,
) -> dict:
    """One scheduler on a fresh control plane: the measured run as a dict (see the module docstring)."""
    scenario_objs = scenario.build()
    cluster = k8s.to_cluster(scenario_objs)  # gangs as the scenario defines them, whatever each scheduler reads
    objs = scenario.users(scenario_objs, scheduler) if scenario.users else scenario_objs
    limit = time_limit or scenario.time_limit
    scheduler_name = k8s.SCHEDULER if scheduler == "gangsolve" else DEFAULT_SCHEDULER
    pending = pending_pods(objs, scheduler_name)
    log_dir.mkdir(parents=True, exist_ok=True)
    gs: GangsolveRun | None = None
    native = scheduler == "kube-scheduler-gang"
    flags: dict[str, Any] = {}
    if native or any(o["apiVersion"] == NATIVE_GANG_API for o in objs):
        flags = workload_flags(scenario.native_gates, scheduler != "gangsolve")
    with ControlPlane(scheduler=scheduler != "gangsolve", log=log, **flags) as cp:
        try:
            late = scenario.late_definitions
            prepare(cp, objs, log, definitions=not late)
            if late:
                pending = own_by_tfjobs(cp, pending)
            if native and scenario.users is None:
                create_all(cp, native_pod_groups(cluster, pending))
            served = first_pod_group_served(cp)
            if scheduler == "gangsolve":
                gs = GangsolveRun(cp, limit, log_dir / f"{scenario.name.replace('/', '__')}-gangsolve.log")
                gs.start()
            rv = list_pods(cp, "?limit=1")["metadata"]["resourceVersion"]
            watch = BindWatch(cp, rv)
            watch.start()
            log(f"{scheduler}: creating {len(pending)} pending pods")
            watch.t0 = time.monotonic()
            create_all(cp, pending)
            created = time.monotonic() - watch.t0
            if late:
                time.sleep(late)
                create_all(cp, [o for o in objs if o["kind"] in DEFINITIONS])
            watch.last_change = max(watch.last_change, time.monotonic())
            while True:
                time.sleep(0.25)
                cp.check_alive()
                if gs is not None and gs.proc is not None and gs.proc.poll() is not None:
                    raise RuntimeError(f"gangsolve run exited with {gs.proc.returncode}:\n{gs.log_tail()}")
                now = time.monotonic()
                with watch.lock:
                    settled = len(watch.bound) == len(pending) and len(watch.running) == len(pending)
                    idle = now - watch.last_change
                if settled or idle >= quiet or now - watch.t0 >= timeout:
                    break
            watch.stop.set()
            final = {
                f"{k8s.NAMESPACE}/{p['metadata']['name']}": p["spec"]["nodeName"]
                for p in list_pods(cp, f"?labelSelector={PENDING_LABEL}%3Dtrue")["items"]
                if p["spec"].get("nodeName")
            }
            background = len(list_pods(cp, f"?labelSelector=!{PENDING_LABEL}")["items"])
            gs_metrics = gs.metrics() if gs is not None else {}
        finally:
            if gs is not None:
                gs.stop()
    result = summarize(
        scheduler,
        cluster,
        final,
        watch,
        created,
        len(pending),
        gs_metrics,
        timed_out=now - watch.t0 >= timeout,
        time_limit=limit if scheduler == "gangsolve" else None,
    )
    # The metrics assume the background still holds its capacity: say so if anything evicted some of it.
    result["background_pods_lost"] = (
        sum(1 for o in objs if o["kind"] == "Pod" and o["spec"].get("nodeName")) - background
    )
    if served is not None:
        result["pod_group_served"] = served
    if scenario.oracle is not None:
        bound_at = {pod: t for pod, (t, _node) in watch.bound.items()}
        result["oracle"] = scenario.oracle(scenario_objs, {k.split("/", 1)[1]: v for k, v in final.items()}, bound_at)
    return result


def summarize(
    scheduler: str,
    cluster,
    final: dict[str, str],
    watch: BindWatch,
    created: float,
    pending: int,
    gs_metrics: dict[str, float],
    *,
    timed_out: bool,
    time_limit: float | None,
) -> dict:
    quality = metrics.quality(cluster, final)
    gangs = {g.name: g for g in cluster.gangs}
    pods_of = {p.name: g.name for g in cluster.gangs for p in g.pods}
    by_gang: dict[str, list[str]] = {}
    for pod in final:
        by_gang.setdefault(pods_of[pod], []).append(pod)
    complete = [name for name, pods in by_gang.items() if len(pods) >= gangs[name].need]
    bind_times = sorted(t for t, _node in watch.bound.values())
    last_bind = bind_times[-1] if bind_times else None

    def short(pod: str) -> str:
        return pod.split("/", 1)[1]

    # Every gang that ends up running, all its pods Running: the time the last of them got there.
    runs = [watch.running.get(short(p)) for name in complete for p in by_gang[name]]
    times = [t for t in runs if t is not None]
    all_running = max(times) if times and len(times) == len(runs) else None
    out = {
        "scheduler": scheduler,
        "time_limit": time_limit,
        "pending_pods": pending,
        "create_seconds": created,
        "first_bind_seconds": bind_times[0] if bind_times else None,
        "last_bind_seconds": last_bind,
        "pods_per_second": len(bind_times) / last_bind if last_bind else None,
        "all_placeable_running_seconds": all_running,
        "gangs_complete": len(complete),
        "bound_over_time": [round(t, 3) for t in bind_times],
        "timed_out": timed_out,
        "watch_errors": watch.errors,
        **quality,
    }
    if gs_metrics:
        out["gangsolve_metrics"] = {
            k: v for k, v in gs_metrics.items() if k.startswith("gangsolve_") and not k.endswith("_created")
        }
    return out


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
    for name in names:
        scenario = LIVE_SCENARIOS[name]
        objs = scenario.build()
        kinds = [o["kind"] for o in objs]
        runs = each_scheduler(
            name,
            schedulers,
            partial(run_live, scenario, log_dir=log_dir, quiet=quiet, time_limit=time_limit, log=log),
            on_run,
        )
        results.append(
            {
                "name": name,
                "description": scenario.description,
                "nodes": scenario.nodes,
                "late_definitions": scenario.late_definitions,
                "objects": {
                    "nodes": kinds.count("Node"),
                    "pods": kinds.count("Pod"),
                    "pending_pods": sum(1 for o in objs if o["kind"] == "Pod" and not o["spec"].get("nodeName")),
                    "podgroups": kinds.count("PodGroup"),
                    "pdbs": kinds.count("PodDisruptionBudget"),
                },
                "runs": runs,
            }
        )
    return results


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
