"""What users see in kubectl: pod conditions, events (events.k8s.io/v1) and PodGroup status.

- A pending gang's pods get PodScheduled=False, reason Unschedulable, message = the solver's explanation
  (written only when it changes).
- Events: FailedScheduling (Warning) for those pods and Scheduled (Normal) for each bound pod. An identical
  event about one pod is written at most once per `event_interval`, and all events share a token bucket of
  `events_per_second`.
- PodGroups of both kinds (scheduling.x-k8s.io, scheduling.volcano.sh): phase, scheduled/running counts and
  a Scheduled/Unschedulable condition, written through the status subresource when it changes.

Feedback works on the latest cycle's result only; a slow API server delays it but never the scheduling.
"""

from __future__ import annotations

import math
import secrets
import time
from datetime import UTC, datetime

import anyio

from gangsolve.gangs import POD_GROUP_LABEL, VOLCANO_ANNOTATION
from gangsolve.live import logs
from gangsolve.live.cache import ClusterCache
from gangsolve.live.kube import STRATEGIC_PATCH, ApiError, Kube
from gangsolve.live.metrics import Metrics
from gangsolve.live.solver_actor import CycleResult
from gangsolve.objects import is_pending_for

COMPONENT = "gangsolve"
MAX_MESSAGE = 1024  # the API server caps an event's note at 1 kB


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class TokenBucket:
    def __init__(self, rate: float, burst: float | None = None) -> None:
        self.rate = rate
        self.capacity = burst if burst is not None else max(1.0, rate * 5)
        self.tokens = self.capacity
        self.stamp = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


class EventLimiter:
    """At most one identical (object, reason, message) event per interval, and a global rate."""

    def __init__(self, interval: float, rate: float) -> None:
        self.interval = interval
        self.bucket = TokenBucket(rate)
        self.last: dict[tuple[str, str, str], float] = {}

    def allow(self, uid: str, reason: str, message: str) -> bool:
        now = time.monotonic()
        key = (uid, reason, message)
        if now - self.last.get(key, -1e18) < self.interval:
            return False
        if not self.bucket.take():
            return False
        self.last[key] = now
        if len(self.last) > 50_000:  # forget the oldest half
            for k, _t in sorted(self.last.items(), key=lambda kv: kv[1])[:25_000]:
                del self.last[k]
        return True


def pod_group_status(pg: dict, members: list[dict], reason: str, existing: dict | None = None) -> dict:
    """The status a PodGroup should show, from its member pods (and the last cycle's reason it waits)."""
    group = str(pg.get("apiVersion", "")).split("/")[0]
    min_member = int((pg.get("spec") or {}).get("minMember", 1) or 1)
    live = [p for p in members if not (p["metadata"].get("deletionTimestamp"))]
    scheduled = sum(1 for p in live if (p.get("spec") or {}).get("nodeName"))
    running = sum(1 for p in live if (p.get("status") or {}).get("phase") == "Running")
    ok = scheduled >= min_member
    if group == "scheduling.volcano.sh":
        phase = "Running" if ok else "Pending"
    else:
        phase = "Running" if running >= min_member else ("Scheduled" if ok else "Pending")
    cond_type = "Scheduled" if ok else "Unschedulable"
    message = (
        f"{scheduled} of {min_member} required pods scheduled"
        if ok
        else (reason or f"{scheduled} of {min_member} required pods scheduled")
    )
    old = {c.get("type"): c for c in ((existing or {}).get("conditions") or [])}
    prev = old.get(cond_type)
    stamp = prev.get("lastTransitionTime") if prev and prev.get("status") == "True" else now_rfc3339()
    condition = {
        "type": cond_type,
        "status": "True",
        "reason": "Scheduled" if ok else "Unschedulable",
        "message": message[:MAX_MESSAGE],
        "lastTransitionTime": stamp,
    }
    status = {"phase": phase, "scheduled": scheduled, "running": running, "conditions": [condition]}
    if group == "scheduling.volcano.sh":
        status.pop("scheduled")
    return status


def _comparable(status: dict | None) -> dict:
    s = dict(status or {})
    s["conditions"] = [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in s.get("conditions") or []]
    return s


