"""Devices of Dynamic Resource Allocation, after the solve: which devices each placed pod's claims get.

The edge turns devices into capacity the solver already understands (per node, how many free devices each
request's selectors match, and how many groups of one attribute value can hold a matchAttribute claim), so the
solver places gangs only where their devices exist. The concrete devices are chosen here, once the pods have
nodes: node by node in name order, pods in queue order, each claim's requests from the most constrained, each
taking the devices the fewest other pending requests of the node could use (then by name); a matchAttribute
claim tries the attribute's groups smallest first. Deterministic, so a replayed cycle allocates the same
devices.

Where capacity alone cannot express a rule exactly (requests whose selectors overlap in part, `All`, a
matchAttribute group shared with other requests, devices reachable from several nodes), the solve may place a
pod whose claim cannot be met: such a pod is taken off (its whole gang when the gang then falls below its
minimum), with the reason, and the gangs left are allocated again. No device is ever allocated twice.

Shared devices (KEP-5075 consumable capacity: `allowMultipleAllocations` with `capacity`) are modelled here,
not as the solver's GPU shares (solver/shares.py): DRA devices are picked by selectors, reached from nodes, and
carry several capacities of any unit, which the per-node milli-GPU model does not express. A request with
capacity requests (`Request.capacity`) takes a share of one shared device per count, consuming on each of the
device's capacities what Kubernetes would: the amount asked rounded up by the capacity's requestPolicy, the
policy's default or all of it where the request asks nothing (`consumption`). A shared device holds shares up to
every capacity, counting what allocated claims consume (`DeviceState.consumed`); a request without capacity
requests takes a shared device only while nothing holds any of it, and then all of it. Among the devices a share
fits, it takes the one it leaves least room on (best fit, against fragmentation), then the one the fewest other
pending requests of the node could use.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import cached_property, lru_cache
from math import ceil
from types import MappingProxyType

from gangsolve.solver.model import Cluster, Gang, GangResult, Placement

DeviceId = tuple[str, str, str]  # driver, pool, device name
ALL = 0  # Request.count for allocationMode All: every matching device of the node


@dataclass(frozen=True)
class Capacity:
    """One capacity of a shared device, and its requestPolicy (exact amounts: quantities may be fractional)."""

    value: Fraction
    default: Fraction | None = None  # consumed by a request that asks nothing of it (else all of it)
    min: Fraction | None = None  # validRange
    max: Fraction | None = None
    step: Fraction | None = None
    valid: tuple[Fraction, ...] = ()  # validValues, ascending

    def consumed(self, asked: Fraction | None) -> Fraction | None:
        """What a request asking `asked` (None: nothing) consumes of it, rounded up as Kubernetes does; None when
        the request is outside the policy."""
        if asked is None:
            return self.default if self.default is not None else self.value
        if self.min is not None:
            got = self.min if asked < self.min else asked
            if self.step and got > self.min:
                got = self.min + ceil((got - self.min) / self.step) * self.step
            return None if self.max is not None and got > self.max else got
        if self.valid:
            return next((v for v in self.valid if v >= asked), None)
        return asked


@dataclass(frozen=True)
class Device:
    id: DeviceId
    nodes: frozenset[str] | None = None  # nodes it is reachable from; None: every node
    attributes: Mapping[str, object] = field(default_factory=dict)  # qualified name -> value (matchAttribute)
    shared: bool = False  # allowMultipleAllocations
    capacity: Mapping[str, Capacity] = field(default_factory=dict)  # name -> capacity (shared only by a shared one)

    @cached_property
    def signature(self) -> tuple[tuple[str, Capacity], ...]:
        """Its capacities, as a key: devices alike consume alike."""
        return tuple(sorted(self.capacity.items()))

    def reachable(self, node: str) -> bool:
        return self.nodes is None or node in self.nodes


@dataclass(frozen=True)
class Request:
    name: str
    candidates: frozenset[DeviceId]  # devices its class's and its own selectors select, tolerated taints
    count: int = 1  # devices to allocate; ALL for allocationMode All
    capacity: Mapping[str, Fraction] = field(default_factory=dict)  # capacity requests: a share of each device


def consumption(device: Device, asked: Mapping[str, Fraction]) -> Mapping[str, Fraction] | None:
    """What a share asking `asked` consumes of each capacity of shared `device`, or None when the device cannot
    hold it: a capacity it does not have, a request outside a policy, or more than the capacity itself."""
    if not device.shared:
        return None
    return _consumption(device.signature, tuple(sorted(asked.items())))


@lru_cache(maxsize=65536)  # a cycle asks it of every (device, share) pair; devices are mostly alike
def _consumption(
    capacities: tuple[tuple[str, Capacity], ...], asked: tuple[tuple[str, Fraction], ...]
) -> Mapping[str, Fraction] | None:
    have = dict(capacities)
    if any(name not in have for name, _q in asked):
        return None
    wanted = dict(asked)
    out = {}
    for name, capacity in capacities:
        got = capacity.consumed(wanted.get(name))
        if got is None or got > capacity.value:
            return None
        out[name] = got
    return MappingProxyType(out)  # shared by every caller: read only


@dataclass(frozen=True)
class MatchAttribute:
    attribute: str  # qualified attribute name every device of these requests shares one value of
    requests: tuple[str, ...] = ()  # request names; empty: every request of the claim


@dataclass(frozen=True)
class Claim:
    name: str  # namespace/name
    pod: str  # the pending pod whose placement allocates it
    requests: tuple[Request, ...]
    constraints: tuple[MatchAttribute, ...] = ()


@dataclass(frozen=True)
class DeviceState:
    devices: Mapping[DeviceId, Device] = field(default_factory=dict)
    allocated: frozenset[DeviceId] = frozenset()  # held by claims allocated already, by anyone (shared or whole)
    claims: tuple[Claim, ...] = ()  # claims of pending pods, to allocate with their pods
    consumed: Mapping[DeviceId, Mapping[str, Fraction]] = field(default_factory=dict)  # of allocated shared ones

    @cached_property
    def _requests(self) -> dict[tuple[str, str], Request]:
        return {(c.name, r.name): r for c in self.claims for r in c.requests}

    def request(self, claim: str, name: str) -> Request:
        """A claim's request by name."""
        return self._requests[(claim, name)]

    def room(self, device: DeviceId, consumed: Mapping[DeviceId, Mapping[str, Fraction]]) -> dict[str, Fraction]:
        """What is left of each capacity of a shared device, given what is consumed of it."""
        held = consumed.get(device, {})
        return {name: c.value - held.get(name, Fraction(0)) for name, c in self.devices[device].capacity.items()}


