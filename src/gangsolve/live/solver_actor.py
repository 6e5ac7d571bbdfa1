"""The solver actor: one cycle at a time.

It waits for a change that matters to scheduling (or the resync period, or a pod's back-off to end), takes an
immutable view from the store and groups gangs in a worker thread. When a gang that changed has all its
members, it solves at once; while the gangs that changed still miss members, it gathers more changes for at
most `debounce` seconds. Then it solves, in the worker thread, the gangs that may place differently than last
time: gangs new or changed since the last cycle, and every gang once capacity may have been freed (a pod or
an assumption gone, a node changed) or the resync period has passed. A gang that did not fit and has not
changed since waits for such an event, as kube-scheduler parks an unschedulable pod until a cluster event
could make it schedulable; its last result is carried into every cycle's report. For every placed gang it
assumes the pods in the store and sends a `GangPlan` to the binder. Each cycle's `CycleResult` goes to
feedback's mailbox.

It owns its settings, a cycle counter, the gangs left waiting by the last cycles and a cache of converted pods
(used only by the one cycle running); it stops when cancelled (a cycle cancelled mid-solve has assumed and sent
nothing).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from gangsolve import objects
from gangsolve.errors import InputError
from gangsolve.gangs import Grace, Waiting, build_cluster, waiting
from gangsolve.live import logs
from gangsolve.live.channels import Latest
from gangsolve.live.metrics import Metrics
from gangsolve.live.store import ClusterStore, View, pod_key
from gangsolve.snapshot import Snapshot
from gangsolve.solver import Cluster, Gang, GangResult, Node, Placement, Pod, SolveConfig, solve


@dataclass(frozen=True)
class GangPlan:
    """A placed gang for the binder: each pod (key, the uid that was solved, node)."""

    gang: str
    pods: tuple[tuple[str, str, str], ...]
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
        """Everything of a gang that decides whether and where it fits."""
        pods = tuple(self._memo[p.name][2] if p.name in self._memo else _pod_signature(p) for p in gang.pods)
        return (gang.min_member, gang.bound_nodes, gang.colocate, gang.starving, pods)


@dataclass(frozen=True)
class Prepared:
    """A cycle's input: the view it was taken from, every gang, and which of them to solve."""

    view: View
    cluster: Cluster  # every node and every pending gang
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
    convert_pod=objects.pod,
) -> tuple[Cluster, dict[str, Waiting], list[InputError]]:
    """The cluster of a snapshot, with every gang, and the pending pods that join no gang yet. An object the
    edge cannot read (a PodGroup with `minMember: many`, a pod asking for more cpu than the model can count) is
    left out and returned with its error: one bad object must not stop everyone else."""
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
            )
            return cluster, waiting(snapshot, scheduler_name, group_label, now, grace), skipped
        except InputError as exc:
            smaller = snapshot.without(exc.obj)
            if _size(smaller) == _size(snapshot):
                raise  # the error names nothing that can be left out: this cycle cannot run
            skipped.append(exc)
            snapshot = smaller


def solve_safely(
    cluster: Cluster, time_limit: float, previous: Mapping[str, str] | None = None
) -> tuple[Cluster, Placement, list[InputError]]:
    """solve(), except that a gang the solver cannot handle is left out (and returned as skipped), not the
    cycle. `previous` (the last cycle's bindings) warm-starts the solver where its gangs are still pending and
    still fit."""
    config = SolveConfig(time_limit=time_limit)
    try:
        return cluster, solve(cluster, config, previous), []
    except Exception as exc:  # a gang the solver cannot handle must not stop the others: find it, leave it out
        solve(Cluster(cluster.nodes, ()), SolveConfig(use_cpsat=False))  # the nodes alone must be solvable
        culprits = _failing_gangs(cluster.nodes, list(cluster.gangs))
        if not culprits:
            raise
        logs.error("gangs left out: the solver fails on them", gangs=",".join(g.name for g in culprits), exc_info=exc)
        skipped = [
            InputError(f"Pod {p.name}", "", f"its gang cannot be solved: {type(exc).__name__}: {exc}")
            for g in culprits
            for p in g.pods
        ]
        cluster = Cluster(cluster.nodes, tuple(g for g in cluster.gangs if g not in culprits))
        return cluster, solve(cluster, config, previous), skipped


@dataclass(frozen=True)
class Plan:
    """What one cycle decided, from one snapshot."""

    cluster: Cluster
    placement: Placement
    skipped: list[InputError]  # objects left out as unreadable
    waiting: dict[str, Waiting]  # pending pods that join no gang yet


def plan(
    snapshot: Snapshot,
    scheduler_name: str,
    group_label: str | None,
    time_limit: float,
    grace: Grace | None = None,
    now: datetime | None = None,
    previous: Mapping[str, str] | None = None,
) -> Plan:
    """A whole cycle on a snapshot, every gang solved: the pure part, as `gangsolve solve --now` replays it."""
    cluster, held, skipped = group(snapshot, scheduler_name, group_label, grace=grace, now=now)
    cluster, placement, failed = solve_safely(cluster, time_limit, previous)
    return Plan(cluster, placement, skipped + failed, held)


