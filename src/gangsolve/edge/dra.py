"""Dynamic Resource Allocation (resource.k8s.io/v1) at the edge: devices become capacity the solver understands.

Selectors are evaluated here, once per (request, device): a DeviceClass's selectors and a request's own, ANDed,
select a request's candidate devices. A *requirement* is what a request asks of a device (its class, its
selectors, its tolerations): requests with the same requirement share one resource. Then, per node:

- `dra/<requirement>`: devices reachable from the node that the requirement selects, those allocated by any
  claim already counted as used (as GPUs of running pods); a pod asking for `count` of them requests `count`.
  These resources count as GPUs in the objective (`Cluster.gpus`). Where the selected sets of several requirements
  overlap (a GPU class, and a request for its 80 GiB GPUs), every union of them is a resource too
  (`dra/a|b`: the free devices either selects), and a pod requests its count on each union its requirement is
  in. By Hall's theorem these sums are exactly the condition for the devices of the node to serve all the
  requests placed there, so the solver never overcommits them (up to 4 overlapping requirements; beyond, only
  each requirement's own count is modelled and the assignment after the solve is the exact check).
- `dra/<requirements> one <attribute> x<n>` for a matchAttribute constraint over requests of n devices in all:
  how many groups of n free devices sharing one value of the attribute the node holds (the sum over values of
  group size // n). The pod requests 1, so the solver places it only where some group can hold its claim;
  which group is chosen after the solve (the smallest that fits).
- `dra/<requirement> (All)` for allocationMode All: 1 when the node reaches at least one matching device and
  none of them is allocated.

Shared devices (`allowMultipleAllocations`, KEP-5075 consumable capacity) serve requests with capacity
requests, each its own requirement (class, selectors, tolerations and the amounts asked), with resources of
their own (gangsolve.edge.dra_capacity); a shared device with any share allocated counts as allocated for
requests without capacity requests. A request with capacity requests whose devices are none of them shared is
a request of whole devices with at least that much of each capacity (`Requirement.whole`), as Kubernetes reads
capacity requests there.

After the solve, gangsolve.solver.devices picks the devices, and takes off any pod whose claim could not be
met after all (only possible with the rules capacity expresses loosely: `All`, matchAttribute groups shared
with other requests, devices reachable from several nodes, shares of several sizes).

A pod is not planned, with the reason, while its claim (or the claim made from its template) does not exist,
or when a claim uses what gangsolve does not model: a selector that does not compile or fails on a device
(Kubernetes aborts the allocation then too), firstAvailable, adminAccess, distinctAttribute, capacity
requests with allocationMode All, capacity requests outside the requestPolicy (or above the capacity) of every
shared device selected, an unallocated claim shared by several pending pods. Devices that consume shared
counters (partitionable devices) are never allocated. A pod whose claims are all allocated already needs no devices;
it is held to the nodes the allocations name.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from itertools import combinations

import orjson

from gangsolve.edge import objects, schema
from gangsolve.edge.cel import CelError, compile_selector, device_input
from gangsolve.edge.dra_capacity import (
    PREFIX,
    add_shares,
    amount,
    capacities,
    consumed_capacity,
    readable,
    share_id,
)
from gangsolve.edge.errors import InputError
from gangsolve.edge.snapshot import Snapshot
from gangsolve.solver.constraints.affinity import affinity_holds
from gangsolve.solver.devices import (
    ALL,
    Claim,
    Device,
    DeviceId,
    DeviceState,
    MatchAttribute,
    Request,
    consumption,
    full,
)
from gangsolve.solver.model import SelectorTerm, Taint, Toleration

FINALIZER = "resource.kubernetes.io/delete-protection"  # what kube-scheduler adds before writing an allocation
MAX_HALL = 4  # overlapping requirements modelled by every union (2^4 - 1 resources); more: each on its own


@dataclass(frozen=True)
class Requirement:
    device_class: str
    selectors: tuple[str, ...]  # the request's own CEL expressions (the class's are looked up)
    tolerations: tuple[Toleration, ...] = ()
    capacity: tuple[tuple[str, Fraction], ...] = ()  # capacity requests: a share of a shared device
    # No device it selects allows multiple allocations: its capacity requests only filter whole devices (a device
    # with at least that much of each), as Kubernetes reads them.
    whole: bool = False

    @property
    def shares(self) -> bool:
        """It asks a share of a shared device."""
        return bool(self.capacity) and not self.whole


@dataclass
class Dra:
    """What DRA adds to one cycle's model."""

    capacity: dict[str, dict[str, int]] = field(default_factory=dict)  # node -> resource -> amount
    used: dict[str, dict[str, int]] = field(default_factory=dict)  # node -> resource -> allocated already
    gpus: frozenset[str] = frozenset()  # each requirement's own resource: its devices count as GPUs
    requests: dict[str, dict[str, int]] = field(default_factory=dict)  # pod -> resource -> amount
    terms: dict[str, tuple[tuple[SelectorTerm, ...], ...]] = field(default_factory=dict)  # pod -> node selectors
    problems: dict[str, str] = field(default_factory=dict)  # pending pod -> why it is not planned
    claims_of: dict[str, tuple[str, ...]] = field(default_factory=dict)  # pod -> every claim it uses (ns/name)
    state: DeviceState = field(default_factory=DeviceState)

    def affinity(self, pod: str, own: tuple[SelectorTerm, ...]) -> tuple[SelectorTerm, ...]:
        """The pod's required node affinity ANDed with the node selectors of its allocated claims."""
        out = own
        for terms in self.terms.get(pod, ()):
            if not terms:
                continue
            out = terms if not out else tuple(_both(a, b) for a in out for b in terms)
        return out


