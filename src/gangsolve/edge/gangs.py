"""From a snapshot to the solver's Cluster: which pods are ours, which gang each belongs to, and its minimum.

A pod joins the gang of the first rule that applies:
0. `spec.schedulingGroup.podGroupName` -> that scheduling.k8s.io PodGroup (Kubernetes' own, KEP-4671): a
   `gang` policy's minCount, its priority and its topology constraint; a `basic` policy means no gang;
1. label `scheduling.x-k8s.io/pod-group` -> that PodGroup (scheduler-plugins, Kubeflow training-operator);
2. annotation `scheduling.k8s.io/group-name` -> that Volcano PodGroup;
3. a PodDisruptionBudget selecting it (kube-batch's legacy convention) -> the pods it selects;
4. `--group-label KEY` -> pods of the namespace sharing that label's value;
5. its controlling ownerReference;
6. otherwise the pod alone.

A gang definition (a PDB, a PodGroup, the min-available annotation) may be created after the pods it
defines: a training operator creates them in separate calls. Grouped by rules 4-6 meanwhile, such pods
could be bound in part, the very thing a gang scheduler exists to prevent. So pods that may still get one
wait for it, `definition_grace` seconds from their creation, before rules 4-6 apply: pods of the known
training-job kinds (and any kind the user adds), pods of a Job or JobSet with more than one pod, and pods of
a `--group-label` group none of whose pods carries the min-available annotation. Pods naming a PodGroup not
created yet wait for it as long as it takes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from gangsolve.edge import dra, objects, schema, shares
from gangsolve.edge.errors import InputError
from gangsolve.edge.schema import UPSTREAM_GROUP, int_or_percent, positive_int
from gangsolve.edge.snapshot import Decoded, Snapshot
from gangsolve.solver import node_table
from gangsolve.solver.model import DEFAULT_QUEUE, GPU, SHARE, Cluster, Gang, Node, Pod, Queue, Running

POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_ANNOTATION = "scheduling.k8s.io/group-name"
MIN_AVAILABLE_ANNOTATION = "gangsolve.io/min-available"
COLOCATE_ANNOTATION = "gangsolve.io/colocate"  # the required topology level (upstream: schedulingConstraints)
# Preferred topology levels, node label keys widest first, comma-separated: fewest domains of each, in order.
PREFERRED_ANNOTATION = "gangsolve.io/topology-preferred"
# The queue of a gang that is not a Volcano PodGroup (whose spec.queue says it), on the PodGroup or the pods.
QUEUE_ANNOTATIONS = ("gangsolve.io/queue", "scheduling.volcano.sh/queue-name")
# kube-scheduler's words for a PodGroup whose pods' priorities differ from its own (KEP-5710)
PRIORITY_MISMATCH = "all pods in a single pod group should have the same priority as the pod group's priority"
# A gang pending longer than this outranks the gangs of its priority that are not, and may hold a reservation:
# maximizing the number of gangs placed would otherwise pass over big gangs for as long as small ones keep
# arriving. A gang wider than a node starves sooner, in proportion (`starvation_age`): it waits for several nodes
# to free at once, and is the first that "most gangs now" passes over. Half an hour, measured in the time-based
# benchmark (docs/benchmarks.md) against an hour and 20 minutes, and against ages shrinking with every GPU: an
# hour leaves the gangs passed over waiting an hour; shorter ages, or shrinking within a node, cost the median.
STARVATION_SECONDS = 1800.0
STARVATION_FLOOR = 300.0  # no gang starves sooner than this, however wide
# Seconds pods that may still get a gang definition wait for it (from their creation); 0 turns waiting off.
DEFINITION_GRACE = 10.0
# Controllers of distributed training jobs: Kubeflow's training-operator kinds and Trainer's TrainJob.
TRAINING_KINDS = frozenset({"TFJob", "PyTorchJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob", "TrainJob"})
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"


@dataclass(frozen=True)
class GangKey:
    rule: str  # upstream | podgroup | volcano | pdb | label | owner | single
    namespace: str
    name: str


def selector_matches(selector: schema.LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector: an empty selector selects everything, a missing one nothing."""
    if selector is None:
        return False
    for key, value in (selector.matchLabels or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.matchExpressions or ():
        key, op, values = expr.key, expr.operator, expr.values or ()
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


class _Pdbs:
    """The PDBs of a snapshot, indexed by one label each selector requires: a cluster may hold thousands of
    PDBs and pods, and testing every selector against every pod would take minutes."""

    def __init__(self, pdbs: list[schema.PodDisruptionBudget], live: list[schema.Pod]) -> None:
        self.by_ns: dict[str, list[schema.PodDisruptionBudget]] = {}  # by name, the order rule 3 tries them in
        self._named: dict[tuple[str, str], schema.PodDisruptionBudget] = {}
        for pdb in sorted(pdbs, key=lambda o: str(o.metadata.name)):
            ns, name = str(pdb.metadata.namespace), str(pdb.metadata.name)
            self.by_ns.setdefault(ns, []).append(pdb)
            self._named[(ns, name)] = pdb
        self._required: dict[tuple[str, str, str], list[int]] = {}  # (ns, key, value) -> PDBs requiring it
        self._unindexed: dict[str, list[int]] = {}  # PDBs without matchLabels: tried for every pod
        for ns, ordered in self.by_ns.items():
            for i, pdb in enumerate(ordered):
                required = self._required_label(pdb)
                if required is None:
                    self._unindexed.setdefault(ns, []).append(i)
                else:
                    self._required.setdefault((ns, *required), []).append(i)
        # Live pods by (ns, key, value) and by ns, of the namespaces with PDBs only: at 50,000 pods, indexing
        # every label of every pod costs more than everything else the edge does with them.
        self._live: dict[tuple[str, str, str] | str, list[schema.Pod]] = {}
        for p in live:
            ns = str(p.metadata.namespace)
            if ns not in self.by_ns:
                continue
            self._live.setdefault(ns, []).append(p)
            for k, v in p.metadata.labels.items():
                self._live.setdefault((ns, k, v), []).append(p)

    @staticmethod
    def _required_label(pdb: schema.PodDisruptionBudget) -> tuple[str, str] | None:
        selector = pdb.spec.selector
        return next(iter((selector.matchLabels or {}).items()), None) if selector is not None else None

    def first_selecting(self, ns: str, labels: Mapping[str, str]) -> schema.PodDisruptionBudget | None:
        """The first PDB (by name) of the namespace whose selector selects these labels."""
        candidates = list(self._unindexed.get(ns, ()))
        for k, v in labels.items():
            candidates += self._required.get((ns, k, v), ())
        for i in sorted(candidates):
            pdb = self.by_ns[ns][i]
            if selector_matches(pdb.spec.selector, labels):
                return pdb
        return None

    def selecting(self, ns: str, labels: Mapping[str, str]) -> list[schema.PodDisruptionBudget]:
        """Every PDB of the namespace whose selector selects these labels."""
        if ns not in self.by_ns:
            return []
        candidates = set(self._unindexed.get(ns, ()))
        for k, v in labels.items():
            candidates.update(self._required.get((ns, k, v), ()))
        ordered = self.by_ns.get(ns, [])
        return [ordered[i] for i in sorted(candidates) if selector_matches(ordered[i].spec.selector, labels)]

    def named(self, ns: str, name: str) -> schema.PodDisruptionBudget:
        return self._named[(ns, name)]

    def selected(self, pdb: schema.PodDisruptionBudget, bound: bool = False) -> int:
        """How many live pods of its namespace the PDB selects (`bound`: of those, how many are bound)."""
        ns, required = str(pdb.metadata.namespace), self._required_label(pdb)
        pods = self._live.get(ns if required is None else (ns, *required), [])
        selector = pdb.spec.selector
        return sum(1 for p in pods if selector_matches(selector, p.metadata.labels) and (not bound or p.bound))

    def allowed(self, pdb: schema.PodDisruptionBudget) -> int:
        """The disruptions the PDB allows now: its status as the disruption controller wrote it, else from its
        spec with bound pods counted healthy."""
        reported = pdb.status_.disruptionsAllowed if pdb.status_ is not None else None
        if reported is not None:
            return reported
        spec, total, healthy = pdb.spec, self.selected(pdb), self.selected(pdb, bound=True)
        if spec.minAvailable is not None:
            return max(0, healthy - int_or_percent(spec.minAvailable, total))
        if spec.maxUnavailable is not None:
            return max(0, int_or_percent(spec.maxUnavailable, total) - (total - healthy))
        return 0


@dataclass(frozen=True)
class Waiting:
    """Why a pending pod is not planned yet, and until when it waits (None: until its definition exists)."""

    reason: str
    until: datetime | None = None


@dataclass(frozen=True)
class Grace:
    """How long pods that may still get a gang definition wait for it, and which owners make them do so."""

    seconds: float = DEFINITION_GRACE
    kinds: frozenset[str] = TRAINING_KINDS

    def with_kinds(self, extra: Iterable[str]) -> Grace:
        return Grace(self.seconds, self.kinds | frozenset(extra))


@dataclass(frozen=True)
class Origin:
    """What defined a gang: the rule that grouped its pods (upstream, podgroup, volcano, pdb, label, owner or
    single), and, when that rule stood in for a definition its pods' job needs and never got, what to do."""

    rule: str
    fallback: str | None = None


class _Grouper:
    def __init__(
        self,
        objs: Decoded,
        group_label: str | None,
        strict: bool,
        grace: Grace | None = None,
        now: datetime | None = None,  # the cycle's clock: without it, nothing waits for a definition
    ) -> None:
        self.objs = objs
        self.group_label = group_label
        self.strict = strict
        self.grace = grace or Grace()
        self.now = now
        # Pods that are (or will be) members: terminating pods are leaving, though they hold capacity until gone.
        self.live = [p for p in objs.pods if not p.finished and not p.terminating]
        self.pdbs = _Pdbs(objs.pdbs, self.live)
        self._owned: dict[str, int] = {}  # controller uid -> live pods it owns
        self._annotated: set[tuple[str, str]] = set()  # (namespace, group-label value) with min-available
        self._upstream_members: dict[tuple[str, str], list[schema.Pod]] = {}  # (ns, PodGroup) -> pods naming it
        self._mismatch: dict[tuple[str, str], str | None] = {}
        for p in self.live:
            meta = p.metadata
            upstream = _upstream_group(p)
            if upstream is not None:
                self._upstream_members.setdefault((str(meta.namespace), upstream), []).append(p)
            ref = meta.controller
            if ref is not None:
                self._owned[str(ref.uid)] = self._owned.get(str(ref.uid), 0) + 1
            if group_label and group_label in meta.labels and MIN_AVAILABLE_ANNOTATION in meta.annotations:
                self._annotated.add((str(meta.namespace), meta.labels[group_label]))

    def waiting(self, pod: schema.Pod) -> Waiting | None:
        """Why this pod joins no gang yet, or None when `key` places it in one."""
        meta = pod.metadata
        ns, labels = str(meta.namespace), meta.labels
        upstream = _upstream_group(pod)
        if upstream is not None and (UPSTREAM_GROUP, ns, upstream) in self.objs.pod_groups:
            mismatch = self.priority_mismatch(ns, upstream)
            return Waiting(mismatch) if mismatch else None
        for group, name in (
            (UPSTREAM_GROUP, upstream),
            ("scheduling.x-k8s.io", labels.get(POD_GROUP_LABEL)),
            ("scheduling.volcano.sh", meta.annotations.get(VOLCANO_ANNOTATION)),
        ):
            if name is not None:
                missing = (group, ns, name) not in self.objs.pod_groups
                return Waiting(f"waiting for PodGroup {ns}/{name} ({group}) to exist") if missing else None
        if self.pdbs.first_selecting(ns, labels) is not None:
            return None
        expected = self._expects_definition(pod)
        since = meta.creationTimestamp
        if expected is None or self.now is None or since is None or self.grace.seconds <= 0:
            return None
        until = since + timedelta(seconds=self.grace.seconds)
        if self.now >= until:
            return None  # the definition never came: the fallback rule applies
        return Waiting(f"waiting up to {self.grace.seconds:g}s from its creation for {expected}", until)

    def _expects_definition(self, pod: schema.Pod) -> str | None:
        """What gang definition this pod may still get, or None when nothing suggests one is coming."""
        labels, ns = pod.metadata.labels, str(pod.metadata.namespace)
        what = "its gang definition (a PodDisruptionBudget or PodGroup)"
        if self.group_label and self.group_label in labels:
            if (ns, labels[self.group_label]) in self._annotated:
                return None
            return f"the {MIN_AVAILABLE_ANNOTATION} annotation of its {self.group_label} group"
        ref = pod.metadata.controller
        if ref is None:
            return None
        if ref.kind in self.grace.kinds:
            return f"{what} of {ref.kind} {ref.name}"
        if ref.kind == "Job" and (JOBSET_LABEL in labels or self._owned.get(str(ref.uid), 0) > 1):
            return f"{what} of Job {ref.name}"
        return None

    def fallback(self, key: GangKey, members: list[schema.Pod]) -> str | None:
        """Why the gang of a job that needs one (see `_expects_definition`) has a minimum of 1, so part of it
        may run, and what keeps it whole; None for every other gang."""
        if key.rule not in ("label", "owner") or len(members) < 2 or self._expects_definition(members[0]) is None:
            return None
        if any(MIN_AVAILABLE_ANNOTATION in p.metadata.annotations for p in members):
            return None  # its minimum was asked for
        part = "its minimum is 1, so part of it may run"
        ref = members[0].metadata.controller
        if key.rule == "label" or ref is None:
            return (
                f"no pod of its {self.group_label} group carries the {MIN_AVAILABLE_ANNOTATION} annotation: {part}; "
                f"annotate its pods {MIN_AVAILABLE_ANNOTATION}: N to keep N of them together"
            )
        return (
            f"no PodGroup or PDB defines the gang of {ref.kind} {ref.name}: {part}; "
            "create a PodGroup (minMember) or a PodDisruptionBudget (minAvailable) for its pods to keep it whole"
        )

    def key(self, pod: schema.Pod, wait: bool = True) -> GangKey | None:
        """The gang of this pod, or None while it waits for its definition (`wait=False`: never; a bound
        pod's gang is what it is now)."""
        meta = pod.metadata
        ns, labels, annotations = str(meta.namespace), meta.labels, meta.annotations
        upstream = _upstream_group(pod)
        if upstream is not None:
            key = self._pod_group(pod, UPSTREAM_GROUP, upstream, "spec.schedulingGroup.podGroupName")
            if key is None or self.priority_mismatch(ns, upstream):
                return None  # waits: for its PodGroup, or for its members' priorities to agree with it
            if self.objs.pod_groups[(UPSTREAM_GROUP, ns, upstream)].gang is None:
                return GangKey("single", ns, str(meta.name))  # a `basic` policy: scheduled pod by pod
            return key
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
        pdb = self.pdbs.first_selecting(ns, labels)
        if pdb is not None:
            return GangKey("pdb", ns, str(pdb.metadata.name))
        if wait and self.waiting(pod) is not None:
            return None  # its definition may be on its way
        if self.group_label and self.group_label in labels:
            return GangKey("label", ns, labels[self.group_label])
        ref = meta.controller
        if ref is not None:
            return GangKey("owner", ns, f"{ref.name}\0{ref.uid}")
        return GangKey("single", ns, str(meta.name))

    def running_key(self, pod: schema.Pod, ours: bool) -> GangKey | None:
        """The gang of a bound pod: ours by the rules above (without waiting); another scheduler's by its
        PodGroup (Kubernetes' own with a gang policy, scheduler-plugins' or Volcano's) if the snapshot has it,
        else none."""
        if ours:
            return self.key(pod, wait=False)
        meta = pod.metadata
        ns = str(meta.namespace)
        upstream = _upstream_group(pod)
        if upstream is not None:
            pg = self.objs.pod_groups.get((UPSTREAM_GROUP, ns, upstream))
            return GangKey("upstream", ns, upstream) if pg is not None and pg.gang is not None else None
        for group, name in (
            ("scheduling.x-k8s.io", meta.labels.get(POD_GROUP_LABEL)),
            ("scheduling.volcano.sh", meta.annotations.get(VOLCANO_ANNOTATION)),
        ):
            if name is not None and (group, ns, name) in self.objs.pod_groups:
                return GangKey("podgroup" if group == "scheduling.x-k8s.io" else "volcano", ns, name)
        return None

    def _pod_group(self, pod: schema.Pod, group: str, name: str, field: str) -> GangKey | None:
        ns = str(pod.metadata.namespace)
        if (group, ns, name) not in self.objs.pod_groups:
            if self.strict:
                raise InputError(pod.describe(), field, f"names PodGroup {ns}/{name} ({group}), not in snapshot")
            return None  # live: wait until the PodGroup appears
        return GangKey(_RULES[group], ns, name)

    def pod_group(self, key: GangKey) -> schema.PodGroup | None:
        group = _GROUPS.get(key.rule)
        return self.objs.pod_groups.get((group, key.namespace, key.name)) if group else None

    def priority_mismatch(self, ns: str, name: str) -> str | None:
        """Upstream schedules no gang whose members' priorities differ from its PodGroup's (KEP-5710): it
        marks the PodGroup SchedulerError. The same message, or None when they agree (or it is no gang)."""
        key = (ns, name)
        if key not in self._mismatch:
            pg = self.objs.pod_groups[(UPSTREAM_GROUP, ns, name)]
            message = None
            if pg.gang is not None:
                want = objects.priority(pg, self.objs.priority_classes)
                for p in self._upstream_members.get(key, []):
                    got = objects.priority(p, self.objs.priority_classes)
                    if got != want:
                        message = f"{PRIORITY_MISMATCH}, got {got} and {want} (pod {p.key}, PodGroup {ns}/{name})"
                        break
            self._mismatch[key] = message
        return self._mismatch[key]

    def group_priority(self, key: GangKey) -> int | None:
        """An upstream PodGroup's priority, which is its gang's (KEP-5710); None for other gangs."""
        pg = self.pod_group(key)
        if pg is None or key.rule != "upstream":
            return None
        return objects.priority(pg, self.objs.priority_classes)

    def min_member(self, key: GangKey, members: list[schema.Pod]) -> int:
        pg = self.pod_group(key)
        if pg is not None:
            return pg.min_member or 1  # (an upstream `basic` policy makes no gang: its pods have their own keys)
        if key.rule == "pdb":
            pdb = self.pdbs.named(key.namespace, key.name)
            spec, selected = pdb.spec, self.pdbs.selected(pdb)
            if spec.minAvailable is not None:
                return max(1, int_or_percent(spec.minAvailable, selected))
            if spec.maxUnavailable is not None:
                return max(1, selected - int_or_percent(spec.maxUnavailable, selected))
            return 1
        field = f"metadata.annotations.{MIN_AVAILABLE_ANNOTATION}"
        mins = []
        for p in members:
            value = p.metadata.annotations.get(MIN_AVAILABLE_ANNOTATION)
            if value is not None:
                try:
                    mins.append(positive_int(value))
                except ValueError as exc:
                    raise InputError(p.describe(), field, str(exc)) from None
        return max(mins, default=1)

    def colocate(self, key: GangKey, members: list[schema.Pod]) -> str | None:
        """The required topology level: the upstream PodGroup's topology constraint, else the annotation."""
        pg = self.pod_group(key)
        constraints = pg.spec.schedulingConstraints if pg is not None else None
        if constraints is not None and constraints.topology:
            return constraints.topology[0].key  # upstream allows one constraint for now
        return self._annotation(pg, members, COLOCATE_ANNOTATION)

    def preferred(self, key: GangKey, members: list[schema.Pod]) -> tuple[str, ...]:
        """Preferred topology levels, widest first, from the annotation (upstream has no such field yet)."""
        value = self._annotation(self.pod_group(key), members, PREFERRED_ANNOTATION) or ""
        return tuple(dict.fromkeys(k.strip() for k in value.split(",") if k.strip()))

    def queue(self, key: GangKey, members: list[schema.Pod]) -> str:
        """A Volcano PodGroup's spec.queue, else a queue annotation on the PodGroup or a member, else `default`.
        A queue other than `default` must exist (Volcano's admission refuses others)."""
        pg = self.pod_group(key)
        sources: list[tuple[schema.PodGroup | schema.Pod, str, str | None]] = []
        if pg is not None and key.rule == "volcano":
            sources.append((pg, "spec.queue", pg.spec.queue))
        sources += [
            (obj, f"metadata.annotations.{name}", obj.metadata.annotations.get(name))
            for name in QUEUE_ANNOTATIONS
            for obj in _with_group(pg, members)
        ]
        for obj, field, named in sources:
            if not named:
                continue
            if named != DEFAULT_QUEUE and named not in self.objs.queues:
                raise InputError(obj.describe(), field, f"names Queue {named!r}, not in snapshot")
            return named
        return DEFAULT_QUEUE

    @staticmethod
    def _annotation(pg: schema.PodGroup | None, members: list[schema.Pod], name: str) -> str | None:
        """The annotation on the PodGroup, else on the first member that has it."""
        for obj in _with_group(pg, members):
            value = obj.metadata.annotations.get(name)
            if value:
                return value
        return None


def _with_group(pg: schema.PodGroup | None, members: list[schema.Pod]) -> list[schema.PodGroup | schema.Pod]:
    """The PodGroup (if any), then the members: where a gang's annotations are looked for, in that order."""
    return [pg, *members] if pg is not None else list(members)


_RULES = {UPSTREAM_GROUP: "upstream", "scheduling.x-k8s.io": "podgroup", "scheduling.volcano.sh": "volcano"}
_GROUPS = {rule: group for group, rule in _RULES.items()}


def upstream_group_name(pod: dict) -> str | None:
    """The scheduling.k8s.io PodGroup an API object (as the live scheduler holds it) names in
    spec.schedulingGroup, if any."""
    name = (((pod.get("spec") or {}).get("schedulingGroup")) or {}).get("podGroupName")
    return str(name) if name else None


def _upstream_group(pod: schema.Pod) -> str | None:
    """The scheduling.k8s.io PodGroup a decoded pod names in spec.schedulingGroup, if any."""
    group = pod.spec.schedulingGroup
    return group.podGroupName or None if group is not None else None


def display_name(key: GangKey) -> str:
    return f"{key.namespace}/{key.name.split(chr(0))[0]}"


def created(pod: dict) -> datetime | None:
    """When an API object (as the live scheduler holds it) was created."""
    stamp = pod["metadata"].get("creationTimestamp")
    return schema.timestamp(stamp) if stamp else None


def gated(snap: Snapshot, scheduler_name: str) -> dict[str, list[str]]:
    """Pods for `scheduler_name` held back by scheduling gates: pod key -> the gates' names. They are not
    planned until the gates are removed."""
    return {
        p.key: [g.name for g in p.spec.schedulingGates]
        for p in snap.decoded(nodes=False).pods
        if p.spec.schedulingGates and p.waiting_for(scheduler_name)
    }


def idle_pdbs(snap: Snapshot) -> list[str]:
    """PDBs that select no pod (pending or running, of any scheduler), as `namespace/name`: they define no gang,
    so the pods meant to be one (a selector with a typo) are grouped by the later rules: by their owner, with a
    minimum of 1."""
    pdbs = _Grouper(snap.decoded(nodes=False), None, strict=False).pdbs
    return [f"{ns}/{p.metadata.name}" for ns in sorted(pdbs.by_ns) for p in pdbs.by_ns[ns] if not pdbs.selected(p)]


def waiting(
    snap: Snapshot,
    scheduler_name: str = "gangsolve",
    group_label: str | None = None,
    now: datetime | None = None,
    grace: Grace | None = None,
) -> dict[str, Waiting]:
    """Pending pods of `scheduler_name` that join no gang yet, and why: their PodGroup does not exist yet, or
    their gang definition may still come (see the module's docstring). `build_cluster` leaves them out."""
    grouper = _Grouper(snap.decoded(nodes=False), group_label, strict=False, grace=grace, now=now)
    held = {
        p.key: why for p in grouper.live if p.pending_for(scheduler_name) and (why := grouper.waiting(p)) is not None
    }
    for pod, problem in dra.model(snap, scheduler_name).problems.items():
        held.setdefault(pod, Waiting(problem))
    return held


def _with_devices(pod: Pod, devices: dra.Dra) -> Pod:
    """The pod with the device capacity its claims request, held to the nodes its allocated claims name."""
    extra = devices.requests.get(pod.name)
    terms = devices.terms.get(pod.name)
    if not extra and not terms:
        return pod
    return replace(pod, requests={**pod.requests, **(extra or {})}, affinity=devices.affinity(pod.name, pod.affinity))


# A bound pod, its requests (its GPU share, SHARE, included) and the device index of its share (None: no share,
# or the pod does not say which device).
Bound = tuple[schema.Pod, dict[str, int], int | None]


def _bound(objs: Decoded, nodes: Sequence[Node]) -> list[Bound]:
    """The snapshot's bound, unfinished pods on known nodes, with their requests. As kube-scheduler counts, a
    terminating pod holds its capacity until it is gone."""
    row = node_table.table(nodes).statics.index
    out: list[Bound] = []
    for p in objs.pods:
        node = nodes[row[str(p.spec.nodeName)]] if str(p.spec.nodeName or "") in row else None
        if node is None or p.finished:
            continue
        requests = objects.pod_requests(p)
        share = shares.asked(p, requests)
        index = None
        if share is not None:
            gpus = node.allocatable.get(GPU, 0)
            index, requests[SHARE] = shares.on_node(p, share, node.name, gpus, node.gpu_memory)
        out.append((p, requests, index))
    return out


def _nodes_with_usage(nodes: Sequence[Node], bound: list[Bound]) -> list[Node]:
    used: dict[str, dict[str, int]] = {}
    for p, requests, _index in bound:
        on = used.setdefault(str(p.spec.nodeName), {})
        for r, q in requests.items():
            on[r] = on.get(r, 0) + q
    held = shares.held((str(p.spec.nodeName), requests.get(SHARE, 0), index) for p, requests, index in bound)
    return [replace(n, used=used.get(n.name, {}), gpu_shares=held.get(n.name, {})) for n in nodes]


def _with_device_capacity(nodes: Sequence[Node], devices: dra.Dra) -> tuple[Node, ...]:
    """The nodes with the devices they reach as capacity, and those allocated already as used."""
    if not devices.capacity and not devices.used:
        return tuple(nodes)
    return tuple(
        replace(
            n,
            allocatable={**n.allocatable, **devices.capacity.get(n.name, {})},
            used={**n.used, **devices.used.get(n.name, {})},
        )
        if n.name in devices.capacity or n.name in devices.used
        else n
        for n in nodes
    )


def starvation_age(gpus: int, node_gpus: int, age: float = STARVATION_SECONDS) -> float:
    """Seconds a gang asking for `gpus` GPUs in all waits before it starves: `age`, or for a gang wider than the
    widest node (`node_gpus`) the share of `age` one node is of it, at least STARVATION_FLOOR or `age` if shorter."""
    if gpus <= node_gpus or node_gpus <= 0:
        return age
    return max(min(STARVATION_FLOOR, age), age * node_gpus / gpus)


def build_cluster(snap: Snapshot, *args: Any, **kwargs: Any) -> Cluster:
    """`build_with_origins`' cluster, for callers that need no gang's origin (the benchmarks, most tests)."""
    return build_with_origins(snap, *args, **kwargs)[0]


def build_with_origins(
    snap: Snapshot,
    scheduler_name: str = "gangsolve",
    group_label: str | None = None,
    strict: bool = True,
    now: datetime | None = None,
    starvation_seconds: float = STARVATION_SECONDS,
    grace: Grace | None = None,
    *,
    nodes: Sequence[Node] | None = None,
    convert_pod: Callable[[dict, Mapping[str, dict], int], Pod] | None = None,
    usage_half_life: float = 0.0,
) -> tuple[Cluster, dict[str, Origin]]:
    """Every node with the capacity bound pods hold, every gang with pending pods of our scheduler, and every
    bound pod of the snapshot as preemption sees it (priority, gang, PDBs, start). With `now` (the live
    scheduler's clock), gangs whose oldest pending pod was created more than `starvation_seconds` earlier are
    marked starving, and pods that may still get a gang definition wait for it by `grace`. Raises InputError
    naming the first object it cannot read (strict or not: the live scheduler leaves that object out and tries
    again).

    The live scheduler keeps the converted nodes and their used capacity up to date as pods come and go, and
    remembers converted pods: it passes `nodes` (without devices: those come from the snapshot's DRA objects
    here) and a memoizing `convert_pod` (of the API object, as objects.pod), so a cycle at 5,000 nodes does not
    read every bound pod again. Its snapshot then holds only some bound pods: `running` lists those alone.

    With the cluster, each gang's origin (by its name): the rule that defined it, and whether that rule stood
    in for a definition that never came. Which rule defined a gang is the edge's to say, not the solver's."""
    objs = snap.decoded(nodes=nodes is None)
    devices = dra.model(snap, scheduler_name)
    grouper = _Grouper(objs, group_label, strict, grace, now)
    converted: Sequence[Node] = [objects.node(n) for n in objs.nodes] if nodes is None else tuple(nodes)
    bound = _bound(objs, converted)
    nodes = _with_device_capacity(_nodes_with_usage(converted, bound) if nodes is None else nodes, devices)
    statics = node_table.table(nodes).statics  # (the GPU memory sizes and the widest node's GPUs)

    def convert(p: schema.Pod, order: int) -> Pod:
        if convert_pod is None:
            return objects.to_pod(p, objs.priority_classes, order)
        return convert_pod(objs.raw_pod(p), snap.priority_classes, order)

    ours = [p for p in grouper.live if p.scheduler == scheduler_name]
    # (by the creation time as written: the order the solver breaks ties in)
    ours.sort(key=lambda p: (str(objs.raw_pod(p)["metadata"].get("creationTimestamp", "")), p.key))
    members: dict[GangKey, list[tuple[int, schema.Pod]]] = {}
    for order, p in enumerate(ours):
        if p.bound or (p.pending_for(scheduler_name) and p.key not in devices.problems):
            key = grouper.key(p)
            if key is not None:
                members.setdefault(key, []).append((order, p))

    requests_of = {id(p): requests for p, requests, _index in bound}  # with the shares their nodes give
    names = _Names()
    gangs = []
    allocated: dict[str, dict[str, int]] = {name: {} for name in objs.queues}  # what bound members hold
    nominated: dict[str, str] = {}
    queue_of: dict[GangKey, str] = {}
    origins: dict[str, Origin] = {}
    for key, pods in sorted(members.items(), key=lambda kv: (kv[0].namespace, kv[0].name, kv[0].rule)):
        queue = queue_of[key] = grouper.queue(key, [p for _o, p in pods])
        held = allocated.setdefault(queue, {})
        for _o, p in pods:
            if p.bound:
                for r, q in requests_of.get(id(p), objects.pod_requests(p)).items():
                    held[r] = held.get(r, 0) + q
        pending = [
            _with_devices(shares.planned_pod(convert(p, order), p, statics.gpu_memories), devices)
            for order, p in pods
            if not p.bound
        ]
        if not pending:
            continue
        objs_ = [p for _o, p in pods]
        born = [c for c in (p.metadata.creationTimestamp for _o, p in pods if not p.bound) if c is not None]
        age = starvation_age(sum(p.requests.get(GPU, 0) for p in pending), statics.most_gpus, starvation_seconds)
        waited = (now - min(born)).total_seconds() if now and born else 0.0
        name = names.of(key)
        origins[name] = Origin(key.rule, grouper.fallback(key, objs_))
        gangs.append(
            Gang(
                name=name,
                pods=tuple(pending),
                min_member=grouper.min_member(key, objs_),
                bound_nodes=tuple(str(p.spec.nodeName) for p in objs_ if p.bound),
                colocate=grouper.colocate(key, objs_),
                starving=waited > age,
                waited=waited,
                preferred=grouper.preferred(key, objs_),
                group_priority=grouper.group_priority(key),
                queue=queue,
            )
        )
        nominated |= {p.key: p.status.nominatedNodeName for p in objs_ if not p.bound and p.status.nominatedNodeName}
    running, budgets = _running(grouper, bound, scheduler_name, members, names, queue_of)
    queues = [objects.queue(q, allocated[name], now, usage_half_life) for name, q in sorted(objs.queues.items())]
    _check_tree(queues, objs.queues)
    if DEFAULT_QUEUE in allocated and DEFAULT_QUEUE not in objs.queues:  # implicit, as Volcano creates it
        queues.append(Queue(DEFAULT_QUEUE, allocated=allocated[DEFAULT_QUEUE]))
    cluster = Cluster(
        tuple(nodes),
        tuple(gangs),
        running=running,
        nominated=nominated,
        budgets=budgets,
        gpus=devices.gpus,
        queues=tuple(queues),
    )
    return cluster, origins


def _check_tree(queues: list[Queue], objs: Mapping[str, schema.Queue]) -> None:
    """A queue's parent must be a queue (or `root`), and parents must not close a loop: Volcano's webhook
    refuses both, and a queue the tree cannot place has no fair share."""
    parent = {q.name: q.parent for q in queues}
    for q in queues:
        if q.parent and q.parent not in parent:
            raise InputError(objs[q.name].describe(), "spec.parent", f"names queue {q.parent!r}, which does not exist")
        seen = [q.name]
        while parent.get(seen[-1]):
            seen.append(parent[seen[-1]])
            if seen[-1] == q.name:
                raise InputError(objs[q.name].describe(), "spec.parent", "closes a loop: " + " -> ".join(seen))
            if len(seen) > len(parent):
                break  # a loop above this queue: reported at its own queues


class _Names:
    """Gang names as users read them (namespace/name), kept apart when two gangs would share one."""

    def __init__(self) -> None:
        self._names: dict[GangKey, str] = {}
        self._taken: set[str] = set()

    def of(self, key: GangKey) -> str:
        if key not in self._names:
            name = display_name(key)
            if name in self._taken:  # e.g. a PodGroup and a Deployment of one name: keep both gangs apart
                name = f"{name} ({key.rule})"
            self._taken.add(name)
            self._names[key] = name
        return self._names[key]


SYSTEM_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})
SYSTEM_PRIORITY = 2_000_000_000  # the system classes' values start here; no user class reaches it


