"""The solver actor: one cycle at a time. Wait for a relevant change (or the resync period), let more changes
arrive for `debounce` seconds, take a snapshot, group gangs and solve off the event loop, then hand placed
gangs to the binder (assumed at once) and pending ones to feedback."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

import anyio

from gangsolve.errors import InputError, describe
from gangsolve.gangs import build_cluster
from gangsolve.live import logs
from gangsolve.live.cache import ClusterCache
from gangsolve.live.metrics import Metrics
from gangsolve.snapshot import Snapshot
from gangsolve.solver import Cluster, Placement, SolveConfig, solve


@dataclass(frozen=True)
class GangPlan:
    """A placed gang for the binder: each pod (key, uid) with its node."""

    gang: str
    pods: tuple[tuple[str, str, str], ...]  # (pod key, uid, node)
    planned_at: float


@dataclass(frozen=True)
class CycleResult:
    snapshot: Snapshot
    cluster: Cluster
    placement: Placement
    skipped: tuple[tuple[str, str], ...] = ()  # objects left out as unreadable: (`Kind ns/name`, error)


def without(snapshot: Snapshot, culprit: str) -> Snapshot:
    """The snapshot less the objects `describe` names `culprit` (e.g. `PodGroup team-a/g`)."""

    def keep(obj: dict) -> bool:
        return describe(obj) != culprit

    return Snapshot(
        nodes=[o for o in snapshot.nodes if keep(o)],
        pods=[o for o in snapshot.pods if keep(o)],
        pdbs=[o for o in snapshot.pdbs if keep(o)],
        pod_groups={k: o for k, o in snapshot.pod_groups.items() if keep(o)},
        priority_classes={k: o for k, o in snapshot.priority_classes.items() if keep(o)},
    )


def plan(
    snapshot: Snapshot,
    scheduler_name: str,
    group_label: str | None,
    time_limit: float,
    skipped: list[InputError] | None = None,
) -> tuple[Cluster, Placement]:
    """The pure part of a cycle, run in a worker thread. An object the edge cannot read (a PodGroup with
    `minMember: many`) is left out of the cycle and reported in `skipped`: it must not stop everyone else."""
    for _attempt in range(100):
        try:
            # The live clock marks gangs pending past the starvation age, so big gangs are not passed over.
            now = datetime.now(UTC)
            cluster = build_cluster(snapshot, scheduler_name, group_label, strict=False, now=now)
            break
        except InputError as exc:
            if skipped is None:
                raise
            skipped.append(exc)
            smaller = without(snapshot, exc.obj)
            if len(smaller.pods) + len(smaller.nodes) + len(smaller.pdbs) + len(smaller.pod_groups) + len(
                smaller.priority_classes
            ) == len(snapshot.pods) + len(snapshot.nodes) + len(snapshot.pdbs) + len(snapshot.pod_groups) + len(
                snapshot.priority_classes
            ):
                raise  # nothing to leave out: give up on this cycle
            snapshot = smaller
    else:
        raise InputError("snapshot", "", "too many unreadable objects")
    return cluster, solve(cluster, SolveConfig(time_limit=time_limit))


class SolverActor:
    def __init__(
        self,
        cache: ClusterCache,
        metrics: Metrics,
        *,
        scheduler_name: str,
        group_label: str | None,
        time_limit: float,
        debounce: float,
        resync_period: float,
        on_placed,
        on_result,
    ) -> None:
        self.cache = cache
        self.metrics = metrics
        self.scheduler_name = scheduler_name
        self.group_label = group_label
        self.time_limit = time_limit
        self.debounce = debounce
        self.resync_period = resync_period
        self.on_placed = on_placed  # async (GangPlan) -> None: to the binder
        self.on_result = on_result  # (CycleResult) -> None: to feedback
        self.stopping = False
        self.cycles = 0
        self.lock = anyio.Lock()  # held for a whole cycle: shutdown takes it to let the cycle finish

    async def stop(self) -> None:
        """Start no new cycle; return once the current one (if any) has handed its plans on."""
        self.stopping = True
        async with self.lock:
            pass

    async def run(self) -> None:
        seen = -1
        while not self.stopping:
            if self.cache.version == seen:
                with anyio.move_on_after(self.resync_period):
                    await self.cache.wait_for_change(seen)
            await anyio.sleep(self.debounce)
            if self.stopping:
                return
            async with self.lock:
                if self.stopping:
                    return
                seen = self.cache.version
                await self.cycle()

    async def cycle(self) -> CycleResult | None:
        started = time.perf_counter()
        snapshot = self.cache.snapshot()
        skipped: list[InputError] = []
        try:
            cluster, placement = await anyio.to_thread.run_sync(
                plan, snapshot, self.scheduler_name, self.group_label, self.time_limit, skipped
            )
        except InputError as exc:
            logs.error("cycle failed", error=str(exc))
            self.metrics.schedule_attempts.labels("error").inc()
            return None
        for exc in skipped:
            logs.warning("object left out of the cycle", object=exc.obj, error=str(exc))
            self.metrics.schedule_attempts.labels("error").inc()
        self.cycles += 1
        m = self.metrics
        m.solve_duration.observe(placement.solve_seconds)
        m.solver_status.labels(placement.status).inc()
        bound = max(placement.best_bound, 1)
        m.optimality_gap.set((placement.best_bound - placement.objective) / bound)

        now = time.monotonic()
        pending_gangs = pending_pods = 0
        for gang, result in zip(cluster.gangs, placement.gangs, strict=True):
            pods = [(p.name, placement.bindings[p.name]) for p in gang.pods if p.name in placement.bindings]
            if pods and not self.stopping:
                uids = []
                for key, node in pods:
                    obj = self.cache.pod(key)
                    uids.append((obj or {}).get("metadata", {}).get("uid", ""))
                    self.cache.assume(key, node, uids[-1], gang.name)
                await self.on_placed(
                    GangPlan(gang.name, tuple((k, u, n) for (k, n), u in zip(pods, uids, strict=True)), now)
                )
            if result.placed and result.placed_pods:
                m.schedule_attempts.labels("scheduled").inc()
            elif not result.placed:
                m.schedule_attempts.labels("unschedulable").inc()
                pending_gangs += 1
            pending_pods += len(gang.pods) - result.placed_pods
        m.pending_gangs.set(pending_gangs)
        m.pending_pods.set(pending_pods)
        out = CycleResult(snapshot, cluster, placement, tuple((e.obj, str(e)) for e in skipped))
        self.on_result(out)
        m.cycle_duration.observe(time.perf_counter() - started)
        (logs.info if cluster.gangs else logs.debug)(
            "cycle",
            n=self.cycles,
            gangs=len(cluster.gangs),
            placed=placement.objective,
            bound=placement.best_bound,
            pods_placed=len(placement.bindings),
            pending_gangs=pending_gangs,
            status=placement.status,
            solve_s=round(placement.solve_seconds, 3),
            cycle_s=round(time.perf_counter() - started, 3),
        )
        return out