# claim -> ((request, device), ...)
Allocations = Mapping[str, tuple[tuple[str, DeviceId], ...]]


def take_off(bindings: dict[str, str], gang: Gang, pod: str) -> None:
    """Unbind `pod`, and the rest of its gang when that no longer reaches the gang's need (all or nothing)."""
    bindings.pop(pod, None)
    left = [p.name for p in gang.pods if p.name in bindings]
    if left and len(left) < gang.need:
        for name in left:
            del bindings[name]


def allocate(cluster: Cluster, placement: Placement, state: DeviceState) -> tuple[Placement, Allocations]:
    """The placement less the pods whose claims could not be met (their gang too when it falls below its
    minimum), and the devices of every claim of the pods left."""
    if not state.claims:
        return placement, {}
    bindings = dict(placement.bindings)
    gang_of = {p.name: g for g in cluster.gangs for p in g.pods}
    dropped: dict[str, str] = {}  # gang -> why
    while True:
        allocations, failed = assign(state, bindings)
        if not failed:
            break
        for pod, why in sorted(failed.items()):
            gang = gang_of[pod]
            take_off(bindings, gang, pod)
            if not any(p.name in bindings for p in gang.pods):
                dropped.setdefault(gang.name, f"devices: {why}")
    if not dropped:
        return placement, allocations
    gangs = []
    for g, result in zip(cluster.gangs, placement.gangs, strict=True):
        count = sum(1 for p in g.pods if p.name in bindings)
        if count != result.placed_pods:
            reason = dropped.get(g.name, result.reason)
            ok = result.placed if g.need == 0 else count >= g.need
            result = GangResult(g.name, ok, result.min_member, result.pods, count, result.priority, reason)
        gangs.append(result)
    lost = sum(1 for before, after in zip(placement.gangs, gangs, strict=True) if before.placed and not after.placed)
    return replace(
        placement,
        bindings=bindings,
        gangs=tuple(gangs),
        objective=placement.objective - lost,
        status="FEASIBLE" if lost and placement.status == "OPTIMAL" else placement.status,
    ), allocations


Consumed = dict[DeviceId, dict[str, Fraction]]  # shared device -> capacity -> consumed


def assign(state: DeviceState, bindings: Mapping[str, str]) -> tuple[Allocations, dict[str, str]]:
    """Devices for every claim of a bound pod: (allocations, pod -> why its claim could not be met)."""
    by_node: dict[str, list[Claim]] = defaultdict(list)
    for claim in state.claims:
        if claim.pod in bindings:
            by_node[bindings[claim.pod]].append(claim)
    used = set(state.allocated)  # no request without capacity requests takes these
    consumed: Consumed = {d: dict(c) for d, c in state.consumed.items()}
    for d in used:  # a shared device held without saying how much: all of it
        if d in state.devices and state.devices[d].shared and d not in consumed:
            consumed[d] = full(state.devices[d])
    allocations: dict[str, tuple[tuple[str, DeviceId], ...]] = {}
    failed: dict[str, str] = {}
    everywhere = [d for d, dev in state.devices.items() if dev.nodes is None]
    local: dict[str, list[DeviceId]] = defaultdict(list)
    for d, dev in state.devices.items():
        for name in sorted(dev.nodes or ()):
            if name in by_node:
                local[name].append(d)
    for node in sorted(by_node):
        # Claims of whole devices first (they need untouched devices), then the rest in queue order. (Shares
        # largest first pack more of each device but strand more pods: measured on the OpenB trace's shares.)
        claims = sorted(by_node[node], key=lambda c: not any(not r.capacity for r in c.requests))
        reach = local[node] + everywhere
        free = {d for d in reach if d not in used}
        shared = {d for d in reach if state.devices[d].shared}
        demand: dict[DeviceId, int] = defaultdict(int)  # how many pending requests of the node could use it
        for claim in claims:
            for request in claim.requests:
                for d in request.candidates & (shared if request.capacity else free):
                    demand[d] += 1
        for claim in claims:
            got = _claim(claim, node, free, shared, state, demand, consumed)
            if got is None:
                failed[claim.pod] = f"claim {claim.name} cannot be met on {node}"
                continue
            allocations[claim.name] = got
            asked = {r.name: r.capacity for r in claim.requests}
            for name, d in got:
                device = state.devices[d]
                if device.shared:  # a share, or all of it for a request without capacity requests
                    took = consumption(device, asked[name]) if asked[name] else full(device)
                    assert took is not None
                    held = consumed.setdefault(d, {})
                    for capacity, amount in took.items():
                        held[capacity] = held.get(capacity, Fraction(0)) + amount
                free.discard(d)
                used.add(d)
    return allocations, failed


