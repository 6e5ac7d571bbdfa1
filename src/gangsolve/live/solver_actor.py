"""The solver actor: one cycle at a time.

It waits for a change that matters to scheduling (or the resync period, or a pod's back-off to end), lets
more changes arrive for `debounce` seconds, takes an immutable snapshot from the store, groups gangs and
solves in a worker thread, then for every placed gang assumes its pods in the store and sends a `GangPlan` to
the binder. When the cycle preempted, it records the nominations (and those to clear: pods no longer
nominated, still pending) and the victims in the store the same way, and sends one `Preemption` to the binder
first. Each cycle's `CycleResult` goes to feedback's mailbox. It owns its settings, a cycle counter and the
runtime estimator with its workload history, which learns from the succeeded pods a watcher sends it (drained
at the start of each cycle, never while a solve reads the estimator); it stops when cancelled (a cycle
cancelled mid-solve has assumed and sent nothing).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from gangsolve import dra, reservations
from gangsolve.errors import InputError
from gangsolve.estimates import Estimator, with_estimates
from gangsolve.gangs import STARVATION_SECONDS, Grace, Waiting, build_cluster, created, waiting
from gangsolve.live import logs
from gangsolve.live.channels import Latest
from gangsolve.live.metrics import Metrics
from gangsolve.live.store import ClusterStore, pod_key
from gangsolve.live.watchers import Event, Resync
from gangsolve.objects import is_waiting_for
from gangsolve.snapshot import Snapshot
from gangsolve.solver import Cluster, Gang, Placement, SolveConfig, solve
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
    cluster: Cluster
    placement: Placement
    skipped: tuple[tuple[str, str], ...] = ()  # objects left out as unreadable: (`Kind ns/name`, error)
    backing_off: dict[str, float] = field(default_factory=dict)  # pod key -> seconds of back-off left
    waiting: dict[str, Waiting] = field(default_factory=dict)  # pods joining no gang yet, and why


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


@dataclass(frozen=True)
class Plan:
    """What one cycle decided, from one snapshot."""

    cluster: Cluster
    placement: Placement
    skipped: list[InputError]  # objects left out as unreadable
    waiting: dict[str, Waiting]  # pending pods that join no gang yet
    claims: dict[str, tuple[ClaimWrite, ...]] = field(default_factory=dict)  # placed pod -> its claims' writes


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
    """The pure part of a cycle, run in a worker thread. An object the edge cannot read (a PodGroup with
    `minMember: many`, a pod asking for more cpu than the model can count, a runtime annotation that is no
    duration) is left out of the cycle and returned with its error: one bad object must not stop everyone else.
    `previous` (the last cycle's bindings) warm-starts the solver where its gangs are still pending and still
    fit. With `estimator`, gangs pending over `starvation` seconds that cannot start get up to `reservations`
    reservations from running pods' expected ends."""
    skipped: list[InputError] = []
    # The live clock marks gangs pending past the starvation age, so big gangs are not passed over, and ends
    # the wait of pods whose gang definition never came.
    now = now or datetime.now(UTC)
    while True:
        try:
            cluster = build_cluster(
                snapshot, scheduler_name, group_label, strict=False, now=now, starvation_seconds=starvation, grace=grace
            )
            if estimator is not None:
                cluster = with_estimates(snapshot, cluster, now, estimator, scheduler_name)
            held = waiting(snapshot, scheduler_name, group_label, now, grace)
            break
        except InputError as exc:
            smaller = snapshot.without(exc.obj)
            if _size(smaller) == _size(snapshot):
                raise  # the error names nothing that can be left out: this cycle cannot run
            skipped.append(exc)
            snapshot = smaller
    config = SolveConfig(
        time_limit=time_limit, preemption=preemption, reservations=reservations if estimator is not None else 0
    )
    try:
        placement = solve(cluster, config, previous)
    except Exception as exc:  # a gang the solver cannot handle must not stop the others: find it, leave it out
        solve(replace(cluster, gangs=()), SolveConfig(use_cpsat=False))  # the nodes alone must be solvable
        culprits = _failing_gangs(cluster, list(cluster.gangs))
        if not culprits:
            raise
        logs.error("gangs left out: the solver fails on them", gangs=",".join(g.name for g in culprits), exc_info=exc)
        skipped += [
            InputError(f"Pod {p.name}", "", f"its gang cannot be solved: {type(exc).__name__}: {exc}")
            for g in culprits
            for p in g.pods
        ]
        cluster = replace(cluster, gangs=tuple(g for g in cluster.gangs if g not in culprits))
        placement = solve(cluster, config, previous)
    placement, claims = _allocate(snapshot, scheduler_name, cluster, placement)
    return Plan(cluster, placement, skipped, held, claims)


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
        self._previous: dict[str, str] = {}  # the last cycle's bindings: the next solve's warm start
        self._grace_ends = math.inf  # monotonic: when the first pod waiting for its gang definition stops waiting
        self._waiting: dict[str, datetime | None] = {}  # pod key -> creation, of the pods the last cycle held back

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
                if self.store.generation == seen:
                    wake = min(
                        self.resync_period, self.store.next_backoff_expiry(), self._grace_ends - time.monotonic()
                    )
                    with anyio.move_on_after(max(wake, 0)):
                        await self.store.wait_for_change(seen)
                await anyio.sleep(self.debounce)
                seen = self.store.generation
                await self.cycle(plans, results)

    async def cycle(
        self, plans: MemoryObjectSendStream[GangPlan | Preemption], results: Latest[CycleResult]
    ) -> CycleResult | None:
        started = time.perf_counter()
        self._learn()
        snapshot = self.store.snapshot()
        backing_off = self.store.backing_off()
        try:
            decided = await anyio.to_thread.run_sync(
                plan,
                snapshot,
                self.scheduler_name,
                self.group_label,
                self.time_limit,
                self.grace,
                None,
                self._previous,
                self.preemption,
                self.estimator,
                self.reservations,
                self.starvation,
                abandon_on_cancel=True,
            )
        except Exception as exc:  # a bug must cost one cycle, never the scheduler
            logs.error("cycle failed", error=f"{type(exc).__name__}: {exc}", exc_info=exc)
            self.metrics.schedule_attempts.labels("error").inc()
            return None
        cluster, placement, skipped = decided.cluster, decided.placement, decided.skipped
        self._previous = dict(placement.bindings)
        ends = [w.until for w in decided.waiting.values() if w.until is not None]
        self._grace_ends = (
            time.monotonic() + (min(ends) - datetime.now(UTC)).total_seconds() + 0.05 if ends else math.inf
        )
        self._observe_waits(snapshot, decided.waiting)
        for err in skipped:
            logs.warning("object left out of the cycle", object=err.obj, error=str(err))
            self.metrics.objects_skipped.inc()
        self.cycles += 1
        self._observe(cluster, placement)
        for kind, count in self.store.counts().items():
            self.metrics.held_objects.labels(kind).set(count)

        # Assume and send with no await in between: a cancelled cycle leaves neither half done.
        uids = {pod_key(p): p["metadata"].get("uid", "") for p in snapshot.pods}
        now = time.monotonic()
        preemption = self._preemption(snapshot, placement, uids, now)
        if preemption is not None:
            self.store.nominate(preemption.nominations)
            self.store.evict((v.pod, v.uid) for v in preemption.victims)
            plans.send_nowait(preemption)
        for gang in cluster.gangs:
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
            snapshot, cluster, placement, tuple((e.obj, str(e)) for e in skipped), backing_off, decided.waiting
        )
        results.put(result)
        self.metrics.cycle_duration.observe(time.perf_counter() - started)
        (logs.info if cluster.gangs else logs.debug)(
            "cycle",
            n=self.cycles,
            gangs=len(cluster.gangs),
            placed=placement.objective,
            bound=placement.best_bound,
            pods_placed=len(placement.bindings),
            status=placement.status,
            solve_s=round(placement.solve_seconds, 3),
            cycle_s=round(time.perf_counter() - started, 3),
        )
        return result

    def _preemption(
        self, snapshot: Snapshot, placement: Placement, uids: Mapping[str, str], now: float
    ) -> Preemption | None:
        """Nominations that change (set, moved, or cleared where a pending pod of ours is no longer nominated
        and not placed: binding clears it on the API server) and the victims; None when there are neither."""
        shown = {
            pod_key(p): (p.get("status") or {}).get("nominatedNodeName") or None
            for p in snapshot.pods
            if is_waiting_for(p, self.scheduler_name)
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
        for key, since in self._waiting.items():
            if key not in held and key in pending and since is not None:
                self.metrics.definition_wait.observe(max(0.0, (now - since).total_seconds()))
        self._waiting = {}
        for p in snapshot.pods:
            if pod_key(p) in held:
                try:
                    self._waiting[pod_key(p)] = created(p)
                except InputError:  # its timestamp was unreadable: the cycle said so already
                    self._waiting[pod_key(p)] = None

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
