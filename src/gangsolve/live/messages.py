"""What the actors send each other, in one module every actor imports, so no actor imports another.

watchers -> store: `Event` and `Resync` of a `Resource`; solver actor -> binder: `GangPlan` (a placed gang,
with the claims to write first) and `Preemption` (nominations, then victims); solver actor -> feedback:
`CycleResult` (the latest only); binder -> feedback: `Bound` and `Evicted`; store -> solver actor: a `View`
per cycle.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from gangsolve.edge.errors import InputError
from gangsolve.edge.gangs import Origin, Waiting
from gangsolve.edge.snapshot import Snapshot
from gangsolve.solver import Cluster, Node, Placement
from gangsolve.solver.model import Share

COMPONENT = "gangsolve"  # how events and conditions name the scheduler


@dataclass(frozen=True)
class Resource:
    """A collection a watcher lists and watches."""

    kind: str  # the key the store files objects under: Pod, Node, PodDisruptionBudget, PodGroup, ResourceClaim...
    api_version: str
    path: str  # the cluster-wide collection
    optional: bool = False  # a CRD that may be missing
    field_selector: str = ""


@dataclass(frozen=True)
class Event:
    """One watch event."""

    resource: Resource
    type: str  # ADDED | MODIFIED | DELETED
    obj: dict


@dataclass(frozen=True)
class Resync:
    """A full list of the resource: everything the store holds of it is replaced."""

    resource: Resource
    objects: list[dict] = field(default_factory=list)


@dataclass(frozen=True)
class ClaimWrite:
    """A ResourceClaim of a placed pod, as the binder must write it before the bind: allocated with these
    devices (`allocation`, None when it is allocated already) and reserved for the pod. `uid` and
    `resource_version` are the claim the cycle saw: the writes are preconditioned on them."""

    pod: str
    claim: str  # namespace/name
    uid: str
    resource_version: str
    allocation: dict | None


@dataclass(frozen=True)
class GangPlan:
    """A placed gang for the binder: each pod (key, the uid that was solved, node), the claims to write, and the
    GPU each fractional pod takes a share of (pod key, share), which the binder writes on the pod first."""

    gang: str
    pods: tuple[tuple[str, str, str], ...]
    planned_at: float  # monotonic
    claims: tuple[ClaimWrite, ...] = ()
    shares: tuple[tuple[str, Share], ...] = ()


@dataclass(frozen=True)
class Victim:
    pod: str  # namespace/name
    uid: str
    node: str
    preemptor: str  # the gang it makes room for
    reason: str


@dataclass(frozen=True)
class Preemption:
    """A cycle's preemption for the binder: nominations to write first (pod key, uid, node; None clears one),
    then the victims to evict."""

    nominations: tuple[tuple[str, str, str | None], ...]
    victims: tuple[Victim, ...]
    planned_at: float  # monotonic


@dataclass(frozen=True)
class CycleResult:
    snapshot: Snapshot
    cluster: Cluster  # every pending gang: those solved this cycle and those carried over
    placement: Placement  # this cycle's bindings; a result per gang of `cluster` (carried ones: their last)
    skipped: tuple[tuple[str, str], ...] = ()  # objects left out as unreadable: (`Kind ns/name`, error)
    backing_off: dict[str, float] = field(default_factory=dict)  # pod key -> seconds of back-off left
    waiting: dict[str, Waiting] = field(default_factory=dict)  # pods joining no gang yet, and why
    carried: int = 0  # gangs not solved again: nothing changed for them since they last did not fit
    origins: dict[str, Origin] = field(default_factory=dict)  # gang name -> the rule that defined it
    usage: dict[str, tuple[float, float]] = field(default_factory=dict)  # queue -> (usage history, when): to write


@dataclass(frozen=True)
class Bound:
    """The binder bound this pod."""

    pod: str  # namespace/name
    uid: str
    node: str


@dataclass(frozen=True)
class Evicted:
    """The binder evicted this victim."""

    victim: Victim


@dataclass(frozen=True)
class View:
    """One cycle's immutable view of the store."""

    snapshot: Snapshot  # the objects as observed, assumed pods shown bound, unreadable and backing-off ones left out
    nodes: tuple[Node, ...]  # every readable node, with the capacity pods bound or assumed there hold
    unreadable: tuple[InputError, ...]  # objects left out because they cannot be read
    freed: int  # the store's `freed` when the view was taken
    partial: bool = False  # only the pods a cycle of one scheduler reads: not every possible victim of preemption
    lowest_bound: float = -math.inf  # the lowest priority of a pod bound or assumed (inf: none is)
    # A partial view's: what the scheduler's pods bound or assumed hold, all of them (the implicit queue's usage).
    held: Mapping[str, int] = field(default_factory=dict)