def _both(a: SelectorTerm, b: SelectorTerm) -> SelectorTerm:
    return SelectorTerm(a.match_expressions + b.match_expressions, a.match_fields + b.match_fields)


def model(snap: Snapshot, scheduler_name: str) -> Dra:
    """The DRA model of a snapshot, built once per snapshot and scheduler name. Raises InputError naming the
    first DRA object it cannot read."""
    key = ("dra", scheduler_name)
    if key not in snap.cache:
        snap.cache[key] = _Builder(snap, scheduler_name).build()
    dra = snap.cache[key]
    assert isinstance(dra, Dra)
    return dra


class _Builder:
    def __init__(self, snap: Snapshot, scheduler_name: str) -> None:
        self.snap = snap
        self.objs = snap.decoded(nodes=False)
        self.scheduler_name = scheduler_name
        self.devices: dict[DeviceId, Device] = {}
        self.inputs: dict[DeviceId, tuple[bytes, dict]] = {}  # CEL input and its content key (for memos)
        self.taints: dict[DeviceId, tuple[Taint, ...]] = {}
        self.candidates: dict[Requirement, frozenset[DeviceId] | str] = {}  # or why it has none
        # Of a requirement asking capacity: the shared devices that hold its share, or (whole) the devices with
        # that much.
        self.holding: dict[Requirement, frozenset[DeviceId]] = {}
        self.memo: dict[tuple[str, bytes], bool | str] = {}

    @cached_property
    def node_labels(self) -> dict[str, dict]:
        """The nodes' labels as given (the live store decoded the nodes as they came, and a cycle reads no
        more); read only when devices are: a cluster without them does not pay a pass over its nodes a cycle."""
        return {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in self.snap.nodes}

    def build(self) -> Dra:
        dra = Dra()
        pods = [p for p in self.objs.pods if p.spec.resourceClaims and p.pending_for(self.scheduler_name)]
        if not pods and not self.objs.resource_slices:
            return dra
        self._read_devices()
        allocated, consumed = self._allocated()
        users: dict[tuple[str, str], int] = defaultdict(int)
        resolved: dict[str, list[tuple[tuple[str, str], schema.ResourceClaim]]] = {}
        for p in pods:
            got = self._claims(p, dra)
            if got is not None:
                resolved[p.key] = got
                for key, _claim in got:
                    users[key] += 1
        claims: list[Claim] = []
        demands: dict[str, list[tuple[Requirement, int]]] = {}  # pod -> (requirement, count or ALL)
        constraints: dict[str, list[tuple[str, frozenset[Requirement], int]]] = {}
        for pod, got in resolved.items():
            try:
                made = self._pod(pod, got, users, dra)
            except _Problem as problem:
                dra.problems[pod] = str(problem)
                continue
            dra.claims_of[pod] = tuple(f"{ns}/{name}" for (ns, name), _c in got)
            for claim, needs, groups in made:
                claims.append(claim)
                demands.setdefault(pod, []).extend(needs)
                constraints.setdefault(pod, []).extend(groups)
        dra.state = DeviceState(self.devices, frozenset(allocated), tuple(claims), consumed)
        self._capacity(dra, allocated, demands, constraints)
        asking = sorted({r for needs in demands.values() for r, _c in needs if r.shares}, key=_order)
        if asking:
            selected = {r: c for r, c in self.candidates.items() if not isinstance(c, str) and not r.shares}
            add_shares(dra, self.devices, {**selected, **self.holding}, self.node_labels, consumed, demands, asking)
        return dra

    # -- devices ----------------------------------------------------------------------------------------

    def _read_devices(self) -> None:
        slices = list(zip(self.snap.resource_slices, self.objs.resource_slices, strict=True))
        newest: dict[tuple[str, str], int] = {}
        for _raw, sl in slices:
            of = (sl.spec.driver, sl.spec.pool.name)
            newest[of] = max(newest.get(of, 0), sl.spec.pool.generation)
        for raw, sl in sorted(slices, key=lambda pair: str(pair[1].metadata.name)):
            spec = sl.spec
            driver, pool = spec.driver, spec.pool.name
            if spec.pool.generation < newest[(driver, pool)]:
                continue  # an older generation of the pool: the driver is replacing it
            scope = None if spec.perDeviceNodeSelection else self._nodes(sl, "spec", spec)
            raw_devices = raw["spec"].get("devices") or []  # (CEL reads a device as given)
            for i, (raw_device, dev) in enumerate(zip(raw_devices, spec.devices or (), strict=True)):
                if dev.consumesCounters:
                    continue  # partitionable devices share counters gangsolve does not model
                ident = (driver, pool, dev.name)
                if ident in self.devices:
                    continue
                nodes = self._nodes(sl, f"spec.devices[{i}]", dev) if spec.perDeviceNodeSelection else scope
                try:
                    cel_input = device_input(driver, raw_device)
                except ValueError as exc:
                    raise InputError(sl.describe(), f"spec.devices[{i}].capacity", str(exc)) from None
                attributes = {
                    f"{dom}/{name}": v for dom, vs in cel_input["attributes"].items() for name, v in vs.items()
                }
                shared = bool(dev.allowMultipleAllocations)
                capacity = capacities(sl, i, dev)
                self.devices[ident] = Device(ident, nodes, attributes, shared, capacity)
                self.inputs[ident] = (orjson.dumps(cel_input, option=orjson.OPT_SORT_KEYS), cel_input)
                self.taints[ident] = tuple(
                    Taint(t.key, t.value or "", t.effect)
                    for t in dev.taints or ()
                    if t.effect in ("NoSchedule", "NoExecute")
                )

    def _nodes(
        self, sl: schema.ResourceSlice, where: str, spec: schema.ResourceSliceSpec | schema.Device
    ) -> frozenset[str] | None:
        """The nodes a slice's (or a device's) devices are reachable from; None for all nodes."""
        if spec.nodeName:
            return frozenset([spec.nodeName])
        if spec.allNodes:
            return None
        selector = spec.nodeSelector
        if selector is None:
            return frozenset()
        terms = objects.selector_terms(sl, f"{where}.nodeSelector.nodeSelectorTerms", selector.nodeSelectorTerms)
        return frozenset(n for n, labels in self.node_labels.items() if terms and affinity_holds(terms, n, labels))

    def _allocated(self) -> tuple[set[DeviceId], dict[DeviceId, dict[str, Fraction]]]:
        """Devices held by allocated claims, whoever allocated them (admin access holds none), and what the
        shares of shared devices consume (all of it where a result does not say)."""
        held: set[DeviceId] = set()
        consumed: dict[DeviceId, dict[str, Fraction]] = {}
        for claim in self.objs.resource_claims.values():
            for j, r in enumerate(_results(claim)):
                if r.adminAccess:
                    continue
                ident = (r.driver, r.pool, r.device)
                held.add(ident)
                device = self.devices.get(ident)
                if device is None or not device.shared:
                    continue
                took = full(device)
                if r.consumedCapacity is not None:
                    where = f"status.allocation.devices.results[{j}].consumedCapacity"
                    took = {n: amount(claim, f"{where}.{n}", q) for n, q in r.consumedCapacity.items()}
                mine = consumed.setdefault(ident, {})
                for name, q in took.items():
                    mine[name] = mine.get(name, Fraction(0)) + q
        return held, consumed

    # -- pods and their claims --------------------------------------------------------------------------

    def _claims(self, pod: schema.Pod, dra: Dra) -> list[tuple[tuple[str, str], schema.ResourceClaim]] | None:
        """The pod's claims, or None (with the pod's problem recorded) while one does not exist yet."""
        ns, key = str(pod.metadata.namespace), pod.key
        statuses = {s.name: s.resourceClaimName for s in pod.status.resourceClaimStatuses or ()}
        out = []
        for ref in pod.spec.resourceClaims or ():
            name = ref.resourceClaimName
            if not name and ref.resourceClaimTemplateName:
                if ref.name not in statuses:
                    template = ref.resourceClaimTemplateName
                    dra.problems[key] = f"waiting for the ResourceClaim of template {ns}/{template} to be created"
                    return None
                name = statuses[ref.name]
                if not name:
                    continue  # none was needed
            if not name:
                continue
            claim = self.objs.resource_claims.get((ns, name))
            if claim is None:
                dra.problems[key] = f"waiting for ResourceClaim {ns}/{name} to exist"
                return None
            if claim.metadata.deletionTimestamp:
                dra.problems[key] = f"ResourceClaim {ns}/{name} is being deleted"
                return None
            out.append(((ns, name), claim))
        return out

    def _pod(
        self,
        pod: str,
        got: list[tuple[tuple[str, str], schema.ResourceClaim]],
        users: Mapping[tuple[str, str], int],
        dra: Dra,
    ) -> list[tuple[Claim, list[tuple[Requirement, int]], list[tuple[str, frozenset[Requirement], int]]]]:
        made = []
        for (ns, name), claim in got:
            where = f"ResourceClaim {ns}/{name}"
            allocation = claim.status.allocation if claim.status is not None else None
            if allocation is not None:
                selector = allocation.nodeSelector
                if selector is not None and selector.nodeSelectorTerms is not None:
                    field_ = "status.allocation.nodeSelector.nodeSelectorTerms"
                    terms = objects.selector_terms(claim, field_, selector.nodeSelectorTerms)
                    dra.terms[pod] = (*dra.terms.get(pod, ()), terms)
                continue
            if users[(ns, name)] > 1:
                raise _Problem(f"{where} is shared by several pending pods and not allocated yet (not supported)")
            devices = (claim.spec.devices if claim.spec is not None else None) or schema.DeviceClaim()
            requests, needs, by_name = [], [], {}
            for k, r in enumerate(devices.requests or ()):
                requirement, count = self._request(where, r, claim, k)
                candidates = self._candidates(where, r.name, requirement)
                requests.append(
                    Request(r.name, candidates, count, dict(requirement.capacity if requirement.shares else ()))
                )
                needs.append((requirement, count))
                by_name[r.name] = (requirement, count)
            matches, groups = [], []
            for c in devices.constraints or ():
                if c.distinctAttribute:
                    raise _Problem(f"{where}: constraints: distinctAttribute is not supported")
                if not c.matchAttribute:
                    continue
                names = tuple(c.requests or ())
                matches.append(MatchAttribute(c.matchAttribute, names))
                bound = [by_name[n] for n in (names or by_name) if n in by_name]
                if bound and all(count != ALL and not r.shares for r, count in bound):  # (shares: after the solve)
                    groups.append((c.matchAttribute, frozenset(r for r, _c in bound), sum(c for _r, c in bound)))
            made.append((Claim(f"{ns}/{name}", pod, tuple(requests), tuple(matches)), needs, groups))
        return made

    def _request(
        self, where: str, r: schema.DeviceRequest, claim: schema.ResourceClaim, k: int
    ) -> tuple[Requirement, int]:
        exactly = r.exactly
        if r.firstAvailable is not None or exactly is None:
            raise _Problem(f"{where}: request {r.name}: firstAvailable is not supported")
        if exactly.adminAccess:
            raise _Problem(f"{where}: request {r.name}: adminAccess is not supported")
        asked = (exactly.capacity.requests if exactly.capacity is not None else None) or {}
        field_ = f"spec.devices.requests[{k}].exactly.capacity.requests"
        capacity = tuple(sorted((n, amount(claim, f"{field_}.{n}", q)) for n, q in asked.items()))
        mode = exactly.allocationMode or "ExactCount"
        if mode not in ("ExactCount", "All"):
            raise _Problem(f"{where}: request {r.name}: allocationMode {mode} is not supported")
        if capacity and mode == "All":
            raise _Problem(f"{where}: request {r.name}: allocationMode All with capacity requests is not supported")
        count = ALL if mode == "All" else exactly.count or 1
        selectors = _expressions(exactly.selectors)
        tolerations = tuple(
            Toleration(t.key or "", t.operator or "Equal", t.value or "", t.effect or "")
            for t in exactly.tolerations or ()
        )
        requirement = Requirement(exactly.deviceClassName, selectors, tolerations, capacity)
        if capacity and not self._selects_shared(requirement):
            requirement = Requirement(exactly.deviceClassName, selectors, tolerations, capacity, whole=True)
        return requirement, count

    def _selection(self, req: Requirement) -> frozenset[DeviceId] | str:
        if req not in self.candidates:
            self.candidates[req] = self._select(req)
        return self.candidates[req]

    def _selects_shared(self, req: Requirement) -> bool:
        """Some device the requirement selects allows multiple allocations (or its selection fails: reported
        then)."""
        got = self._selection(req)
        return isinstance(got, str) or any(self.devices[d].shared for d in got)

    def _candidates(self, where: str, request: str, req: Requirement) -> frozenset[DeviceId]:
        got = self._selection(req)
        if isinstance(got, str):
            raise _Problem(f"{where}: request {request}: {got}")
        if not req.capacity:
            return got
        asked = dict(req.capacity)
        if req.whole:  # a filter: the devices with at least that much of each capacity asked
            if req not in self.holding:
                self.holding[req] = frozenset(d for d in got if _at_least(self.devices[d], asked))
            return self.holding[req]
        # A share goes to shared devices that hold it; one no shared device it selects holds is not planned.
        shared = [d for d in got if self.devices[d].shared and all(n in self.devices[d].capacity for n in asked)]
        if req not in self.holding:
            self.holding[req] = frozenset(d for d in shared if consumption(self.devices[d], asked) is not None)
        fit = self.holding[req]
        if shared and not fit:
            wanted = ", ".join(f"{n}: {readable(q)}" for n, q in req.capacity)
            message = f"capacity {{{wanted}}} is outside the requestPolicy or above the capacity of every device"
            raise _Problem(f"{where}: request {request}: {message} it selects")
        return fit

    def _select(self, req: Requirement) -> frozenset[DeviceId] | str:
        device_class = self.objs.device_classes.get(req.device_class)
        if device_class is None:
            return f"DeviceClass {req.device_class} does not exist"
        own = _expressions(device_class.spec.selectors if device_class.spec is not None else None)
        compiled = []
        for origin, expression in [(f"DeviceClass {req.device_class}", e) for e in own] + [
            ("selector", e) for e in req.selectors
        ]:
            try:
                compiled.append((origin, compile_selector(expression)))
            except CelError as exc:
                return f"{origin}: CEL {expression!r} is not supported or does not compile: {exc}"
        out = []
        for ident, (content, cel_input) in self.inputs.items():
            if not all(_tolerated(req.tolerations, t) for t in self.taints[ident]):
                continue
            selected = True
            for origin, selector in compiled:
                memo = (selector.expression, content)
                hit = self.memo.get(memo)
                if hit is None:
                    try:
                        hit = selector.matches(cel_input)
                    except CelError as exc:
                        hit = f"{origin}: CEL {selector.expression!r} failed on device {'/'.join(ident)}: {exc}"
                    self.memo[memo] = hit
                if isinstance(hit, str):
                    return hit  # Kubernetes aborts the allocation on a runtime error too
                if not hit:
                    selected = False
                    break
            if selected:
                out.append(ident)
        return frozenset(out)

    # -- capacity ---------------------------------------------------------------------------------------

    def _capacity(
        self,
        dra: Dra,
        allocated: set[DeviceId],
        demands: Mapping[str, list[tuple[Requirement, int]]],
        constraints: Mapping[str, list[tuple[str, frozenset[Requirement], int]]],
    ) -> None:
        used = sorted({r for needs in demands.values() for r, _c in needs if not r.shares}, key=_order)
        if not used:
            return
        names = _names(used)
        cands: dict[Requirement, frozenset[DeviceId]] = {}
        for r in used:
            got = self.holding[r] if r in self.holding else self.candidates[r]  # (capacity asked: filtered)
            assert not isinstance(got, str)  # a requirement with a problem is in no pod's demands
            cands[r] = got
        # Requirements whose candidate sets overlap form one component: its unions are the Hall resources.
        parent = {r: r for r in used}

        def root(r: Requirement) -> Requirement:
            while parent[r] != r:
                parent[r] = parent[parent[r]]
                r = parent[r]
            return r

        member: dict[DeviceId, list[Requirement]] = defaultdict(list)
        for r in used:
            for d in cands[r]:
                member[d].append(r)
        for sharing in member.values():
            for other in sharing[1:]:
                parent[root(other)] = root(sharing[0])
        components: dict[Requirement, list[Requirement]] = defaultdict(list)
        for r in used:
            components[root(r)].append(r)
        unions: dict[Requirement, list[tuple[str, frozenset[Requirement]]]] = defaultdict(list)
        for comp in components.values():
            subsets: Iterable[tuple[Requirement, ...]]
            if len(comp) <= MAX_HALL:
                subsets = (s for k in range(1, len(comp) + 1) for s in combinations(comp, k))
            else:
                subsets = ((r,) for r in comp)
            for subset in subsets:
                resource = PREFIX + "|".join(names[r] for r in subset)
                for r in subset:
                    unions[r].append((resource, frozenset(subset)))
        for pod, needs in demands.items():
            want = dra.requests.setdefault(pod, {})
            for r, count in needs:
                if r.shares:
                    continue  # a share: dra_capacity
                if count == ALL:
                    resource = f"{PREFIX}{names[r]} (All)"
                    want[resource] = want.get(resource, 0) + 1
                    continue
                for union_name, _subset in unions[r]:
                    want[union_name] = want.get(union_name, 0) + count
            for attribute, rs, n in constraints.get(pod, []):
                group = _group_resource(names, attribute, rs, n)
                want[group] = want.get(group, 0) + 1

        # Per node: the devices reachable from it, by which requirements select them.
        everywhere = [d for d, dev in self.devices.items() if dev.nodes is None and d in member]
        local: dict[str, list[DeviceId]] = defaultdict(list)
        for d, dev in self.devices.items():
            if dev.nodes is not None and d in member:
                for name in dev.nodes:
                    local[name].append(d)
        all_modes = {r for needs in demands.values() for r, c in needs if c == ALL}
        groups = {(a, rs, n) for cs in constraints.values() for a, rs, n in cs}
        resources = {res: union for r in used for res, union in unions[r]}
        dra.gpus = frozenset(PREFIX + names[r] for r in used)
        for node in self.node_labels:
            reach = local.get(node, []) + everywhere
            cap = dra.capacity.setdefault(node, {})
            held = dra.used.setdefault(node, {})
            free = [d for d in reach if d not in allocated]
            for res, union in resources.items():
                # Devices held already are used capacity, as GPUs of running pods: the node is not empty.
                cap[res] = sum(1 for d in reach if any(r in union for r in member[d]))
                held[res] = cap[res] - sum(1 for d in free if any(r in union for r in member[d]))
            for r in all_modes:
                mine = [d for d in reach if r in member[d]]
                cap[f"{PREFIX}{names[r]} (All)"] = int(bool(mine) and not any(d in allocated for d in mine))
            for attribute, among, n in groups:
                sizes: dict[str, int] = defaultdict(int)
                for d in free:
                    value = self.devices[d].attributes.get(attribute)
                    if value is not None and any(r in among for r in member[d]):
                        sizes[repr(value)] += 1
                cap[_group_resource(names, attribute, among, n)] = sum(size // n for size in sizes.values())


def _at_least(device: Device, asked: Mapping[str, Fraction]) -> bool:
    """The device has at least the amount asked of each capacity."""
    return all(n in device.capacity and device.capacity[n].value >= q for n, q in asked.items())


class _Problem(Exception):
    """Why a pod's claims cannot be planned."""


def _results(claim: schema.ResourceClaim) -> list[schema.DeviceRequestAllocationResult]:
    allocation = claim.status.allocation if claim.status is not None else None
    devices = allocation.devices if allocation is not None else None
    return list(devices.results or ()) if devices is not None else []


def _expressions(selectors: list[schema.DeviceSelector] | None) -> tuple[str, ...]:
    """The CEL expressions of a class's or a request's selectors."""
    return tuple(s.cel.expression for s in selectors or () if s.cel is not None)


def _tolerated(tolerations: tuple[Toleration, ...], taint: Taint) -> bool:
    """resource.k8s.io/v1 DeviceToleration against a NoSchedule or NoExecute device taint."""
    for t in tolerations:
        if t.effect and t.effect != taint.effect:
            continue
        if t.key and t.key != taint.key:
            continue
        if t.operator == "Exists" or t.value == taint.value:
            return True
    return False


def _order(r: Requirement) -> tuple[str, tuple[str, ...], str, str, bool]:
    return (r.device_class, r.selectors, repr(r.tolerations), repr(r.capacity), r.whole)


def _names(used: list[Requirement]) -> dict[Requirement, str]:
    """Readable resource names: the class alone, `class#1`, `class#2`... for requests with selectors of their own."""
    out: dict[Requirement, str] = {}
    seen: dict[str, int] = defaultdict(int)
    for r in used:  # sorted: the plain class first
        if not r.selectors and not r.tolerations and not r.capacity:
            out[r] = r.device_class
        else:
            seen[r.device_class] += 1
            out[r] = f"{r.device_class}#{seen[r.device_class]}"
    return out


def _group_resource(names: Mapping[Requirement, str], attribute: str, rs: frozenset[Requirement], n: int) -> str:
    return f"{PREFIX}{'|'.join(sorted(names[r] for r in rs))} one {attribute} x{n}"


def allocation_result(
    claim: str, devices: Iterable[tuple[str, DeviceId]], node: str, state: DeviceState
) -> dict[str, object]:
    """A claim's `status.allocation` as kube-scheduler writes it: the devices, and the node selector of where
    they are (the node itself, unless every device is reachable from every node)."""
    devices = list(devices)
    results: list[dict[str, object]] = []
    for r, d in devices:
        result: dict[str, object] = {"request": r, "driver": d[0], "pool": d[1], "device": d[2]}
        consumed = consumed_capacity(claim, r, d, state)
        if consumed is not None:  # a share of a shared device (or all of it), named by a share ID of its own
            result["consumedCapacity"] = consumed
            result["shareID"] = share_id(claim, r, d)
        results.append(result)
    out: dict[str, object] = {"devices": {"results": results}}
    if any(state.devices[d].nodes is not None for _r, d in devices):
        out["nodeSelector"] = {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
        }
    return out
