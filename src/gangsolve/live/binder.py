"""The binder actor: binds every pod of a placed gang through the Binding subresource.

A gang is bound as a transaction as far as Kubernetes allows (it has no atomic multi-pod bind):

1. **Last check**, against the store as it is now, before the gang's first bind: every pod still there with
   the uid that was solved, unbound and not terminating; every target node still there, schedulable, Ready,
   its taints tolerated and its selectors and affinity matched, and with room for the gang's pods next to
   everything bound or assumed there now (other schedulers' pods and terminating ones included). A gang that
   fails it is not bound at all: its pods are forgotten and it is planned again.
2. **Bind** all its pods concurrently, within the leader's fence: no call is made once the lease's validity
   has run out, and none may still be in flight after it.
3. A failed bind forgets that pod with back-off (1 s doubling to 10 s) and starts a new cycle.

Each bound pod is announced on the `bound` stream (feedback writes its Scheduled event). The binder owns no
state of its own beyond its concurrency limit; assumptions belong to the store.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, replace

import aiohttp
import anyio
from anyio.abc import ObjectReceiveStream
from anyio.streams.memory import MemoryObjectSendStream

from gangsolve import objects
from gangsolve.errors import InputError
from gangsolve.live import logs
from gangsolve.live.kube import ApiError, Kube
from gangsolve.live.leader import Fence
from gangsolve.live.metrics import Metrics
from gangsolve.live.solver_actor import GangPlan
from gangsolve.live.store import ClusterStore
from gangsolve.solver import Cluster, Gang, validate


@dataclass(frozen=True)
class Bound:
    pod: str  # namespace/name
    uid: str
    node: str


class BinderActor:
    def __init__(self, kube: Kube, store: ClusterStore, metrics: Metrics, fence: Fence, *, concurrency: int = 16):
        self.kube = kube
        self.store = store
        self.metrics = metrics
        self.fence = fence
        self.limiter = anyio.CapacityLimiter(concurrency)

    async def run(self, plans: ObjectReceiveStream[GangPlan], bound: MemoryObjectSendStream[Bound]) -> None:
        """Bind every plan received; returns once the plan stream is closed and every gang is done."""
        async with plans, bound, anyio.create_task_group() as tg:
            async for plan in plans:
                tg.start_soon(self.bind_gang, plan, bound)

    async def bind_gang(self, plan: GangPlan, bound: MemoryObjectSendStream[Bound]) -> bool:
        why = self.last_check(plan)
        if why is None and self.fence.remaining() <= 0:
            why = "not the leader"
        if why is not None:
            logs.info("gang not bound, planning again", gang=plan.gang, reason=why)
            self.metrics.gangs_replanned.inc()
            for key, uid, _node in plan.pods:
                self.store.forget(key, uid, failed=False)
            return False
        failures: list[str] = []
        async with anyio.create_task_group() as tg:
            for key, uid, node in plan.pods:
                tg.start_soon(self._bind_one, key, uid, node, failures, bound)
        self.metrics.gang_bind_duration.observe(time.monotonic() - plan.planned_at)
        if failures:
            logs.warning("gang partly failed to bind", gang=plan.gang, failed=len(failures), pods=len(plan.pods))
            return False
        logs.info("gang bound", gang=plan.gang, pods=len(plan.pods), nodes=",".join(sorted({n for *_, n in plan.pods})))
        return True

    def last_check(self, plan: GangPlan) -> str | None:
        """Why the plan must not be bound as it stands now, or None."""
        store = self.store
        mine = {key for key, _uid, _node in plan.pods}
        classes = store.priority_classes()
        pods_by_node: dict[str, list] = defaultdict(list)
        for key, uid, node in plan.pods:
            obj = store.pod(key)
            if obj is None:
                return f"pod {key} is gone"
            if obj["metadata"].get("uid") != uid:
                return f"pod {key} was replaced"
            if (obj.get("spec") or {}).get("nodeName") or obj["metadata"].get("deletionTimestamp"):
                return f"pod {key} is bound or terminating"
            try:
                pods_by_node[node].append(objects.pod(obj, classes, 0))
            except InputError as exc:
                return str(exc)
        nodes = []
        for name in pods_by_node:
            view = store.node_view(name)  # with what every pod bound or assumed there holds, terminating ones too
            if view is None:
                return f"node {name} is gone" if store.node(name) is None else str(store.node_error(name))
            used = dict(view.used)
            for key, a in store.assumed_on(name):  # this plan's own pods: the ones being checked
                if key in mine:
                    for r, q in a.requests.items():
                        used[r] = used.get(r, 0) - q
            nodes.append(replace(view, used=used))
        pods = tuple(p for ps in pods_by_node.values() for p in ps)
        gang = Gang(plan.gang, pods, min_member=len(pods))
        violations = validate(Cluster(tuple(nodes), (gang,)), {p.name: n for n, ps in pods_by_node.items() for p in ps})
        return violations[0] if violations else None

    async def _bind_one(
        self, key: str, uid: str, node: str, failures: list[str], bound: MemoryObjectSendStream[Bound]
    ) -> None:
        ns, _, name = key.partition("/")
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": ns, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        async with self.limiter:
            budget = self.fence.remaining()
            if budget <= 0:
                self._failed(key, uid, node, "not_leader", "leadership ended before the bind", failures, backoff=False)
                return
            started = time.perf_counter()
            try:
                await self.kube.post(f"/api/v1/namespaces/{ns}/pods/{name}/binding", body, timeout=budget)
            except ApiError as exc:
                reason = {404: "not_found", 409: "conflict"}.get(exc.status, str(exc.status))
                self._failed(key, uid, node, reason, exc.message, failures)
                return
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                self._failed(key, uid, node, type(exc).__name__, str(exc), failures)
                return
            finally:
                self.metrics.bind_duration.observe(time.perf_counter() - started)
        self.metrics.pods_bound.inc()
        logs.debug("bound", pod=key, node=node)
        bound.send_nowait(Bound(key, uid, node))

    def _failed(
        self,
        key: str,
        uid: str,
        node: str,
        reason: str,
        message: str,
        failures: list[str],
        backoff: bool = True,
    ) -> None:
        failures.append(key)
        self.metrics.bind_errors.labels(reason).inc()
        logs.warning("bind failed", pod=key, node=node, reason=reason, error=message[:300])
        self.store.forget(key, uid, failed=backoff)
