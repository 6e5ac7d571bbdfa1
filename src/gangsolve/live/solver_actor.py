"""The solver actor: one cycle at a time.

It waits for a change that matters to scheduling (or the resync period, or a pod's back-off to end), takes an
immutable view from the store and groups gangs in a worker thread, no sooner than `cycle_interval` after the last
cycle started (what arrives meanwhile is solved together). When a gang that changed has all its members, it
solves at once; while the gangs that changed still miss members, it gathers more changes for at most `debounce`
seconds. Then it solves, in the worker thread, the gangs that may place differently than last
time, as its `SchedulingQueue` says (gangs new or changed, gangs holding room, every gang once capacity may
have been freed or the resync period passed); a parked gang's last result is carried into every cycle's report.
Where they all fit in what is free, the first cycle solves only the first `FIRST_CYCLE_GANGS` of them, so that
binding starts early; the next one, at once, all of them.
Grouping and deciding are `gangsolve.cycle`'s, the same steps `gangsolve solve` runs offline.

The view holds the pending pods and the pods that may share a gang with them; other pods count only through
the capacity they hold. A cycle that may preempt (preemption on, and a gang to solve of higher priority than
some pod bound), holds a nomination (whose pods leaving there count) or solves a starving gang while
reservations are on (a reservation is planned from running pods' expected ends) takes a view of every pod
instead; a cycle on a partial view never preempts. Gangs holding a nomination, and starving gangs while
reservations are on, are solved every cycle: what they hold limits where the others go.

For every placed gang it assumes the pods (and the devices chosen for their claims, and the GPUs of their
shares) in the store and sends a `GangPlan` to the binder. When the cycle preempted, it records the nominations
(and those to clear: pods no longer nominated, still pending) and the victims in the store the same way, and
sends one `Preemption` to the binder first. Each cycle's `CycleResult` goes to feedback's mailbox.

It owns its settings (the cycle's `Rules` and the `SolveConfig`, passed whole), a cycle counter, the last
cycle's bindings (the next one's warm start), a cache of converted pods (used only by the one cycle running)
and the runtime estimator with its workload history, which learns from the succeeded pods a watcher sends it
(drained before a cycle groups gangs, never while a cycle reads the estimator); it stops when cancelled (a cycle
cancelled mid-solve has assumed and sent nothing). With the page of the plan on, it also keeps the queue shares of
the last hours and, after each cycle, replaces `page` (a frozen `PlanView` the HTTP server reads) at once.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from gangsolve import cycle
from gangsolve.cycle import Decisions, Rules
from gangsolve.edge import dra, objects, reservations, usage
from gangsolve.edge.errors import InputError
from gangsolve.edge.estimates import Estimator
from gangsolve.edge.gangs import Origin, Waiting, created
from gangsolve.edge.objects import is_waiting_for, pod_key
from gangsolve.edge.snapshot import Snapshot
from gangsolve.live import logs
from gangsolve.live.channels import Latest
from gangsolve.live.messages import ClaimWrite, CycleResult, Event, GangPlan, Preemption, Resync, Victim, View
from gangsolve.live.metrics import Metrics
from gangsolve.live.plan_page import PlanView, ShareHistory, carried_running, started_now
from gangsolve.live.queue import SchedulingQueue, Signature
from gangsolve.live.store import ClusterStore
from gangsolve.solver import Cluster, Gang, GangResult, Placement, Pod, Reservation, SolveConfig
from gangsolve.solver.model import DEFAULT_QUEUE, Queue
from gangsolve.solver.queues import queue_key

# Where the gangs waiting at start-up together ask for no more than the cluster has free, the first cycle solves
# at most this many (the first in queue order); the next one starts at once (no cycle has solved every gang yet:
# one that does is due, SchedulingQueue.full_due) and solves them all. The binder starts while the rest are being
# solved, as kube-scheduler binds its first pod at once. (A cycle walks about a millisecond a gang: 1,000 gangs
# kept every bind 1.5-2 s behind the lists.) Gangs that compete for room are weighed together from the first
# cycle: solved 100 first, synthetic/1000nodes' 200 gangs placed 2-3 fewer.
FIRST_CYCLE_GANGS = 100


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


def _room_for_all(cluster: Cluster, gangs: tuple[Gang, ...]) -> bool:
    """Whether the gangs together ask for no more of any resource than the nodes that take pods have free."""
    free: dict[str, int] = {}
    for node in cluster.nodes:
        if node.ready and not node.unschedulable:
            for r, q in node.allocatable.items():
                free[r] = free.get(r, 0) + q - node.used.get(r, 0)
    asked: dict[str, int] = {}
    for gang in gangs:
        for r, q in gang.total_requests.items():
            asked[r] = asked.get(r, 0) + q
    return all(q <= free.get(r, 0) for r, q in asked.items())


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
    origins: dict[str, Origin]  # gang name -> the rule that defined it (and a fallback's warning)

    @property
    def ready(self) -> bool:
        """A gang to solve has all the members it needs: no reason to wait for more changes."""
        return any(len(g.pods) >= g.need for g in self.solve)


def _claim_writes(snapshot: Snapshot, scheduler_name: str, decided: Decisions) -> dict[str, tuple[ClaimWrite, ...]]:
    """The claims of each placed pod as the binder writes them before the bind: allocated with the devices the
    cycle chose (None when allocated already) and reserved for the pod, preconditioned on the claim it saw."""
    model = dra.model(snapshot, scheduler_name)
    out: dict[str, tuple[ClaimWrite, ...]] = {}
    for pod, node in decided.placement.bindings.items():
        writes = []
        for claim in model.claims_of.get(pod, ()):
            ns, _, name = claim.partition("/")
            meta = snapshot.resource_claims[(ns, name)]["metadata"]
            allocation = None
            if claim in decided.allocations:
                allocation = dra.allocation_result(claim, decided.allocations[claim], node, model.state)
            writes.append(ClaimWrite(pod, claim, meta.get("uid", ""), meta.get("resourceVersion", ""), allocation))
        if writes:
            out[pod] = tuple(writes)
    return out


class SolverActor:
    def __init__(
        self,
        store: ClusterStore,
        queue: SchedulingQueue,
        metrics: Metrics,
        rules: Rules,
        config: SolveConfig,
        *,
        debounce: float,
        cycle_interval: float = 0.0,
        estimator: Estimator | None = None,
        plan_page: bool = False,
        first_cycle_gangs: int = FIRST_CYCLE_GANGS,
    ) -> None:
        self.store = store
        self.queue = queue
        self.metrics = metrics
        self.rules = rules
        self.config = config
        self.debounce = debounce
        self.cycle_interval = cycle_interval
        self.estimator = estimator or Estimator(default=None)
        self.first_cycle_gangs = first_cycle_gangs
        self._succeeded: MemoryObjectReceiveStream[Event | Resync] | None = None  # finished pods to learn from
        self.cycles = 0
        self.whole_views = 0  # cycles that read every pod (they may preempt, hold a nomination or reserve)
        self._previous: dict[str, str] = {}  # the last cycle's bindings: the next solve's warm start
        self._promised: dict[str, Reservation] = {}  # the last cycle's plan: no gang in it starts later than shown
        self._shown: dict[str, float] = {}  # gang -> the first expected start it was shown, until it starts
        self._converter = PodConverter()
        # Pods the last cycle held back for a gang definition, and when each was created: new ones need a cycle
        # (to say so, and to time the end of their grace) even with no gang to solve, and how long one had
        # existed when it stopped waiting is what the grace added to its latency.
        self._held: dict[str, datetime | None] = {}
        # The page of the plan (off: neither is kept): the latest view, replaced whole after each cycle, and the
        # queue shares sampled so far.
        self.page: PlanView | None = None
        self._shares = ShareHistory() if plan_page else None
        # Queues' usage histories, for fair shares that remember (none without a half-life).
        self._usage = usage.History(rules.usage_half_life) if rules.usage_half_life > 0 else None

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
            last_start = -self.cycle_interval
            while True:
                if self.store.generation == seen and not self.queue.again:
                    with anyio.move_on_after(self.queue.next_wake()):
                        await self.store.wait_for_change(seen)
                # Cycles start at least the interval apart: what arrives meanwhile is solved together.
                if (wait := last_start + self.cycle_interval - time.monotonic()) > 0:
                    await anyio.sleep(wait)
                self.queue.again = False
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
                    prepared.solve
                    or self.queue.full_due(self.store.freed)
                    or prepared.waiting.keys() != self._held.keys()
                ):
                    last_start = time.monotonic()
                    await self.cycle(plans, results, prepared)

    async def prepare(self, whole: bool = False) -> Prepared | None:
        """The view (of every pod if `whole`, else of what a cycle of ours reads) and its gangs (grouped in a
        worker thread), and which gangs to solve; None if it fails."""
        self._learn()
        self.queue.prune(self.store.pod)
        view = self.store.view(None if whole else self.rules.scheduler_name, leave_out=self.queue.backing_off())
        full = self.queue.full_due(self.store.freed)
        try:
            return await anyio.to_thread.run_sync(self._prepare, view, full, abandon_on_cancel=True)
        except Exception as exc:  # a bug must cost one cycle, never the scheduler
            logs.error("cycle failed", error=f"{type(exc).__name__}: {exc}", exc_info=exc)
            self.metrics.schedule_attempts.labels("error").inc()
            return None

    def _prepare(self, view: View, full: bool) -> Prepared:
        self._converter.begin(view.snapshot.priority_classes)
        grouped = cycle.group(
            view.snapshot,
            self.rules,
            now=datetime.now(UTC),  # gangs pending past the starvation age starve; definition waits end
            estimator=self.estimator,
            nodes=view.nodes,
            convert_pod=self._converter,
        )
        self._converter.end()
        cluster = grouped.cluster
        if view.partial:  # no Queue exists: the implicit one holds every pod of ours, not just those read
            cluster = replace(cluster, queues=(Queue(DEFAULT_QUEUE, allocated=dict(view.held)),))
        signatures = {g.name: self._converter.signature(g) for g in cluster.gangs}
        todo = self.queue.to_solve(cluster.gangs, signatures, lambda g: self._holds(g, cluster), full)
        if self.cycles == 0 and len(todo) > self.first_cycle_gangs and _room_for_all(cluster, todo):
            first = sorted(todo, key=queue_key)[: self.first_cycle_gangs]  # as the solver begins its walk
            names = {g.name for g in first}
            todo = tuple(g for g in todo if g.name in names)
        skipped = (*view.unreadable, *grouped.skipped)
        return Prepared(view, cluster, grouped.snapshot, skipped, todo, signatures, grouped.waiting, grouped.origins)

    def _holds(self, gang: Gang, cluster: Cluster) -> bool:
        """Whether the gang holds room that limits where the others go: a nomination, or (while the plan is on)
        a reservation, planned again each cycle."""
        planned = self.config.reservations > 0 and (gang.starving or gang.name in self._promised)
        return planned or any(p.name in cluster.nominated for p in gang.pods)

    def _needs_whole(self, prepared: Prepared) -> bool:
        """Whether the cycle must read every pod: a gang to solve may preempt (preemption chooses among all
        running pods, and only those of lower priority), holds a nomination (the pods leaving its nodes decide
        whether it still fits there) or may be planned (from the expected ends of the pods running: a gang held
        or tried before and left pending; a burst that places at once never reads every pod)."""
        view = prepared.view
        return view.partial and any(
            self._holds(g, prepared.cluster)
            or (self.config.reservations > 0 and self.queue.parked(g.name) is not None)
            or (self.config.preemption and g.preempts and g.need > 0 and g.priority > view.lowest_bound)
            for g in prepared.solve
        )

    async def cycle(
        self,
        plans: MemoryObjectSendStream[GangPlan | Preemption],
        results: Latest[CycleResult],
        prepared: Prepared | None = None,
    ) -> CycleResult | None:
        """One cycle: the gangs due (on a whole view where they need it), decided by the cycle offline runs too,
        then the queue and metrics told, the placed gangs assumed and sent to the binder, the result to feedback."""
        started = time.perf_counter()
        prepared = prepared or await self.prepare()
        if prepared is not None and self._needs_whole(prepared):
            prepared = await self.prepare(whole=True)
            self.whole_views += 1
        if prepared is None:
            return None
        decided = await self._decide(prepared)
        if decided is None:
            return None
        full = len(prepared.solve) == len(prepared.cluster.gangs) and self.queue.full_due(self.store.freed)
        backing_off = self.queue.backing_off()
        self.cycles += 1
        self._previous = dict(decided.placement.bindings)
        self._promised = {r.gang: r for r in decided.placement.reservations if r.start is not None}
        skipped = (*prepared.skipped, *decided.skipped)
        for err in skipped:
            logs.warning("object left out of the cycle", object=err.obj, error=str(err))
            self.metrics.objects_skipped.inc()
        if self._usage is not None and decided.cluster.now and not prepared.view.partial:
            # (a partial view counts only some of each queue's pods: its shares would under-count)
            self._usage.record(decided.cluster.queues, decided.placement.queues, decided.cluster.now)
        carried = self._requeue(prepared, decided, full)
        everything = replace(decided.cluster, gangs=(*decided.cluster.gangs, *(g for g, _r in carried)))
        report = replace(decided.placement, gangs=(*decided.placement.gangs, *(r for _g, r in carried)))
        self._observe(everything, report)
        self._send(plans, prepared, decided, {p.name for g, _r in carried for p in g.pods})
        errors = tuple((e.obj, str(e)) for e in skipped)
        result = CycleResult(
            prepared.view.snapshot,
            everything,
            report,
            errors,
            backing_off,
            prepared.waiting,
            len(carried),
            prepared.origins,
            self._usage.values() if self._usage is not None else {},
        )
        results.put(result)
        if self._shares is not None:
            self._publish(prepared, decided, result)
        self._log(prepared, decided, len(carried), time.perf_counter() - started)
        return result

    async def _decide(self, prepared: Prepared) -> Decisions | None:
        """The due gangs decided in the worker thread; None if that fails (a bug must cost one cycle, never the
        scheduler)."""
        solving = {g.name for g in prepared.solve}
        promised = tuple(r for name, r in self._promised.items() if name in solving)
        cluster = replace(prepared.cluster, gangs=prepared.solve, promised=promised)
        if self._usage is not None and cluster.now:
            now, history = cluster.now, self._usage
            cluster = replace(cluster, queues=tuple(replace(q, usage=history.at(q, now)) for q in cluster.queues))
        if prepared.view.partial:  # its running pods are not all the possible victims: no preemption on it
            cluster = replace(cluster, running=(), budgets={})
        try:
            return await anyio.to_thread.run_sync(
                cycle.decide,
                cluster,
                prepared.snapshot,
                self.rules.scheduler_name,
                self.config,
                self._previous,
                abandon_on_cancel=True,
            )
        except Exception as exc:
            logs.error("cycle failed", error=f"{type(exc).__name__}: {exc}", exc_info=exc)
            self.metrics.schedule_attempts.labels("error").inc()
            return None

    def _requeue(self, prepared: Prepared, decided: Decisions, full: bool) -> list[tuple[Gang, GangResult]]:
        """Tell the queue what the cycle did; the gangs it did not solve (carried, with their last result)."""
        self._observe_waits(prepared.view.snapshot, prepared.waiting)
        ends = [w.until for w in prepared.waiting.values() if w.until is not None]
        attempted = {g.name for g in prepared.solve}
        carried = []
        for g in prepared.cluster.gangs:
            parked = self.queue.parked(g.name)
            if g.name not in attempted and parked is not None:
                carried.append((g, parked.result))
        left = [
            (g.name, prepared.signatures[g.name], r)
            for g, r in zip(decided.cluster.gangs, decided.placement.gangs, strict=True)
            if not r.placed
        ]
        # Gangs solved and left pending are parked, unless this cycle placed gangs: then why they wait may be
        # what those took ("gangs placed this cycle took it"), so the next cycle solves them again at once.
        self.queue.solved(
            [g.name for g, _r in carried],
            left,
            placed_any=bool(decided.placement.bindings),
            full_freed=prepared.view.freed if full else None,
            grace_ends=min(ends) if ends else None,
        )
        return carried

    def _send(
        self,
        plans: MemoryObjectSendStream[GangPlan | Preemption],
        prepared: Prepared,
        decided: Decisions,
        carried_pods: set[str],
    ) -> None:
        """Assume and send with no await in between: a cancelled cycle leaves neither half done."""
        snapshot, placement = prepared.view.snapshot, decided.placement
        uids = {pod_key(p): p["metadata"].get("uid", "") for p in snapshot.pods}
        now = time.monotonic()
        preemption = self._preemption(snapshot, placement, uids, carried_pods, now)
        if preemption is not None:
            self.store.nominate(preemption.nominations)
            self.store.evict((v.pod, v.uid) for v in preemption.victims)
            plans.send_nowait(preemption)
        claims = _claim_writes(prepared.snapshot, self.rules.scheduler_name, decided)
        for gang in decided.cluster.gangs:
            placed = [
                (p.name, uids.get(p.name, ""), placement.bindings[p.name])
                for p in gang.pods
                if p.name in placement.bindings
            ]
            if placed:
                writes = tuple(w for key, _uid, _node in placed for w in claims.get(key, ()))
                shares = tuple((key, placement.shares[key]) for key, _uid, _node in placed if key in placement.shares)
                gang_plan = GangPlan(gang.name, tuple(placed), now, writes, shares)
                chosen = [(w.pod, w.claim, w.allocation) for w in writes if w.allocation is not None]
                self.store.assume(gang.name, gang_plan.pods, chosen, {key: s.gpu for key, s in shares})
                plans.send_nowait(gang_plan)

    def _publish(self, prepared: Prepared, decided: Decisions, result: CycleResult) -> None:
        """The page's view of this cycle, in one assignment. Its running pods: those the cycle read, the gangs
        it started, and (a partial view reads only what is pending and its gangs) those of the last view that
        still run."""
        assert self._shares is not None
        self._shares.record(result.cluster.now, result.placement.queues)
        running = (*prepared.cluster.running, *started_now(decided.cluster, decided.placement))
        if prepared.view.partial and self.page is not None:
            running = (*running, *carried_running(self.page.running, running, self._still_running))
        self.page = PlanView(self.cycles, result, running, self._shares.samples())

    def _still_running(self, key: str) -> bool:
        pod = self.store.pod(key)
        if pod is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return False
        return bool((pod.get("spec") or {}).get("nodeName")) or self.store.is_assumed(key)

    def _log(self, prepared: Prepared, decided: Decisions, carried: int, seconds: float) -> None:
        for kind, count in {**self.store.counts(), "backoff": self.queue.held()}.items():
            self.metrics.held_objects.labels(kind).set(count)
        self.metrics.cycle_duration.observe(seconds)
        placement = decided.placement
        (logs.info if decided.cluster.gangs else logs.debug)(
            "cycle",
            n=self.cycles,
            gangs=len(decided.cluster.gangs),
            waiting=carried,
            whole=not prepared.view.partial,
            placed=placement.objective,
            bound=placement.best_bound,
            pods_placed=len(placement.bindings),
            evicted=len(placement.evictions),
            status=placement.status,
            pools=_pools(placement),
            solve_s=round(placement.solve_seconds, 3),
            cycle_s=round(seconds, 3),
        )

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
            if is_waiting_for(p, self.rules.scheduler_name) and pod_key(p) not in carried
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
        m.cycle_pools.set(_pools(placement))
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
        starts = [r.start for r in placement.reservations if r.start is not None]
        m.plan_horizon.set(max(starts, default=cluster.now) - cluster.now)
        self._observe_promises(cluster, placement)

    def _observe_promises(self, cluster: Cluster, placement: Placement) -> None:
        """How a gang's start compares with the first expected start it was shown (kept until it starts)."""
        for r in (*placement.reservations, *placement.forecasts):
            if r.start is not None:
                self._shown.setdefault(r.gang, r.start)
        for result in placement.gangs:
            if result.placed and result.placed_pods and result.name in self._shown:
                self.metrics.start_after_expected.observe(cluster.now - self._shown.pop(result.name))
        pending = {g.name for g in cluster.gangs}
        self._shown = {name: start for name, start in self._shown.items() if name in pending}


def _pools(placement: Placement) -> int:
    """The node pools a cycle was solved in, each in its own process (a `pool` stage each); 1: solved whole."""
    return max(1, sum(1 for stage in placement.stages if stage["name"] == "pool"))
