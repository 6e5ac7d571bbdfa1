"""What users see in kubectl: pod conditions, events (events.k8s.io/v1) and PodGroup status.

- A pending gang's pods get PodScheduled=False, reason Unschedulable, message = the solver's explanation,
  and for a gang holding a reservation when it is expected to start: `reserved 16 GPUs on nodes a, b from
  about 14:05 UTC`, or `waiting for an estimate` (written only when it changes).
- Events: FailedScheduling (Warning) for those pods, Scheduled (Normal) for each bound pod and Preempted
  (Normal) for each pod evicted. An identical event about one pod is written at most once per
  `event_interval`, and all events but Preempted share a rate of `events_per_second` (a Preempted event
  records something done to that pod, once: none may be lost).
- The pods of a job that needs a gang definition and has none (a TFJob without PodGroup or PDB: its minimum is
  1, so part of it may run) get a NoGangDefinition (Warning) event saying what keeps it whole, each cycle they
  are pending, and the same words in their condition while any of them waits, placed gang or not.
- PodGroups of both CRD kinds (scheduling.x-k8s.io, scheduling.volcano.sh): phase, scheduled/running counts
  and a Scheduled/Unschedulable condition, written through the status subresource when it changes.
- Kubernetes' own PodGroups (scheduling.k8s.io) whose pods are ours: the condition kube-scheduler writes,
  PodGroupInitiallyScheduled (True, reason Scheduled, once minCount pods are scheduled, and never False
  again; else False, reason Unschedulable, or SchedulerError when its pods' priorities differ from its own).
- Volcano Queues: status.allocated, what the queue's pods hold (bound and just placed), as Volcano writes it
  (quantities, without the pod count), when it changes. A pending gang its queue's capability holds back says
  so in its pods' condition (the solver's explanation).

Feedback works on the latest cycle's result only (a mailbox the solver actor overwrites); a slow API server
delays it but never the scheduling. It owns what it has written (keyed by uid, so a pod or PodGroup deleted
and created again under its name is written afresh), pruned every cycle to objects that still exist. Its
writes are fenced like the binder's: none once this replica's leadership has run out.
"""

from __future__ import annotations

import math
import secrets
import time
from datetime import UTC, datetime

import aiohttp
import anyio
from aiolimiter import AsyncLimiter
from anyio.abc import ObjectReceiveStream

from gangsolve.edge import reservations, usage
from gangsolve.edge.gang_hints import pod_group_of
from gangsolve.edge.gangs import (
    POD_GROUP_LABEL,
    PRIORITY_MISMATCH,
    UPSTREAM_GROUP,
    VOLCANO_ANNOTATION,
    upstream_group_name,
)
from gangsolve.edge.objects import is_pending_for, pod_key
from gangsolve.edge.snapshot import QUEUE_GROUP
from gangsolve.live import logs
from gangsolve.live.channels import Latest
from gangsolve.live.fence import Fence
from gangsolve.live.kube import STRATEGIC_PATCH, ApiError, Kube
from gangsolve.live.messages import COMPONENT, Bound, CycleResult, Evicted
from gangsolve.live.metrics import Metrics
from gangsolve.live.store import ClusterStore, ObjectKey
from gangsolve.solver.explain import quantity
from gangsolve.solver.model import PODS
from gangsolve.solver.queues import ROOT

MAX_MESSAGE = 1024  # the API server caps an event's note at 1 kB
USAGE_EVERY = 60.0  # seconds: a queue's usage history is written at most this often (unless it moved by 1%)
NO_GANG_DEFINITION = "NoGangDefinition"  # the event on pods of a job whose gang fell back to a minimum of 1


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class EventLimiter:
    """At most one identical (object, reason, message) event per interval, and a global rate (events beyond
    it are dropped, not queued: the next cycle says the same thing again)."""

    def __init__(self, interval: float, rate: float, clock=time.monotonic) -> None:
        self.interval = interval
        self.rate = AsyncLimiter(max(1.0, rate * 5), 5.0)  # `rate` a second, bursts of five seconds' worth
        self.last: dict[tuple[str, str, str], float] = {}
        self._clock = clock

    async def allow(self, uid: str, reason: str, message: str, rated: bool = True) -> bool:
        """`rated=False`: not held to the global rate (an event per thing done, not per cycle's finding)."""
        now = self._clock()
        key = (uid, reason, message)
        if now - self.last.get(key, -math.inf) < self.interval or (rated and not self.rate.has_capacity()):
            return False
        if rated:
            await self.rate.acquire()  # has capacity: returns at once
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


INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"


def upstream_pod_group_status(pg: dict, members: list[dict], reason: str, existing: dict | None = None) -> dict:
    """A scheduling.k8s.io PodGroup's status as kube-scheduler writes it: its one scheduling condition, other
    conditions (DisruptionTarget) kept as they are. True is terminal: it is never turned back to False."""
    conditions = [c for c in ((existing or {}).get("conditions") or []) if c.get("type") != INITIALLY_SCHEDULED]
    prev = next((c for c in (existing or {}).get("conditions") or [] if c.get("type") == INITIALLY_SCHEDULED), None)
    if prev is not None and prev.get("status") == "True":
        return dict(existing or {})
    gang = (((pg.get("spec") or {}).get("schedulingPolicy")) or {}).get("gang")
    need = int((gang or {}).get("minCount") or 1) if isinstance(gang, dict) else 1
    scheduled = sum(1 for p in members if (p.get("spec") or {}).get("nodeName") and not _terminating(p))
    if scheduled >= need:
        condition = {"status": "True", "reason": "Scheduled", "message": ""}
    elif not reason:
        return dict(existing or {})  # placed by this cycle, its bindings on their way: nothing to say yet
    elif reason.startswith(PRIORITY_MISMATCH):
        condition = {"status": "False", "reason": "SchedulerError", "message": reason}
    else:
        condition = {"status": "False", "reason": "Unschedulable", "message": reason}
    same = prev is not None and all(prev.get(k) == v for k, v in condition.items())
    stamp = prev.get("lastTransitionTime") if same and prev else now_rfc3339()
    condition = {"type": INITIALLY_SCHEDULED, **condition, "lastTransitionTime": stamp}
    condition["message"] = str(condition["message"])[:MAX_MESSAGE]
    return {**(existing or {}), "conditions": [*conditions, condition]}


def _terminating(pod: dict) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def _comparable(status: dict | None) -> dict:
    s = dict(status or {})
    s["conditions"] = [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in s.get("conditions") or []]
    return s


_WRITE_ERRORS = (ApiError, aiohttp.ClientError, OSError, TimeoutError)


def _fallbacks(result: CycleResult) -> dict[str, str]:
    """Gang name -> why its minimum is 1 though its job needs a gang definition, and what to do."""
    return {name: origin.fallback for name, origin in result.origins.items() if origin.fallback}


def _uid(obj: dict) -> str:
    return str((obj.get("metadata") or {}).get("uid", ""))