def _failing_gangs(nodes: tuple[Node, ...], gangs: list[Gang]) -> list[Gang]:
    """The gangs whose (greedy) solve raises, by bisection: a handful of cheap solves, only after a failure."""
    try:
        solve(Cluster(nodes, tuple(gangs)), SolveConfig(use_cpsat=False))
        return []
    except Exception:
        if len(gangs) == 1:
            return gangs
    half = len(gangs) // 2
    return _failing_gangs(nodes, gangs[:half]) + _failing_gangs(nodes, gangs[half:])


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
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.scheduler_name = scheduler_name
        self.group_label = group_label
        self.time_limit = time_limit
        self.debounce = debounce
        self.resync_period = resync_period
        self.grace = grace or Grace()
        self.cycles = 0
        self._previous: dict[str, str] = {}  # the last cycle's bindings: the next solve's warm start
        self._grace_ends = math.inf  # monotonic: when the first pod waiting for its gang definition stops waiting
        self._converter = PodConverter()
        self._waiting: dict[str, _Waiting] = {}  # gang name -> how it looked when a cycle left it pending
        self._freed: int | None = None  # the store's `freed` at the last cycle that solved every gang
        self._full_at = -float("inf")  # monotonic: when that was
        self._again = False  # the last cycle placed gangs and left others pending: solve those again at once
        # Pods the last cycle reported waiting for a gang definition: new ones need a cycle (to say so, and to
        # time the end of their grace) even with no gang to solve.
        self._held: frozenset[str] = frozenset()

    async def run(self, plans: MemoryObjectSendStream[GangPlan], results: Latest[CycleResult]) -> None:
        """Cycle until cancelled; closing `plans` on the way out tells the binder no more will come."""
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
                    prepared.solve or self._full_due() or frozenset(prepared.waiting) != self._held
                ):
                    await self.cycle(plans, results, prepared)

    def _full_due(self) -> bool:
        """Every gang is worth solving again: room may have been made, a pod stopped waiting for its gang
        definition, or the resync period passed."""
        now = time.monotonic()
        return self._freed != self.store.freed or now - self._full_at >= self.resync_period or now >= self._grace_ends

    async def prepare(self) -> Prepared | None:
        """The view and its gangs (grouped in a worker thread), and which gangs to solve; None if it fails."""
        view = self.store.view(self.scheduler_name)
        full = self._full_due()
        try:
            return await anyio.to_thread.run_sync(self._prepare, view, full, abandon_on_cancel=True)
        except Exception as exc:  # a bug must cost one cycle, never the scheduler
            logs.error("cycle failed", error=f"{type(exc).__name__}: {exc}", exc_info=exc)
            self.metrics.schedule_attempts.labels("error").inc()
            return None

    def _prepare(self, view: View, full: bool) -> Prepared:
        self._converter.begin(view.snapshot.priority_classes)
        cluster, held, skipped = group(
            view.snapshot,
            self.scheduler_name,
            self.group_label,
            grace=self.grace,
            nodes=view.nodes,
            convert_pod=self._converter,
        )
        self._converter.end()
        signatures = {g.name: self._converter.signature(g) for g in cluster.gangs}
        if full:
            todo = cluster.gangs
        else:
            todo = tuple(
                g
                for g in cluster.gangs
                if (w := self._waiting.get(g.name)) is None or w.signature != signatures[g.name]
            )
        return Prepared(view, cluster, (*view.unreadable, *skipped), todo, signatures, held)

    async def cycle(
        self,
        plans: MemoryObjectSendStream[GangPlan],
        results: Latest[CycleResult],
        prepared: Prepared | None = None,
    ) -> CycleResult | None:
        started = time.perf_counter()
        if prepared is None:
            prepared = await self.prepare()
            if prepared is None:
                return None
        full = len(prepared.solve) == len(prepared.cluster.gangs) and self._full_due()
        view = prepared.view
        backing_off = self.store.backing_off()
        try:
            solved, placement, failed = await anyio.to_thread.run_sync(
                solve_safely,
                Cluster(prepared.cluster.nodes, prepared.solve),
                self.time_limit,
                self._previous,
                abandon_on_cancel=True,
            )
        except Exception as exc:  # a bug must cost one cycle, never the scheduler
            logs.error("cycle failed", error=f"{type(exc).__name__}: {exc}", exc_info=exc)
            self.metrics.schedule_attempts.labels("error").inc()
            return None
        skipped = [*prepared.skipped, *failed]
        for err in skipped:
            logs.warning("object left out of the cycle", object=err.obj, error=str(err))
            self.metrics.objects_skipped.inc()
        self.cycles += 1
        if full:
            self._freed, self._full_at = view.freed, time.monotonic()
        self._previous = dict(placement.bindings)
        self._held = frozenset(prepared.waiting)
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
        everything = Cluster(solved.nodes, (*solved.gangs, *(g for g, _r in carried)))
        report = replace(placement, gangs=(*placement.gangs, *(r for _g, r in carried)))
        self._observe(everything, report)
        for kind, count in self.store.counts().items():
            self.metrics.held_objects.labels(kind).set(count)

        # Assume and send with no await in between: a cancelled cycle leaves neither half done.
        uids = {pod_key(p): p["metadata"].get("uid", "") for p in view.snapshot.pods if not objects.is_bound(p)}
        now = time.monotonic()
        for gang in solved.gangs:
            placed = [
                (p.name, uids.get(p.name, ""), placement.bindings[p.name])
                for p in gang.pods
                if p.name in placement.bindings
            ]
            if placed:
                gang_plan = GangPlan(gang.name, tuple(placed), now)
                self.store.assume(gang.name, gang_plan.pods)
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
            placed=placement.objective,
            bound=placement.best_bound,
            pods_placed=len(placement.bindings),
            status=placement.status,
            solve_s=round(placement.solve_seconds, 3),
            cycle_s=round(time.perf_counter() - started, 3),
        )
        return result

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
