"""The solver's input and output: plain, immutable data.

Quantities are integers in the resource's base unit as the edge converted them: cpu in millicores, memory and
storage in bytes, `pods` and extended resources (`nvidia.com/gpu`) in units. A pod's requests include `pods: 1`.
Mappings inside these frozen dataclasses are never mutated after construction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

GPU = "nvidia.com/gpu"
PODS = "pods"
# A part of one GPU, in thousandths (milli-GPU): what a fractional pod requests and a device holds (WHOLE).
SHARE = "gangsolve.io/gpu-share"
WHOLE = 1000
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB of each of a node's GPUs, as GPU feature discovery labels it

Resources = Mapping[str, int]
# (priority, fair-share tier, starving): the strict order gangs are placed in
Level = tuple[int, int, int]
DEFAULT_QUEUE = "default"  # the queue of gangs that name none
PLAN_DEPTH = 2  # pending gangs planned (holding a reservation) per cycle by default (SolveConfig.reservations)
FORECAST_DEPTH = 30  # pending gangs past those given a forecast start by default (SolveConfig.forecasts)
# How gangs of one level and fair share are ordered (SolveConfig.order). "expansion": the largest expansion
# factor first, (wait + runtime) / runtime, so a short job passes a long one only until it has waited a
# comparable share of its runtime; "arrival": first come first served.
ORDERS = ("expansion", "arrival")
# The runtime the factor divides by is held between these: a job of seconds is not made urgent by a few
# seconds' wait, and a job of hours or weeks (or of unknown length) ages as one of an hour does.
EXPANSION_FLOOR = 60.0
EXPANSION_CAP = 3600.0


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"  # NoSchedule | PreferNoSchedule | NoExecute

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True)
class Toleration:
    key: str = ""  # empty with operator Exists tolerates every taint
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # empty matches every effect


@dataclass(frozen=True)
class Requirement:
    """One node selector requirement: a label (or field) key, an operator and its values."""

    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist | Gt | Lt
    values: tuple[str, ...] = ()

    def __str__(self) -> str:
        if self.operator in ("Exists", "DoesNotExist"):
            return f"{self.key} {self.operator}"
        return f"{self.key} {self.operator} ({','.join(self.values)})"


@dataclass(frozen=True)
class SelectorTerm:
    """A required node affinity term: every expression must hold (terms are ORed)."""

    match_expressions: tuple[Requirement, ...] = ()
    match_fields: tuple[Requirement, ...] = ()  # only metadata.name is defined


@dataclass(frozen=True)
class Node:
    name: str
    allocatable: Resources
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True
    used: Resources = field(default_factory=dict)  # requests of bound, unfinished pods
    gpu_memory: int = 0  # MiB of each GPU (label GPU_MEMORY_LABEL); 0: not labelled
    # Device index -> milli-GPU that bound fractional pods hold on it. Those devices are not whole any more;
    # a fractional pod whose device is unknown is filed under a negative index, a device of its own.
    gpu_shares: Mapping[int, int] = field(default_factory=dict)

    def free(self, resource: str) -> int:
        return self.allocatable.get(resource, 0) - self.used.get(resource, 0)


@dataclass(frozen=True)
class Pod:
    name: str  # namespace/name
    requests: Resources
    priority: int = 0
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: tuple[SelectorTerm, ...] = ()  # required terms; empty means no constraint
    tolerations: tuple[Toleration, ...] = ()
    order: int = 0  # queue position among equals (creation order)
    preempts: bool = True  # preemptionPolicy is not Never (from the pod or its PriorityClass)
    # A GPU share asked as memory (MiB of one GPU): its share is that part of the chosen node's GPU memory, and
    # requests[SHARE] is its share of the smallest GPU that holds it (what the solver plans with, at most).
    gpu_memory: int = 0


@dataclass(frozen=True)
class Gang:
    """Pods that only make progress together: place at least `min_member - len(bound_nodes)` or none."""

    name: str  # namespace/name
    pods: tuple[Pod, ...]  # pending members to place
    min_member: int = 1
    bound_nodes: tuple[str, ...] = ()  # nodes of members already bound and not finished
    colocate: str | None = None  # the required topology level: a node label key whose one value all members share
    # Preferred topology levels, node label keys from the widest to the narrowest (e.g. block, then rack):
    # the locality tier minimizes the domains the gang spans at each, in this order, before nodes spanned.
    preferred: tuple[str, ...] = ()
    group_priority: int | None = None  # the priority its gang definition gives it (an upstream PodGroup's)
    starving: bool = False  # waited past the starvation age: outranks gangs of its priority that have not
    queue: str = DEFAULT_QUEUE
    # Set by the solver from the queues (queues.rank), not by callers: whether the gang's minimum fits its
    # queue's fair share with the queue's earlier gangs (a gang borrowing idle capacity does not), and the
    # weighted dominant share its queue would hold with it placed (lower goes first within a level).
    fair: bool = True
    share: float = 0.0
    # The fair-share tier (queues.rank): highest for gangs within their queue's fair share; below it, gangs that
    # would borrow, the poorest queue's (weighted dominant share held) highest.
    tier: int = 0
    runtime: float | None = None  # estimated seconds from start to end; None: no estimate (runs for ever)
    # The runtime is a guess (learned from history, or the default), not declared: the plan shows the gang a
    # start but holds nothing for it, and counts on no end of it (planning.py).
    guessed: bool = False
    waited: float = 0.0  # seconds pending: since its oldest pending member was created (or the job arrived)

    @property
    def need(self) -> int:
        """Pending members that must be placed together for the gang to reach min_member."""
        return max(0, self.min_member - len(self.bound_nodes))

    # Cached: sorting and scoring thousands of gangs asks for these a hundred thousand times a cycle.
    @cached_property
    def priority(self) -> int:
        if self.group_priority is not None:
            return self.group_priority
        return max((p.priority for p in self.pods), default=0)

    @cached_property
    def total_requests(self) -> dict[str, int]:
        """What all its pending pods ask for together."""
        total: dict[str, int] = {}
        for pod in self.pods:
            for r, q in pod.requests.items():
                total[r] = total.get(r, 0) + q
        return total

    @property
    def topology(self) -> bool:
        """Whether the gang has topology levels, required or preferred."""
        return bool(self.colocate or self.preferred)

    @cached_property
    def level(self) -> Level:
        """The strict-order tier: priority first; within a priority, gangs within their queue's fair share
        before gangs that would borrow; then starving gangs before the rest (so maximizing gangs placed
        cannot starve big gangs for ever)."""
        return (self.priority, self.tier, int(self.starving))

    @cached_property
    def order(self) -> int:
        return min((p.order for p in self.pods), default=0)

    @cached_property
    def expansion(self) -> float:
        """(wait + runtime) / runtime, the runtime held between EXPANSION_FLOOR and EXPANSION_CAP: what its
        wait has stretched its time in the system by. 1 when it has just arrived."""
        runtime = min(max(self.runtime if self.runtime is not None else EXPANSION_CAP, EXPANSION_FLOOR), EXPANSION_CAP)
        return (self.waited + runtime) / runtime

    @property
    def preempts(self) -> bool:
        """Whether the gang may evict lower-priority pods to fit: none of its pods says preemptionPolicy Never."""
        return all(p.preempts for p in self.pods)


@dataclass(frozen=True)
class Running:
    """A bound, unfinished pod. Its requests are already in its node's `used` and come back at its estimated
    end (what reservations are planned from); the rest is what preemption needs to choose it as a victim, or
    to leave it alone."""

    node: str
    requests: Resources
    end: float | None = None  # on the cycle's clock (Cluster.now); None: no estimate, never assumed to end
    guessed: bool = False  # the end is a guess (learned or default runtime): no reservation rests on it
    overran: bool = False  # it outran its estimate: `end` is an extension (planning.expected_end), a guess too
    name: str = ""  # namespace/name
    priority: int = 0
    gang: str = ""  # the gang it belongs to, named as pending gangs are; "" for a pod alone
    min_member: int = 1  # the gang's minimum: evicting members below it evicts the whole gang
    pdbs: tuple[str, ...] = ()  # PodDisruptionBudgets selecting it that are not gang definitions
    started: float = 0.0  # seconds on any clock (only the order counts): the most recent are evicted first
    protected: bool = False  # never a victim (system-cluster-critical, system-node-critical)
    leaving: bool = False  # terminating: holds its capacity until gone, and is no victim
    queue: str = ""  # the queue of its gang when this scheduler placed it; "": none (never reclaimed)
    gpu: int | None = None  # the device index its GPU share is on (requests[SHARE]); None: no share

    def ending(self, end: float | None, guessed: bool = False, overran: bool = False) -> Running:
        """This pod with expected end `end`: `replace(self, end=end, guessed=guessed, overran=overran)` without its
        walk over the fields, which is a third of what estimating the ends of 40,000 running pods costs a cycle."""
        copy = object.__new__(Running)
        copy.__dict__.update(self.__dict__, end=end, guessed=guessed, overran=overran)
        return copy


@dataclass(frozen=True)
class Queue:
    """A tenant's queue (Volcano's Queue). Gangs naming a queue the cluster lacks get weight 1 and no cap.
    Queues form a tree (Volcano's `spec.parent`): a department's queue holds its teams' queues, its share of the
    cluster is divided among them, and its capability caps them together."""

    name: str
    weight: int = 1
    capability: Resources = field(default_factory=dict)  # hard cap per resource named; others unlimited
    guarantee: Resources = field(default_factory=dict)  # fair share never below this (while it has demand)
    reclaimable: bool = True  # queues below their fair share may evict its gangs past its own (preemption.py)
    allocated: Resources = field(default_factory=dict)  # requests of its bound, unfinished pods
    closed: bool = False  # Volcano's state Closed (or Closing): it admits no new gangs; its running pods stay
    parent: str = ""  # the queue it belongs to; "" (or Volcano's `root`): the top of the tree
    deserved: Resources = field(default_factory=dict)  # its fair share per resource named (Volcano's capacity)
    # Seconds its pods must have run before they may be evicted, by preemption or reclaim (None: the
    # scheduler's `preempt_min_runtime` / `reclaim_min_runtime`).
    min_runtime: float | None = None
    # Its past use, for fair share with history: dominant share x seconds, decayed by a half-life (whoever keeps
    # the history sets it: the live scheduler, the bench). 0 everywhere: instantaneous fair shares.
    usage: float = 0.0


@dataclass(frozen=True)
class Cluster:
    nodes: tuple[Node, ...]
    gangs: tuple[Gang, ...]
    running: tuple[Running, ...] = ()
    # Pending pods nominated to a node by an earlier preemption (status.nominatedNodeName): pod -> node.
    nominated: Mapping[str, str] = field(default_factory=dict)
    # Per PodDisruptionBudget that is not a gang definition: the disruptions it allows now.
    budgets: Mapping[str, int] = field(default_factory=dict)
    # Resources the objective counts as GPUs (placed first; empty GPU nodes kept whole) besides `nvidia.com/gpu`:
    # GPUs the edge turned into other resources, such as devices of Dynamic Resource Allocation.
    gpus: frozenset[str] = frozenset()
    queues: tuple[Queue, ...] = ()
    now: float = 0.0  # the cycle's clock, seconds (the same clock as Running.end)
    # The last cycle's plan (its Placement.reservations): each gang named keeps at most the start it was shown
    # there, on those nodes, while that still holds (planning.py). Empty: every pending gang is planned afresh.
    promised: tuple[Reservation, ...] = ()


@dataclass(frozen=True)
class SolveConfig:
    time_limit: float = 2.0  # wall-clock seconds for the whole cycle
    workers: int = 1  # CP-SAT interleaves its strategies on these threads; 1 leaves a core for the event loop
    # Node pools (gangs that may use no node in common) solved apart, in up to this many processes at once
    # (pools.py); CP-SAT's workers are shared among them. 1: the cycle solved whole, in this process.
    parallel: int = 1
    candidates_per_pod: int = 3  # candidate nodes kept per pending pod of a gang (pruning on big clusters)
    min_candidates: int = 16
    use_cpsat: bool = True  # False: the greedy allocator alone
    preemption: bool = True  # pending gangs that may preempt evict lower-priority pods to fit
    # Pending gangs that get a planned start per cycle, in queue order (as Slurm's backfill depth): each that
    # cannot start now holds a reservation from then on, which no gang started later delays. 0: no plan.
    reservations: int = PLAN_DEPTH
    # Only starving gangs (`Gang.starving`) may take one of those reservations; the others blocked get a
    # forecast. Off by default: the timelines measured trade one figure for another with it (docs/benchmarks.md).
    plan_starving_only: bool = False
    # Relaxed backfill (Ward, Mahood and West, 2002): a reservation is held no sooner than (1 + this) times the
    # gang's earliest wait from now (the first time it fits from then on), and at most this times its runtime past
    # that, so more gangs may start now on its nodes; the gang still starts as soon as it fits, and keeps the
    # start it is shown. 0: at its earliest start. Not where queues compete (a reservation is within its queue's
    # fair share, and relaxed its room would go to other queues' gangs). 1: more of the time-based timelines'
    # targets met than with 0, at a cost to the synthetic mix's tail on other seeds (docs/benchmarks.md).
    plan_relaxation: float = 1.0
    # Seconds a running pod must have run before it may be evicted for a higher priority (preemption) or for
    # another queue's fair share (reclaim): a restarted job loses its work since its last checkpoint. A queue's
    # own `min_runtime` overrides both for its pods.
    preempt_min_runtime: float = 0.0
    reclaim_min_runtime: float = 0.0
    # Pending gangs past those planned that are given an expected start that holds nothing (a forecast).
    forecasts: int = FORECAST_DEPTH
    # How gangs of one level and fair share are ordered (ORDERS): the walk that starts and plans them, the
    # greedy hint, and which gangs the plan reaches. Largest expansion factor first by default: over time it
    # is ahead of first come first served on most figures of every timeline measured (docs/benchmarks.md).
    order: str = "expansion"
    # Seconds between the cycles that start planned gangs, as Slurm's bf_resolution: the plan's times are
    # rounded up to them (a gang planned for 10:04:17 starts at the 10:05 cycle, and its nodes free a minute
    # later too), so a chain of planned gangs on a node stays whole. 0: cycles run when pods end, as live.
    plan_resolution: float = 0.0
    # A deterministic budget instead of the clock: the search makes at most this many steps, every hint variant
    # runs, and CP-SAT and the bounds stop on their own work only (as much as `time_limit` grants them), so the
    # same input gives the same placement however loaded the machine. None: the wall clock, as live.
    steps: int | None = None


@dataclass(frozen=True)
class GangResult:
    name: str
    placed: bool
    min_member: int
    pods: int  # members: pending plus bound
    placed_pods: int  # pending members placed this cycle
    priority: int
    reason: str = ""


@dataclass(frozen=True)
class Eviction:
    """A running pod to evict so that gang `preemptor` fits."""

    pod: str
    node: str
    preemptor: str
    reason: str


@dataclass(frozen=True)
class Reservation:
    """A pending gang's planned start: capacity held for it on its nodes from the estimated time running pods
    (and the gangs planned before it) leave it room. Gangs started now may use those nodes only where they
    leave the reservation whole (they end by `start`, or take only what it does not need)."""

    gang: str
    nodes: tuple[str, ...]
    start: float | None  # on the cycle's clock; None: waiting for an estimate of running pods' ends
    gpus: int = 0  # GPUs held on `nodes`
    bindings: Mapping[str, str] = field(default_factory=dict)  # pod -> node it would take at `start`
    end: float | None = None  # start plus the gang's estimated runtime; None: no estimate (or no start)
    held: bool = True  # False: a forecast past the plan's depth, which holds nothing and promises nothing
    guessed: bool = False  # a forecast because its start counts on a runtime nobody declared (planning.py)
    # The earliest it could start, where the plan holds it later (`SolveConfig.plan_relaxation`); None: `start`.
    earliest: float | None = None


@dataclass(frozen=True)
class Share:
    """The device a fractional pod takes part of: GPU `gpu` of `node`, `milli` thousandths of it."""

    node: str
    gpu: int
    milli: int


@dataclass(frozen=True)
class Placement:
    bindings: Mapping[str, str]  # pod -> node
    gangs: tuple[GangResult, ...]
    status: str  # OPTIMAL | FEASIBLE | GREEDY (CP-SAT found nothing better or was not run)
    objective: int  # gangs placed
    best_bound: int  # upper bound on gangs placed, given strict priority order
    solve_seconds: float
    stages: tuple[Mapping[str, object], ...] = ()  # per-stage solver statistics
    levels: tuple[Mapping[str, int], ...] = ()  # per priority level: gangs placed, bound, gangs modelled
    nominations: Mapping[str, str] = field(default_factory=dict)  # pod -> node: binds once its victims are gone
    evictions: tuple[Eviction, ...] = ()  # this cycle's preemptions
    reservations: tuple[Reservation, ...] = ()  # queue order
    forecasts: tuple[Reservation, ...] = ()  # expected starts of gangs past the reservations; nothing held
    backfilled: tuple[str, ...] = ()  # gangs started on nodes a reservation holds (they leave it whole)
    queues: tuple[QueueResult, ...] = ()
    shares: Mapping[str, Share] = field(default_factory=dict)  # fractional pod placed -> its device


@dataclass(frozen=True)
class QueueResult:
    """A queue after the cycle: what it holds (bound pods plus this placement) and its dominant shares of the
    cluster (the largest fraction of any resource), held and fair."""

    name: str
    weight: int
    capability: Resources
    allocated: Resources  # a parent queue: what the queues under it hold, together
    share: float
    fair_share: float
    parent: str = ""
    usage: float = 0.0  # its usage history (with its children's), as the fair share counted it