def _running(
    grouper: _Grouper,
    bound: list[Bound],
    scheduler_name: str,
    members: dict[GangKey, list[tuple[int, schema.Pod]]],
    names: _Names,
    queue_of: Mapping[GangKey, str],
) -> tuple[tuple[Running, ...], dict[str, int]]:
    """Every bound, unfinished pod as a possible victim, and the allowance of every PDB that guards one.

    Our pods belong to gangs by the rules above; another scheduler's pods to their PodGroup (Kubernetes' own,
    Volcano's or scheduler-plugins'), else to no gang. A PDB that defines one of our gangs (rule 3) is that
    gang's minimum, not a budget to keep."""
    classes = grouper.objs.priority_classes
    keyed: list[tuple[schema.Pod, dict[str, int], GangKey | None, str, int | None]] = []
    by_key: dict[GangKey, list[schema.Pod]] = {key: [p for _o, p in pods] for key, pods in members.items()}
    for p, requests, index in bound:
        key = grouper.running_key(p, p.spec.schedulerName == scheduler_name)
        queue = queue_of.get(key, "") if key is not None else ""  # our gangs' only: theirs are never reclaimed
        if key is not None and key.rule == "single":
            key = None
        if key is not None and key not in members:
            by_key.setdefault(key, []).append(p)
        keyed.append((p, requests, key, queue, index))
    gang_pdbs = {(k.namespace, k.name) for k in by_key if k.rule == "pdb"}
    minimum: dict[GangKey, int] = {}
    budgets: dict[str, int] = {}
    running = []
    for p, requests, key, queue, index in keyed:
        meta, spec = p.metadata, p.spec
        ns = str(meta.namespace)
        pdbs = []
        for pdb in grouper.pdbs.selecting(ns, meta.labels):
            name = pdb.metadata.name
            if (ns, name) not in gang_pdbs:
                pdbs.append(f"{ns}/{name}")
                if pdbs[-1] not in budgets:
                    budgets[pdbs[-1]] = grouper.pdbs.allowed(pdb)
        priority, protected = spec.priority, False
        if priority is None:  # admission sets it on every pod; snapshots written by hand may lack it
            try:
                priority = objects.priority(p, classes)
            except InputError:  # its PriorityClass is gone: what it was is unknown, so it is never a victim
                priority, protected = 0, True
        if key is not None and key not in minimum:
            minimum[key] = grouper.min_member(key, by_key[key])
        running.append(
            Running(
                node=str(spec.nodeName),
                requests=requests,
                name=p.key,
                priority=priority,
                gang=names.of(key) if key is not None else "",
                min_member=minimum[key] if key is not None else 1,
                pdbs=tuple(pdbs),
                started=objects.started(p),
                protected=protected or spec.priorityClassName in SYSTEM_CLASSES or priority >= SYSTEM_PRIORITY,
                leaving=p.terminating,
                queue=queue,
                gpu=index,
            )
        )
    return tuple(running), budgets
