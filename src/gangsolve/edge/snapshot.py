"""Reading a cluster snapshot: what `kubectl get nodes,pods,pdb,podgroups...,priorityclasses,queues -A -o yaml`
prints.

Accepts a `kind: List` (or any `*List`) with `items`, a single object, or a multi-document YAML/JSON stream.
Kinds other than the ones gangsolve understands (and its kinds of API groups it does not read) are set aside
unread, for `gangsolve solve` to warn about those that look meant for it (gangsolve.edge.hints). Objects are
filed here by kind and name, as the API gives them (the live scheduler's store builds its snapshots of the same
dicts); `Snapshot.decoded` decodes them, once per snapshot, into the typed objects the cluster is built from
(gangsolve.edge.schema).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any

import msgspec
import orjson
import yaml

from gangsolve.edge import schema
from gangsolve.edge.errors import InputError, describe, shown

POD_GROUP_KINDS = {
    "scheduling.k8s.io": "PodGroup",  # Kubernetes' own (KEP-4671): v1beta1, v1alpha2
    "scheduling.x-k8s.io": "PodGroup",  # scheduler-plugins coscheduling, Kubeflow training-operator
    "scheduling.volcano.sh": "PodGroup",  # Volcano
}
PDB_VERSIONS = ("policy/v1", "policy/v1beta1")
TAKEN_AT_ANNOTATION = "gangsolve.io/snapshot-time"  # on the List `gangsolve export` writes: when it listed
QUEUE_GROUP = "scheduling.volcano.sh"  # Volcano's Queue (v1beta1): tenants' weights and caps
# Dynamic Resource Allocation (resource.k8s.io/v1): devices, their classes, claims and claim templates
DRA_KINDS = ("ResourceSlice", "DeviceClass", "ResourceClaim", "ResourceClaimTemplate")
DRA_GROUP = "resource.k8s.io"
KINDS = ("Node", "Pod", "PodDisruptionBudget", "PodGroup", "PriorityClass", "Queue", *DRA_KINDS)
# YAML aliases may repeat a value; a document may not grow by them to more values than it has characters
# (plus this many): a billion-laughs document of under 1 KB would otherwise expand to billions of values.
ALIAS_ALLOWANCE = 100_000
_ALIAS = re.compile(r"(?:^|[\s\[{,])\*[^\s,\[\]{}]", re.MULTILINE)


@dataclass
class Snapshot:
    nodes: list[dict] = field(default_factory=list)
    pods: list[dict] = field(default_factory=list)
    pdbs: list[dict] = field(default_factory=list)
    pod_groups: dict[tuple[str, str, str], dict] = field(default_factory=dict)  # (group, ns, name) -> PodGroup
    priority_classes: dict[str, dict] = field(default_factory=dict)
    queues: dict[str, dict] = field(default_factory=dict)  # Volcano Queues by name (cluster-scoped)
    resource_slices: list[dict] = field(default_factory=list)
    device_classes: dict[str, dict] = field(default_factory=dict)
    resource_claims: dict[tuple[str, str], dict] = field(default_factory=dict)  # (ns, name) -> ResourceClaim
    claim_templates: dict[tuple[str, str], dict] = field(default_factory=dict)  # (ns, name) -> template
    taken_at: datetime | None = None  # when `gangsolve export` listed the cluster (its List's annotation)
    unread: list[dict] = field(default_factory=list)  # objects of kinds (or API groups) gangsolve does not read
    # The PodGroups decoded already (or the InputError each raised), by whoever filed them: the live store
    # decodes each as it arrives, not every one each cycle (a stream has a PodGroup per gang).
    decoded_pod_groups: dict[tuple[str, str, str], Any] | None = field(default=None, repr=False, compare=False)
    # What is derived from these objects once per snapshot (their decoded form, the DRA model), shared by the
    # cycle's steps: the objects are not changed once filed (`add` starts it again)
    cache: dict[object, object] = field(default_factory=dict, repr=False, compare=False)

    def add(self, obj: dict) -> None:
        """File one object under its kind; objects of kinds gangsolve does not read are set aside, unread."""
        if not isinstance(obj, dict):
            raise InputError("snapshot", "items", f"expected an object, got {type(obj).__name__}")
        kind, api = obj.get("kind"), obj.get("apiVersion", "")
        if kind not in KINDS:
            self.unread.append(obj)
            return
        self.cache.clear()
        if not isinstance(api, str):
            raise InputError(describe(obj), "apiVersion", f"expected a string, got {shown(api)}")
        group = api.split("/")[0] if "/" in api else ""
        if kind == "Node":
            self.nodes.append(_checked(obj))
        elif kind == "Pod":
            self.pods.append(_checked(obj, namespaced=True))
        elif kind == "PodDisruptionBudget" and (api in PDB_VERSIONS or not api):
            self.pdbs.append(_checked(obj, namespaced=True))
        elif kind == "PodGroup" and group in POD_GROUP_KINDS:
            obj = _checked(obj, namespaced=True)
            key = (group, obj["metadata"]["namespace"], obj["metadata"]["name"])
            if key in self.pod_groups:
                raise _duplicate(obj)
            self.pod_groups[key] = obj
        elif kind == "PriorityClass":
            obj = _checked(obj)
            if obj["metadata"]["name"] in self.priority_classes:
                raise _duplicate(obj)
            self.priority_classes[obj["metadata"]["name"]] = obj
        elif kind == "Queue" and group == QUEUE_GROUP:
            obj = _checked(obj)
            if obj["metadata"]["name"] in self.queues:
                raise _duplicate(obj)
            self.queues[obj["metadata"]["name"]] = obj
        elif kind in DRA_KINDS and (group == DRA_GROUP or not api):
            self._add_dra(kind, obj)
        else:  # one of its kinds, of an API group it does not read
            self.unread.append(obj)

    def _add_dra(self, kind: str, obj: dict) -> None:
        if kind == "ResourceSlice":
            self.resource_slices.append(_checked(obj))
            return
        if kind == "DeviceClass":
            obj = _checked(obj)
            if obj["metadata"]["name"] in self.device_classes:
                raise _duplicate(obj)
            self.device_classes[obj["metadata"]["name"]] = obj
            return
        obj = _checked(obj, namespaced=True)
        into = self.resource_claims if kind == "ResourceClaim" else self.claim_templates
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        if key in into:
            raise _duplicate(obj)
        into[key] = obj

    def decoded(self, nodes: bool = True) -> Decoded:
        """Every object decoded (gangsolve.edge.schema.check), once per snapshot; the first that cannot be read
        raises InputError. `nodes=False` leaves the nodes to a caller that decoded them already (the live store,
        as they arrive)."""
        for key in (("decoded", True), ("decoded", nodes)):
            decoded = self.cache.get(key)
            if isinstance(decoded, Decoded):
                return decoded
        decoded = self.cache["decoded", nodes] = Decoded(self, nodes)
        return decoded

    def objects(self) -> Iterator[dict]:
        """Every object filed, kind by kind."""
        yield from self.nodes
        yield from self.pods
        yield from self.pdbs
        yield from self.pod_groups.values()
        yield from self.priority_classes.values()
        yield from self.queues.values()
        yield from self.resource_slices
        yield from self.device_classes.values()
        yield from self.resource_claims.values()
        yield from self.claim_templates.values()

    def without(self, culprit: str) -> Snapshot:
        """The snapshot less the objects `describe` names `culprit` (e.g. `PodGroup team-a/g`): how the live
        scheduler leaves out an object it cannot read."""

        def keep(obj: dict) -> bool:
            return describe(obj) != culprit

        return Snapshot(
            nodes=[o for o in self.nodes if keep(o)],
            pods=[o for o in self.pods if keep(o)],
            pdbs=[o for o in self.pdbs if keep(o)],
            pod_groups={k: o for k, o in self.pod_groups.items() if keep(o)},
            priority_classes={k: o for k, o in self.priority_classes.items() if keep(o)},
            queues={k: o for k, o in self.queues.items() if keep(o)},
            resource_slices=[o for o in self.resource_slices if keep(o)],
            device_classes={k: o for k, o in self.device_classes.items() if keep(o)},
            resource_claims={k: o for k, o in self.resource_claims.items() if keep(o)},
            claim_templates={k: o for k, o in self.claim_templates.items() if keep(o)},
            taken_at=self.taken_at,
            unread=self.unread,
        )

    def check_duplicates(self) -> None:
        seen: set[tuple[str, str, str, str]] = set()
        for obj in [*self.nodes, *self.pods, *self.pdbs, *self.resource_slices]:
            meta = obj["metadata"]
            api = obj.get("apiVersion") or ""
            key = (api.split("/")[0] if "/" in api else "", obj["kind"], meta.get("namespace", ""), meta["name"])
            if key in seen:
                raise _duplicate(obj)
            seen.add(key)


class Decoded:
    """A snapshot's objects as typed structs, filed as the snapshot files them (nodes only if asked for)."""

    def __init__(self, snap: Snapshot, nodes: bool) -> None:
        check = schema.check
        self.nodes: list[schema.Node] = [check(o, "Node") for o in snap.nodes] if nodes else []
        self.pods: list[schema.Pod] = [check(o, "Pod") for o in snap.pods]
        self.pdbs: list[schema.PodDisruptionBudget] = [check(o, "PodDisruptionBudget") for o in snap.pdbs]
        given = snap.decoded_pod_groups
        self.pod_groups: dict[tuple[str, str, str], schema.PodGroup] = {
            k: check(o, "PodGroup") if given is None else _raised(given[k]) for k, o in snap.pod_groups.items()
        }
        self.priority_classes: dict[str, schema.PriorityClass] = {
            k: check(o, "PriorityClass") for k, o in snap.priority_classes.items()
        }
        self.queues: dict[str, schema.Queue] = {k: check(o, "Queue") for k, o in snap.queues.items()}
        self.resource_slices: list[schema.ResourceSlice] = [check(o, "ResourceSlice") for o in snap.resource_slices]
        self.device_classes: dict[str, schema.DeviceClass] = {
            k: check(o, "DeviceClass") for k, o in snap.device_classes.items()
        }
        self.resource_claims: dict[tuple[str, str], schema.ResourceClaim] = {
            k: check(o, "ResourceClaim") for k, o in snap.resource_claims.items()
        }
        self.claim_templates: dict[tuple[str, str], schema.ResourceClaimTemplate] = {
            k: check(o, "ResourceClaimTemplate") for k, o in snap.claim_templates.items()
        }
        self.raw: dict[int, dict] = {id(p): o for p, o in zip(self.pods, snap.pods, strict=True)}

    def raw_pod(self, pod: schema.Pod) -> dict:
        """The API object a pod was decoded from."""
        return self.raw[id(pod)]


