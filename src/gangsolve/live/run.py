r"""`gangsolve run`: every actor in one task group; a crash in one cancels all.

    watchers --events--> ClusterStore --snapshot--> SolverActor --GangPlan, Preemption--> BinderActor
                             ^   (assume, nominate, evict) ^ \                              |  Bound, Evicted
                             |                             |  \-- CycleResult (latest) --> Feedback <--+
                             +-----------------------------|------------- forget ---------/
    succeeded pods watcher (while leading) ----------------+  (the runtime history)
    HealthServer (/metrics /healthz /readyz; /plan /plan.json with --plan-page), signals,
    LeaderElector (Lease: the fence on every write)

Every replica watches and keeps its store warm; only the leader (or the only replica, without
--leader-elect) runs the solver, binder and feedback. Stopping is cancellation:

- SIGTERM/SIGINT: the solver actor is cancelled (no new cycle; a cycle mid-solve is dropped), the binder
  finishes the gangs it was given within `shutdown-grace` seconds (then they are cancelled too), the lease is
  released, exit 0. Before leading, a signal just ends the wait.
- Losing the lease: `keep()` raises LeadershipLost the moment leadership stops being valid, which cancels
  the solver, binder and feedback at once; exit 1 (its Deployment restarts it).
"""

from __future__ import annotations

import math
import signal
from functools import partial

import anyio

from gangsolve import cycle
from gangsolve.live import logs
from gangsolve.live.binder import BinderActor
from gangsolve.live.channels import Latest
from gangsolve.live.config import Config
from gangsolve.live.feedback import Feedback
from gangsolve.live.fence import Unfenced
from gangsolve.live.http import HealthServer
from gangsolve.live.kube import Kube
from gangsolve.live.leader import LeaderElector
from gangsolve.live.messages import Bound, CycleResult, Event, Evicted, GangPlan, Preemption, Resync
from gangsolve.live.metrics import Metrics
from gangsolve.live.queue import SchedulingQueue
from gangsolve.live.solver_actor import SolverActor
from gangsolve.live.store import ClusterStore
from gangsolve.live.watchers import RESOURCES, Watcher, succeeded_pods

_HISTORY_WAIT = 10.0  # seconds the first cycle waits for the list of succeeded pods


