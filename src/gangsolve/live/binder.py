"""The binder actor: binds every pod of a placed gang through the Binding subresource.

A gang is bound as a transaction as far as Kubernetes allows (it has no atomic multi-pod bind):

1. **Last check**, against the store as it is now, before the gang's first bind: every pod still there with
   the uid that was solved, unbound and not terminating; every target node still there, schedulable, Ready,
   its taints tolerated and its selectors and affinity matched, and with room for the gang's pods next to
   everything bound or assumed there now (other schedulers' pods and terminating ones included). A gang that
   fails it is not bound at all: its pods are forgotten and it is planned again.
2. **Claims** (Dynamic Resource Allocation), as kube-scheduler writes them before binding: each claim of the
   gang's pods gets the delete-protection finalizer, its `status.allocation` (the devices the solver actor
   chose, unless it is allocated already) and the pod in `status.reservedFor`, each write preconditioned on
   the claim's uid and resourceVersion as the cycle saw them. If any write fails, the claims written are
   undone and nothing is bound. The last check has made sure no device is allocated to another claim,
   observed or assumed, and that no shared device (DRA consumable capacity) holds more than its capacity with
   the shares chosen (the allocation of a share says what it consumes: `consumedCapacity`).
3. **Bind** all its pods concurrently, within the leader's fence: no call is made once the lease's validity
   has run out, and none may still be in flight after it. A fractional pod first gets the GPU the cycle chose
   for its share (annotation `gangsolve.io/gpu-index`, through pods/status, the pod's uid as precondition):
   how a restarted scheduler knows which GPUs are shared. A pod whose annotation cannot be written is not bound.
4. A failed bind (or GPU index write) forgets that pod, and the scheduling queue backs it off (1 s doubling to
   10 s); its claims' reservation (and the allocation it made) is undone, and a new cycle starts.

A `Preemption` is carried out the way kube-scheduler does it, within the same fence:

1. **Nominations** first (`status.nominatedNodeName` through pods/status, the pod's uid as precondition;
   `null` clears one), so that whoever schedules next sees whom the room being freed is for.
2. **Victims**: each gets the `DisruptionTarget` condition (reason `PreemptionByScheduler`) and is deleted with
   its uid as precondition and its own grace period. Not the Eviction API: it refuses victims whose PDB allows
   no disruption, and a victim gang must go whole (the solver already spent PDB violations only where it had
   to). A victim deleted or replaced meanwhile is fine; other failures are retried twice, then forgotten in
   the store so the next cycle plans with it running.

Each bound pod and each evicted victim is announced on the `events` stream (feedback writes Scheduled and
Preempted events). At most `concurrency` gangs are checked and bound at once, in the order the cycle planned
them: a cycle that places a thousand gangs sends its first Bindings after one last check, not after a thousand
(and each check reads the store as close to its binds as it can). The binder owns no state of its own beyond
its concurrency limits; assumptions, nominations and evictions in flight belong to the store, back-off to the
scheduling queue.
"""

from __future__ import annotations

import copy
import time
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime

import aiohttp
import anyio
from anyio.abc import ObjectReceiveStream
from anyio.streams.memory import MemoryObjectSendStream

from gangsolve.edge import dra, dra_capacity, objects, shares
from gangsolve.edge.errors import InputError
from gangsolve.live import logs
from gangsolve.live.fence import Fence
from gangsolve.live.kube import STRATEGIC_PATCH, ApiError, Kube
from gangsolve.live.messages import COMPONENT, Bound, ClaimWrite, Evicted, GangPlan, Preemption, Victim
from gangsolve.live.metrics import Metrics
from gangsolve.live.queue import SchedulingQueue
from gangsolve.live.store import ClusterStore
from gangsolve.solver import Cluster, Gang, validate
from gangsolve.solver.validate import validate_shares


