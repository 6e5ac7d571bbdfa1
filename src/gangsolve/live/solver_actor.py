"""The solver actor: one cycle at a time.

It waits for a change that matters to scheduling (or the resync period, or a pod's back-off to end), takes an
immutable view from the store and groups gangs in a worker thread. When a gang that changed has all its
members, it solves at once; while the gangs that changed still miss members, it gathers more changes for at
most `debounce` seconds. Then it solves, in the worker thread, the gangs that may place differently than last
time: gangs new or changed since the last cycle, gangs holding a nomination (the room it holds must stay
theirs), and every gang once capacity may have been freed (a pod, an assumption or a nomination gone, a node
or device changed) or the resync period has passed. A gang that did not fit and has not changed since waits
for such an event, as kube-scheduler parks an unschedulable pod until a cluster event could make it
schedulable; its last result is carried into every cycle's report.

The view holds the pending pods and the pods that may share a gang with them; other pods count only through
the capacity they hold. A cycle that may preempt (preemption on, and a gang to solve of higher priority than
some pod bound), holds a nomination (whose pods leaving there count) or solves a starving gang while
reservations are on (a reservation is planned from running pods' expected ends) takes a view of every pod
instead; a cycle on a partial view never preempts. Gangs holding a nomination, and starving gangs while
reservations are on, are solved every cycle: what they hold limits where the others go.

For every placed gang it assumes the pods (and the devices chosen for their claims) in the store and sends a
`GangPlan` to the binder. When the cycle preempted, it records the nominations (and those to clear: pods no
longer nominated, still pending) and the victims in the store the same way, and sends one `Preemption` to the
binder first. Each cycle's `CycleResult` goes to feedback's mailbox.

It owns its settings, a cycle counter, the gangs left waiting by the last cycles, a cache of converted pods
(used only by the one cycle running) and the runtime estimator with its workload history, which learns from the
succeeded pods a watcher sends it (drained before a cycle groups gangs, never while a cycle reads the
estimator); it stops when cancelled (a cycle cancelled mid-solve has assumed and sent nothing).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from gangsolve.edge import dra, objects, reservations
from gangsolve.edge.errors import InputError
from gangsolve.edge.estimates import Estimator, with_estimates
from gangsolve.edge.gangs import STARVATION_SECONDS, Grace, Waiting, build_cluster, created, waiting
from gangsolve.edge.objects import is_waiting_for
from gangsolve.edge.snapshot import Snapshot
from gangsolve.live import logs
from gangsolve.live.channels import Latest
from gangsolve.live.metrics import Metrics
from gangsolve.live.store import ClusterStore, View, pod_key
from gangsolve.live.watchers import Event, Resync
from gangsolve.solver import Cluster, Gang, GangResult, Node, Placement, Pod, SolveConfig, solve
from gangsolve.solver.devices import allocate
from gangsolve.solver.validate import validate_devices


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
    """A placed gang for the binder: each pod (key, the uid that was solved, node), and the claims to write."""

    gang: str
    pods: tuple[tuple[str, str, str], ...]
    planned_at: float  # monotonic
    claims: tuple[ClaimWrite, ...] = ()


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


def _size(snapshot: Snapshot) -> int:
    return (
        len(snapshot.nodes)
        + len(snapshot.pods)
        + len(snapshot.pdbs)
        + len(snapshot.pod_groups)
        + len(snapshot.priority_classes)
        + len(snapshot.queues)
        + len(snapshot.resource_slices)
        + len(snapshot.device_classes)
        + len(snapshot.resource_claims)
        + len(snapshot.claim_templates)
    )


Signature = tuple


def _pod_signature(pod: Pod) -> Signature:
    """Everything of a pending pod that decides where it fits (not its queue position)."""
    return (
        pod.name,
        pod.priority,
        tuple(sorted(pod.requests.items())),
        tuple(sorted(pod.node_selector.items())),
        pod.affinity,
        pod.tolerations,
    )


class PodConverter:
    """`objects.pod`, remembered per pod object (objects from the store are never changed in place, so an
    object seen before converts as before): a cycle converts only the pods that changed since the last one.
    Used by one cycle at a time, in its worker thread."""

    def __init__(self) -> None:
        self._memo: dict[str, tuple[dict, Pod, Signature]] = {}
        self._classes: list[tuple[str, dict]] = []
        self._seen: set[str] = set()

    def begin(self, classes: Mapping[str, dict]) -> None:
        if list(classes.items()) != self._classes:  # priorities may differ: convert everything afresh
            self._memo.clear()
            self._classes = list(classes.items())
        self._seen = set()

    def end(self) -> None:
        """Forget pods this cycle did not see (bound, gone): memory stays what is pending."""
        self._memo = {k: v for k, v in self._memo.items() if k in self._seen}

    def __call__(self, obj: dict, classes: Mapping[str, dict], order: int) -> Pod:
        key = pod_key(obj)
        self._seen.add(key)
        hit = self._memo.get(key)
        if hit is None or hit[0] is not obj:
            pod = objects.pod(obj, classes, order)
            self._memo[key] = (obj, pod, _pod_signature(pod))
            return pod
        pod = hit[1]
        return pod if pod.order == order else replace(pod, order=order)

    def signature(self, gang: Gang) -> Signature:
        """Everything of a gang that decides whether and where it fits (a pod's devices included: they change
        its requests and affinity, not its object)."""
        pods = []
        for p in gang.pods:
            hit = self._memo.get(p.name)
            same = hit is not None and hit[1].requests is p.requests and hit[1].affinity is p.affinity
            pods.append(hit[2] if hit is not None and same else _pod_signature(p))
        return (gang.min_member, gang.bound_nodes, gang.colocate, gang.starving, tuple(pods))


@dataclass(frozen=True)
class Grouped:
    """A snapshot's gangs: what `group` made of it."""

    cluster: Cluster  # every node and every pending gang
    waiting: dict[str, Waiting]  # pending pods that join no gang yet
    skipped: list[InputError]  # objects left out as unreadable
    snapshot: Snapshot  # the snapshot without them