class Scheduler:
    """Everything of one `gangsolve run`, wired; `await Scheduler(cfg, kube).run()`."""

    def __init__(self, cfg: Config, kube: Kube) -> None:
        self.cfg = cfg
        self.metrics = Metrics()
        self.store = ClusterStore(group_label=cfg.group_label)
        self.watchers = [Watcher(kube, r, on_error=self._watch_error) for r in RESOURCES]
        # Only the leader learns runtimes: it lists what succeeded when it starts leading.
        self.succeeded = Watcher(kube, succeeded_pods(cfg.scheduler_name), on_error=self._watch_error)
        self.elector: LeaderElector | None = None
        if cfg.leader_elect:
            self.elector = LeaderElector(
                kube.limited(None),  # nothing may delay the lease's renewal
                name=cfg.lease_name,
                namespace=cfg.lease_namespace,
                identity=cfg.identity,
                lease_duration=cfg.lease_duration,
                renew_deadline=cfg.renew_deadline,
                retry_period=cfg.retry_period,
                on_change=lambda leading: self.metrics.is_leader.set(int(leading)),
            )
        fence = self.elector or Unfenced()
        self.queue = SchedulingQueue(cfg.resync_period)
        self.solver = SolverActor(
            self.store,
            self.queue,
            self.metrics,
            cfg.rules(),
            cfg.solve_config(),
            debounce=cfg.debounce,
            cycle_interval=cfg.cycle_interval,
            estimator=cfg.estimator(),
            plan_page=cfg.plan_page,
        )
        self.binder = BinderActor(kube, self.store, self.queue, self.metrics, fence, concurrency=cfg.bind_concurrency)
        self.feedback = Feedback(
            kube.limited(cfg.kube_api_qps, cfg.kube_api_burst),  # events and statuses never delay binds
            self.store,
            self.metrics,
            fence,
            identity=cfg.identity,
            scheduler_name=cfg.scheduler_name,
            event_interval=cfg.event_interval,
            events_per_second=cfg.events_per_second,
        )
        hp = cfg.metrics_host_port
        plan = (lambda: self.solver.page) if cfg.plan_page else None  # the server reads the actor's latest view
        self.http = (
            HealthServer(self.metrics, hp[0], hp[1], healthy=self._healthy, ready=self._ready, plan=plan)
            if hp
            else None
        )
        self.http_port: int | None = None
        self.stop = anyio.Event()
        self._waiting = anyio.CancelScope()  # the wait for leadership and synced caches

    def _watch_error(self, kind: str, reason: str) -> None:
        self.metrics.watch_errors.labels(kind, reason).inc()

    def _healthy(self) -> str | None:
        if self.elector is not None and self.elector.leading and not self.elector.valid():
            return "lease not renewed within the renew deadline"
        return None

    def _ready(self) -> str | None:
        waiting = [w.name for w in self.watchers if not w.synced.is_set()]
        return f"caches not synced: {', '.join(waiting)}" if waiting else None

    async def _signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                logs.info("signal received, shutting down", signal=signal.Signals(signum).name)
                self.stop.set()
                self._waiting.cancel()
                return

    async def run(self) -> int:
        logs.info(
            "starting",
            scheduler_name=self.cfg.scheduler_name,
            identity=self.cfg.identity,
            leader_elect=self.cfg.leader_elect,
        )
        events_send, events_receive = anyio.create_memory_object_stream[Event | Resync](10_000)
        try:
            async with anyio.create_task_group() as tg:
                if self.http is not None:
                    self.http_port = await self.http.start()
                async with events_send:
                    for w in self.watchers:
                        tg.start_soon(w.run, events_send.clone())
                tg.start_soon(self.store.run, events_receive)
                tg.start_soon(self._signals)
                # The solver loads (in a thread) while the caches fill: the first cycle need not wait for it.
                tg.start_soon(partial(anyio.to_thread.run_sync, cycle.load_solver, abandon_on_cancel=True))
                with self._waiting:
                    # Caches first, then the lease: once leading, renewal starts at once. (Acquired first, a
                    # lease could expire while slow initial lists, say under a low kube-api-qps, still ran.)
                    for w in self.watchers:
                        await w.synced.wait()
                    if self.elector is not None:
                        await self.elector.acquire()
                if not self.stop.is_set():
                    await self._lead()
                if self.elector is not None:
                    await self.elector.release()
                tg.cancel_scope.cancel()
        finally:
            if self.http is not None:
                with anyio.CancelScope(shield=True):
                    await self.http.stop()
        logs.info("stopped")
        return 0

    async def _lead(self) -> None:
        logs.info("scheduling", scheduler_name=self.cfg.scheduler_name)
        plans_send, plans_receive = anyio.create_memory_object_stream[GangPlan | Preemption](math.inf)
        bound_send, bound_receive = anyio.create_memory_object_stream[Bound | Evicted](math.inf)
        results: Latest[CycleResult] = Latest()
        succeeded_send, succeeded_receive = anyio.create_memory_object_stream[Event | Resync](math.inf)
        binder_done = anyio.Event()

        async def bind() -> None:
            await self.binder.run(plans_receive, bound_send)
            binder_done.set()

        async with anyio.create_task_group() as leading:
            if self.elector is not None:
                leading.start_soon(self.elector.keep)
            leading.start_soon(self.feedback.run, results, bound_receive)
            leading.start_soon(bind)
            leading.start_soon(self.succeeded.run, succeeded_send)
            # The history's first list, before the first cycle: estimates (and the reservations they make) are
            # then the same as before a restart. A slow list does not hold scheduling up for long.
            with anyio.move_on_after(_HISTORY_WAIT):
                await self.succeeded.synced.wait()
            async with anyio.create_task_group() as planning:
                planning.start_soon(self.solver.run, plans_send, results, succeeded_receive)
                await self.stop.wait()
                planning.cancel_scope.cancel()
            # The solver has stopped and closed the plan stream: the binder finishes what it was given.
            with anyio.move_on_after(self.cfg.shutdown_grace) as grace:
                await binder_done.wait()
            if grace.cancelled_caught:
                logs.warning("binds still in flight at the end of the shutdown grace were cancelled")
            leading.cancel_scope.cancel()


async def main(cfg: Config) -> int:
    logs.setup(cfg.log_format, cfg.log_level)
    # Every watch holds a connection while it runs (one per watched kind, and the succeeded pods'): the pool has
    # room for all of them, the binds, and the calls that must not wait for one, the lease's renewal above all.
    connections = len(RESOURCES) + 1 + cfg.bind_concurrency + 16
    kube = await Kube.connect(cfg.kubeconfig, connections=connections, qps=cfg.kube_api_qps, burst=cfg.kube_api_burst)
    try:
        return await Scheduler(cfg, kube).run()
    finally:
        with anyio.CancelScope(shield=True):
            await kube.close()
