"""Helpers for the live scheduler's end-to-end tests: pod manifests, polling and the invariants checked after
every test (no node overcommitted, no GPU shared past all of it, no gang partly bound). gangsolve as a
subprocess and the CRDs are the live bench's too (gangsolve.bench.devcluster)."""

from __future__ import annotations

import math
import re
import secrets
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from gangsolve.bench.devcluster import ApiError, ControlPlane
from gangsolve.bench.devcluster.crds import POD_GROUP_APIS

REPO = Path(__file__).resolve().parents[2]
GPU = "nvidia.com/gpu"


def poll(condition: Callable[[], Any], *, timeout: float = 60.0, interval: float = 0.2, what: str = "condition"):
    """Poll until `condition()` is truthy; return its value, or fail saying what was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def pod(
    name: str,
    *,
    scheduler: str,
    gpus: int = 0,
    cpu: str = "1",
    memory: str = "1Gi",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    owner: Mapping[str, str] | None = None,
    tolerations: list[dict] | None = None,
) -> dict:
    requests = {"cpu": cpu, "memory": memory}
    limits = {}
    if gpus:
        requests[GPU] = str(gpus)
        limits[GPU] = str(gpus)
    meta: dict[str, Any] = {"name": name, "labels": dict(labels or {}), "annotations": dict(annotations or {})}
    if owner:
        meta["ownerReferences"] = [{**owner, "controller": True, "blockOwnerDeletion": False}]
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "main",
                "image": "registry.invalid/train:1",
                "resources": {"requests": requests, **({"limits": limits} if limits else {})},
            }
        ],
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = tolerations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def create(cp: ControlPlane, namespace: str, obj: dict) -> dict:
    api = obj["apiVersion"]
    base = "/api/v1" if api == "v1" else f"/apis/{api}"
    plural = {
        "Pod": "pods",
        "PodDisruptionBudget": "poddisruptionbudgets",
        "ConfigMap": "configmaps",
        "PodGroup": "podgroups",
        "PriorityClass": "priorityclasses",
        "Queue": "queues",
        "ResourceSlice": "resourceslices",
        "DeviceClass": "deviceclasses",
        "ResourceClaim": "resourceclaims",
        "ResourceClaimTemplate": "resourceclaimtemplates",
    }[obj["kind"]]
    cluster_scoped = obj["kind"] in ("PriorityClass", "Queue", "ResourceSlice", "DeviceClass")
    path = f"{base}/{plural}" if cluster_scoped else f"{base}/namespaces/{namespace}/{plural}"
    return cp.request("POST", path, obj)


def pods(cp: ControlPlane, namespace: str, selector: str = "") -> list[dict]:
    q = f"?labelSelector={selector}" if selector else ""
    return cp.request("GET", f"/api/v1/namespaces/{namespace}/pods{q}")["items"]


def delete_pod(cp: ControlPlane, namespace: str, name: str) -> None:
    try:
        cp.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}?gracePeriodSeconds=0")
    except ApiError as e:
        if e.status != 404:
            raise


def running(items: list[dict]) -> list[dict]:
    return [p for p in items if p.get("status", {}).get("phase") == "Running"]


def bound(items: list[dict]) -> list[dict]:
    return [p for p in items if p.get("spec", {}).get("nodeName")]


def events(cp: ControlPlane, namespace: str, reason: str) -> list[dict]:
    items = cp.request("GET", f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
    return [e for e in items if e.get("reason") == reason]


def unique(prefix: str = "gangsolve") -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


# --- the soundness oracle: written from the Kubernetes rules and README's gang table, sharing no code with
# gangsolve's edge (objects.py, gangs.py), so a mistake there shows up here.

_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))(?:[eE]([+-]?[0-9]+))?(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$")
_SCALE = {
    None: Fraction(1), "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
    "P": Fraction(10**15), "E": Fraction(10**18), "Ki": Fraction(2**10), "Mi": Fraction(2**20),
    "Gi": Fraction(2**30), "Ti": Fraction(2**40), "Pi": Fraction(2**50), "Ei": Fraction(2**60),
}  # fmt: skip
FINISHED = ("Succeeded", "Failed")
MIN_AVAILABLE = "gangsolve.io/min-available"


def _quantity(text: object) -> Fraction:
    match = _QUANTITY.match(str(text))
    assert match, f"quantity {text!r} does not parse"
    number, exponent, suffix = match.groups()
    return Fraction(number) * Fraction(10) ** int(exponent or 0) * _SCALE[suffix]


def _requests(pod: dict) -> dict[str, int]:
    """A pod's effective requests as kube-scheduler's NodeResourcesFit computes them: the containers' sum
    (requests, else limits) plus restartable init containers (sidecars), raised to what any init container
    needs with the sidecars started before it, plus the overhead; cpu in millicores rounded up."""

    def of(container: dict) -> dict[str, Fraction]:
        res = container.get("resources") or {}
        given = {**(res.get("limits") or {}), **(res.get("requests") or {})}  # a missing request defaults to the limit
        return {k: _quantity(v) for k, v in given.items()}

    spec = pod.get("spec") or {}
    total: dict[str, Fraction] = defaultdict(Fraction)
    for c in spec.get("containers") or []:
        for k, v in of(c).items():
            total[k] += v
    sidecars: dict[str, Fraction] = defaultdict(Fraction)  # restartable init containers started so far
    init_peak: dict[str, Fraction] = defaultdict(Fraction)
    for c in spec.get("initContainers") or []:
        sidecar = c.get("restartPolicy") == "Always"
        for k, v in of(c).items():
            if sidecar:
                sidecars[k] += v
            init_peak[k] = max(init_peak[k], sidecars[k] if sidecar else v + sidecars[k])
    for k, v in sidecars.items():
        total[k] += v
    for k, v in init_peak.items():
        total[k] = max(total[k], v)
    for k, v in (spec.get("overhead") or {}).items():
        total[k] += _quantity(v)
    return {k: math.ceil(v * 1000 if k == "cpu" else v) for k, v in total.items()}


GPU_INDEX = "gangsolve.io/gpu-index"
GPU_MEMORY = "nvidia.com/gpu.memory"


def gpu_holdings(nodes: Mapping[str, dict], pods: list[dict]) -> tuple[dict[tuple[str, str], int], dict[str, int]]:
    """What bound, unfinished pods hold of their nodes' GPUs, read from the objects alone by docs/gpu-sharing.md's
    rules: per (node, GPU index) the thousandths of a GPU fractional pods hold there (`gpu-fraction` rounded up
    to thousandths, or `gpu-memory` MiB of the node's label `nvidia.com/gpu.memory`); a fractional pod without
    an index holds a GPU of its own (keyed by its name). And per node, the whole GPUs pods request."""
    shared: dict[tuple[str, str], int] = defaultdict(int)
    whole: dict[str, int] = defaultdict(int)
    for p in pods:
        node = p["spec"].get("nodeName")
        if not node or node not in nodes or (p.get("status") or {}).get("phase") in FINISHED:
            continue
        whole[node] += _requests(p).get(GPU, 0)
        annotations = p["metadata"].get("annotations") or {}
        if "gpu-fraction" in annotations:
            milli = math.ceil(Fraction(annotations["gpu-fraction"]) * 1000)
        elif "gpu-memory" in annotations:
            label = int(nodes[node]["metadata"]["labels"][GPU_MEMORY])
            milli = math.ceil(Fraction(1000 * int(annotations["gpu-memory"]), label))
        else:
            continue
        shared[(node, annotations.get(GPU_INDEX, f"pod {p['metadata']['name']}"))] += milli
    return shared, whole


def assert_gpus_sound(nodes: Mapping[str, dict], pods: list[dict]) -> None:
    """No GPU shared past all of it, no GPU index that is not one of its node's GPUs, and no whole GPU shared:
    the GPUs holding shares plus the whole GPUs requested are no more than the node has."""
    shared, whole = gpu_holdings(nodes, pods)
    gpus = {name: int((n["status"].get("allocatable") or {}).get(GPU, 0)) for name, n in nodes.items()}
    for (node, index), milli in shared.items():
        assert milli <= 1000, f"GPU {index} of node {node} shared past all of it: {milli} thousandths"
        assert index.startswith("pod ") or int(index) in range(gpus[node]), f"node {node} has no GPU {index}"
    for node in {n for n, _i in shared} | set(whole):
        held = sum(1 for n, _i in shared if n == node)
        assert held + whole[node] <= gpus[node], (
            f"node {node}: {whole[node]} whole GPUs and {held} shared of {gpus[node]}"
        )


def _selects(selector: Mapping | None, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector: a missing selector selects nothing, an empty one everything."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        present, value, values = e["key"] in labels, labels.get(e["key"]), e.get("values") or []
        if not {
            "In": present and value in values,
            "NotIn": not present or value not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }[e["operator"]]:
            return False
    return True


def _gang_of(pod: dict, pdbs: list[dict], pod_groups: Mapping[tuple[str, str, str], dict], group_label: str | None):
    """README's gang table, first rule that applies: (rule, namespace, name), or None while a named PodGroup
    does not exist."""
    meta = pod["metadata"]
    ns, labels, annotations = meta["namespace"], meta.get("labels") or {}, meta.get("annotations") or {}
    upstream = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
    if upstream is not None and "basic" in pod_groups.get(("scheduling.k8s.io", ns, upstream), {}):
        return ("pod", ns, meta["name"])  # a basic policy: no gang
    for group, name in (
        ("scheduling.k8s.io", upstream),
        ("scheduling.x-k8s.io", labels.get("scheduling.x-k8s.io/pod-group")),
        ("scheduling.volcano.sh", annotations.get("scheduling.k8s.io/group-name")),
    ):
        if name is not None:
            return (group, ns, name) if (group, ns, name) in pod_groups else None
    for pdb in sorted(pdbs, key=lambda b: b["metadata"]["name"]):
        if pdb["metadata"]["namespace"] == ns and _selects((pdb.get("spec") or {}).get("selector"), labels):
            return ("pdb", ns, pdb["metadata"]["name"])
    if group_label and group_label in labels:
        return ("label", ns, labels[group_label])
    owner = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
    if owner:
        return ("owner", ns, f"{owner['name']}/{owner['uid']}")
    return ("pod", ns, meta["name"])


def _minimum(gang: tuple[str, str, str], members: list[dict], pdbs: list[dict], groups: dict, live: list[dict]) -> int:
    rule, ns, name = gang
    if rule == "scheduling.k8s.io":
        return int(groups[gang]["spec"]["schedulingPolicy"]["gang"]["minCount"])
    if rule in ("scheduling.x-k8s.io", "scheduling.volcano.sh"):
        return int((groups[gang].get("spec") or {}).get("minMember", 1))
    if rule == "pdb":
        spec = next(b for b in pdbs if b["metadata"]["namespace"] == ns and b["metadata"]["name"] == name)["spec"]
        selected = sum(
            1
            for p in live
            if p["metadata"]["namespace"] == ns and _selects(spec.get("selector"), p["metadata"].get("labels") or {})
        )

        def count(value: int | str) -> int:
            return math.ceil(int(value[:-1]) * selected / 100) if isinstance(value, str) else int(value)

        if "minAvailable" in spec:
            return max(1, count(spec["minAvailable"]))
        if "maxUnavailable" in spec:
            return max(1, selected - count(spec["maxUnavailable"]))
        return 1
    annotations = [p["metadata"].get("annotations") or {} for p in members]
    return max((int(a[MIN_AVAILABLE]) for a in annotations if MIN_AVAILABLE in a), default=1)


def assert_cluster_sound(cp: ControlPlane, group_label: str | None = None) -> None:
    """Read the whole cluster through the API: no node holds more than its allocatable on any resource (every
    pod bound to it and not Succeeded/Failed counts, terminating ones included, as kube-scheduler counts them)
    nor of its GPUs (`assert_gpus_sound`),
    and no gang of a gang scheduler's pods (README's rules) has some but fewer than its minimum members bound."""
    nodes = {n["metadata"]["name"]: n for n in cp.request("GET", "/api/v1/nodes")["items"]}
    pods = cp.request("GET", "/api/v1/pods")["items"]
    pdbs = cp.request("GET", "/apis/policy/v1/poddisruptionbudgets")["items"]
    groups: dict[tuple[str, str, str], dict] = {}
    for api in ("scheduling.k8s.io/v1beta1", "scheduling.x-k8s.io/v1alpha1", "scheduling.volcano.sh/v1beta1"):
        try:
            for obj in cp.request("GET", f"/apis/{api}/podgroups")["items"]:
                groups[(api.split("/")[0], obj["metadata"]["namespace"], obj["metadata"]["name"])] = obj
        except ApiError:
            pass  # the CRD is not installed

    held: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for p in pods:
        node = p["spec"].get("nodeName")
        if node and (p.get("status") or {}).get("phase") not in FINISHED:
            for r, q in _requests(p).items():
                held[node][r] += q
            held[node]["pods"] += 1
    for node, res in held.items():
        if node not in nodes:
            continue  # deleted with its test
        allocatable = nodes[node]["status"].get("allocatable") or {}
        for r, q in res.items():
            have = _quantity(allocatable.get(r, 0)) * (1000 if r == "cpu" else 1)
            assert q <= have, f"node {node} overcommitted on {r}: {q} requested, {have} allocatable"
    assert_gpus_sound(nodes, pods)

    live = [
        p
        for p in pods
        if (p.get("status") or {}).get("phase") not in FINISHED and not p["metadata"].get("deletionTimestamp")
    ]
    # A namespace being deleted loses its pods one by one, so its gangs are torn down, not placed.
    leaving = {
        ns["metadata"]["name"]
        for ns in cp.request("GET", "/api/v1/namespaces")["items"]
        if ns["metadata"].get("deletionTimestamp")
    }
    gangs: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    policies = {k: (g.get("spec") or {}).get("schedulingPolicy") or {} for k, g in groups.items()}
    for p in live:
        if p["spec"].get("schedulerName", "default-scheduler") == "default-scheduler":
            continue
        if p["metadata"]["namespace"] in leaving:
            continue
        gang = _gang_of(p, pdbs, policies, group_label)
        if gang is not None:
            gangs[gang].append(p)
    for gang, members in gangs.items():
        n_bound = sum(1 for p in members if p["spec"].get("nodeName"))
        need = _minimum(gang, members, pdbs, groups, live)
        assert n_bound == 0 or n_bound >= need, f"gang {gang} partly bound: {n_bound} of {need}"


def pod_group(group: str, name: str, min_member: int) -> dict:
    return {
        "apiVersion": f"{group}/{POD_GROUP_APIS[group]}",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": min_member},
    }


def get_pod_group(cp: ControlPlane, namespace: str, group: str, name: str) -> dict | None:
    return cp.get(f"/apis/{group}/{POD_GROUP_APIS[group]}/namespaces/{namespace}/podgroups/{name}")


def service_account_kubeconfig(cp: ControlPlane, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig holding only a TokenRequest token of a ServiceAccount (no admin certificate)."""
    token = cp.kubectl("create", "token", account, "-n", namespace, "--duration=24h").stdout.strip()
    admin = yaml.safe_load(Path(cp.kubeconfig).read_text())
    ca_data = admin["clusters"][0]["cluster"]["certificate-authority-data"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "dev", "cluster": {"server": cp.server, "certificate-authority-data": ca_data}}],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "dev", "user": account, "namespace": namespace}}],
        "current-context": "sa",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def bench_runs(run_scenarios, name: str, schedulers: list[str], log_dir: Path) -> dict[str, dict]:
    """One live bench scenario, each scheduler on its own control plane: the runs by scheduler, none failed."""
    (scenario,) = run_scenarios([name], schedulers, log_dir, quiet=5, log=lambda m: print(f"[live] {m}", flush=True))
    out = {r["scheduler"]: r for r in scenario["runs"]}
    for r in out.values():
        assert "error" not in r, r["error"]
    return out