@dataclass(frozen=True)
class Prepared:
    """A cycle's input: the view it was taken from, every gang, and which of them to solve."""

    view: View
    cluster: Cluster  # every node and every pending gang
    snapshot: Snapshot  # the view's, without the objects skipped
    skipped: tuple[InputError, ...]
    solve: tuple[Gang, ...]  # the gangs that may place differently than last time
    signatures: dict[str, Signature]
    waiting: dict[str, Waiting]  # pending pods that join no gang yet

    @property
    def ready(self) -> bool:
        """A gang to solve has all the members it needs: no reason to wait for more changes."""
        return any(len(g.pods) >= g.need for g in self.solve)


def group(
    snapshot: Snapshot,
    scheduler_name: str,
    group_label: str | None,
    *,
    grace: Grace | None = None,
    now: datetime | None = None,
    nodes: tuple[Node, ...] | None = None,
    convert_pod=None,
    starvation: float = STARVATION_SECONDS,
    estimator: Estimator | None = None,
) -> Grouped:
    """The cluster of a snapshot, with every gang (and, with `estimator`, the expected runtimes of gangs and
    running pods), and the pending pods that join no gang yet. An object the edge cannot read (a PodGroup with
    `minMember: many`, a pod asking for more cpu than the model can count, a runtime annotation that is no
    duration) is left out and returned with its error: one bad object must not stop everyone else."""
    skipped: list[InputError] = []
    # The live clock marks gangs pending past the starvation age, so big gangs are not passed over, and ends
    # the wait of pods whose gang definition never came.
    now = now or datetime.now(UTC)
    while True:
        try:
            cluster = build_cluster(
                snapshot,
                scheduler_name,
                group_label,
                strict=False,
                now=now,
                grace=grace,
                nodes=nodes,
                convert_pod=convert_pod,
                starvation_seconds=starvation,
            )
            if estimator is not None:
                cluster = with_estimates(snapshot, cluster, now, estimator, scheduler_name)
            return Grouped(cluster, waiting(snapshot, scheduler_name, group_label, now, grace), skipped, snapshot)
        except InputError as exc:
            smaller = snapshot.without(exc.obj)
            if _size(smaller) == _size(snapshot):
                raise  # the error names nothing that can be left out: this cycle cannot run
            skipped.append(exc)
            snapshot = smaller


