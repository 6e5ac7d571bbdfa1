"""List then watch one kind of object, forever, and send what changes to the snapshot actor.

Each watcher lists from the API server's watch cache (resourceVersion 0, as kube-scheduler's informers list:
at start-up the list is on the way to the first binding), sends the full list as one `Resync` (so deletions
missed while away are seen), then watches from the list's resourceVersion with bookmarks. A watch that ends
is resumed from the last resourceVersion seen, so no update is missed; `410 Gone` (too old) means list again.
Connection errors back off exponentially (with jitter). A kind whose API is not served (a PodGroup CRD not
installed) sends an empty Resync and is looked for again every `missing_recheck` seconds.
"""

from __future__ import annotations

import random

import aiohttp
import anyio
from anyio.abc import ObjectSendStream

from gangsolve.live import logs
from gangsolve.live.kube import ApiError, Kube
from gangsolve.live.messages import Event, Resource, Resync

RESOURCES = (
    # Finished pods hold no capacity; kube-scheduler's informer leaves them out the same way.
    Resource("Pod", "v1", "/api/v1/pods", field_selector="status.phase!=Succeeded,status.phase!=Failed"),
    Resource("Node", "v1", "/api/v1/nodes"),
    Resource("PodDisruptionBudget", "policy/v1", "/apis/policy/v1/poddisruptionbudgets"),
    Resource("PriorityClass", "scheduling.k8s.io/v1", "/apis/scheduling.k8s.io/v1/priorityclasses"),
    Resource("PodGroup", "scheduling.x-k8s.io/v1alpha1", "/apis/scheduling.x-k8s.io/v1alpha1/podgroups", optional=True),
    Resource(
        "PodGroup", "scheduling.volcano.sh/v1beta1", "/apis/scheduling.volcano.sh/v1beta1/podgroups", optional=True
    ),
    # Kubernetes' own PodGroup (KEP-4671): v1beta1 from 1.37 (GenericWorkload feature gate), v1alpha2 in 1.36.
    Resource("PodGroup", "scheduling.k8s.io/v1beta1", "/apis/scheduling.k8s.io/v1beta1/podgroups", optional=True),
    Resource("PodGroup", "scheduling.k8s.io/v1alpha2", "/apis/scheduling.k8s.io/v1alpha2/podgroups", optional=True),
    Resource("Queue", "scheduling.volcano.sh/v1beta1", "/apis/scheduling.volcano.sh/v1beta1/queues", optional=True),
    # Dynamic Resource Allocation (GA in 1.34): devices, their classes, claims and claim templates.
    *(
        Resource(kind, "resource.k8s.io/v1", f"/apis/resource.k8s.io/v1/{path}", optional=True)
        for kind, path in (
            ("ResourceSlice", "resourceslices"),
            ("DeviceClass", "deviceclasses"),
            ("ResourceClaim", "resourceclaims"),
            ("ResourceClaimTemplate", "resourceclaimtemplates"),
        )
    ),
)


def succeeded_pods(scheduler_name: str) -> Resource:
    """Our pods that succeeded, for the runtime history (the Pod watch above leaves them out): listed when this
    replica starts leading, so the history is rebuilt from what the cluster still keeps, then watched."""
    selector = f"status.phase=Succeeded,spec.schedulerName={scheduler_name}"
    return Resource("SucceededPod", "v1", "/api/v1/pods", field_selector=selector)


class Backoff:
    def __init__(self, initial: float = 0.2, maximum: float = 10.0) -> None:
        self.initial, self.maximum, self.current = initial, maximum, initial

    def reset(self) -> None:
        self.current = self.initial

    async def sleep(self) -> None:
        await anyio.sleep(self.current * random.uniform(0.8, 1.2))
        self.current = min(self.maximum, self.current * 2)


