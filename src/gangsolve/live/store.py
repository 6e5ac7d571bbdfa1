"""The cluster store: the one owner of what the scheduler knows about the cluster.

It holds these things, and says who may change each:

- **observed objects**, exactly as the API sent them and never mutated: written only by `run` (the watch
  pump), from the watchers' events;
- **assumed placements** (kube-scheduler's assume/bind/forget): a pod the solver actor handed to the binder
  shows as bound to its node in every later view (a fractional pod holding the GPU chosen for it, as the binder
  writes it on the pod), so no cycle gives its capacity away twice. Written by the solver actor (`assume`),
  ended by the watch showing the pod bound (confirmed) or gone, or by the binder (`forget`);
- **assumed claim allocations**, the DRA half of an assumption: the devices the solver actor chose for a
  claim of a placed pod show as allocated in every later snapshot until the watch shows the claim allocated
  (or gone), so no cycle hands a device out twice. Written with the pod's assumption (`assume`), dropped with
  it when the binder forgets the pod or the pod is replaced or deleted;
- **preemptions in flight**, the same way as assumptions: a nomination the solver actor decided (a pending
  pod's `status.nominatedNodeName`, or its clearing) and a victim it chose show in every later snapshot, the
  pod nominated and the victim leaving, until the watch shows the API server has them (or the pod is gone or
  replaced), or the binder reports the write failed (`forget_nomination`, `forget_eviction`). The capacity a
  nomination holds is no state of its own: each cycle derives it from the pods' nominations.

Everyone else reads: an immutable `View` per cycle, or single objects (`pod`, `node`, `node_view`) for the
binder's last check and feedback.

What a cycle needs from thousands of nodes and tens of thousands of bound pods is kept up to date as events
arrive, not rebuilt per cycle (kube-scheduler's cache does the same): each node converted once per change, each
pod's requests computed once per change, and per node the requests of the pods bound or assumed there. A
change that matters to scheduling bumps `generation`, which wakes the solver actor; `freed` counts the changes
that may have made room (a pod gone or unbound, a victim among them; an assumption dropped; a nomination
cleared or moved; a node changed; a device claim deallocated or gone, a ResourceSlice or DeviceClass
changed), so the solver actor knows when gangs that did not fit are worth trying again. Capacity only taken
(a bind, ours confirmed or another scheduler's) starts no cycle by itself, nor do status writes gangsolve
makes, node heartbeats, or a bound pod starting to run. The store also counts the priorities of the pods
bound or assumed, so a cycle knows without reading them whether preemption could find a victim at all.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import anyio
from anyio.abc import ObjectReceiveStream

from gangsolve.edge import objects, schema, shares
from gangsolve.edge.errors import InputError
from gangsolve.edge.gang_hints import Hint, gang_hints, pod_group_of
from gangsolve.edge.objects import pod_key
from gangsolve.edge.snapshot import DRA_KINDS, KINDS, POD_GROUP_KINDS, QUEUE_GROUP, Snapshot
from gangsolve.live import logs
from gangsolve.live.fingerprints import fingerprint
from gangsolve.live.gpu_shares import GpuShares
from gangsolve.live.messages import Event, Resync, View
from gangsolve.solver import Node

ObjectKey = tuple[str, str, str]  # (api group, namespace, name)
Requests = dict[str, int]

EVICTING = "1970-01-01T00:00:00Z"  # a victim's deletionTimestamp until the watch shows the real one


def object_key(obj: dict) -> ObjectKey:
    """PodGroups of every API group share one table, so the group is part of the key."""
    meta = obj.get("metadata") or {}
    api = str(obj.get("apiVersion", ""))
    group = api.split("/")[0] if "/" in api else ""
    return group, meta.get("namespace", ""), meta.get("name", "")


def _node_name(pod: dict | None) -> str | None:
    return ((pod or {}).get("spec") or {}).get("nodeName") or None


def _priority(pod: dict | None) -> int | None:
    """spec.priority as admission sets it on every pod (None on one written without it)."""
    priority = ((pod or {}).get("spec") or {}).get("priority")
    return priority if isinstance(priority, int) else None


def _scheduler_name(pod: dict) -> str:
    return str((pod.get("spec") or {}).get("schedulerName") or "default-scheduler")


def _unindex(index: dict[str, dict[str, dict]], name: str, key: str) -> None:
    members = index.get(name)
    if members is not None:
        members.pop(key, None)
        if not members:
            del index[name]


def _unlink(index: dict[Any, set[str]], name: Any, key: str) -> bool:
    """Take `key` out of the set filed under `name`, dropping `name` once the set is empty (then True)."""
    members = index.get(name)
    if members is None:
        return False
    members.discard(key)
    if members:
        return False
    del index[name]
    return True


def _covers(new: Requests | None, old: Requests) -> bool:
    """Whether `new` holds at least as much of every resource as `old`: replacing one by the other frees nothing."""
    return new is not None and all(new.get(r, 0) >= q for r, q in old.items())


def _add(into: dict[str, Requests], node: str, requests: Requests, sign: int) -> None:
    used = into.setdefault(node, {})
    for r, q in requests.items():
        left = used.get(r, 0) + sign * q
        if left:
            used[r] = left
        else:
            used.pop(r, None)
    if not used:
        del into[node]


@dataclass(frozen=True)
class Assumption:
    node: str
    uid: str
    gang: str
    requests: Requests  # what it adds to the node's used capacity until confirmed or dropped
    priority: int | None  # the pod's spec.priority
    gpu: int | None = None  # the GPU of its node it takes a share of (None: no share)
    scheduler: str = ""  # the pod's spec.schedulerName


@dataclass(frozen=True)
class ClaimAssumption:
    pod: str  # the pod key whose placement allocated it
    allocation: dict  # the claim's status.allocation as the binder writes it


@dataclass(frozen=True)
class Nomination:
    node: str | None  # None: the nomination is being cleared
    uid: str


class ClusterStore:
    def __init__(self, group_label: str | None = None) -> None:
        self.group_label = group_label  # the scheduler's --group-label (a gang rule)
        self._objects: dict[str, dict[ObjectKey, dict]] = {k: {} for k in KINDS}
        self._prints: dict[str, dict[ObjectKey, object]] = {k: {} for k in KINDS}
        self._on_node: dict[str, set[str]] = {}  # node name -> keys of pods observed bound there
        self._members: dict[ObjectKey, set[str]] = {}  # PodGroup -> keys of the pods naming it
        self._decoded_groups: dict[ObjectKey, Any] = {}  # PodGroup -> decoded, or the InputError it raised
        # PodGroup -> members_seen when it or its members last changed, in the order of those changes
        self._group_marks: dict[ObjectKey, int] = {}
        self._by_scheduler: dict[str, dict[str, dict]] = {}  # spec.schedulerName -> pod key -> pod
        self._by_namespace: dict[str, dict[str, dict]] = {}  # namespace -> pod key -> pod
        self._by_hint: dict[Hint, set[str]] = {}  # gang hint -> keys of the pods that have it
        self._unbound: dict[str, dict[str, dict]] = {}  # spec.schedulerName -> key -> pod not bound (yet)
        self._versions: dict[str, int] = dict.fromkeys(KINDS, 0)  # bumps on any change to an object of the kind
        self._cached: dict[str, tuple[int, Any]] = {}  # what views share while nothing of its kind changes
        self._requests: dict[str, Requests] = {}  # pod key -> the observed object's requests (readable ones)
        self._bad_pods: dict[str, InputError] = {}  # pod key -> why its requests cannot be read
        self._nodes: dict[str, Node] = {}  # node name -> converted (readable ones)
        self._bad_nodes: dict[str, InputError] = {}
        self._used: dict[str, Requests] = {}  # node name -> requests of the pods bound or assumed there
        self._held: dict[str, Requests] = {}  # spec.schedulerName -> requests of its pods bound or assumed
        self._gpu_shares = GpuShares()  # the GPU shares of the pods bound or assumed on each node
        self._views: dict[str, Node] = {}  # node name -> its Node with `used`, rebuilt when dirty
        self._dirty: set[str] = set()
        self._node_order: list[Node] | None = None  # the views in node order (`_node_tuple`); None: make again
        self._node_place: dict[str, int] = {}  # node name -> its place in `_node_order`
        self._assumed: dict[str, Assumption] = {}  # pod key -> where the solver placed it
        self._assumed_on: dict[str, set[str]] = {}  # node name -> keys of pods assumed there
        # spec.priority (None: not set) -> how many pods bound or assumed have it: whether preemption may find
        # a victim, without reading every bound pod
        self._bound_priorities: dict[int | None, int] = {}
        self._claims: dict[tuple[str, str], ClaimAssumption] = {}  # (ns, claim) -> the devices chosen for it
        self._nominated: dict[str, Nomination] = {}  # pod key -> nomination written, not observed yet
        self._evicting: dict[str, str] = {}  # pod key -> uid of a victim being evicted, not observed leaving yet
        self.generation = 0
        self.freed = 0
        self._changed = anyio.Event()
        self.members_seen = 0  # bumps on any change to a pod that names a PodGroup (its status included)
        self._members_changed = anyio.Event()

    # ------------------------------------------------------------------ the watch pump

    async def run(self, events: ObjectReceiveStream[Event | Resync]) -> None:
        """File the watchers' events until their streams close."""
        async with events:
            async for event in events:
                self.apply(event)

    def apply(self, event: Event | Resync) -> bool:
        """File one watch event (or a full relist of a kind); True when it matters to scheduling."""
        if isinstance(event, Resync):
            relevant = self._resync(event)
        else:
            relevant = self._apply_one(event.resource.kind, event.type, event.obj)
        if relevant:
            self._bump()
        return relevant

    def _resync(self, event: Resync) -> bool:
        kind = event.resource.kind
        table = self._objects[kind]
        fresh = {object_key(o): o for o in event.objects}
        relevant = False
        # Gone while we were away: objects of this resource's version only (two versions of one group, as
        # the upstream PodGroup's v1alpha2 and v1beta1, are watched apart and may not both be served).
        version = event.resource.api_version
        mine = [k for k, o in table.items() if o.get("apiVersion", version) == version]
        for key in [k for k in mine if k not in fresh]:
            relevant |= self._apply_one(kind, "DELETED", table[key])
        for obj in fresh.values():
            relevant |= self._apply_one(kind, "MODIFIED", obj)
        return relevant or not table  # a first (even empty) list lets the first cycle run

    def _apply_one(self, kind: str, etype: str, obj: dict) -> bool:
        table, prints = self._objects[kind], self._prints[kind]
        key = object_key(obj)
        old = table.get(key)
        self._versions[kind] += 1
        if etype == "DELETED":
            if old is None:
                return False
            del table[key]
            prints.pop(key, None)
            if kind == "Pod":
                self._pod_changed(pod_key(old), old, None)
            elif kind == "PodGroup":
                self._decoded_groups.pop(key, None)
                if key not in self._members:
                    self._group_marks.pop(key, None)
            elif kind == "Node":
                self._node_changed(key[2], None)
            elif kind in DRA_KINDS:
                self._dra_changed(kind, key, old, None)
            elif kind == "Queue":
                self.freed += 1  # its gangs fall back to queue default, uncapped
            return True
        table[key] = obj
        confirmed = False
        if kind == "PodGroup":
            self.members_seen += 1
            self._mark_group(key)
            try:
                self._decoded_groups[key] = schema.check(obj, "PodGroup")
            except InputError as exc:  # a cycle that reads it says why
                self._decoded_groups[key] = exc
        if kind == "Pod":
            confirmed = self._pod_changed(pod_key(obj), old, obj)
        if kind == "ResourceClaim" and key[1:] in self._claims and (obj.get("status") or {}).get("allocation"):
            self._end_claim(key[1:])  # confirmed: the watch shows it allocated
        fp = fingerprint(kind, obj)
        if prints.get(key) == fp:
            return False
        prints[key] = fp
        if kind == "Node":
            self._node_changed(key[2], obj)
        elif kind in DRA_KINDS:
            self._dra_changed(kind, key, old, obj)
        elif kind == "Queue":
            self.freed += 1  # a cap raised or a weight changed: gangs its cap or share held back may go now
        return not confirmed

    # ------------------------------------------------------------------ derived state, kept up to date

    def _pod_changed(self, key: str, old: dict | None, new: dict | None) -> bool:
        """Index, requests, used capacity, assumptions and preemptions in flight after a pod event; True when
        the event only confirms the assumption of this pod on the node it was bound to (it changes nothing a
        cycle would see)."""
        was_nominated = self._nomination(key, old)
        if old is not None:
            _unindex(self._by_scheduler, _scheduler_name(old), key)
            _unindex(self._by_namespace, old["metadata"].get("namespace", ""), key)
            _unindex(self._unbound, _scheduler_name(old), key)
            for hint in gang_hints(old, self.group_label):
                _unlink(self._by_hint, hint, key)
        if new is not None:
            self._by_scheduler.setdefault(_scheduler_name(new), {})[key] = new
            self._by_namespace.setdefault(new["metadata"].get("namespace", ""), {})[key] = new
            if not _node_name(new):
                self._unbound.setdefault(_scheduler_name(new), {})[key] = new
            for hint in gang_hints(new, self.group_label):
                self._by_hint.setdefault(hint, set()).add(key)
        old_group, new_group = pod_group_of(old), pod_group_of(new)
        if old_group != new_group:
            if old_group and _unlink(self._members, old_group, key) and old_group not in self._objects["PodGroup"]:
                self._group_marks.pop(old_group, None)
            if new_group:
                self._members.setdefault(new_group, set()).add(key)
        if old_group or new_group:
            self.members_seen += 1
            for changed in (old_group, new_group):
                if changed is not None and (changed in self._members or changed in self._objects["PodGroup"]):
                    self._mark_group(changed)
            event, self._members_changed = self._members_changed, anyio.Event()
            event.set()
        old_node, new_node = _node_name(old), _node_name(new)
        if old_node != new_node:
            if old_node:
                _unlink(self._on_node, old_node, key)
            if new_node:
                self._on_node.setdefault(new_node, set()).add(key)
        if old_node:
            self._count_priority(_priority(old), -1)
        if new_node:
            self._count_priority(_priority(new), +1)
        old_requests = self._requests.get(key)
        if new is None:
            self._requests.pop(key, None)
            self._bad_pods.pop(key, None)
            new_requests = None
            shared = self._gpu_shares.observe(key, None, None)
        elif new is not old:
            try:
                checked = schema.check(new, "Pod")
                new_requests = objects.pod_requests(checked)
                self._requests[key] = new_requests
                self._bad_pods.pop(key, None)
                shared = self._gpu_shares.observe(key, checked, new_requests)
            except InputError as exc:
                new_requests = None
                self._requests.pop(key, None)
                self._bad_pods[key] = exc
                shared = self._gpu_shares.observe(key, None, None)
        else:
            new_requests, shared = old_requests, False
        if shared:  # the GPU it holds a share of may have changed with it
            self._dirty.update(n for n in (old_node, new_node) if n)
        if (old_node, old_requests) != (new_node, new_requests):
            scheduler = _scheduler_name(new or old or {})  # (spec.schedulerName is immutable)
            if old_node and old_requests is not None:
                # Room is freed unless the pod's new self holds at least as much of it on the same node.
                kept = old_node == new_node and _covers(new_requests, old_requests)
                self._use(old_node, old_requests, -1, freed=not kept)
                _add(self._held, scheduler, old_requests, -1)
            if new_node and new_requests is not None:
                self._use(new_node, new_requests, +1)
                _add(self._held, scheduler, new_requests, +1)
        if new is None:
            self._pod_gone(key)
            confirmed = False
        else:
            confirmed = self._observe_pod(key, new, new_requests)
        if was_nominated not in (None, new_node, self._nomination(key, new)):
            self.freed += 1  # the room held for it on its nominated node is for any gang now (not bound there)
        return confirmed

    def _observe_pod(self, key: str, obj: dict, requests: Requests | None) -> bool:
        uid = obj["metadata"].get("uid")
        self._observe_preemption(key, uid, obj)
        a = self._assumed.get(key)
        if a is None:
            return False
        node = _node_name(obj)
        if uid != a.uid:
            # Deleted and created again under its name: the room assumed for the old pod is free again, unless
            # the new one, already bound there, holds at least as much of it.
            held = (
                node == a.node and requests is not None and all(requests.get(r, 0) >= q for r, q in a.requests.items())
            )
            self._drop(key, "pod replaced", freed=not held)
        elif node:
            if node != a.node:
                logs.warning("pod bound elsewhere than assumed", pod=key, assumed=a.node, node=node)
            self._end_assumption(key, freed=node != a.node)  # confirmed: the watch shows it bound
            return node == a.node
        elif requests is not None and requests != a.requests:  # still pending, asking for something else
            self._end_assumption(key, freed=True)
            self._assume_one(key, a.uid, a.node, a.gang, a.gpu)
        return False

    def _observe_preemption(self, key: str, uid: str | None, obj: dict) -> None:
        """End what the watch now shows (or makes moot): a nomination the pod carries, or that no longer matters
        (bound, replaced); a victim observed leaving, or replaced."""
        n = self._nominated.get(key)
        if n is not None:
            spec, status = obj.get("spec") or {}, obj.get("status") or {}
            if n.uid != uid or spec.get("nodeName") or (status.get("nominatedNodeName") or None) == n.node:
                del self._nominated[key]
        victim = self._evicting.get(key)
        if victim is not None and (victim != uid or obj["metadata"].get("deletionTimestamp")):
            del self._evicting[key]

    def _nomination(self, key: str, pod: dict | None) -> str | None:
        """The node a pending pod is nominated to as views show it: the solver's nomination in flight, else
        the observed one."""
        if pod is None or _node_name(pod):
            return None
        n = self._nominated.get(key)
        return n.node if n is not None else ((pod.get("status") or {}).get("nominatedNodeName") or None)

    def _pod_gone(self, key: str) -> None:
        self._drop(key, "pod deleted")
        self._nominated.pop(key, None)
        self._evicting.pop(key, None)

    def _node_changed(self, name: str, obj: dict | None) -> None:
        self._node_order = None
        self._nodes.pop(name, None)
        self._views.pop(name, None)
        self._bad_nodes.pop(name, None)
        if obj is not None:
            try:
                self._nodes[name] = objects.node(schema.check(obj, "Node"))
            except InputError as exc:
                self._bad_nodes[name] = exc
        self._dirty.add(name)
        self.freed += 1  # a node added, or changed in labels, taints, readiness or size: gangs may fit now

    def _dra_changed(self, kind: str, key: ObjectKey, old: dict | None, new: dict | None) -> None:
        """A DRA object changed in what scheduling reads. Devices may have been freed or added: a claim gone or
        deallocated, a ResourceSlice, DeviceClass or template changed (a claim only allocated frees nothing)."""
        if kind == "ResourceClaim" and new is not None:
            allocation = ((old or {}).get("status") or {}).get("allocation")
            if allocation is None or allocation == (new.get("status") or {}).get("allocation"):
                return
        if kind == "ResourceClaim" and new is None:
            self._end_claim(key[1:])
        self.freed += 1

    def _count_priority(self, priority: int | None, sign: int) -> None:
        left = self._bound_priorities.get(priority, 0) + sign
        if left:
            self._bound_priorities[priority] = left
        else:
            self._bound_priorities.pop(priority, None)

    def _use(self, node: str, requests: Requests, sign: int, *, freed: bool = True) -> None:
        _add(self._used, node, requests, sign)
        self._dirty.add(node)
        if sign < 0 and freed:
            self.freed += 1

    def _drop(self, key: str, why: str, *, freed: bool = True) -> None:
        if key in self._assumed:
            self._end_assumption(key, freed=freed)
            logs.debug("assumption dropped", pod=key, why=why)
        self._drop_claims(key)

    def _drop_claims(self, pod: str) -> None:
        for claim in [c for c, a in self._claims.items() if a.pod == pod]:
            self._end_claim(claim)

    def _end_claim(self, claim: tuple[str, str]) -> None:
        if self._claims.pop(claim, None) is not None:
            self._versions["ResourceClaim"] += 1  # (views show the claims with their assumed allocations)

    def _end_assumption(self, key: str, *, freed: bool) -> None:
        a = self._assumed.pop(key)
        _unlink(self._assumed_on, a.node, key)
        _add(self._used, a.node, a.requests, -1)
        _add(self._held, a.scheduler, a.requests, -1)
        self._count_priority(a.priority, -1)
        self._dirty.add(a.node)
        if freed:
            self.freed += 1

    def _bump(self) -> None:
        self.generation += 1
        event, self._changed = self._changed, anyio.Event()
        event.set()

    # ------------------------------------------------------------------ assume (solver actor) / forget (binder)

    def assume(
        self,
        gang: str,
        pods: Iterable[tuple[str, str, str]],
        claims: Iterable[tuple[str, str, dict]] = (),
        gpus: Mapping[str, int] | None = None,
    ) -> None:
        """The solver placed these (pod key, uid, node): they count as bound until confirmed or forgotten; and
        chose these devices (pod key, claim `ns/name`, status.allocation): allocated until the watch shows it;
        and these GPUs for fractional pods (pod key -> GPU index), held until the watch shows the pod bound."""
        for key, uid, node in pods:
            if key in self._assumed:
                self._end_assumption(key, freed=self._assumed[key].node != node)
            self._assume_one(key, uid, node, gang, (gpus or {}).get(key))
        for pod, claim, allocation in claims:
            ns, _, name = claim.partition("/")
            self._claims[(ns, name)] = ClaimAssumption(pod, allocation)
            self._versions["ResourceClaim"] += 1

    def _assume_one(self, key: str, uid: str, node: str, gang: str, gpu: int | None) -> None:
        requests = dict(self._requests.get(key) or {})
        pod = self.pod(key)
        self._assumed[key] = a = Assumption(node, uid, gang, requests, _priority(pod), gpu, _scheduler_name(pod or {}))
        self._assumed_on.setdefault(node, set()).add(key)
        _add(self._used, node, requests, +1)
        _add(self._held, a.scheduler, requests, +1)
        self._count_priority(a.priority, +1)
        self._dirty.add(node)

    def forget(self, key: str, uid: str) -> bool:
        """The binder did not bind this pod: its capacity is free again and its gang is planned anew (after a
        failed bind, not before its back-off in the scheduling queue has passed). False when this pod was not
        assumed (the watch ended the assumption first)."""
        a = self._assumed.get(key)
        if a is None or a.uid != uid:
            return False
        self._end_assumption(key, freed=True)
        self._drop_claims(key)
        self._bump()
        return True

    # ------------------------------------------------------------------ preemption (solver actor / binder)

    def nominate(self, pods: Iterable[tuple[str, str, str | None]]) -> None:
        """The solver nominated these (pod key, uid, node; None clears the nomination)."""
        for key, uid, node in pods:
            was = self._nomination(key, self.pod(key))
            self._nominated[key] = Nomination(node, uid)
            if was is not None and was != node:
                self.freed += 1  # the room held for it there is for any gang now

    def evict(self, pods: Iterable[tuple[str, str]]) -> None:
        """The solver chose these (pod key, uid) as victims: they count as leaving from now on."""
        for key, uid in pods:
            self._evicting[key] = uid

    def forget_nomination(self, key: str, uid: str) -> None:
        """The nomination was not written: the pod shows what the API server has again."""
        n = self._nominated.get(key)
        if n is not None and n.uid == uid:
            del self._nominated[key]
            if n.node is not None and n.node != self._nomination(key, self.pod(key)):
                self.freed += 1
            self._bump()

    def forget_eviction(self, key: str, uid: str) -> None:
        """The victim was not evicted: it counts as running again."""
        if self._evicting.get(key) == uid:
            del self._evicting[key]
            self._bump()

    # ------------------------------------------------------------------ reading

    async def wait_for_change(self, seen: int) -> None:
        while self.generation == seen:
            await self._changed.wait()

    async def wait_for_members(self, seen: int) -> None:
        """Until a pod that names a PodGroup changes (`members_seen` moves past `seen`)."""
        while self.members_seen == seen:
            await self._members_changed.wait()

    def pod_group_members(self, key: ObjectKey) -> list[dict]:
        """The pods that name this PodGroup."""
        return [p for k in self._members.get(key, ()) if (p := self.pod(k)) is not None]

    def pod_groups_changed(self, since: int) -> list[ObjectKey]:
        """PodGroups that changed, or whose members did, after `members_seen` was `since`."""
        out = []
        for key, mark in reversed(self._group_marks.items()):
            if mark <= since:
                break
            out.append(key)
        return out

    def _mark_group(self, key: ObjectKey) -> None:
        self._group_marks.pop(key, None)  # re-inserted last: the dict stays in the order of the changes
        self._group_marks[key] = self.members_seen

    def pod(self, key: str) -> dict | None:
        ns, _, name = key.partition("/")
        return self._objects["Pod"].get(("", ns, name))

    def node(self, name: str) -> dict | None:
        return self._objects["Node"].get(("", "", name))

    def node_view(self, name: str) -> Node | None:
        """The node as a cycle sees it: converted, with the capacity pods bound or assumed there hold (None when
        it is gone or cannot be read)."""
        if name not in self._nodes:
            self._dirty.discard(name)
            return None
        if name in self._dirty or name not in self._views:
            used, held = dict(self._used.get(name, {})), self.gpu_shares(name)
            self._views[name] = replace(self._nodes[name], used=used, gpu_shares=held)
            if self._node_order is not None and name in self._node_place:
                self._node_order[self._node_place[name]] = self._views[name]
            self._dirty.discard(name)
            self._versions["Node"] += 1  # views built from now on take the nodes anew
        return self._views[name]

    def gpu_shares(self, name: str, but: Collection[str] = ()) -> dict[int, int]:
        """GPU index -> milli-GPU the fractional pods bound or assumed on node `name` hold, but those `but` names."""
        node = self._nodes.get(name)
        if node is None or not self._gpu_shares:
            return {}
        bound = (k for k in self._on_node.get(name, ()) if k not in but)
        assumed = ((k, self._assumed[k].gpu) for k in self._assumed_on.get(name, ()) if k not in but)
        return self._gpu_shares.held(node, bound, assumed)

    def node_error(self, name: str) -> InputError | None:
        """Why a node cannot be read (None when it can, or is gone)."""
        return self._bad_nodes.get(name)

    def requests(self, key: str) -> Requests | None:
        """The observed pod's requests (None when it is gone or they cannot be read)."""
        return self._requests.get(key)

    def assumed_on(self, node: str) -> list[tuple[str, Assumption]]:
        return [(k, self._assumed[k]) for k in self._assumed_on.get(node, ())]

    def pods(self) -> list[dict]:
        """Every pod observed (finished ones are never watched)."""
        return list(self._objects["Pod"].values())

    def pods_on(self, node: str) -> list[dict]:
        """Pods observed bound to `node` (finished ones are never watched)."""
        return [p for k in self._on_node.get(node, ()) if (p := self.pod(k)) is not None]

    def is_assumed(self, key: str) -> bool:
        return key in self._assumed

    def claim(self, key: str) -> dict | None:
        """A ResourceClaim as observed, by `ns/name`."""
        ns, _, name = key.partition("/")
        return self._objects["ResourceClaim"].get(("resource.k8s.io", ns, name))

    def devices_in_use(self, but: Iterable[str] = ()) -> dict[tuple[str, str, str], str]:
        """Every device held whole by an observed claim or chosen for an assumed one (an allocation result that
        consumes no capacity of it), and its claim (`ns/name`), leaving out the claims `but` names."""
        return {device: claim for claim, device, r in self._results(but) if r.get("consumedCapacity") is None}

    def shares_in_use(self, but: Iterable[str] = ()) -> dict[tuple[str, str, str], list[dict]]:
        """What each share held of a shared device consumes (`consumedCapacity` of the allocation results of
        observed and assumed claims, leaving out the claims `but` names)."""
        out: dict[tuple[str, str, str], list[dict]] = {}
        for _claim, device, r in self._results(but):
            consumed = r.get("consumedCapacity")
            if consumed is not None:
                out.setdefault(device, []).append(consumed)
        return out

    def _results(self, but: Iterable[str]) -> Iterator[tuple[str, tuple[str, str, str], dict]]:
        skip = set(but)
        allocations = {
            f"{k[1]}/{k[2]}": (c.get("status") or {}).get("allocation")
            for k, c in self._objects["ResourceClaim"].items()
        }
        allocations.update({f"{ns}/{name}": a.allocation for (ns, name), a in self._claims.items()})
        for claim, allocation in allocations.items():
            if claim in skip or not allocation:
                continue
            for r in (allocation.get("devices") or {}).get("results") or []:
                if not r.get("adminAccess"):
                    yield claim, (r["driver"], r["pool"], r["device"]), r

    def shared_capacities(self) -> dict[tuple[str, str, str], dict]:
        """The capacities (as given) of every device of the observed ResourceSlices that allows multiple
        allocations."""
        out: dict[tuple[str, str, str], dict] = {}
        for sl in self._objects["ResourceSlice"].values():
            spec = sl.get("spec") or {}
            driver, pool = str(spec.get("driver")), str((spec.get("pool") or {}).get("name"))
            for device in spec.get("devices") or []:
                if device.get("allowMultipleAllocations"):
                    out[(driver, pool, str(device.get("name")))] = device.get("capacity") or {}
        return out

    def pod_groups(self) -> dict[ObjectKey, dict]:
        return dict(self._objects["PodGroup"])

    def priority_classes(self) -> dict[str, dict]:
        return {k[2]: v for k, v in self._objects["PriorityClass"].items()}

    def queues(self) -> dict[str, dict]:
        return {k[2]: v for k, v in self._objects["Queue"].items() if k[0] == QUEUE_GROUP}

    def counts(self) -> dict[str, int]:
        """Objects per kind and assumptions: what the store holds in memory."""
        out = {kind: len(table) for kind, table in self._objects.items()}
        out.update(
            assumed=len(self._assumed),
            assumed_claims=len(self._claims),
            nominated=len(self._nominated),
            evicting=len(self._evicting),
        )
        return out

    def snapshot(self) -> Snapshot:
        return self.view().snapshot

    def view(self, scheduler_name: str | None = None, leave_out: Collection[str] = ()) -> View:
        """An immutable view for one cycle: assumed pods appear bound to their node (and their claims'
        devices allocated), nominations and evictions in flight appear done, the pods `leave_out` names (in
        back-off: their gangs wait for them) are left out, and so are objects that cannot be read (listed in
        `unreadable`).

        With `scheduler_name`, only the pods a cycle for that scheduler reads: its pending pods, the pods that
        may share a gang with them (`gang_hints`), and the pods of their namespaces where a PDB may group them.
        Every other pod counts only through the capacity it holds, which `nodes` carry: a cycle reads what is
        pending, not the tens of thousands of pods a large cluster runs. Such a view is `partial`: its bound pods
        are not all the possible victims of a preemption; a cycle that may preempt takes a whole one. While a Queue
        exists every view is whole: a queue's usage, which its cap and fair share are measured against, is what
        every bound gang of the queue holds."""
        bad_pods = {k for k in self._bad_pods if _node_name(self.pod(k))}  # requests matter once bound
        if self._objects["Queue"]:
            scheduler_name = None  # a queue's usage is what every bound gang of it holds: read them all
        if scheduler_name is None:
            by_key = {pod_key(p): p for p in self._objects["Pod"].values()}
        else:
            pending = {k: p for k, p in self._unbound.get(scheduler_name, {}).items() if k not in self._assumed}
            by_key = dict(pending)
            # Each hint once (in the order the pending pods first give it): a gang's pods share their hints,
            # and reading its mates once per member would cost members x gang size (a million for 1,000 pods).
            hints = dict.fromkeys(hint for p in pending.values() for hint in gang_hints(p, self.group_label))
            for hint in hints:
                in_namespace = self._by_namespace.get(hint[1], {})
                by_key.update((k, in_namespace[k]) for k in self._by_hint.get(hint, ()) if k in in_namespace)
            guarded = {k[1] for k in self._objects["PodDisruptionBudget"]}
            for ns in guarded & {p["metadata"].get("namespace", "") for p in pending.values()}:
                by_key.update(self._by_namespace.get(ns, {}))
        for key in {*leave_out, *bad_pods}:
            by_key.pop(key, None)
        for key in (self._assumed.keys() | self._nominated.keys() | self._evicting.keys()) & by_key.keys():
            by_key[key] = self._as_assumed(by_key[key])
        pods = list(by_key.values())
        node_objs = self._objects["Node"]
        unreadable = [self._bad_pods[k] for k in sorted(bad_pods)]
        unreadable += [self._bad_nodes[n] for n in sorted(self._bad_nodes)]
        for name in list(self._dirty):
            self.node_view(name)
        groups, decoded_groups = self._shared("PodGroup", self._pod_groups_read)
        snapshot = Snapshot(
            nodes=self._shared("Node", lambda: [o for key, o in node_objs.items() if key[2] not in self._bad_nodes]),
            pods=pods,
            pdbs=self._shared("PodDisruptionBudget", lambda: list(self._objects["PodDisruptionBudget"].values())),
            pod_groups=groups,
            decoded_pod_groups=decoded_groups,
            priority_classes=self._shared("PriorityClass", self.priority_classes),
            queues=self._shared("Queue", self.queues),
            resource_slices=self._shared("ResourceSlice", lambda: list(self._objects["ResourceSlice"].values())),
            device_classes=self._shared(
                "DeviceClass", lambda: {k[2]: v for k, v in self._objects["DeviceClass"].items()}
            ),
            resource_claims=self._shared(
                "ResourceClaim",
                lambda: {(k[1], k[2]): self._as_allocated(k, v) for k, v in self._objects["ResourceClaim"].items()},
            ),
            claim_templates=self._shared(
                "ResourceClaimTemplate",
                lambda: {(k[1], k[2]): v for k, v in self._objects["ResourceClaimTemplate"].items()},
            ),
        )
        nodes = self._shared("nodes", self._node_tuple)
        lowest = min(
            (-math.inf if p is None else p for p in self._bound_priorities), default=math.inf
        )  # (a pod without spec.priority may be of any)
        held = dict(self._held.get(scheduler_name, {})) if scheduler_name is not None else {}  # (View.held)
        return View(snapshot, nodes, tuple(unreadable), self.freed, scheduler_name is not None, lowest, held)

    def _node_tuple(self) -> tuple[Node, ...]:
        """The readable nodes' views in node order: the kept list, patched as views are rebuilt, copied (gathering
        16,384 views by name each cycle cost more)."""
        if self._node_order is None:
            names = [k[2] for k in self._objects["Node"] if k[2] in self._views]
            self._node_order, self._node_place = [self._views[n] for n in names], {n: i for i, n in enumerate(names)}
        return tuple(self._node_order)

    def _pod_groups_read(self) -> tuple[dict[ObjectKey, dict], dict[ObjectKey, Any]]:
        """The PodGroups of the kinds a cycle reads, and each one decoded as it arrived (views share both)."""
        groups = {k: v for k, v in self._objects["PodGroup"].items() if k[0] in POD_GROUP_KINDS}
        return groups, {k: self._decoded_groups[k] for k in groups}

    def _shared(self, kind: str, build: Callable[[], Any]) -> Any:
        """What `build` makes of the objects of `kind`, made again only when one of them changed: views share
        it, and nobody changes what a view holds."""
        version = self._versions["Node" if kind == "nodes" else kind]
        cached = self._cached.get(kind)
        if cached is None or cached[0] != version:
            cached = self._cached[kind] = (version, build())
        return cached[1]

    def _as_allocated(self, key: ObjectKey, claim: dict) -> dict:
        a = self._claims.get(key[1:])
        if a is None or (claim.get("status") or {}).get("allocation") is not None:
            return claim
        return {**claim, "status": {**(claim.get("status") or {}), "allocation": a.allocation}}

    def _as_assumed(self, pod: dict) -> dict:
        key = pod_key(pod)
        a = self._assumed.get(key)
        if a is not None and not (pod.get("spec") or {}).get("nodeName"):
            pod = {**pod, "spec": {**(pod.get("spec") or {}), "nodeName": a.node}}
            if a.gpu is not None:  # as the binder writes it before the bind
                annotations = {**(pod["metadata"].get("annotations") or {}), shares.INDEX: str(a.gpu)}
                pod = {**pod, "metadata": {**pod["metadata"], "annotations": annotations}}
        n = self._nominated.get(key)
        if n is not None:
            pod = {**pod, "status": {**(pod.get("status") or {}), "nominatedNodeName": n.node}}
        if key in self._evicting:
            pod = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": EVICTING}}
        return pod