@dataclass(frozen=True)
class Plan:
    """What one cycle decided, from one snapshot."""

    cluster: Cluster
    placement: Placement
    skipped: list[InputError]  # objects left out as unreadable
    waiting: dict[str, Waiting]  # pending pods that join no gang yet
    claims: dict[str, tuple[ClaimWrite, ...]] = field(default_factory=dict)  # placed pod -> its claims' writes


def decide(
    cluster: Cluster,
    snapshot: Snapshot,
    scheduler_name: str,
    time_limit: float,
    previous: Mapping[str, str] | None = None,
    preemption: bool = True,
    reservations: int = 0,
) -> Plan:
    """Solve the cluster's gangs (up to `reservations` starving ones reserving room they cannot take now), then
    choose the devices of the placed pods' claims. A gang the solver cannot handle is left out (and returned as
    skipped), not the cycle. `previous` (the last cycle's bindings) warm-starts the solver where its gangs are
    still pending and still fit."""
    config = SolveConfig(time_limit=time_limit, preemption=preemption, reservations=reservations)
    skipped: list[InputError] = []
    try:
        placement = solve(cluster, config, previous)
    except Exception as exc:  # a gang the solver cannot handle must not stop the others: find it, leave it out
        solve(replace(cluster, gangs=()), SolveConfig(use_cpsat=False))  # the nodes alone must be solvable
        culprits = _failing_gangs(cluster, list(cluster.gangs))
        if not culprits:
            raise
        logs.error("gangs left out: the solver fails on them", gangs=",".join(g.name for g in culprits), exc_info=exc)
        skipped = [
            InputError(f"Pod {p.name}", "", f"its gang cannot be solved: {type(exc).__name__}: {exc}")
            for g in culprits
            for p in g.pods
        ]
        cluster = replace(cluster, gangs=tuple(g for g in cluster.gangs if g not in culprits))
        placement = solve(cluster, config, previous)
    placement, claims = _allocate(snapshot, scheduler_name, cluster, placement)
    return Plan(cluster, placement, skipped, {}, claims)


def plan(
    snapshot: Snapshot,
    scheduler_name: str,
    group_label: str | None,
    time_limit: float,
    grace: Grace | None = None,
    now: datetime | None = None,
    previous: Mapping[str, str] | None = None,
    preemption: bool = True,
    estimator: Estimator | None = None,
    reservations: int = SolveConfig.reservations,
    starvation: float = STARVATION_SECONDS,
) -> Plan:
    """A whole cycle on a snapshot, every gang solved: the pure part, as `gangsolve solve --now` replays it. With
    `estimator`, gangs pending over `starvation` seconds that cannot start get up to `reservations`
    reservations from running pods' expected ends."""
    grouped = group(
        snapshot, scheduler_name, group_label, grace=grace, now=now, starvation=starvation, estimator=estimator
    )
    decided = decide(
        grouped.cluster,
        grouped.snapshot,
        scheduler_name,
        time_limit,
        previous,
        preemption,
        reservations if estimator is not None else 0,
    )
    return replace(decided, skipped=grouped.skipped + decided.skipped, waiting=grouped.waiting)


def _allocate(
    snapshot: Snapshot, scheduler_name: str, cluster: Cluster, placement: Placement
) -> tuple[Placement, dict[str, tuple[ClaimWrite, ...]]]:
    """Devices for the claims of the placed pods (gangs whose claims cannot be met are taken off), checked by
    the device oracle, as the writes the binder makes before binding."""
    model = dra.model(snapshot, scheduler_name)
    if not model.claims_of:
        return placement, {}
    placement, allocations = allocate(cluster, placement, model.state)
    violations = validate_devices(model.state, placement, allocations)
    if violations:
        raise RuntimeError(f"device assignment unsound: {violations[0]}")
    out: dict[str, tuple[ClaimWrite, ...]] = {}
    for pod, node in placement.bindings.items():
        writes = []
        for claim in model.claims_of.get(pod, ()):
            ns, _, name = claim.partition("/")
            obj = snapshot.resource_claims[(ns, name)]
            meta = obj["metadata"]
            allocation = None
            if claim in allocations:
                allocation = dra.allocation_result(claim, allocations[claim], node, model.state)
            writes.append(ClaimWrite(pod, claim, meta.get("uid", ""), meta.get("resourceVersion", ""), allocation))
        if writes:
            out[pod] = tuple(writes)
    return placement, out