class Watcher:
    def __init__(
        self,
        kube: Kube,
        resource: Resource,
        *,
        watch_timeout: int = 300,
        missing_recheck: float = 30.0,
        on_error=None,
    ) -> None:
        self.kube = kube
        self.resource = resource
        self.watch_timeout = watch_timeout
        self.missing_recheck = missing_recheck
        self.synced = anyio.Event()
        self.on_error = on_error or (lambda kind, reason: None)
        self.missing = False

    @property
    def name(self) -> str:
        return f"{self.resource.kind}.{self.resource.api_version}"

    def _query(self) -> dict:
        return {"fieldSelector": self.resource.field_selector} if self.resource.field_selector else {}

    async def list(self) -> tuple[list[dict], str]:
        """Every object, from the API server's watch cache (resourceVersion 0, as informers list): at 50,000 pods
        half the time of paging through etcd, and at most a moment behind it, which the watch then catches up
        on. It comes in one answer; continue tokens are still followed, for a server that pages anyway."""
        items: list[dict] = []
        cont = ""
        while True:
            query = {**self._query(), "resourceVersion": "0"}
            if cont:
                query["continue"] = cont
            page = await self.kube.get(self.resource.path, **query)
            kind = page.get("kind", "List").removesuffix("List")
            for obj in page.get("items") or []:
                obj.setdefault("kind", kind)
                obj.setdefault("apiVersion", self.resource.api_version)
                items.append(obj)
            cont = (page.get("metadata") or {}).get("continue") or ""
            if not cont:
                return items, page["metadata"]["resourceVersion"]

    async def run(self, send: ObjectSendStream[Event | Resync]) -> None:
        """List, then watch, for ever (until cancelled), sending what changes on `send`."""
        backoff = Backoff()
        rv: str | None = None
        async with send:
            while True:
                try:
                    if rv is None:
                        items, rv = await self.list()
                        if self.missing:
                            logs.info("watching again", kind=self.name)
                        self.missing = False
                        await send.send(Resync(self.resource, items))
                        self.synced.set()
                    rv = await self._watch(rv, send)
                    backoff.reset()
                except ApiError as exc:
                    if exc.status == 410:  # our resourceVersion is too old: list again
                        logs.info("watch expired, relisting", kind=self.name)
                        rv = None
                        continue
                    if exc.status == 404 and self.resource.optional:
                        if not self.missing:
                            logs.info("kind not served, will look again", kind=self.name)
                            await send.send(Resync(self.resource, []))
                        self.missing = True
                        self.synced.set()
                        rv = None
                        await anyio.sleep(self.missing_recheck)
                        continue
                    self.on_error(self.name, str(exc.status))
                    logs.warning("watch failed", kind=self.name, error=str(exc))
                    if exc.status in (401, 403):
                        rv = None
                    await backoff.sleep()
                except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
                    self.on_error(self.name, type(exc).__name__)
                    logs.warning("watch connection lost", kind=self.name, error=f"{type(exc).__name__}: {exc}")
                    await backoff.sleep()

    async def _watch(self, rv: str, send: ObjectSendStream[Event | Resync]) -> str | None:
        """One watch request; returns the resourceVersion to resume from (None: list again)."""
        query = {
            **self._query(),
            "resourceVersion": rv,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": self.watch_timeout,
        }
        async for event in self.kube.watch_lines(self.resource.path, query, read_timeout=self.watch_timeout + 30):
            etype, obj = event.get("type"), event.get("object") or {}
            if etype == "ERROR":
                code = obj.get("code")
                if code == 410:
                    logs.info("watch expired, relisting", kind=self.name)
                    return None
                raise ApiError(int(code or 500), obj.get("message", ""), "WATCH", self.resource.path)
            rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
            if etype not in ("ADDED", "MODIFIED", "DELETED"):  # BOOKMARK: only its resourceVersion counts
                continue
            obj.setdefault("apiVersion", self.resource.api_version)
            await send.send(Event(self.resource, etype, obj))
        return rv