def full(device: Device) -> dict[str, Fraction]:
    """Every capacity of a device, all of it: what a request without capacity requests consumes of a shared one."""
    return {name: c.value for name, c in device.capacity.items()}


def _claim(
    claim: Claim,
    node: str,
    free: set[DeviceId],
    shared: set[DeviceId],
    state: DeviceState,
    demand: Mapping[DeviceId, int],
    consumed: Consumed,
) -> tuple[tuple[str, DeviceId], ...] | None:
    """One claim's devices, or None. Constraints are tried group by group (smallest group first)."""
    names = [r.name for r in claim.requests]

    def search(k: int, allowed: dict[str, set[DeviceId]]) -> tuple[tuple[str, DeviceId], ...] | None:
        if k == len(claim.constraints):
            return _requests(claim, node, allowed, state, demand, consumed)
        constraint = claim.constraints[k]
        bound = constraint.requests or tuple(names)
        values: dict[object, int] = defaultdict(int)
        for name in bound:
            for d in allowed[name]:
                if constraint.attribute in state.devices[d].attributes:
                    values[_key(state.devices[d].attributes[constraint.attribute])] += 1
        for value in sorted(values, key=lambda v: (values[v], repr(v))):
            narrowed = dict(allowed)
            for name in bound:
                narrowed[name] = {
                    d
                    for d in allowed[name]
                    if constraint.attribute in state.devices[d].attributes
                    and _key(state.devices[d].attributes[constraint.attribute]) == value
                }
            got = search(k + 1, narrowed)
            if got is not None:
                return got
        return None

    return search(0, {r.name: set(r.candidates & (shared if r.capacity else free)) for r in claim.requests})


def _key(value: object) -> object:
    return tuple(value) if isinstance(value, list) else value


def _requests(
    claim: Claim,
    node: str,
    allowed: Mapping[str, set[DeviceId]],
    state: DeviceState,
    demand: Mapping[DeviceId, int],
    consumed: Consumed,
) -> tuple[tuple[str, DeviceId], ...] | None:
    taken: set[DeviceId] = set()
    out: list[tuple[str, DeviceId]] = []
    for request in sorted(claim.requests, key=lambda r: (r.count == ALL, len(allowed[r.name]), r.name)):
        if request.count == ALL:
            # Every matching device of the node, none of them allocated already.
            every = {d for d in request.candidates if state.devices[d].reachable(node)}
            if not every or not every <= allowed[request.name] or every & taken:
                return None
            chosen = sorted(every)
        elif request.capacity:
            fits = {
                d: left
                for d in allowed[request.name] - taken
                if (left := _left(state, d, request, consumed)) is not None
            }
            if len(fits) < request.count:
                return None
            chosen = sorted(fits, key=lambda d: (fits[d], demand.get(d, 0), d))[: request.count]
        else:
            pool = sorted(allowed[request.name] - taken, key=lambda d: (demand.get(d, 0), d))
            if len(pool) < request.count:
                return None
            chosen = pool[: request.count]
        taken.update(chosen)
        out += [(request.name, d) for d in chosen]
    return tuple(sorted(out, key=lambda rd: (names_order(claim, rd[0]), rd[1])))


def _left(state: DeviceState, d: DeviceId, request: Request, consumed: Consumed) -> Fraction | None:
    """How much of shared device `d` a share for `request` would leave (its capacities' fractions summed), or
    None when the share does not fit."""
    device = state.devices[d]
    took = consumption(device, request.capacity)
    if took is None:
        return None
    room = state.room(d, consumed)
    if any(took[name] > room[name] for name in took):
        return None
    return sum(((room[n] - took[n]) / device.capacity[n].value for n in took if device.capacity[n].value), Fraction(0))


def names_order(claim: Claim, name: str) -> int:
    return next(i for i, r in enumerate(claim.requests) if r.name == name)
