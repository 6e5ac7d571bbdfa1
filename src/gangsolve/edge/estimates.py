"""Runtime estimates: how long a gang is expected to run once started, and when running pods are expected to end.

A gang's estimate is the first of:
1. annotation `gangsolve.io/expected-runtime` (a Go duration: `90m`, `1h30m`, `45s`) on a pod, its PodGroup
   or its owner;
2. the pods' `spec.activeDeadlineSeconds` (the smallest: the kubelet ends the pod by then);
3. the history of finished gangs of the same workload (`RuntimeHistory`: same owner kind and name prefix, or
   the value of a label the user names);
4. a configured default.

Estimates only plan reservations: a running pod that outruns its estimate is expected to run on
(`planning.expected_end`), and nothing is ever evicted because of one. Only declared runtimes (1 and 2) are held
to: learned and default ones are guesses (`Gang.guessed`, `Running.guessed`), on which the plan shows starts but
holds none.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

import numpy as np

from gangsolve.edge import objects
from gangsolve.edge.errors import InputError, describe, shown
from gangsolve.edge.gangs import POD_GROUP_LABEL, UPSTREAM_GROUP, VOLCANO_ANNOTATION, upstream_group_name
from gangsolve.edge.quantity import parse_duration
from gangsolve.edge.snapshot import Snapshot
from gangsolve.solver.model import Cluster
from gangsolve.solver.planning import expected_end, overran

EXPECTED_RUNTIME_ANNOTATION = "gangsolve.io/expected-runtime"


def _annotated(obj: dict) -> float | None:
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(EXPECTED_RUNTIME_ANNOTATION)
    if value is None:
        return None
    field_name = f"metadata.annotations.{EXPECTED_RUNTIME_ANNOTATION}"
    try:
        seconds = parse_duration(str(value))
    except ValueError:
        raise InputError(
            describe(obj), field_name, f"expected a duration such as 90m or 1h30m, got {value!r}"
        ) from None
    if seconds <= 0:
        raise InputError(describe(obj), field_name, f"must be positive, got {value!r}")
    return seconds


def declared_runtime(pods: Sequence[dict], group: dict | None = None, owner: dict | None = None) -> float | None:
    """The runtime the objects declare: the annotation (pods, then PodGroup, then owner), else the smallest
    activeDeadlineSeconds; None when they declare none."""
    for obj in [*pods, *(o for o in (group, owner) if o is not None)]:
        seconds = _annotated(obj)
        if seconds is not None:
            return seconds
    deadlines = []
    for pod in pods:
        value = (pod.get("spec") or {}).get("activeDeadlineSeconds")
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(describe(pod), "spec.activeDeadlineSeconds", f"expected a positive integer, got {value!r}")
        deadlines.append(float(value))
    return min(deadlines, default=None)


_SUFFIX = re.compile(r"(-[0-9a-z]{5}|-[0-9]+|-[0-9a-f]{8,10})+$")


def workload_key(pod: Mapping, label: str | None = None) -> str:
    """Which workload a pod's gang belongs to, for the history: the value of `label` when the pod has it,
    else its owner's kind and name (or its own name) without generated suffixes (`-7d9f8`, `-00042`, `-3`),
    so the runs of one job template share a key."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    ns = meta.get("namespace", "")
    if label and label in labels:
        return f"{ns}/label:{labels[label]}"
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller"):
            return f"{ns}/{ref.get('kind', '')}:{_SUFFIX.sub('', str(ref.get('name', '')))}"
    group = labels.get(POD_GROUP_LABEL) or (meta.get("annotations") or {}).get(VOLCANO_ANNOTATION)
    name = str(group or meta.get("name", ""))
    return f"{ns}/{'PodGroup' if group else 'Pod'}:{_SUFFIX.sub('', name)}"


def finished_runtime(pod: dict) -> float | None:
    """How long a pod that succeeded ran: from status.startTime to its last container's finishedAt. (Read from
    the object as given: `gangsolve solve` learns from hand-written files too, so no shape is assumed.)"""
    if _at(pod, "status.phase") != "Succeeded":
        return None
    started = _time(pod, "status.startTime")
    statuses = _at(pod, "status.containerStatuses") or []
    if not isinstance(statuses, list):
        raise InputError(describe(pod), "status.containerStatuses", f"expected a list, got {shown(statuses)}")
    ends = [_at(cs, "state.terminated.finishedAt") for cs in statuses]
    finished = [_stamp(pod, "status.containerStatuses[].state.terminated.finishedAt", e) for e in ends if e]
    if started is None or not finished:
        return None
    return (max(finished) - started).total_seconds()