class Feedback:
    def __init__(
        self,
        kube: Kube,
        cache: ClusterCache,
        metrics: Metrics,
        *,
        identity: str,
        scheduler_name: str,
        event_interval: float = 60.0,
        events_per_second: float = 20.0,
        concurrency: int = 8,
    ) -> None:
        self.kube = kube
        self.cache = cache
        self.metrics = metrics
        self.identity = identity
        self.scheduler_name = scheduler_name
        self.events = EventLimiter(event_interval, events_per_second)
        self.limiter = anyio.CapacityLimiter(concurrency)
        self._latest: CycleResult | None = None
        self._wake = anyio.Event()
        self._written_status: dict[tuple, dict] = {}
        self._written_condition: dict[str, str] = {}  # pod uid -> message written
        self._bound_send, self._bound_receive = anyio.create_memory_object_stream(math.inf)

    # called by the solver actor after each cycle: never blocks
    def submit(self, result: CycleResult) -> None:
        self._latest = result
        self._wake.set()

    # called by the binder for each pod bound: never blocks
    def bound(self, key: str, uid: str, node: str) -> None:
        self._bound_send.send_nowait((key, uid, node))

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._scheduled_events)
            await self._cycles()

    async def _scheduled_events(self) -> None:
        async with self._bound_receive:
            async for key, uid, node in self._bound_receive:
                try:
                    await self.scheduled(key, uid, node)
                except Exception as exc:
                    if isinstance(exc, anyio.get_cancelled_exc_class()):
                        raise
                    logs.warning("event not written", pod=key, error=f"{type(exc).__name__}: {exc}")

    async def _cycles(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            result, self._latest = self._latest, None
            if result is not None:
                try:
                    await self.apply(result)
                except Exception as exc:
                    if isinstance(exc, anyio.get_cancelled_exc_class()):
                        raise
                    logs.warning("feedback failed", error=f"{type(exc).__name__}: {exc}")

    async def apply(self, result: CycleResult) -> None:
        reasons: dict[str, str] = {}  # pod key -> why it waits
        for gang, res in zip(result.cluster.gangs, result.placement.gangs, strict=True):
            if res.placed:
                continue
            for p in gang.pods:
                if p.name not in result.placement.bindings:
                    reasons[p.name] = res.reason or "waiting for the rest of the gang"
        reasons.update(self._waiting_for_pod_group(result))
        async with anyio.create_task_group() as tg:
            for key, reason in reasons.items():
                tg.start_soon(self._unschedulable, key, reason)
            tg.start_soon(self._pod_groups, reasons)

    # ------------------------------------------------------------------ pods

    def _waiting_for_pod_group(self, result: CycleResult) -> dict[str, str]:
        """Pending pods of ours that name a PodGroup not (yet) created: they join no gang, and say so."""
        out = {}
        groups = result.snapshot.pod_groups
        unreadable = dict(result.skipped)
        for p in result.snapshot.pods:
            if not is_pending_for(p, self.scheduler_name):
                continue
            meta = p["metadata"]
            ns, key = meta.get("namespace", ""), f"{meta.get('namespace', '')}/{meta['name']}"
            if f"Pod {key}" in unreadable:
                out[key] = f"cannot be scheduled: {unreadable[f'Pod {key}']}"
                continue
            label = (meta.get("labels") or {}).get(POD_GROUP_LABEL)
            annotation = (meta.get("annotations") or {}).get(VOLCANO_ANNOTATION)
            wanted = (
                ("scheduling.x-k8s.io", label)
                if label
                else ("scheduling.volcano.sh", annotation)
                if annotation
                else None
            )
            if wanted is None:
                continue
            problem = unreadable.get(f"PodGroup {ns}/{wanted[1]}")
            if problem:
                out[key] = f"PodGroup {ns}/{wanted[1]} ({wanted[0]}) cannot be read: {problem}"
            elif (wanted[0], ns, wanted[1]) not in groups:
                out[key] = f"waiting for PodGroup {ns}/{wanted[1]} ({wanted[0]}) to exist"
        return out

    async def _unschedulable(self, key: str, message: str) -> None:
        pod = self.cache.pod(key)
        if pod is None or (pod.get("spec") or {}).get("nodeName"):
            return
        uid = pod["metadata"].get("uid", "")
        message = message[:MAX_MESSAGE]
        current = next(
            (c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"), None
        )
        same = (
            current is not None
            and current.get("status") == "False"
            and current.get("reason") == "Unschedulable"
            and current.get("message") == message
        )
        async with self.limiter:
            if key in self.cache.assumed or (self.cache.pod(key) or {}).get("spec", {}).get("nodeName"):
                return  # placed by a newer cycle meanwhile: its binding sets PodScheduled=True
            if not same and self._written_condition.get(uid) != message:
                ns, _, name = key.partition("/")
                patch = {
                    "status": {
                        "conditions": [
                            {
                                "type": "PodScheduled",
                                "status": "False",
                                "reason": "Unschedulable",
                                "message": message,
                                "lastProbeTime": None,
                                "lastTransitionTime": now_rfc3339(),
                            }
                        ]
                    }
                }
                try:
                    await self.kube.patch(f"/api/v1/namespaces/{ns}/pods/{name}/status", patch, STRATEGIC_PATCH)
                    if len(self._written_condition) > 100_000:
                        self._written_condition.clear()
                    self._written_condition[uid] = message
                except ApiError as exc:
                    if exc.status != 404:
                        logs.warning("pod condition not written", pod=key, error=str(exc))
            await self.event(pod, "Warning", "FailedScheduling", "Scheduling", message)

    async def event(self, pod: dict, etype: str, reason: str, action: str, note: str) -> None:
        meta = pod["metadata"]
        if not self.events.allow(meta.get("uid", ""), reason, note):
            self.metrics.events_dropped.inc()
            return
        body = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{secrets.token_hex(8)}", "namespace": meta["namespace"]},
            "eventTime": now_micro(),
            "reportingController": COMPONENT,
            "reportingInstance": self.identity,
            "action": action,
            "reason": reason,
            "type": etype,
            "note": note[:MAX_MESSAGE],
            "regarding": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta.get("uid", ""),
                "resourceVersion": meta.get("resourceVersion", ""),
            },
        }
        try:
            await self.kube.post(f"/apis/events.k8s.io/v1/namespaces/{meta['namespace']}/events", body)
        except ApiError as exc:
            if exc.status not in (403, 404):  # namespace terminating, or no rights: nothing to do
                logs.warning("event not written", pod=f"{meta['namespace']}/{meta['name']}", error=str(exc))

    async def scheduled(self, key: str, uid: str, node: str) -> None:
        pod = self.cache.pod(key)
        if pod is None:
            ns, _, name = key.partition("/")
            pod = {"metadata": {"namespace": ns, "name": name, "uid": uid}}
        async with self.limiter:
            await self.event(pod, "Normal", "Scheduled", "Binding", f"Successfully assigned {key} to {node}")

    # ------------------------------------------------------------------ PodGroups

    async def _pod_groups(self, reasons: dict[str, str]) -> None:
        pods = list(self.cache.objects["Pod"].values())
        members: dict[tuple[str, str, str], list[dict]] = {}
        for p in pods:
            meta = p["metadata"]
            ns = meta.get("namespace", "")
            name = (meta.get("labels") or {}).get(POD_GROUP_LABEL)
            if name:
                members.setdefault(("scheduling.x-k8s.io", ns, name), []).append(p)
                continue
            name = (meta.get("annotations") or {}).get(VOLCANO_ANNOTATION)
            if name:
                members.setdefault(("scheduling.volcano.sh", ns, name), []).append(p)
        for key, pg in list(self.cache.objects["PodGroup"].items()):
            group_pods = members.get(key, [])
            reason = next(
                (
                    reasons[f"{p['metadata']['namespace']}/{p['metadata']['name']}"]
                    for p in group_pods
                    if f"{p['metadata']['namespace']}/{p['metadata']['name']}" in reasons
                ),
                "",
            )
            status = pod_group_status(pg, group_pods, reason, pg.get("status"))
            if _comparable(status) == _comparable(pg.get("status")) or _comparable(status) == _comparable(
                self._written_status.get(key)
            ):
                continue
            path = f"/apis/{pg['apiVersion']}/namespaces/{key[1]}/podgroups/{key[2]}"
            try:
                async with self.limiter:
                    try:
                        await self.kube.patch(path + "/status", {"status": status})
                    except ApiError as exc:
                        if exc.status != 404:
                            raise
                        await self.kube.patch(path, {"status": status})  # a CRD without the status subresource
                self._written_status[key] = status
            except ApiError as exc:
                if exc.status != 404:
                    logs.warning("PodGroup status not written", podgroup=f"{key[1]}/{key[2]}", error=str(exc))