def _failing_gangs(cluster: Cluster, gangs: list[Gang]) -> list[Gang]:
    """The gangs whose (greedy) solve raises, by bisection: a handful of cheap solves, only after a failure."""
    try:
        solve(replace(cluster, gangs=tuple(gangs)), SolveConfig(use_cpsat=False))
        return []
    except Exception:
        if len(gangs) == 1:
            return gangs
    half = len(gangs) // 2
    return _failing_gangs(cluster, gangs[:half]) + _failing_gangs(cluster, gangs[half:])


@dataclass(frozen=True)
class _Waiting:
    """A gang a cycle left pending: what it looked like then, and the result it got."""

    signature: Signature
    result: GangResult


class SolverActor:
    def __init__(
        self,
        store: ClusterStore,
        metrics: Metrics,
        *,
        scheduler_name: str,
        group_label: str | None,
        time_limit: float,
        debounce: float,
        resync_period: float,
        grace: Grace | None = None,
        preemption: bool = True,
        estimator: Estimator | None = None,
        reservations: int = SolveConfig.reservations,
        starvation: float = STARVATION_SECONDS,
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.scheduler_name = scheduler_name
        self.group_label = group_label
        self.time_limit = time_limit
        self.debounce = debounce
        self.resync_period = resync_period
        self.grace = grace or Grace()
        self.preemption = preemption
        self.estimator = estimator or Estimator(default=None)
        self.reservations = reservations
        self.starvation = starvation
        self._succeeded: MemoryObjectReceiveStream[Event | Resync] | None = None  # finished pods to learn from
        self.cycles = 0
        self.whole_views = 0  # cycles that read every pod (they may preempt, hold a nomination or reserve)
        self._previous: dict[str, str] = {}  # the last cycle's bindings: the next solve's warm start
        self._grace_ends = math.inf  # monotonic: when the first pod waiting for its gang definition stops waiting
        self._converter = PodConverter()
        self._waiting: dict[str, _Waiting] = {}  # gang name -> how it looked when a cycle left it pending
        self._freed: int | None = None  # the store's `freed` at the last cycle that solved every gang
        self._full_at = -float("inf")  # monotonic: when that was
        self._again = False  # the last cycle placed gangs and left others pending: solve those again at once
        # Pods the last cycle held back for a gang definition, and when each was created: new ones need a cycle
        # (to say so, and to time the end of their grace) even with no gang to solve, and how long one had
        # existed when it stopped waiting is what the grace added to its latency.
        self._held: dict[str, datetime | None] = {}

    async def run(
        self,
        plans: MemoryObjectSendStream[GangPlan | Preemption],
        results: Latest[CycleResult],
        succeeded: MemoryObjectReceiveStream[Event | Resync] | None = None,
    ) -> None:
        """Cycle until cancelled; closing `plans` on the way out tells the binder no more will come. `succeeded`:
        a watch of our pods that succeeded, which the runtime history learns from."""
        self._succeeded = succeeded
        async with plans:
            seen = -1
            while True:
                if self.store.generation == seen and not self._again:
                    now = time.monotonic()
                    wake = min(
                        self._full_at + self.resync_period - now,
                        self.store.next_backoff_expiry(),
                        self._grace_ends - now,
                    )
                    with anyio.move_on_after(max(wake, 0.0)):
                        await self.store.wait_for_change(seen)
                self._again = False
                deadline = time.monotonic() + self.debounce
                while True:
                    seen = self.store.generation
                    prepared = await self.prepare()
                    if prepared is None or not prepared.solve or prepared.ready or time.monotonic() >= deadline:
                        break
                    # Only gangs still missing members changed: gather more, for at most the debounce.
                    with anyio.move_on_after(deadline - time.monotonic()):
                        await self.store.wait_for_change(seen)
                if prepared is not None and (
                    prepared.solve or self._full_due() or prepared.waiting.keys() != self._held.keys()
                ):
                    await self.cycle(plans, results, prepared)

    def _full_due(self) -> bool:
        """Every gang is worth solving again: room may have been made, a pod stopped waiting for its gang
        definition, or the resync period passed."""
        now = time.monotonic()
        return self._freed != self.store.freed or now - self._full_at >= self.resync_period or now >= self._grace_ends

    async def prepare(self, whole: bool = False) -> Prepared | None:
        """The view (of every pod if `whole`, else of what a cycle of ours reads) and its gangs (grouped in a
        worker thread), and which gangs to solve; None if it fails."""
        self._learn()
        view = self.store.view(None if whole else self.scheduler_name)
        full = self._full_due()
        try:
            return await anyio.to_thread.run_sync(self._prepare, view, full, abandon_on_cancel=True)
        except Exception as exc:  # a bug must cost one cycle, never the scheduler
            logs.error("cycle failed", error=f"{type(exc).__name__}: {exc}", exc_info=exc)
            self.metrics.schedule_attempts.labels("error").inc()
            return None

    def _prepare(self, view: View, full: bool) -> Prepared:
        self._converter.begin(view.snapshot.priority_classes)
        grouped = group(
            view.snapshot,
            self.scheduler_name,
            self.group_label,
            grace=self.grace,
            nodes=view.nodes,
            convert_pod=self._converter,
            starvation=self.starvation,
            estimator=self.estimator,
        )
        self._converter.end()
        cluster = grouped.cluster
        signatures = {g.name: self._converter.signature(g) for g in cluster.gangs}
        if full:
            todo = cluster.gangs
        else:
            todo = tuple(
                g
                for g in cluster.gangs
                if (w := self._waiting.get(g.name)) is None
                or w.signature != signatures[g.name]
                or self._holds(g, cluster)
            )
        skipped = (*view.unreadable, *grouped.skipped)
        return Prepared(view, cluster, grouped.snapshot, skipped, todo, signatures, grouped.waiting)

    def _holds(self, gang: Gang, cluster: Cluster) -> bool:
        """Whether the gang holds room that limits where the others go: a nomination, or (starving, while
        reservations are on) a reservation planned each cycle."""
        return (self.reservations > 0 and gang.starving) or any(p.name in cluster.nominated for p in gang.pods)

    def _needs_whole(self, prepared: Prepared) -> bool:
        """Whether the cycle must read every pod: a gang to solve may preempt (preemption chooses among all
        running pods, and only those of lower priority), holds a nomination (the pods leaving its nodes decide
        whether it still fits there) or may reserve (from the expected ends of the pods running)."""
        view = prepared.view
        return view.partial and any(
            self._holds(g, prepared.cluster)
            or (self.preemption and g.preempts and g.need > 0 and g.priority > view.lowest_bound)
            for g in prepared.solve
        )

    async def cycle(
        self,
        plans: MemoryObjectSendStream[GangPlan | Preemption],
        results: Latest[CycleResult],
        prepared: Prepared | None = None,
    ) -> CycleResult | None:
        started = time.perf_counter()
        if prepared is None:
            prepared = await self.prepare()
            if prepared is None:
                return None
        if self._needs_whole(prepared):
            prepared = await self.prepare(whole=True)
            if prepared is None:
                return None
            self.whole_views += 1
        full = len(prepared.solve) == len(prepared.cluster.gangs) and self._full_due()
        view = prepared.view
        backing_off = self.store.backing_off()
        cluster = replace(prepared.cluster, gangs=prepared.solve)
        if view.partial:  # its running pods are not all the possible victims: no preemption on it
            cluster = replace(cluster, running=(), budgets={})
        try:
            decided = await anyio.to_thread.run_sync(
                decide,
                cluster,
                prepared.snapshot,
                self.scheduler_name,
                self.time_limit,
                self._previous,
                self.preemption,
                self.reservations,
                abandon_on_cancel=True,
            )
        except Exception as exc:  # a bug must cost one cycle, never the scheduler
            logs.error("cycle failed", error=f"{type(exc).__name__}: {exc}", exc_info=exc)
            self.metrics.schedule_attempts.labels("error").inc()
            return None
        solved, placement = decided.cluster, decided.placement
        skipped = [*prepared.skipped, *decided.skipped]
        for err in skipped:
            logs.warning("object left out of the cycle", object=err.obj, error=str(err))
            self.metrics.objects_skipped.inc()
        self.cycles += 1
        if full:
            self._freed, self._full_at = view.freed, time.monotonic()
        self._previous = dict(placement.bindings)
        self._observe_waits(view.snapshot, prepared.waiting)
        ends = [w.until for w in prepared.waiting.values() if w.until is not None]
        self._grace_ends = (
            time.monotonic() + (min(ends) - datetime.now(UTC)).total_seconds() + 0.05 if ends else math.inf
        )

        # Gangs not solved this cycle keep waiting with their last result; those solved and left pending join them,
        # unless this cycle placed gangs: then why they wait may be what those took ("gangs placed this cycle
        # took it"), so the next cycle, right after, solves them again against the capacity left.
        attempted = {g.name for g in prepared.solve}
        carried = [(g, self._waiting[g.name].result) for g in prepared.cluster.gangs if g.name not in attempted]
        left = [(g, r) for g, r in zip(solved.gangs, placement.gangs, strict=True) if not r.placed]
        self._again = bool(placement.bindings and left)
        self._waiting = {g.name: self._waiting[g.name] for g, _r in carried} | {
            g.name: _Waiting(prepared.signatures[g.name], r) for g, r in left if not self._again
        }
        everything = replace(solved, gangs=(*solved.gangs, *(g for g, _r in carried)))
        report = replace(placement, gangs=(*placement.gangs, *(r for _g, r in carried)))
        self._observe(everything, report)
        for kind, count in self.store.counts().items():
            self.metrics.held_objects.labels(kind).set(count)

        # Assume and send with no await in between: a cancelled cycle leaves neither half done.
        uids = {pod_key(p): p["metadata"].get("uid", "") for p in view.snapshot.pods}
        now = time.monotonic()
        carried_pods = {p.name for g, _r in carried for p in g.pods}
        preemption = self._preemption(view.snapshot, placement, uids, carried_pods, now)
        if preemption is not None:
            self.store.nominate(preemption.nominations)
            self.store.evict((v.pod, v.uid) for v in preemption.victims)
            plans.send_nowait(preemption)
        for gang in solved.gangs:
            placed = [
                (p.name, uids.get(p.name, ""), placement.bindings[p.name])
                for p in gang.pods
                if p.name in placement.bindings
            ]
            if placed:
                writes = tuple(w for key, _uid, _node in placed for w in decided.claims.get(key, ()))
                gang_plan = GangPlan(gang.name, tuple(placed), now, writes)
                chosen = [(w.pod, w.claim, w.allocation) for w in writes if w.allocation is not None]
                self.store.assume(gang.name, gang_plan.pods, chosen)
                plans.send_nowait(gang_plan)
        result = CycleResult(
            view.snapshot,
            everything,
            report,
            tuple((e.obj, str(e)) for e in skipped),
            backing_off,
            prepared.waiting,
            carried=len(carried),
        )
        results.put(result)
        self.metrics.cycle_duration.observe(time.perf_counter() - started)
        (logs.info if solved.gangs else logs.debug)(
            "cycle",
            n=self.cycles,
            gangs=len(solved.gangs),
            waiting=len(carried),
            whole=not view.partial,
            placed=placement.objective,
            bound=placement.best_bound,
            pods_placed=len(placement.bindings),
            evicted=len(placement.evictions),
            status=placement.status,
            solve_s=round(placement.solve_seconds, 3),
            cycle_s=round(time.perf_counter() - started, 3),
        )
        return result

    def _preemption(
        self,
        snapshot: Snapshot,
        placement: Placement,
        uids: Mapping[str, str],
        carried: set[str],
        now: float,
    ) -> Preemption | None:
        """Nominations that change (set, moved, or cleared where a pending pod of ours is no longer nominated
        and not placed: binding clears it on the API server) and the victims; None when there are neither. Pods
        of gangs this cycle did not solve (`carried`) keep what they have."""
        shown = {
            pod_key(p): (p.get("status") or {}).get("nominatedNodeName") or None
            for p in snapshot.pods
            if is_waiting_for(p, self.scheduler_name) and pod_key(p) not in carried
        }
        nominations: list[tuple[str, str, str | None]] = [
            (k, uids.get(k, ""), n) for k, n in placement.nominations.items() if shown.get(k) != n
        ]
        nominations += [
            (k, uids.get(k, ""), None)
            for k, n in shown.items()
            if n and k not in placement.nominations and k not in placement.bindings
        ]
        victims = [Victim(e.pod, uids.get(e.pod, ""), e.node, e.preemptor, e.reason) for e in placement.evictions]
        if not nominations and not victims:
            return None
        self.metrics.preemption_victims.inc(len(victims))
        return Preemption(tuple(nominations), tuple(victims), now)

    def _observe_waits(self, snapshot: Snapshot, held: Mapping[str, Waiting]) -> None:
        """A pod the last cycle held back for its gang definition and this one did not (the definition came, or
        the grace ended): how long it had existed then is what the grace added to its latency."""
        now = datetime.now(UTC)
        pending = {pod_key(p) for p in snapshot.pods if not (p.get("spec") or {}).get("nodeName")}
        for key, since in self._held.items():
            if key not in held and key in pending and since is not None:
                self.metrics.definition_wait.observe(max(0.0, (now - since).total_seconds()))
        self._held = {}
        for p in snapshot.pods:
            if pod_key(p) in held:
                try:
                    self._held[pod_key(p)] = created(p)
                except InputError:  # its timestamp was unreadable: the cycle said so already
                    self._held[pod_key(p)] = None

    def _learn(self) -> None:
        """The history learns from the succeeded pods received since the last cycle (a list after a restart
        or relist, then one at a time); a pod whose times do not parse is skipped."""
        if self._succeeded is None:
            return
        pods: list[dict] = []
        while True:
            try:
                message = self._succeeded.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                break
            if isinstance(message, Resync):
                pods += message.objects
            elif message.type != "DELETED":
                pods.append(message.obj)
        for pod in pods:
            try:
                self.estimator.learn([pod])
            except InputError as exc:
                logs.warning("finished pod not learned from", object=exc.obj, error=str(exc))
        self.metrics.held_objects.labels("runtime_history").set(len(self.estimator.history.seen))

    def _observe(self, cluster: Cluster, placement: Placement) -> None:
        m = self.metrics
        m.solve_duration.observe(placement.solve_seconds)
        m.solver_status.labels(placement.status).inc()
        m.optimality_gap.set((placement.best_bound - placement.objective) / max(placement.best_bound, 1))
        pending_gangs = pending_pods = 0
        for gang, result in zip(cluster.gangs, placement.gangs, strict=True):
            if result.placed and result.placed_pods:
                m.schedule_attempts.labels("scheduled").inc()
            elif not result.placed:
                m.schedule_attempts.labels("unschedulable").inc()
                pending_gangs += 1
            pending_pods += len(gang.pods) - result.placed_pods
        m.pending_gangs.set(pending_gangs)
        m.pending_pods.set(pending_pods)
        m.observe_queues(cluster, placement)
        figures = reservations.figures(placement)
        m.reservations.set(figures["reservations"])
        m.reserved_gpus.set(figures["reserved_gpus"])
        m.waiting_for_estimate.set(figures["waiting_for_estimate"])
        m.backfilled_gangs.inc(figures["backfilled_gangs"])
