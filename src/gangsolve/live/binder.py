"""The binder actor: binds every pod of a placed gang through the Binding subresource.

Before a gang's first bind its pods are checked against the cache (still there, same uid, still unbound,
node still there): a gang that lost a pod while the solver ran is not bound at all but planned again. Then all
its pods are bound concurrently (bounded by `concurrency` across gangs). A failed bind (409: bound already or
replaced; 404: pod gone; node gone) forgets that pod's assumption, which starts a new cycle. A pod is never
bound twice: the pod is assumed (no later cycle plans it) until the watch shows it bound, every uid this
process bound is remembered, and the API server refuses to bind a pod that has a node already.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable

import anyio

from gangsolve.live import logs
from gangsolve.live.cache import ClusterCache
from gangsolve.live.kube import ApiError, Kube
from gangsolve.live.metrics import Metrics
from gangsolve.live.solver_actor import GangPlan

# A failpoint for fault tests: seconds to wait before each Binding call, so a test can act while a gang is
# being bound. Never set in production.
_FAULT_BIND_DELAY = float(os.environ.get("GANGSOLVE_FAULT_BIND_DELAY", "0") or 0)


class BinderActor:
    def __init__(
        self,
        kube: Kube,
        cache: ClusterCache,
        metrics: Metrics,
        *,
        concurrency: int = 16,
        may_bind: Callable[[], bool] = lambda: True,
        on_bound: Callable[[str, str, str], None] = lambda pod, uid, node: None,
    ) -> None:
        self.kube = kube
        self.cache = cache
        self.metrics = metrics
        self.send, self.receive = anyio.create_memory_object_stream(math.inf)
        self.limiter = anyio.CapacityLimiter(concurrency)
        self.may_bind = may_bind  # False once leadership is in doubt: bind nothing more
        self.on_bound = on_bound
        self.bound_uids: set[str] = set()
        self.in_flight = 0
        self.idle = anyio.Event()
        self.idle.set()

    async def submit(self, plan: GangPlan) -> None:
        """From the solver actor: counted in flight from here, so a drain waits for it."""
        self.in_flight += 1
        if self.idle.is_set():
            self.idle = anyio.Event()
        await self.send.send(plan)

    async def run(self) -> None:
        async with self.receive, anyio.create_task_group() as tg:
            async for plan in self.receive:
                tg.start_soon(self._bind_gang_tracked, plan)

    async def drain(self) -> None:
        """Wait until no gang is being bound (SIGTERM: in-flight binds finish)."""
        while self.in_flight:
            await self.idle.wait()

    async def _bind_gang_tracked(self, plan: GangPlan) -> None:
        try:
            with anyio.CancelScope(shield=True):  # a started gang is finished, even on shutdown
                await self.bind_gang(plan)
        finally:
            self.in_flight -= 1
            if not self.in_flight:
                self.idle.set()

    def _stale(self, plan: GangPlan) -> str | None:
        for key, uid, node in plan.pods:
            obj = self.cache.pod(key)
            if obj is None:
                return f"pod {key} is gone"
            if obj["metadata"].get("uid") != uid:
                return f"pod {key} was replaced"
            if (obj.get("spec") or {}).get("nodeName") or obj["metadata"].get("deletionTimestamp"):
                return f"pod {key} is bound or terminating"
            if uid in self.bound_uids:
                return f"pod {key} was bound already"
            if self.cache.node(node) is None:
                return f"node {node} is gone"
        return None

    async def bind_gang(self, plan: GangPlan) -> bool:
        why = self._stale(plan) or (None if self.may_bind() else "not the leader")
        if why is not None:
            logs.info("gang not bound, planning again", gang=plan.gang, reason=why)
            for key, _uid, _node in plan.pods:
                self.cache.forget(key)
            self.cache.touch()
            return False
        failures: list[str] = []
        async with anyio.create_task_group() as tg:
            for key, uid, node in plan.pods:
                tg.start_soon(self._bind_one, key, uid, node, failures)
        self.metrics.gang_bind_duration.observe(time.monotonic() - plan.planned_at)
        if failures:
            logs.warning("gang partly failed to bind", gang=plan.gang, failed=len(failures), pods=len(plan.pods))
            self.cache.touch()
            return False
        logs.info(
            "gang bound", gang=plan.gang, pods=len(plan.pods), nodes=",".join(sorted({n for _k, _u, n in plan.pods}))
        )
        return True

    async def _bind_one(self, key: str, uid: str, node: str, failures: list[str]) -> None:
        ns, _, name = key.partition("/")
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": ns, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        async with self.limiter:
            if _FAULT_BIND_DELAY:
                await anyio.sleep(_FAULT_BIND_DELAY)
            if not self.may_bind():
                failures.append(key)
                self.cache.forget(key)
                self.metrics.bind_errors.labels("not_leader").inc()
                return
            started = time.perf_counter()
            try:
                await self.kube.post(f"/api/v1/namespaces/{ns}/pods/{name}/binding", body)
            except ApiError as exc:
                reason = {404: "not_found", 409: "conflict"}.get(exc.status, str(exc.status))
                self._failed(key, node, reason, exc.message, failures)
                return
            except (OSError, TimeoutError, Exception) as exc:
                if isinstance(exc, anyio.get_cancelled_exc_class()):
                    raise
                self._failed(key, node, type(exc).__name__, str(exc), failures)
                return
            finally:
                self.metrics.bind_duration.observe(time.perf_counter() - started)
        self.bound_uids.add(uid)
        self.metrics.pods_bound.inc()
        logs.debug("bound", pod=key, node=node)
        self.on_bound(key, uid, node)

    def _failed(self, key: str, node: str, reason: str, message: str, failures: list[str]) -> None:
        failures.append(key)
        self.metrics.bind_errors.labels(reason).inc()
        logs.warning("bind failed", pod=key, node=node, reason=reason, error=message[:300])
        self.cache.forget(key)
