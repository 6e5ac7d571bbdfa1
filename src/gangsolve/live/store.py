"""The cluster store: the one owner of what the scheduler knows about the cluster.

It holds three things, and says who may change each:

- **observed objects**, exactly as the API sent them and never mutated: written only by `run` (the watch
  pump), from the watchers' events;
- **assumed placements** (kube-scheduler's assume/bind/forget): a pod the solver actor handed to the binder
  shows as bound to its node in every later snapshot, so no cycle gives its capacity away twice. Written by
  the solver actor (`assume`), ended by the watch showing the pod bound (confirmed) or gone, or by the binder
  (`forget`);
- **assumed claim allocations**, the DRA half of an assumption: the devices the solver actor chose for a
  claim of a placed pod show as allocated in every later snapshot until the watch shows the claim allocated
  (or gone), so no cycle hands a device out twice. Written with the pod's assumption (`assume`), dropped with
  it when the binder forgets the pod or the pod is replaced or deleted;
- **back-off** after a failed bind: the binder's `forget(..., failed=True)` keeps that pod out of planning for
  1 s, doubling up to 10 s (kube-scheduler's pod back-off), so a pod the API server keeps refusing cannot make
  the scheduler hammer it;
- **preemptions in flight**, the same way as assumptions: a nomination the solver actor decided (a pending
  pod's `status.nominatedNodeName`, or its clearing) and a victim it chose show in every later snapshot, the
  pod nominated and the victim leaving, until the watch shows the API server has them (or the pod is gone or
  replaced), or the binder reports the write failed (`forget_nomination`, `forget_eviction`). The capacity a
  nomination holds is no state of its own: each cycle derives it from the pods' nominations.

Everyone else reads: an immutable `Snapshot` per cycle, or single objects (`pod`, `node`, `pods_on`) for the
binder's last check and feedback. A change that matters to scheduling bumps `generation` (status writes
gangsolve makes itself and node heartbeats do not), which wakes the solver actor.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass

import anyio
from anyio.abc import ObjectReceiveStream

from gangsolve.live import logs
from gangsolve.live.watchers import Event, Resync
from gangsolve.snapshot import DRA_KINDS, POD_GROUP_KINDS, QUEUE_GROUP, Snapshot

KINDS = ("Pod", "Node", "PodDisruptionBudget", "PodGroup", "PriorityClass", "Queue", *DRA_KINDS)
ObjectKey = tuple[str, str, str]  # (api group, namespace, name)

EVICTING = "1970-01-01T00:00:00Z"  # a victim's deletionTimestamp until the watch shows the real one
BACKOFF_INITIAL = 1.0  # seconds, as kube-scheduler's podInitialBackoffSeconds
BACKOFF_MAX = 10.0  # as its podMaxBackoffSeconds


def object_key(obj: dict) -> ObjectKey:
    """PodGroups of every API group share one table, so the group is part of the key."""
    meta = obj.get("metadata") or {}
    api = str(obj.get("apiVersion", ""))
    group = api.split("/")[0] if "/" in api else ""
    return group, meta.get("namespace", ""), meta.get("name", "")


def pod_key(obj: dict) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


def _ready(node: dict) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions if isinstance(c, dict))


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
            _ready(obj),
        )
    if kind == "PriorityClass":
        return (obj.get("value"), obj.get("globalDefault"))
    if kind == "ResourceClaim":  # its allocation and reservations decide which devices are free
        return (
            meta.get("uid"),
            meta.get("deletionTimestamp"),
            spec,
            status.get("allocation"),
            status.get("reservedFor"),
        )
    if kind in DRA_KINDS:
        return spec
    if kind == "Queue":  # its state (Open, Closed) is in its status; what it holds is ours to write
        return (meta.get("labels"), meta.get("annotations"), spec, status.get("state"))
    return (meta.get("labels"), meta.get("annotations"), spec)  # PDB, PodGroup: not their status


@dataclass(frozen=True)
class Assumption:
    node: str
    uid: str
    gang: str


@dataclass(frozen=True)
class ClaimAssumption:
    pod: str  # the pod key whose placement allocated it
    allocation: dict  # the claim's status.allocation as the binder writes it


@dataclass(frozen=True)
class Nomination:
    node: str | None  # None: the nomination is being cleared
    uid: str


@dataclass
class Backoff:
    uid: str
    attempts: int
    until: float  # monotonic


class ClusterStore:
    def __init__(self, clock=time.monotonic) -> None:
        self._objects: dict[str, dict[ObjectKey, dict]] = {k: {} for k in KINDS}
        self._prints: dict[str, dict[ObjectKey, object]] = {k: {} for k in KINDS}
        self._on_node: dict[str, set[str]] = {}  # node name -> keys of pods observed bound there
        self._assumed: dict[str, Assumption] = {}  # pod key -> where the solver placed it
        self._claims: dict[tuple[str, str], ClaimAssumption] = {}  # (ns, claim) -> the devices chosen for it
        self._backoff: dict[str, Backoff] = {}  # pod key -> kept out of planning until
        self._nominated: dict[str, Nomination] = {}  # pod key -> nomination written, not observed yet
        self._evicting: dict[str, str] = {}  # pod key -> uid of a victim being evicted, not observed leaving yet
        self._clock = clock
        self.generation = 0
        self._changed = anyio.Event()

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
        if kind == "Pod":
            self._index_pod(table.get(key), None if etype == "DELETED" else obj)
        if etype == "DELETED":
            gone = table.pop(key, None)
            prints.pop(key, None)
            if kind == "Pod":
                self._pod_gone(pod_key(obj))
            if kind == "ResourceClaim":
                self._claims.pop(key[1:], None)
            return gone is not None
        table[key] = obj
        if kind == "Pod":
            self._observe_pod(obj)
        if kind == "ResourceClaim" and (obj.get("status") or {}).get("allocation") is not None:
            self._claims.pop(key[1:], None)  # confirmed: the watch shows it allocated
        fp = fingerprint(kind, obj)
        if prints.get(key) == fp:
            return False
        prints[key] = fp
        return True

    def _index_pod(self, old: dict | None, new: dict | None) -> None:
        old_node = ((old or {}).get("spec") or {}).get("nodeName")
        new_node = ((new or {}).get("spec") or {}).get("nodeName")
        if old_node == new_node:
            return
        key = pod_key(old or new or {})
        if old_node:
            members = self._on_node.get(old_node, set())
            members.discard(key)
            if not members:
                self._on_node.pop(old_node, None)
        if new_node:
            self._on_node.setdefault(new_node, set()).add(key)

    def _observe_pod(self, obj: dict) -> None:
        key = pod_key(obj)
        uid = obj["metadata"].get("uid")
        backoff = self._backoff.get(key)
        if backoff is not None and backoff.uid != uid:
            del self._backoff[key]  # a new pod under the old name starts afresh
        self._observe_preemption(key, uid, obj)
        a = self._assumed.get(key)
        if a is None:
            return
        node = (obj.get("spec") or {}).get("nodeName")
        if uid != a.uid:
            self._drop(key, "pod replaced")
        elif node:
            if node != a.node:
                logs.warning("pod bound elsewhere than assumed", pod=key, assumed=a.node, node=node)
            del self._assumed[key]  # confirmed: the watch shows it bound
            self._backoff.pop(key, None)

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

    def _pod_gone(self, key: str) -> None:
        self._drop(key, "pod deleted")
        self._backoff.pop(key, None)
        self._nominated.pop(key, None)
        self._evicting.pop(key, None)

    def _drop(self, key: str, why: str) -> None:
        if self._assumed.pop(key, None) is not None:
            logs.debug("assumption dropped", pod=key, why=why)
        self._drop_claims(key)

    def _drop_claims(self, pod: str) -> None:
        for claim in [c for c, a in self._claims.items() if a.pod == pod]:
            del self._claims[claim]

    def _bump(self) -> None:
        self.generation += 1
        event, self._changed = self._changed, anyio.Event()
        event.set()

    # ------------------------------------------------------------------ assume (solver actor) / forget (binder)

    def assume(
        self, gang: str, pods: Iterable[tuple[str, str, str]], claims: Iterable[tuple[str, str, dict]] = ()
    ) -> None:
        """The solver placed these (pod key, uid, node): they count as bound until confirmed or forgotten; and
        chose these devices (pod key, claim `ns/name`, status.allocation): allocated until the watch shows it."""
        for key, uid, node in pods:
            self._assumed[key] = Assumption(node, uid, gang)
        for pod, claim, allocation in claims:
            ns, _, name = claim.partition("/")
            self._claims[(ns, name)] = ClaimAssumption(pod, allocation)

    def forget(self, key: str, uid: str, *, failed: bool) -> None:
        """The binder did not bind this pod: its capacity is free again and its gang is planned anew; after a
        failed bind (`failed`), not before its back-off has passed."""
        a = self._assumed.get(key)
        if a is None or a.uid != uid:
            return
        del self._assumed[key]
        self._drop_claims(key)
        if failed:
            previous = self._backoff.get(key)
            attempts = previous.attempts + 1 if previous is not None and previous.uid == uid else 1
            delay = min(BACKOFF_MAX, BACKOFF_INITIAL * 2 ** (attempts - 1))
            self._backoff[key] = Backoff(uid, attempts, self._clock() + delay)
        self._bump()

    # ------------------------------------------------------------------ preemption (solver actor / binder)

    def nominate(self, pods: Iterable[tuple[str, str, str | None]]) -> None:
        """The solver nominated these (pod key, uid, node; None clears the nomination)."""
        for key, uid, node in pods:
            self._nominated[key] = Nomination(node, uid)

    def evict(self, pods: Iterable[tuple[str, str]]) -> None:
        """The solver chose these (pod key, uid) as victims: they count as leaving from now on."""
        for key, uid in pods:
            self._evicting[key] = uid

    def forget_nomination(self, key: str, uid: str) -> None:
        """The nomination was not written: the pod shows what the API server has again."""
        n = self._nominated.get(key)
        if n is not None and n.uid == uid:
            del self._nominated[key]
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

    def next_backoff_expiry(self) -> float:
        """Seconds until the first pod in back-off may be planned again (inf when none is)."""
        now = self._clock()
        waiting = [b.until - now for b in self._backoff.values() if b.until > now]
        return max(0.0, min(waiting)) if waiting else math.inf

    def backing_off(self) -> dict[str, float]:
        """Pods held back after a failed bind: key -> seconds left."""
        now = self._clock()
        return {k: b.until - now for k, b in self._backoff.items() if b.until > now}

    def pod(self, key: str) -> dict | None:
        ns, _, name = key.partition("/")
        return self._objects["Pod"].get(("", ns, name))

    def node(self, name: str) -> dict | None:
        return self._objects["Node"].get(("", "", name))

    def pods(self) -> list[dict]:
        """Every pod observed (finished ones are never watched)."""
        return list(self._objects["Pod"].values())

    def pods_on(self, node: str) -> list[dict]:
        """Pods observed bound to `node` (finished ones are never watched)."""
        return [p for k in self._on_node.get(node, ()) if (p := self.pod(k)) is not None]

    def assumed_on(self, node: str) -> list[tuple[str, Assumption]]:
        return [(k, a) for k, a in self._assumed.items() if a.node == node]

    def is_assumed(self, key: str) -> bool:
        return key in self._assumed

    def claim(self, key: str) -> dict | None:
        """A ResourceClaim as observed, by `ns/name`."""
        ns, _, name = key.partition("/")
        return self._objects["ResourceClaim"].get(("resource.k8s.io", ns, name))

    def devices_in_use(self, but: Iterable[str] = ()) -> dict[tuple[str, str, str], str]:
        """Every device allocated by an observed claim or chosen for an assumed one, and its claim (`ns/name`),
        leaving out the claims `but` names."""
        skip = set(but)
        out: dict[tuple[str, str, str], str] = {}
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
                    out[(r["driver"], r["pool"], r["device"])] = claim
        return out

    def pod_groups(self) -> dict[ObjectKey, dict]:
        return dict(self._objects["PodGroup"])

    def priority_classes(self) -> dict[str, dict]:
        return {k[2]: v for k, v in self._objects["PriorityClass"].items()}

    def queues(self) -> dict[str, dict]:
        return {k[2]: v for k, v in self._objects["Queue"].items() if k[0] == QUEUE_GROUP}

    def counts(self) -> dict[str, int]:
        """Objects per kind, assumptions and back-offs: what the scheduler holds in memory."""
        out = {kind: len(table) for kind, table in self._objects.items()}
        out.update(
            assumed=len(self._assumed),
            assumed_claims=len(self._claims),
            backoff=len(self._backoff),
            nominated=len(self._nominated),
            evicting=len(self._evicting),
        )
        return out

    def snapshot(self) -> Snapshot:
        """An immutable view for one cycle: assumed pods appear bound to their node, pods in back-off are
        left out (their gangs wait for them), nominations and evictions in flight appear done."""
        held = self.backing_off()
        pods = list(self._objects["Pod"].values())
        if self._assumed or held or self._nominated or self._evicting:
            pods = [self._as_assumed(p) for p in pods if pod_key(p) not in held]
        return Snapshot(
            nodes=list(self._objects["Node"].values()),
            pods=pods,
            pdbs=list(self._objects["PodDisruptionBudget"].values()),
            pod_groups={k: v for k, v in self._objects["PodGroup"].items() if k[0] in POD_GROUP_KINDS},
            priority_classes=self.priority_classes(),
            queues=self.queues(),
            resource_slices=list(self._objects["ResourceSlice"].values()),
            device_classes={k[2]: v for k, v in self._objects["DeviceClass"].items()},
            resource_claims={(k[1], k[2]): self._as_allocated(k, v) for k, v in self._objects["ResourceClaim"].items()},
            claim_templates={(k[1], k[2]): v for k, v in self._objects["ResourceClaimTemplate"].items()},
        )

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
        n = self._nominated.get(key)
        if n is not None:
            pod = {**pod, "status": {**(pod.get("status") or {}), "nominatedNodeName": n.node}}
        if key in self._evicting:
            pod = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": EVICTING}}
        return pod
