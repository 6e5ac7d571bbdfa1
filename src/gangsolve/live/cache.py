"""The snapshot actor: the cluster state kept incrementally from watch events, plus the placements in flight.

Objects are stored as the API sent them and never mutated: a snapshot is a set of lists of the same dicts,
so handing one to the solver thread is cheap and safe. A change bumps `version` only when it matters to
scheduling (a pod's spec, phase, labels...; a node's capacity, taints, readiness; a PDB's or PodGroup's spec):
the status writes gangsolve itself makes (pod conditions, PodGroup status) and node heartbeats do not
start a new cycle.

Assumed placements follow kube-scheduler's cache: the binder `assume`s every pod of a placed gang before
binding, and the snapshot shows an assumed pod as bound to its node, so the next cycle cannot give the same
capacity away. An assumption ends when the watch shows the pod bound (Added), when the pod goes away, or
when its bind fails (`forget`, which also starts a new cycle so the gang is planned again).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import anyio
from anyio.abc import ObjectReceiveStream

from gangsolve.live import logs
from gangsolve.live.watchers import Event, Resync
from gangsolve.snapshot import POD_GROUP_KINDS, Snapshot

KINDS = ("Pod", "Node", "PodDisruptionBudget", "PodGroup", "PriorityClass")


def _key(obj: dict) -> tuple[str, str, str]:
    """(api group, namespace, name): PodGroups of both kinds share the cache's 'PodGroup' table."""
    meta = obj.get("metadata") or {}
    api = str(obj.get("apiVersion", ""))
    group = api.split("/")[0] if "/" in api else ""
    return group, meta.get("namespace", ""), meta.get("name", "")


def pod_key(obj: dict) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


def _ready(node: dict) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )


def fingerprint(kind: str, obj: dict) -> object:
    """What of an object matters to a scheduling decision; a change elsewhere starts no cycle."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    if kind == "Pod":
        return (
            meta.get("uid"),
            meta.get("labels"),
            meta.get("annotations"),
            meta.get("ownerReferences"),
            meta.get("deletionTimestamp"),
            spec,
            status.get("phase"),
        )
    if kind == "Node":
        return (
            meta.get("labels"),
            spec.get("taints"),
            spec.get("unschedulable"),
            status.get("allocatable", status.get("capacity")),
            _ready(node=obj),
        )
    if kind == "PriorityClass":
        return (obj.get("value"), obj.get("globalDefault"))
    return (meta.get("labels"), meta.get("annotations"), spec)  # PDB, PodGroup: not their status


@dataclass
class Assumption:
    node: str
    uid: str
    gang: str
    since: float


class ClusterCache:
    def __init__(self) -> None:
        self.objects: dict[str, dict[tuple[str, str, str], dict]] = {k: {} for k in KINDS}
        self._prints: dict[str, dict[tuple[str, str, str], object]] = {k: {} for k in KINDS}
        self.assumed: dict[str, Assumption] = {}  # pod key -> where it is being bound
        self.version = 0
        self._changed = anyio.Event()

    # ------------------------------------------------------------------ changes

    def _bump(self) -> None:
        self.version += 1
        event, self._changed = self._changed, anyio.Event()
        event.set()

    def touch(self) -> None:
        """Something outside the watched objects changed (a bind failed): plan again."""
        self._bump()

    async def wait_for_change(self, seen: int) -> None:
        while self.version == seen:
            await self._changed.wait()

    def apply(self, event: Event | Resync) -> bool:
        """File one watch event (or a full relist of a kind); True when a cycle should follow."""
        if isinstance(event, Resync):
            relevant = self._resync(event)
        else:
            relevant = self._apply_one(event.resource.kind, event.type, event.obj)
        if relevant:
            self._bump()
        return relevant

    def _resync(self, event: Resync) -> bool:
        kind = event.resource.kind
        table = self.objects[kind]
        group = event.resource.api_version.split("/")[0] if "/" in event.resource.api_version else ""
        fresh = {_key(o): o for o in event.objects}
        relevant = False
        for key in [k for k in table if k[0] == group and k not in fresh]:  # gone while we were away
            relevant |= self._apply_one(kind, "DELETED", table[key])
        for obj in fresh.values():
            relevant |= self._apply_one(kind, "MODIFIED", obj)
        return relevant or not table  # a first (even empty) list lets the first cycle run

    def _apply_one(self, kind: str, etype: str, obj: dict) -> bool:
        table, prints = self.objects[kind], self._prints[kind]
        key = _key(obj)
        if etype == "DELETED":
            if kind == "Pod":
                self._drop_assumption(pod_key(obj), "pod deleted")
            gone = table.pop(key, None)
            prints.pop(key, None)
            return gone is not None
        table[key] = obj
        if kind == "Pod":
            self._observe_pod(obj)
        fp = fingerprint(kind, obj)
        if prints.get(key) == fp:
            return False
        prints[key] = fp
        return True

    def _observe_pod(self, obj: dict) -> None:
        key = pod_key(obj)
        a = self.assumed.get(key)
        if a is None:
            return
        node = (obj.get("spec") or {}).get("nodeName")
        if obj["metadata"].get("uid") != a.uid:
            self._drop_assumption(key, "pod replaced")
        elif node:
            if node != a.node:
                logs.warning("pod bound elsewhere than assumed", pod=key, assumed=a.node, node=node)
            del self.assumed[key]  # Added: the watch shows it bound

    def _drop_assumption(self, key: str, why: str) -> None:
        if self.assumed.pop(key, None) is not None:
            logs.debug("assumption dropped", pod=key, why=why)

    # ------------------------------------------------------------------ assumptions (binder)

    def assume(self, key: str, node: str, uid: str, gang: str) -> None:
        self.assumed[key] = Assumption(node, uid, gang, time.monotonic())

    def forget(self, key: str) -> None:
        """A bind failed: the capacity is free again and the gang is planned anew."""
        if self.assumed.pop(key, None) is not None:
            self._bump()

    def pod(self, key: str) -> dict | None:
        ns, _, name = key.partition("/")
        return self.objects["Pod"].get(("", ns, name))

    def node(self, name: str) -> dict | None:
        return self.objects["Node"].get(("", "", name))

    # ------------------------------------------------------------------ snapshots

    def snapshot(self) -> Snapshot:
        """An immutable view for one cycle: assumed pods appear bound to their node."""
        pods = list(self.objects["Pod"].values())
        if self.assumed:
            pods = [self._as_assumed(p) for p in pods]
        return Snapshot(
            nodes=list(self.objects["Node"].values()),
            pods=pods,
            pdbs=list(self.objects["PodDisruptionBudget"].values()),
            pod_groups={k: v for k, v in self.objects["PodGroup"].items() if k[0] in POD_GROUP_KINDS},
            priority_classes={k[2]: v for k, v in self.objects["PriorityClass"].items()},
        )

    def _as_assumed(self, pod: dict) -> dict:
        a = self.assumed.get(pod_key(pod))
        if a is None or (pod.get("spec") or {}).get("nodeName"):
            return pod
        return {**pod, "spec": {**(pod.get("spec") or {}), "nodeName": a.node}}


class SnapshotActor:
    """Reads the watchers' stream into the cache."""

    def __init__(self, cache: ClusterCache, receive: ObjectReceiveStream) -> None:
        self.cache = cache
        self.receive = receive

    async def run(self) -> None:
        async with self.receive:
            async for event in self.receive:
                self.cache.apply(event)
