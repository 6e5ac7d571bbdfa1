"""From a snapshot to the solver's Cluster: which pods are ours, which gang each belongs to, and its minimum.

A pod joins the gang of the first rule that applies:
1. label `scheduling.x-k8s.io/pod-group` -> that PodGroup (scheduler-plugins, Kubeflow training-operator);
2. annotation `scheduling.k8s.io/group-name` -> that Volcano PodGroup;
3. a PodDisruptionBudget selecting it (kube-batch's legacy convention) -> the pods it selects;
4. `--group-label KEY` -> pods of the namespace sharing that label's value;
5. its controlling ownerReference;
6. otherwise the pod alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from gangsolve import objects
from gangsolve.errors import InputError, describe
from gangsolve.snapshot import Snapshot
from gangsolve.solver.model import Cluster, Gang, Node, Pod

POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_ANNOTATION = "scheduling.k8s.io/group-name"
MIN_AVAILABLE_ANNOTATION = "gangsolve.io/min-available"
COLOCATE_ANNOTATION = "gangsolve.io/colocate"
# A gang pending longer than this outranks the gangs of its priority that are not: maximizing the number of
# gangs placed would otherwise pass over big gangs for as long as small ones keep arriving.
STARVATION_SECONDS = 900.0


@dataclass(frozen=True)
class GangKey:
    rule: str  # podgroup | volcano | pdb | label | owner | pod
    namespace: str
    name: str


def selector_matches(selector: Mapping | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector: an empty selector selects everything, a missing one nothing."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        have = labels.get(key)
        if op == "In" and have not in values:
            return False
        if op == "NotIn" and have in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _positive_int(obj: dict, field: str, value) -> int:
    try:
        n = int(value)
        if isinstance(value, bool) or str(n) != str(value).strip():
            raise ValueError
    except (TypeError, ValueError):
        raise InputError(describe(obj), field, f"expected a whole number, got {value!r}") from None
    if n < 1:
        raise InputError(describe(obj), field, f"must be at least 1, got {n}")
    return n


def _int_or_percent(obj: dict, field: str, value, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        try:
            pct = int(value[:-1])
        except ValueError:
            raise InputError(describe(obj), field, f"expected a number or a percentage, got {value!r}") from None
        return math.ceil(pct * total / 100)  # rounded up, as the disruption controller does for minAvailable
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise InputError(describe(obj), field, f"expected a number or a percentage, got {value!r}")


class _Grouper:
    def __init__(self, snap: Snapshot, group_label: str | None, strict: bool) -> None:
        self.snap = snap
        self.group_label = group_label
        self.strict = strict
        self.pdbs_by_ns: dict[str, list[dict]] = {}
        for pdb in sorted(snap.pdbs, key=lambda o: o["metadata"]["name"]):
            self.pdbs_by_ns.setdefault(pdb["metadata"]["namespace"], []).append(pdb)
        self.live = [p for p in snap.pods if not objects.is_finished(p) and not p["metadata"].get("deletionTimestamp")]

    def key(self, pod: dict) -> GangKey | None:
        meta = pod["metadata"]
        ns, labels, annotations = meta["namespace"], meta.get("labels") or {}, meta.get("annotations") or {}
        if POD_GROUP_LABEL in labels:
            return self._pod_group(
                pod, "scheduling.x-k8s.io", labels[POD_GROUP_LABEL], f"metadata.labels.{POD_GROUP_LABEL}"
            )
        if VOLCANO_ANNOTATION in annotations:
            return self._pod_group(
                pod,
                "scheduling.volcano.sh",
                annotations[VOLCANO_ANNOTATION],
                f"metadata.annotations.{VOLCANO_ANNOTATION}",
            )
        for pdb in self.pdbs_by_ns.get(ns, []):
            if selector_matches((pdb.get("spec") or {}).get("selector"), labels):
                return GangKey("pdb", ns, pdb["metadata"]["name"])
        if self.group_label and self.group_label in labels:
            return GangKey("label", ns, labels[self.group_label])
        for ref in meta.get("ownerReferences") or []:
            if ref.get("controller"):
                return GangKey("owner", ns, f"{ref.get('name')}\0{ref.get('uid')}")
        return GangKey("pod", ns, meta["name"])

    def _pod_group(self, pod: dict, group: str, name: str, field: str) -> GangKey | None:
        ns = pod["metadata"]["namespace"]
        if (group, ns, name) not in self.snap.pod_groups:
            if self.strict:
                raise InputError(describe(pod), field, f"names PodGroup {ns}/{name} ({group}), not in snapshot")
            return None  # live: wait until the PodGroup appears
        return GangKey("podgroup" if group == "scheduling.x-k8s.io" else "volcano", ns, name)

    def pod_group(self, key: GangKey) -> dict | None:
        group = {"podgroup": "scheduling.x-k8s.io", "volcano": "scheduling.volcano.sh"}.get(key.rule)
        return self.snap.pod_groups.get((group, key.namespace, key.name)) if group else None

    def min_member(self, key: GangKey, members: list[dict]) -> int:
        pg = self.pod_group(key)
        if pg is not None:
            return _positive_int(pg, "spec.minMember", (pg.get("spec") or {}).get("minMember", 1))
        if key.rule == "pdb":
            pdb = next(p for p in self.pdbs_by_ns[key.namespace] if p["metadata"]["name"] == key.name)
            spec = pdb.get("spec") or {}
            selected = sum(
                1
                for p in self.live
                if p["metadata"]["namespace"] == key.namespace
                and selector_matches(spec.get("selector"), p["metadata"].get("labels") or {})
            )
            if "minAvailable" in spec:
                return max(1, _int_or_percent(pdb, "spec.minAvailable", spec["minAvailable"], selected))
            if "maxUnavailable" in spec:
                return max(1, selected - _int_or_percent(pdb, "spec.maxUnavailable", spec["maxUnavailable"], selected))
            return 1
        mins = [
            _positive_int(
                p,
                f"metadata.annotations.{MIN_AVAILABLE_ANNOTATION}",
                p["metadata"]["annotations"][MIN_AVAILABLE_ANNOTATION],
            )
            for p in members
            if MIN_AVAILABLE_ANNOTATION in (p["metadata"].get("annotations") or {})
        ]
        return max(mins, default=1)

    def colocate(self, key: GangKey, members: list[dict]) -> str | None:
        pg = self.pod_group(key)
        sources = ([pg] if pg is not None else []) + members
        for obj in sources:
            value = (obj["metadata"].get("annotations") or {}).get(COLOCATE_ANNOTATION)
            if value:
                return str(value)
        return None


def display_name(key: GangKey) -> str:
    return f"{key.namespace}/{key.name.split(chr(0))[0]}"


def _created(pod: dict) -> datetime | None:
    stamp = pod["metadata"].get("creationTimestamp")
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")) if stamp else None
    except ValueError:
        raise InputError(describe(pod), "metadata.creationTimestamp", f"not an RFC 3339 time: {stamp!r}") from None


def _nodes_with_usage(snap: Snapshot, live: list[dict]) -> list[Node]:
    nodes = [objects.node(n) for n in snap.nodes]
    index = {n.name: i for i, n in enumerate(nodes)}
    used: list[dict[str, int]] = [{} for _ in nodes]
    for p in live:
        node_name = (p.get("spec") or {}).get("nodeName")
        if node_name in index:
            for r, q in objects.pod_requests(p).items():
                used[index[node_name]][r] = used[index[node_name]].get(r, 0) + q
    return [
        Node(n.name, n.allocatable, n.labels, n.taints, n.unschedulable, n.ready, used[i]) for i, n in enumerate(nodes)
    ]


def build_cluster(
    snap: Snapshot,
    scheduler_name: str = "gangsolve",
    group_label: str | None = None,
    strict: bool = True,
    now: datetime | None = None,
    starvation_seconds: float = STARVATION_SECONDS,
    *,
    nodes: Sequence[Node] | None = None,
    convert_pod: Callable[[dict, Mapping[str, dict], int], Pod] = objects.pod,
) -> Cluster:
    """Every node with the capacity bound pods hold, and every gang with pending pods of our scheduler.
    With `now` (the live scheduler's clock), gangs whose oldest pending pod was created more than
    `starvation_seconds` earlier are marked starving.

    The live scheduler keeps the converted nodes and their used capacity up to date as pods come and go, and
    remembers converted pods: it passes `nodes` and a memoizing `convert_pod`, so a cycle at 5,000 nodes does not
    read every bound pod again."""
    for pg in snap.pod_groups.values():
        _positive_int(pg, "spec.minMember", (pg.get("spec") or {}).get("minMember", 1))
    grouper = _Grouper(snap, group_label, strict)
    if nodes is None:
        nodes = _nodes_with_usage(snap, grouper.live)

    ours = [
        p for p in grouper.live if (p.get("spec") or {}).get("schedulerName", "default-scheduler") == scheduler_name
    ]
    ours.sort(key=lambda p: (str(p["metadata"].get("creationTimestamp", "")), objects.pod_key(p)))
    members: dict[GangKey, list[tuple[int, dict]]] = {}
    for order, p in enumerate(ours):
        if objects.is_bound(p) or objects.is_pending_for(p, scheduler_name):
            key = grouper.key(p)
            if key is not None:
                members.setdefault(key, []).append((order, p))

    gangs = []
    names: set[str] = set()
    for key, pods in sorted(members.items(), key=lambda kv: (kv[0].namespace, kv[0].name, kv[0].rule)):
        pending = [convert_pod(p, snap.priority_classes, order) for order, p in pods if not objects.is_bound(p)]
        if not pending:
            continue
        objs = [p for _o, p in pods]
        name = display_name(key)
        if name in names:  # e.g. a PodGroup and a Deployment of one name: keep both gangs apart
            name = f"{name} ({key.rule})"
        names.add(name)
        created = [c for c in (_created(p) for _o, p in pods if not objects.is_bound(p)) if c is not None]
        starving = bool(now and created and (now - min(created)).total_seconds() > starvation_seconds)
        gangs.append(
            Gang(
                name=name,
                pods=tuple(pending),
                min_member=grouper.min_member(key, objs),
                bound_nodes=tuple(p["spec"]["nodeName"] for p in objs if objects.is_bound(p)),
                colocate=grouper.colocate(key, objs),
                starving=starving,
            )
        )
    return Cluster(tuple(nodes), tuple(gangs))