class Feedback:
    def __init__(
        self,
        kube: Kube,
        store: ClusterStore,
        metrics: Metrics,
        fence: Fence,
        *,
        identity: str,
        scheduler_name: str,
        event_interval: float = 60.0,
        events_per_second: float = 20.0,
        concurrency: int = 8,
    ) -> None:
        self.kube = kube
        self.store = store
        self.metrics = metrics
        self.fence = fence
        self.identity = identity
        self.scheduler_name = scheduler_name
        self.events = EventLimiter(event_interval, events_per_second)
        self.limiter = anyio.CapacityLimiter(concurrency)
        self._condition_written: dict[str, tuple[str, str]] = {}  # pod uid -> (its key, PodScheduled message written)
        self._status_written: dict[str, dict] = {}  # PodGroup uid -> status written
        self._groups_seen = -1  # the store's members_seen at the last pass over PodGroups
        self._waiting_groups: set[ObjectKey] = set()  # PodGroups looked at again next pass
        self._reasons: dict[str, str] = {}  # the latest cycle's: pod key -> why it waits
        self._allocated_written: dict[str, dict] = {}  # Queue uid -> status.allocated written
        self._usage_written: dict[str, tuple[float, float]] = {}  # Queue uid -> the usage history written, when

    async def run(self, results: Latest[CycleResult], bound: ObjectReceiveStream[Bound | Evicted]) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._scheduled_events, bound)
            tg.start_soon(self._follow_pod_groups)
            while True:
                result = await results.take()
                try:
                    await self.apply(result)
                except _WRITE_ERRORS as exc:  # feedback must never stop the scheduler
                    logs.warning("feedback failed", error=f"{type(exc).__name__}: {exc}")

    async def _scheduled_events(self, bound: ObjectReceiveStream[Bound | Evicted]) -> None:
        async with bound:
            async for b in bound:
                if isinstance(b, Evicted):
                    await self._preempted(b)
                    continue
                pod = self.store.pod(b.pod)
                if pod is None or _uid(pod) != b.uid:
                    ns, _, name = b.pod.partition("/")
                    pod = {"metadata": {"namespace": ns, "name": name, "uid": b.uid}}
                async with self.limiter:
                    await self.event(
                        pod, "Normal", "Scheduled", "Binding", f"Successfully assigned {b.pod} to {b.node}"
                    )

    async def _follow_pod_groups(self, interval: float = 1.0) -> None:
        """PodGroup phases follow their members (bound, then Running) between cycles too: a binding or a pod
        starting to run starts no cycle. At most once per `interval`."""
        seen = -1
        while True:
            await self.store.wait_for_members(seen)
            await anyio.sleep(interval)
            seen = self.store.members_seen
            try:
                await self._pod_groups(self._reasons)
            except _WRITE_ERRORS as exc:
                logs.warning("feedback failed", error=f"{type(exc).__name__}: {exc}")
            self._prune()

    async def _preempted(self, e: Evicted) -> None:
        """kube-scheduler's Preempted event on each victim, naming the gang it made room for."""
        ns, _, name = e.victim.pod.partition("/")
        pod = {"metadata": {"namespace": ns, "name": name, "uid": e.victim.uid}}
        note = f"Preempted by gang {e.victim.preemptor} on node {e.victim.node}"
        async with self.limiter:  # one per pod evicted, as kube-scheduler writes: never dropped for the rate
            await self.event(pod, "Normal", "Preempted", "Preempting", note, rated=False)

    def reasons(self, result: CycleResult) -> dict[str, str]:
        """Pod key -> why it waits, for every pending pod of ours the cycle left unplaced in a gang it did not
        place, and in a gang placed at a minimum of 1 because its job has no definition: that, and what to do."""
        reasons: dict[str, str] = {}
        held = {r.gang: r for r in (*result.placement.reservations, *result.placement.forecasts)}
        fallbacks = _fallbacks(result)
        for gang, res in zip(result.cluster.gangs, result.placement.gangs, strict=True):
            if res.placed and gang.name not in fallbacks:
                continue  # the rest of a gang past its minimum waits for room quietly
            why = reservations.pending_message(res.reason, held.get(gang.name), result.cluster.now)
            why = "; ".join(filter(None, (why or "waiting for the rest of the gang", fallbacks.get(gang.name))))
            for p in gang.pods:
                if p.name not in result.placement.bindings:
                    reasons[p.name] = why
        reasons.update(self._waiting(result))
        for key, seconds in result.backing_off.items():
            reasons[key] = f"binding failed; trying again in {max(1, round(seconds))}s"
        return reasons

    async def apply(self, result: CycleResult) -> None:
        reasons = self._reasons = self.reasons(result)
        self._prune()
        async with anyio.create_task_group() as tg:
            for key, reason in reasons.items():
                tg.start_soon(self._unschedulable, key, reason)
            fallbacks = _fallbacks(result)
            for gang in result.cluster.gangs:
                if gang.name in fallbacks:
                    for p in gang.pods:
                        tg.start_soon(self._undefined, p.name, fallbacks[gang.name])
            tg.start_soon(self._pod_groups, reasons)
            tg.start_soon(self._queues, result)

    def _prune(self) -> None:
        """Forget what was written about objects that are gone, and about pods bound since (none is written
        Unschedulable again): memory stays flat over a long run."""
        self._condition_written = {
            u: (key, m)
            for u, (key, m) in self._condition_written.items()
            if (pod := self.store.pod(key)) is not None
            and _uid(pod) == u
            and not (pod.get("spec") or {}).get("nodeName")
        }
        groups = {_uid(pg) for pg in self.store.pod_groups().values()}
        self._status_written = {u: s for u, s in self._status_written.items() if u in groups}
        queues = {_uid(q) for q in self.store.queues().values()}
        self._allocated_written = {u: a for u, a in self._allocated_written.items() if u in queues}
        self._usage_written = {u: a for u, a in self._usage_written.items() if u in queues}
        self.metrics.held_objects.labels("feedback").set(self.written())

    def written(self) -> int:
        return len(self._condition_written) + len(self._status_written) + len(self._allocated_written)

    # ------------------------------------------------------------------ pods

    def _waiting(self, result: CycleResult) -> dict[str, str]:
        """Pending pods of ours that join no gang yet (their PodGroup does not exist yet, or their gang
        definition may still come), or that name an object the cycle could not read: they say so."""
        out = {key: w.reason for key, w in result.waiting.items()}
        unreadable = dict(result.skipped)
        for p in result.snapshot.pods:
            if (p.get("spec") or {}).get("nodeName") or not is_pending_for(p, self.scheduler_name):
                continue  # (the cheap test first: most pods of a large cluster are bound)
            meta = p["metadata"]
            ns, key = meta.get("namespace", ""), pod_key(p)
            if f"Pod {key}" in unreadable:
                out[key] = f"cannot be scheduled: {unreadable[f'Pod {key}']}"
                continue
            upstream = upstream_group_name(p)
            label = (meta.get("labels") or {}).get(POD_GROUP_LABEL)
            annotation = (meta.get("annotations") or {}).get(VOLCANO_ANNOTATION)
            wanted = (
                (UPSTREAM_GROUP, upstream)
                if upstream
                else ("scheduling.x-k8s.io", label)
                if label
                else ("scheduling.volcano.sh", annotation)
                if annotation
                else None
            )
            problem = unreadable.get(f"PodGroup {ns}/{wanted[1]}") if wanted else None
            if wanted and problem:
                out[key] = f"PodGroup {ns}/{wanted[1]} ({wanted[0]}) cannot be read: {problem}"
        return out

    async def _unschedulable(self, key: str, message: str) -> None:
        message = message[:MAX_MESSAGE]
        async with self.limiter:
            pod = self.store.pod(key)
            if pod is None or (pod.get("spec") or {}).get("nodeName") or self.store.is_assumed(key):
                return  # gone, or placed by a newer cycle meanwhile: its binding sets PodScheduled=True
            uid = _uid(pod)
            current = next(
                (c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"),
                None,
            )
            shown = (
                current is not None
                and current.get("status") == "False"
                and current.get("reason") == "Unschedulable"
                and current.get("message") == message
            )
            if not shown and self._condition_written.get(uid) != (key, message):
                ns, _, name = key.partition("/")
                condition = {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastProbeTime": None,
                    "lastTransitionTime": now_rfc3339(),
                }
                try:
                    await self.kube.patch(
                        f"/api/v1/namespaces/{ns}/pods/{name}/status",
                        {"metadata": {"uid": uid}, "status": {"conditions": [condition]}},
                        STRATEGIC_PATCH,
                        timeout=self.fence.remaining(),
                    )
                    self._condition_written[uid] = (key, message)
                except _WRITE_ERRORS as exc:
                    if not (isinstance(exc, ApiError) and exc.status in (404, 409)):
                        logs.warning("pod condition not written", pod=key, error=str(exc))
            await self.event(pod, "Warning", "FailedScheduling", "Scheduling", message)

    async def _undefined(self, key: str, message: str) -> None:
        """The pod's gang has a minimum of 1 because its job's definition never came: say so, and what to do."""
        async with self.limiter:
            pod = self.store.pod(key)
            if pod is not None:
                await self.event(pod, "Warning", NO_GANG_DEFINITION, "Scheduling", message)

    async def event(self, pod: dict, etype: str, reason: str, action: str, note: str, rated: bool = True) -> None:
        meta = pod["metadata"]
        if not await self.events.allow(meta.get("uid", ""), reason, note, rated):
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
            await self.kube.post(
                f"/apis/events.k8s.io/v1/namespaces/{meta['namespace']}/events", body, timeout=self.fence.remaining()
            )
        except _WRITE_ERRORS as exc:
            if not (isinstance(exc, ApiError) and exc.status in (403, 404)):  # namespace terminating, or no rights
                logs.warning("event not written", pod=f"{meta['namespace']}/{meta['name']}", error=str(exc))

    # ------------------------------------------------------------------ Queues

    async def _queues(self, result: CycleResult) -> None:
        held = {q.name: q.allocated for q in result.placement.queues}
        top: dict[str, int] = {}  # Volcano's root queue holds what the queues at the top hold together
        for q in result.placement.queues:
            if not q.parent:
                for r, v in q.allocated.items():
                    top[r] = top.get(r, 0) + v
        held.setdefault(ROOT, top)
        for name, queue in self.store.queues().items():
            allocated = {r: quantity(r, v) for r, v in sorted(held.get(name, {}).items()) if r != PODS and v}
            current = (queue.get("status") or {}).get("allocated") or {}
            uid = _uid(queue)
            if allocated in (current, self._allocated_written.get(uid)):
                continue
            # A merge patch merges maps: resources no longer held are removed by naming them null.
            body = {"metadata": {"uid": uid}, "status": {"allocated": {**dict.fromkeys(current), **allocated}}}
            try:
                async with self.limiter:
                    await self.kube.patch(
                        f"/apis/{QUEUE_GROUP}/v1beta1/queues/{name}/status", body, timeout=self.fence.remaining()
                    )
                self._allocated_written[uid] = allocated
            except _WRITE_ERRORS as exc:
                if not (isinstance(exc, ApiError) and exc.status in (404, 409)):
                    logs.warning("Queue status not written", queue=name, error=str(exc))
        for name, queue in self.store.queues().items():
            if name in result.usage:
                await self._usage(name, queue, *result.usage[name])

    async def _usage(self, name: str, queue: dict, value: float, at: float) -> None:
        """The queue's usage history on the Queue (annotation), where a restarted scheduler starts from: each
        minute at most, as it changes slowly."""
        uid = _uid(queue)
        last = self._usage_written.get(uid)
        if last is not None and at - last[1] < USAGE_EVERY and abs(value - last[0]) <= 0.01 * max(last[0], 1.0):
            return
        text = usage.write(value, datetime.fromtimestamp(at, UTC))
        body = {"metadata": {"uid": uid, "annotations": {usage.ANNOTATION: text}}}
        try:
            async with self.limiter:
                await self.kube.patch(
                    f"/apis/{QUEUE_GROUP}/v1beta1/queues/{name}", body, timeout=self.fence.remaining()
                )
            self._usage_written[uid] = (value, at)
        except _WRITE_ERRORS as exc:
            if not (isinstance(exc, ApiError) and exc.status in (404, 409)):
                logs.warning("Queue usage not written", queue=name, error=str(exc))

    # ------------------------------------------------------------------ PodGroups

    async def _pod_groups(self, reasons: dict[str, str]) -> None:
        """Write the status of every PodGroup that changed (itself or its members) since the last pass, or whose
        members wait (or waited) for a reason; not while a cycle's placement of its members is being bound."""
        waiting = {g for k in reasons if (g := pod_group_of(self.store.pod(k))) is not None}
        since, self._groups_seen = self._groups_seen, self.store.members_seen
        changed = set(self.store.pod_groups_changed(since)) | waiting | self._waiting_groups
        self._waiting_groups = waiting
        groups = self.store.pod_groups()
        for key in changed:
            pg = groups.get(key)
            if pg is None:
                continue
            group_pods = self.store.pod_group_members(key)
            if any(self.store.is_assumed(pod_key(p)) for p in group_pods):
                self._waiting_groups.add(key)  # placed, being bound: its status once the watch shows that
                continue
            reason = next((reasons[pod_key(p)] for p in group_pods if pod_key(p) in reasons), "")
            if key[0] == UPSTREAM_GROUP:
                # kube-scheduler writes the status of the groups of its own pods: gangsolve of its own only.
                if not group_pods or any(
                    (p.get("spec") or {}).get("schedulerName", "default-scheduler") != self.scheduler_name
                    for p in group_pods
                ):
                    continue
                status = upstream_pod_group_status(pg, group_pods, reason, pg.get("status"))
            else:
                status = pod_group_status(pg, group_pods, reason, pg.get("status"))
            uid = _uid(pg)
            if _comparable(status) in (_comparable(pg.get("status")), _comparable(self._status_written.get(uid))):
                continue
            path = f"/apis/{pg['apiVersion']}/namespaces/{key[1]}/podgroups/{key[2]}"
            body = {"metadata": {"uid": uid}, "status": status}
            try:
                async with self.limiter:
                    await self.kube.patch(path + "/status", body, timeout=self.fence.remaining())
                self._status_written[uid] = status
            except _WRITE_ERRORS as exc:
                # 404: deleted meanwhile, or a CRD without the status subresource (both PodGroup CRDs have it).
                if not (isinstance(exc, ApiError) and exc.status == 409):
                    logs.warning("PodGroup status not written", podgroup=f"{key[1]}/{key[2]}", error=str(exc))