def _raised(decoded: Any) -> Any:
    """A decoded object, or the InputError decoding it raised, raised again."""
    if isinstance(decoded, InputError):
        raise decoded
    return decoded


def _duplicate(obj: dict) -> InputError:
    return InputError(describe(obj), "metadata.name", "duplicate object in snapshot")


def _checked(obj: dict, namespaced: bool = False) -> dict:
    """The object, once its name and namespace (what it is filed under) are strings."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise InputError(describe(obj), "metadata.name", "missing")
    if namespaced and not meta.get("namespace"):
        meta["namespace"] = "default"  # as kubectl create would
    if not isinstance(meta.get("namespace", ""), str):
        raise InputError(describe(obj), "metadata.namespace", f"expected a string, got {shown(meta['namespace'])}")
    return obj


def _documents(text: str) -> list:
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            return [orjson.loads(text)]  # fast path for `-o json`; big snapshots parse 20x faster than YAML
        except orjson.JSONDecodeError:
            pass  # a JSON stream of several documents, or YAML flow style: the YAML parser reads both
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        docs = [d for d in yaml.load_all(text, Loader=loader) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError("snapshot", "", f"invalid YAML/JSON{where}: {problem}") from None
    except RecursionError:  # the pure-Python loader, where libyaml's nesting limit is missing
        raise InputError("snapshot", "", "invalid YAML/JSON: nested too deeply") from None
    if _ALIAS.search(text) and _expanded_size(docs, len(text) + ALIAS_ALLOWANCE) > len(text) + ALIAS_ALLOWANCE:
        raise InputError("snapshot", "", "YAML aliases expand the document to too many values")
    return docs


def _expanded_size(root: Any, limit: int) -> int:
    """How many values `root` holds once every alias is expanded, counted until it passes `limit` (a
    recursive alias counts as past it). Shared values are sized once, so this is linear in what was parsed."""
    size: dict[int, int] = {}
    open_: set[int] = set()  # containers whose size is being summed: meeting one again means a cycle
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        values = list(node.values()) if isinstance(node, dict) else node
        if children_done:
            open_.discard(key)
            size[key] = 1 + sum(size[id(v)] if isinstance(v, dict | list) else 1 for v in values)
            if size[key] > limit:
                return size[key]
            continue
        if key in size:
            continue
        if key in open_:
            return limit + 1
        open_.add(key)
        stack.append((node, True))
        stack.extend((v, False) for v in values if isinstance(v, dict | list) and id(v) not in size)
    return size[id(root)]


def parse(text: str) -> Snapshot:
    return of_documents(_documents(text))


def of_documents(documents: list) -> Snapshot:
    """The snapshot of decoded documents: objects, lists of them, or `kind: ...List` objects."""
    snap = Snapshot()
    for doc in documents:
        items = doc if isinstance(doc, list) else [doc]
        for obj in items:
            kind = obj.get("kind") if isinstance(obj, dict) else None
            if isinstance(kind, str) and kind.endswith("List") and "items" in obj:
                if not isinstance(obj["items"], list):
                    raise InputError("snapshot", "items", "expected a list")
                for item in obj["items"]:
                    snap.add(item)
                snap.taken_at = _taken_at(obj) or snap.taken_at
            else:
                snap.add(obj)
    snap.check_duplicates()
    return snap


def _taken_at(listing: dict) -> datetime | None:
    """The time `gangsolve export` wrote into the List it made (an annotation), if any."""
    meta = listing.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    stamp = annotations.get(TAKEN_AT_ANNOTATION) if isinstance(annotations, dict) else None
    if stamp is None:
        return None
    try:
        return schema.timestamp(stamp)
    except msgspec.ValidationError:
        raise InputError(
            "snapshot", f"metadata.annotations.{TAKEN_AT_ANNOTATION}", f"not an RFC 3339 time: {shown(stamp)}"
        ) from None


def read(source: str | IO[str]) -> Snapshot:
    """`source` is a path, `-` for standard input, or an open text stream."""
    try:
        if source == "-":
            return parse(sys.stdin.buffer.read().decode("utf-8"))
        if isinstance(source, str):
            try:
                with open(source, encoding="utf-8") as f:
                    return parse(f.read())
            except OSError as exc:
                raise InputError("snapshot", "", f"cannot read {source}: {exc.strerror}") from None
        return parse(source.read())
    except UnicodeError:
        raise InputError("snapshot", "", "not UTF-8 text") from None