class BinderActor:
    def __init__(
        self,
        kube: Kube,
        store: ClusterStore,
        queue: SchedulingQueue,
        metrics: Metrics,
        fence: Fence,
        *,
        concurrency: int = 16,
    ):
        self.kube = kube
        self.store = store
        self.queue = queue
        self.metrics = metrics
        self.fence = fence
        self.limiter = anyio.CapacityLimiter(concurrency)  # calls in flight
        self.gangs = anyio.CapacityLimiter(concurrency)  # gangs being checked and bound

    async def run(
        self, plans: ObjectReceiveStream[GangPlan | Preemption], bound: MemoryObjectSendStream[Bound | Evicted]
    ) -> None:
        """Bind every plan received and carry out every preemption; returns once the plan stream is closed and
        every one is done."""
        async with plans, bound, anyio.create_task_group() as tg:
            async for plan in plans:
                if isinstance(plan, Preemption):
                    tg.start_soon(self.preempt, plan, bound)
                else:
                    tg.start_soon(self.bind_gang, plan, bound)

    async def bind_gang(self, plan: GangPlan, bound: MemoryObjectSendStream[Bound | Evicted]) -> bool:
        async with self.gangs:
            return await self._bind_gang(plan, bound)

    async def _bind_gang(self, plan: GangPlan, bound: MemoryObjectSendStream[Bound | Evicted]) -> bool:
        why = self.last_check(plan)
        if why is None and self.fence.remaining() <= 0:
            why = "not the leader"
        if why is not None:
            logs.info("gang not bound, planning again", gang=plan.gang, reason=why)
            self.metrics.gangs_replanned.inc()
            for key, uid, _node in plan.pods:
                self.store.forget(key, uid)
            return False
        uids = {key: uid for key, uid, _node in plan.pods}
        written: list[tuple[ClaimWrite, dict]] = []
        try:
            for w in plan.claims:
                written.append((w, await self._reserve(w, uids[w.pod])))
        except (ApiError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            logs.warning("claim write failed, gang not bound", gang=plan.gang, error=str(exc)[:300])
            self.metrics.bind_errors.labels("claim").inc()
            await self._unreserve(written, uids)
            for key, uid, _node in plan.pods:
                self._forget(key, uid, backoff=True)
            return False
        failures: list[str] = []
        gpus = {key: share.gpu for key, share in plan.shares}
        async with anyio.create_task_group() as tg:
            for key, uid, node in plan.pods:
                tg.start_soon(self._bind_one, key, uid, node, gpus.get(key), failures, bound)
        self.metrics.gang_bind_duration.observe(time.monotonic() - plan.planned_at)
        if failures:
            logs.warning("gang partly failed to bind", gang=plan.gang, failed=len(failures), pods=len(plan.pods))
            await self._unreserve([(w, obj) for w, obj in written if w.pod in failures], uids)
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
            nodes.append(replace(view, used=used, gpu_shares=store.gpu_shares(name, but=mine)))
        pods = tuple(p for ps in pods_by_node.values() for p in ps)
        cluster = Cluster(tuple(nodes), (Gang(plan.gang, pods, min_member=len(pods)),))
        bindings = {p.name: n for n, ps in pods_by_node.items() for p in ps}
        violations = validate(cluster, bindings) or validate_shares(cluster, bindings, dict(plan.shares))
        return violations[0] if violations else self._claims_check(plan)

    def _claims_check(self, plan: GangPlan) -> str | None:
        """Every claim as the cycle saw it and unallocated (or allocated already, to be reserved only); no
        device chosen for two claims, or allocated to any other claim, observed or assumed; no pod with claims
        bound without them."""
        with_writes = {w.pod for w in plan.claims}
        for key, _uid, _node in plan.pods:
            obj = self.store.pod(key)
            if obj is not None and (obj.get("spec") or {}).get("resourceClaims") and key not in with_writes:
                return f"pod {key} has resource claims and no allocation was planned for them"
        if not plan.claims:
            return None
        in_use = self.store.devices_in_use(but={w.claim for w in plan.claims})
        shares = self.store.shares_in_use(but={w.claim for w in plan.claims})
        chosen: dict[tuple[str, str, str], str] = {}
        shared: set[tuple[str, str, str]] = set()  # the shared devices this plan takes shares of
        for w in plan.claims:
            claim = self.store.claim(w.claim)
            if claim is None:
                return f"ResourceClaim {w.claim} is gone"
            meta = claim["metadata"]
            if meta.get("uid") != w.uid or meta.get("resourceVersion") != w.resource_version:
                return f"ResourceClaim {w.claim} changed since the cycle"
            allocated = (claim.get("status") or {}).get("allocation") is not None
            if allocated != (w.allocation is None):
                return (
                    f"ResourceClaim {w.claim} was allocated meanwhile"
                    if allocated
                    else f"{w.claim} lost its allocation"
                )
            for r in ((w.allocation or {}).get("devices") or {}).get("results") or []:
                device = (r["driver"], r["pool"], r["device"])
                holder = in_use.get(device) or chosen.get(device)
                if holder is not None:
                    return f"device {'/'.join(device)} is allocated to ResourceClaim {holder}"
                if r.get("consumedCapacity") is not None:
                    shares.setdefault(device, []).append(r["consumedCapacity"])
                    shared.add(device)
                    continue
                if device in shares:
                    return f"device {'/'.join(device)} holds shares"
                chosen[device] = w.claim
        if not shared:
            return None
        # Only the devices this plan shares: what others hold elsewhere is not this gang's to refuse.
        return dra_capacity.over_capacity({d: shares[d] for d in shared}, self.store.shared_capacities())

    def _claim_path(self, claim: str) -> str:
        ns, _, name = claim.partition("/")
        return f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}"

    def _budget(self) -> float:
        budget = self.fence.remaining()
        if budget <= 0:
            raise TimeoutError("leadership ended before the claim write")
        return budget

    async def _reserve(self, w: ClaimWrite, pod_uid: str) -> dict:
        """The claim allocated (finalizer first, as kube-scheduler does) and reserved for the pod; each write
        carries the resourceVersion it was read at, so a claim changed meanwhile is refused (409)."""
        observed = self.store.claim(w.claim)
        if observed is None:
            raise ApiError(404, f"ResourceClaim {w.claim} is gone", "PUT", self._claim_path(w.claim))
        body = copy.deepcopy(observed)
        body["metadata"]["resourceVersion"] = w.resource_version
        finalizers = body["metadata"].get("finalizers") or []
        async with self.limiter:
            if w.allocation is not None and dra.FINALIZER not in finalizers:
                body["metadata"]["finalizers"] = [*finalizers, dra.FINALIZER]
                body = await self.kube.put(self._claim_path(w.claim), body, timeout=self._budget())
            status = body.setdefault("status", {})
            if w.allocation is not None:
                status["allocation"] = w.allocation
            _ns, _, pod = w.pod.partition("/")
            status["reservedFor"] = [
                *(status.get("reservedFor") or []),
                {"resource": "pods", "name": pod, "uid": pod_uid},
            ]
            return await self.kube.put(self._claim_path(w.claim) + "/status", body, timeout=self._budget())

    async def _unreserve(self, written: list[tuple[ClaimWrite, dict]], uids: dict[str, str]) -> None:
        """Undo `_reserve`: the pod out of reservedFor, and the allocation and finalizer this plan added once no
        one else holds the claim. Best effort: a claim left reserved for a pending pod is read as allocated
        next cycle (the pod then goes where its devices are), as kube-scheduler's own leftovers are."""
        for w, obj in reversed(written):
            body = copy.deepcopy(obj)
            status = body.setdefault("status", {})
            status["reservedFor"] = [r for r in status.get("reservedFor") or [] if r.get("uid") != uids[w.pod]]
            release = w.allocation is not None and not status["reservedFor"]
            if release:
                status.pop("allocation", None)
            try:
                async with self.limiter:
                    body = await self.kube.put(self._claim_path(w.claim) + "/status", body, timeout=self._budget())
                    finalizers = body["metadata"].get("finalizers") or []
                    if release and dra.FINALIZER in finalizers:
                        body["metadata"]["finalizers"] = [f for f in finalizers if f != dra.FINALIZER]
                        await self.kube.put(self._claim_path(w.claim), body, timeout=self._budget())
            except (ApiError, aiohttp.ClientError, OSError, TimeoutError) as exc:
                logs.warning("claim not undone", claim=w.claim, error=str(exc)[:300])

    async def _bind_one(
        self,
        key: str,
        uid: str,
        node: str,
        gpu: int | None,
        failures: list[str],
        bound: MemoryObjectSendStream[Bound | Evicted],
    ) -> None:
        """Bind the pod, a fractional one (`gpu`: the GPU of its share) once the GPU is written on it."""
        ns, _, name = key.partition("/")
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": ns, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        async with self.limiter:
            for call in ("gpu", "bind") if gpu is not None else ("bind",):
                budget = self.fence.remaining()
                if budget <= 0:
                    message = f"leadership ended before the {'GPU index' if call == 'gpu' else 'bind'}"
                    self._failed(key, uid, node, "not_leader", message, failures, backoff=False)
                    return
                started = time.perf_counter()
                try:
                    if call == "gpu":
                        index = {"metadata": {"uid": uid, "annotations": {shares.INDEX: str(gpu)}}}
                        # (through pods/status, which may write annotations too: no permission beyond the
                        # conditions' and nominations')
                        await self.kube.patch(f"/api/v1/namespaces/{ns}/pods/{name}/status", index, timeout=budget)
                    else:
                        await self.kube.post(f"/api/v1/namespaces/{ns}/pods/{name}/binding", body, timeout=budget)
                except ApiError as exc:
                    reason = {404: "not_found", 409: "conflict"}.get(exc.status, str(exc.status))
                    self._failed(key, uid, node, _REASON[call] + reason, exc.message, failures)
                    return
                except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                    self._failed(key, uid, node, _REASON[call] + type(exc).__name__, str(exc), failures)
                    return
                finally:
                    if call == "bind":
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
        self._forget(key, uid, backoff=backoff)

    def _forget(self, key: str, uid: str, *, backoff: bool) -> None:
        """Not bound: the store forgets the assumption; after a failed bind the queue backs the pod off."""
        if self.store.forget(key, uid) and backoff:
            self.queue.back_off(key, uid)

    # ------------------------------------------------------------------ preemption

    async def preempt(self, p: Preemption, events: MemoryObjectSendStream[Bound | Evicted]) -> None:
        if self.fence.remaining() <= 0:
            logs.info("preemption not carried out: not the leader", victims=len(p.victims))
            for key, uid, _node in p.nominations:
                self.store.forget_nomination(key, uid)
            for v in p.victims:
                self.store.forget_eviction(v.pod, v.uid)
            return
        async with anyio.create_task_group() as tg:
            for key, uid, node in p.nominations:
                tg.start_soon(self._nominate, key, uid, node)
        async with anyio.create_task_group() as tg:
            for v in p.victims:
                tg.start_soon(self._evict, v, events)
        if p.victims:
            gangs = ",".join(sorted({v.preemptor for v in p.victims}))
            logs.info("preempted", gangs=gangs, victims=len(p.victims), nominated=len(p.nominations))

    async def _nominate(self, key: str, uid: str, node: str | None) -> None:
        ns, _, name = key.partition("/")
        body = {"metadata": {"uid": uid}, "status": {"nominatedNodeName": node}}
        async with self.limiter:
            try:
                await self.kube.patch(
                    f"/api/v1/namespaces/{ns}/pods/{name}/status", body, timeout=self.fence.remaining()
                )
            except _ERRORS as exc:
                self.store.forget_nomination(key, uid)
                if not (isinstance(exc, ApiError) and exc.status in (404, 409)):  # gone or replaced: nothing to do
                    logs.warning("nomination not written", pod=key, node=node, error=str(exc)[:300])

    async def _evict(self, v: Victim, events: MemoryObjectSendStream[Bound | Evicted]) -> None:
        ns, _, name = v.pod.partition("/")
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": f"{COMPONENT}: preempting to accommodate a higher priority gang {v.preemptor}",
            "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        status = {"metadata": {"uid": v.uid}, "status": {"conditions": [condition]}}
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": v.uid}}
        path = f"/api/v1/namespaces/{ns}/pods/{name}"
        for attempt in range(_EVICT_ATTEMPTS):
            async with self.limiter:
                try:
                    await self.kube.patch(path + "/status", status, STRATEGIC_PATCH, timeout=self.fence.remaining())
                    await self.kube.delete(path, options, timeout=self.fence.remaining())
                except _ERRORS as exc:
                    if isinstance(exc, ApiError) and exc.status in (404, 409):  # deleted or replaced meanwhile
                        self.metrics.evictions.labels("gone").inc()
                        return
                    error = str(exc)[:300]
                else:
                    self.metrics.evictions.labels("evicted").inc()
                    events.send_nowait(Evicted(v))
                    return
            if self.fence.remaining() <= 0:
                break
            await anyio.sleep(_EVICT_RETRY * 2**attempt)
        self.metrics.evictions.labels("failed").inc()
        logs.warning("victim not evicted", pod=v.pod, preemptor=v.preemptor, error=error)
        self.store.forget_eviction(v.pod, v.uid)


_ERRORS = (ApiError, aiohttp.ClientError, OSError, TimeoutError)
_REASON = {"gpu": "gpu_index_", "bind": ""}  # a failed GPU index write is told apart from a failed bind
_EVICT_ATTEMPTS = 3
_EVICT_RETRY = 0.2  # seconds before the second attempt, doubling
