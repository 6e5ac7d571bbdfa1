"""`gangsolve run`: one task group holding every actor; a crash in one cancels all.

    watchers --events--> SnapshotActor (ClusterCache) --snapshot--> SolverActor --plans--> BinderActor
                                                                         \\--results--> Feedback
    HealthServer (/metrics /healthz /readyz), LeaderElector (Lease), signal handler

Only the leader (or the only replica, without --leader-elect) runs the solver, binder and feedback; every
replica keeps its cache warm. SIGTERM/SIGINT: no new cycle starts, binds in flight finish, the lease is
released, exit 0. Losing the lease ends the process with status 1 (its Deployment restarts it).
"""

from __future__ import annotations

import signal

import anyio

from gangsolve.live import logs
from gangsolve.live.binder import BinderActor
from gangsolve.live.cache import ClusterCache, SnapshotActor
from gangsolve.live.config import Config
from gangsolve.live.feedback import Feedback
from gangsolve.live.http import HealthServer
from gangsolve.live.kube import Kube
from gangsolve.live.leader import LeaderElector
from gangsolve.live.metrics import Metrics
from gangsolve.live.solver_actor import SolverActor
from gangsolve.live.watchers import RESOURCES, Watcher

SHUTDOWN_GRACE = 30.0  # seconds for binds in flight at SIGTERM


class Scheduler:
    """Everything of one `gangsolve run`, wired; `await Scheduler(cfg).run()`."""

    def __init__(self, cfg: Config, kube: Kube) -> None:
        self.cfg = cfg
        self.kube = kube
        self.metrics = Metrics()
        self.cache = ClusterCache()
        send, receive = anyio.create_memory_object_stream(10_000)
        self.watchers = [Watcher(kube, r, send.clone(), on_error=self._watch_error) for r in RESOURCES]
        send.close()
        self.snapshot_actor = SnapshotActor(self.cache, receive)
        self.elector = None
        if cfg.leader_elect:
            self.elector = LeaderElector(
                kube,
                name=cfg.lease_name,
                namespace=cfg.lease_namespace,
                identity=cfg.identity,
                lease_duration=cfg.lease_duration,
                renew_deadline=cfg.renew_deadline,
                retry_period=cfg.retry_period,
                on_change=lambda leading: self.metrics.is_leader.set(int(leading)),
            )
        self.feedback = Feedback(
            kube,
            self.cache,
            self.metrics,
            identity=cfg.identity,
            scheduler_name=cfg.scheduler_name,
            event_interval=cfg.event_interval,
            events_per_second=cfg.events_per_second,
        )
        self.binder = BinderActor(
            kube,
            self.cache,
            self.metrics,
            concurrency=cfg.bind_concurrency,
            may_bind=self.elector.valid if self.elector else (lambda: True),
            on_bound=self.feedback.bound,
        )
        self.solver = SolverActor(
            self.cache,
            self.metrics,
            scheduler_name=cfg.scheduler_name,
            group_label=cfg.group_label,
            time_limit=cfg.time_limit,
            debounce=cfg.debounce,
            resync_period=cfg.resync_period,
            on_placed=self.binder.submit,
            on_result=self.feedback.submit,
        )
        self.shutdown = anyio.Event()
        self.scheduling = False
        hp = cfg.metrics_host_port
        self.http = HealthServer(self.metrics, hp[0], hp[1], healthy=self._healthy, ready=self._ready) if hp else None
        self.http_port: int | None = None

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
                self.shutdown.set()
                return

    async def _lead(self, tg) -> None:
        if self.elector is not None:
            await self.elector.acquire()
            tg.start_soon(self.elector.keep)
        for w in self.watchers:
            await w.synced.wait()
        if self.shutdown.is_set():
            return
        logs.info("scheduling", scheduler_name=self.cfg.scheduler_name)
        self.scheduling = True
        tg.start_soon(self.binder.run)
        tg.start_soon(self.feedback.run)
        tg.start_soon(self.solver.run)

    async def run(self) -> int:
        logs.info(
            "starting",
            scheduler_name=self.cfg.scheduler_name,
            identity=self.cfg.identity,
            leader_elect=self.cfg.leader_elect,
        )
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._signals)
                if self.http is not None:
                    self.http_port = await self.http.start()
                for w in self.watchers:
                    tg.start_soon(w.run)
                tg.start_soon(self.snapshot_actor.run)
                tg.start_soon(self._lead, tg)
                await self.shutdown.wait()
                await self.solver.stop()  # no new cycle; the current one hands its plans on
                with anyio.move_on_after(SHUTDOWN_GRACE) as scope:
                    await self.binder.drain()
                if scope.cancelled_caught:
                    logs.warning("binds still in flight at shutdown", gangs=self.binder.in_flight)
                if self.elector is not None:
                    await self.elector.release()
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                if self.http is not None:
                    await self.http.stop()
        logs.info("stopped")
        return 0


async def main(cfg: Config) -> int:
    logs.setup(cfg.log_format, cfg.log_level)
    kube = await Kube.connect(cfg.kubeconfig, connections=cfg.bind_concurrency + 16)
    try:
        return await Scheduler(cfg, kube).run()
    finally:
        with anyio.CancelScope(shield=True):
            await kube.close()