@dataclass
class RuntimeHistory:
    """Runtimes of finished gangs per workload; the estimate for the next is a high quantile of the last
    `window` (erring long: a short estimate lets backfilled gangs delay a reservation)."""

    window: int = 20
    quantile: float = 0.75
    most_seen: int = 100_000  # pod uids remembered as learned from, the oldest forgotten first
    runs: dict[str, deque[float]] = field(default_factory=dict)
    seen: dict[str, None] = field(default_factory=dict)  # pod uids already learned from, oldest first

    def record(self, key: str, seconds: float) -> None:
        if seconds > 0:
            self.runs.setdefault(key, deque(maxlen=self.window)).append(float(seconds))

    def learn(self, pods: Sequence[dict], label: str | None = None) -> int:
        """Record every succeeded pod not seen before (by uid), so the same pod seen again (a relist, a
        restart listing what the cluster still has) counts once. Returns how many were new."""
        learned = 0
        for pod in pods:
            uid = _at(pod, "metadata.uid")
            if not isinstance(uid, str) or not uid or uid in self.seen:
                continue
            seconds = finished_runtime(pod)
            if seconds is None:
                continue
            self.seen[uid] = None
            if len(self.seen) > self.most_seen:
                del self.seen[next(iter(self.seen))]
            self.record(workload_key(pod, label), seconds)
            learned += 1
        return learned

    def estimate(self, key: str) -> float | None:
        runs = self.runs.get(key)
        return float(np.quantile(list(runs), self.quantile)) if runs else None


@dataclass
class Estimator:
    """The order of sources for one scheduler: declared, learned, default."""

    default: float | None = 3600.0
    history: RuntimeHistory = field(default_factory=RuntimeHistory)
    label: str | None = None  # the label naming a workload for the history; else owner kind and name prefix

    def learn(self, pods: Sequence[dict]) -> int:
        """The history learns from these finished pods (those it has not seen yet)."""
        return self.history.learn(pods, self.label)

    def estimate(
        self, pods: Sequence[dict], group: dict | None = None, owner: dict | None = None
    ) -> tuple[float | None, bool]:
        """The runtime, and whether it is a guess (learned or the default, not declared)."""
        declared = declared_runtime(pods, group, owner)
        if declared is not None:
            return declared, False
        guess = self.choose(None, workload_key(pods[0], self.label) if pods else None)
        return guess, guess is not None

    def choose(self, declared: float | None, key: str | None) -> float | None:
        if declared is not None:
            return declared
        learned = self.history.estimate(key) if key is not None else None
        return learned if learned is not None else self.default


def _group_of(snap: Snapshot, pod: dict) -> dict | None:
    """The PodGroup the pod names, by the gang rules' order (gangs.py)."""
    meta = pod.get("metadata") or {}
    ns = meta.get("namespace", "")
    name = upstream_group_name(pod)
    if name:
        return snap.pod_groups.get((UPSTREAM_GROUP, ns, name))
    name = (meta.get("labels") or {}).get(POD_GROUP_LABEL)
    if name:
        return snap.pod_groups.get(("scheduling.x-k8s.io", ns, name))
    name = (meta.get("annotations") or {}).get(VOLCANO_ANNOTATION)
    return snap.pod_groups.get(("scheduling.volcano.sh", ns, name)) if name else None


def _at(obj: object, path: str) -> object:
    """The value at a dotted path, None where the path ends early or meets a non-object."""
    for part in path.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None  # JSON objects (not Mapping: an ABC check is slow)
    return obj


def _time(obj: dict, path: str) -> datetime | None:
    value = _at(obj, path)
    return _stamp(obj, path, value) if value else None


def _stamp(obj: dict, path: str, value: object) -> datetime:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise InputError(describe(obj), path, f"not an RFC 3339 time: {value!r}") from None


def with_estimates(
    snap: Snapshot,
    cluster: Cluster,
    now: datetime,
    estimator: Estimator,
    scheduler_name: str = "gangsolve",
    owners: Mapping[str, dict] | None = None,
) -> Cluster:
    """`cluster` (from build_cluster on `snap`) with every pending gang's runtime estimate, every bound
    unfinished pod's expected end, and the clock, in seconds since the epoch. Pods of other schedulers end
    only by what they declare (a service runs for ever). `owners` maps an ownerReference uid to the owner
    object, where the caller has it (the live scheduler's informers)."""
    pods = {objects.pod_key(p): p for p in snap.pods}
    owners = owners or {}

    def owner_of(pod: dict) -> dict | None:
        refs = (pod.get("metadata") or {}).get("ownerReferences") or []
        return next((owners[r.get("uid")] for r in refs if r.get("controller") and r.get("uid") in owners), None)

    gangs = []
    for gang in cluster.gangs:
        members = [pods[p.name] for p in gang.pods if p.name in pods]
        first = members[0] if members else {}
        runtime, guessed = (
            estimator.estimate(members, _group_of(snap, first), owner_of(first)) if members else (None, False)
        )
        gangs.append(replace(gang, runtime=runtime, guessed=guessed))

    clock = now.timestamp()
    running = []
    for r in cluster.running:  # every bound, unfinished pod, as build_cluster found them
        pod = pods.get(r.name)
        # A terminating pod holds its capacity until it is gone, with no estimate of when.
        end, guessed, over = None, False, False
        if pod is not None and not r.leaving:
            started = _time(pod, "status.startTime") or _time(pod, "metadata.creationTimestamp")
            group, owner = _group_of(snap, pod), owner_of(pod)
            ours = (pod.get("spec") or {}).get("schedulerName", "default-scheduler") == scheduler_name
            estimate, guessed = (
                estimator.estimate([pod], group, owner) if ours else (declared_runtime([pod], group, owner), False)
            )
            if started:
                since = started.timestamp()
                end, over = expected_end(since, estimate, clock), overran(since, estimate, clock)
        running.append(r.ending(end, guessed and end is not None, over))
    return replace(cluster, gangs=tuple(gangs), running=tuple(running), now=clock)
