"""Consumable capacity (KEP-5075) at the edge: devices that allow multiple allocations, shared by claims that ask
part of them, become capacity the solver understands (see gangsolve.edge.dra for the devices themselves).

Each kind of share (a requirement: class, selectors, tolerations and the amounts asked) gets, per node:

- `dra/<requirement> shares`: how many more such shares its devices hold, device by device (the floor of each
  capacity's room over what the share consumes, rounded up by the requestPolicy): exact for one size of share;
- `dra/<requirements> <capacity>`: the room of each capacity asked, summed over the devices of requirements
  whose devices overlap, so that shares of several sizes are counted together (in thousandths of the unit where
  the largest capacity allows, so fractional quantities count);
- `dra/<requirements> <capacity> cut <ε>`, for ε of 0.1 to 0.5: Fekete and Schepers' dual feasible function
  U_ε (a share above 1 - ε of the device weighs all of it, one below ε nothing, others their part), summed
  over the devices, a valid bound on what their shares weigh together: it sees that a 0.81 share leaves no room
  on its device for a 0.22 one, which the room summed does not (at ε = 0.5: one share above half per device).

A request of a whole device whose devices are all ones that shares of a group may take counts all of one
device in that group's summed room and cuts (it takes a device no share may then touch). Shares of several
sizes may still not pack device by device: gangsolve.solver.devices allocates them exactly
after the solve. Quantities are exact (fractions): what a share consumes is what the binder writes as the
allocation's `consumedCapacity`, and `over_capacity` is the binder's last check of it.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache
from itertools import combinations
from math import floor
from typing import TYPE_CHECKING

from gangsolve.edge import schema
from gangsolve.edge.errors import InputError, shown
from gangsolve.edge.quantity import MAX_UNITS, parse_quantity
from gangsolve.solver.devices import ALL, Capacity, Device, DeviceId, DeviceState, consumption, full

if TYPE_CHECKING:
    from gangsolve.edge.dra import Dra, Requirement

PREFIX = "dra/"  # resource names of device capacity, apart from any extended resource
MAX_SHARES = 1000  # shares counted on one device when a share consumes nothing of it
CUTS = (Fraction(1, 10), Fraction(2, 10), Fraction(3, 10), Fraction(4, 10), Fraction(1, 2))  # the ε of each cut
CUT_UNITS = 1000  # a device's weight in each cut


def add_shares(
    dra: Dra,
    devices: Mapping[DeviceId, Device],
    candidates: Mapping[Requirement, frozenset[DeviceId]],
    node_names: Iterable[str],
    consumed: Mapping[DeviceId, Mapping[str, Fraction]],
    demands: Mapping[str, list[tuple[Requirement, int]]],
    asking: list[Requirement],
) -> None:
    """The capacity of shared devices for `asking`, the requirements with capacity requests (in order), and what
    each pod of `demands` requests of it, added to `dra` (see the module docstring). `candidates`: the devices
    of each requirement of `demands` (of a share: those that hold it)."""
    numbered: dict[str, int] = defaultdict(int)
    names: dict[Requirement, str] = {}
    for r in asking:
        numbered[r.device_class] += 1
        names[r] = f"{r.device_class} share#{numbered[r.device_class]}"
    cands = {r: candidates[r] for r in asking}
    groups = _overlapping(asking, cands)  # requirement -> the requirements whose devices overlap its own
    union = {r: frozenset().union(*(cands[g] for g in groups[r])) for r in asking}
    scale = {r: _scale(devices[d] for d in union[r]) for r in asking}
    group_name = {r: "|".join(sorted(names[g] for g in groups[r])) for r in asking}
    need = {r: {d: _need(devices[d], r) for d in cands[r]} for r in asking}
    # One device of each kind: devices alike share one (cached) consumption, so its identity tells kinds apart.
    kinds = {r: list({id(need[r][d]): d for d in cands[r]}.values()) for r in asking}
    # What a share weighs in each cut: the least over the devices it may take (a bound stays a bound).
    weight = {
        r: {
            (n, eps): min((_cut(need[r][d][n], devices[d].capacity[n].value, eps) for d in kinds[r]), default=0)
            for n, _q in r.capacity
            for eps in CUTS
        }
        for r in asking
    }
    least = {
        r: {n: min((need[r][d][n] for d in kinds[r]), default=Fraction(0)) for n, _q in r.capacity} for r in asking
    }
    takes = _whole_devices(demands, candidates, devices, asking, union, scale, group_name)
    for pod, needs in demands.items():
        want = dra.requests.setdefault(pod, {})
        for r, count in needs:
            if not r.shares:
                for resource, amount_ in takes.get(r, {}).items():
                    want[resource] = want.get(resource, 0) + count * amount_
                continue
            slots = f"{PREFIX}{names[r]} shares"
            want[slots] = want.get(slots, 0) + count
            for name, _q in r.capacity:
                summed = f"{PREFIX}{group_name[r]} {name}"
                want[summed] = want.get(summed, 0) + count * floor(least[r][name] * scale[r])
            for (name, eps), w in weight[r].items():
                if w:
                    cut = _cut_name(group_name[r], name, eps)
                    want[cut] = want.get(cut, 0) + count * w
    everywhere = [d for d, dev in devices.items() if dev.nodes is None and dev.shared]
    local: dict[str, list[DeviceId]] = defaultdict(list)
    for d, dev in devices.items():
        if dev.nodes is not None and dev.shared:
            for name in dev.nodes:
                local[name].append(d)
    rooms = {d: _room(dev, consumed) for d, dev in devices.items() if dev.shared}
    for node in node_names:
        reach = local.get(node, []) + everywhere
        cap = dra.capacity.setdefault(node, {})
        held = dra.used.setdefault(node, {})
        for r in asking:
            slots = f"{PREFIX}{names[r]} shares"
            mine = [d for d in reach if d in cands[r]]
            cap[slots] = sum(_slots(full(devices[d]), need[r][d]) for d in mine)
            held[slots] = cap[slots] - sum(_slots(rooms[d], need[r][d]) for d in mine)
            for name, _q in r.capacity:
                around = [d for d in reach if d in union[r] and name in devices[d].capacity]
                summed = f"{PREFIX}{group_name[r]} {name}"
                if summed not in cap:
                    cap[summed] = sum(floor(devices[d].capacity[name].value * scale[r]) for d in around)
                    held[summed] = cap[summed] - sum(floor(max(rooms[d][name], Fraction(0)) * scale[r]) for d in around)
                for eps in CUTS:
                    cut = _cut_name(group_name[r], name, eps)
                    if cut not in cap:
                        cap[cut] = CUT_UNITS * len(around)
                        # (what a device holds already weighs as one share, rounded down: its room is never less)
                        held[cut] = sum(
                            _cut(devices[d].capacity[name].value - rooms[d][name], devices[d].capacity[name].value, eps)
                            for d in around
                        )


@lru_cache(maxsize=65536)  # asked of every (share, device) pair: few distinct amounts in a cluster
def _cut(amount: Fraction, value: Fraction, eps: Fraction) -> int:
    """Fekete and Schepers' dual feasible function U_ε of `amount` of a capacity `value`, in CUT_UNITS rounded
    down: all of it above 1 - ε of the device, nothing below ε, else its own part. Whatever shares one device
    holds, theirs sum to at most all of it (what it holds already counted as one more share): a share above
    1 - ε leaves room only for shares below ε, which weigh nothing."""
    if value <= 0:
        return 0
    part = amount / value
    weighed = Fraction(1) if part > 1 - eps else Fraction(0) if part < eps else part
    return floor(weighed * CUT_UNITS)


def _cut_name(group: str, capacity: str, eps: Fraction) -> str:
    return f"{PREFIX}{group} {capacity} cut {float(eps):g}"


def _whole_devices(
    demands: Mapping[str, list[tuple[Requirement, int]]],
    candidates: Mapping[Requirement, frozenset[DeviceId]],
    devices: Mapping[DeviceId, Device],
    asking: list[Requirement],
    union: Mapping[Requirement, frozenset[DeviceId]],
    scale: Mapping[Requirement, int],
    group_name: Mapping[Requirement, str],
) -> dict[Requirement, dict[str, int]]:
    """What a request of one whole device counts in the resources of shares: where every device it may take is
    one that shares of a group may take, all of one of them (the least such device's capacity summed, all of
    a device in each cut); elsewhere nothing (it may take a device no share takes)."""
    out: dict[Requirement, dict[str, int]] = {}
    for w in {r for needs in demands.values() for r, c in needs if not r.shares and c != ALL}:
        mine = candidates.get(w, frozenset())
        for r in asking:
            if not mine or not mine <= union[r]:
                continue
            for name, _q in r.capacity:
                if all(name in devices[d].capacity for d in mine):
                    least = min(devices[d].capacity[name].value for d in mine)
                    takes = out.setdefault(w, {})
                    takes[f"{PREFIX}{group_name[r]} {name}"] = floor(least * scale[r])
                    takes.update({_cut_name(group_name[r], name, eps): CUT_UNITS for eps in CUTS})
    return out


def _overlapping(asking: list[Requirement], cands: Mapping[Requirement, frozenset[DeviceId]]) -> dict:
    """Each requirement's group: the requirements whose candidate devices overlap its own, transitively."""
    groups: dict[Requirement, set[Requirement]] = {r: {r} for r in asking}
    for a, b in combinations(asking, 2):
        if cands[a] & cands[b] and groups[a] is not groups[b]:
            merged = groups[a] | groups[b]
            for r in merged:
                groups[r] = merged
    return {r: frozenset(g) for r, g in groups.items()}


def _scale(devices: Iterable[Device]) -> int:
    """Units per capacity unit in the summed resources: thousandths where the largest capacity allows."""
    largest = max((c.value for dev in devices for c in dev.capacity.values()), default=Fraction(0))
    return 1000 if largest * 1000 <= MAX_UNITS // 1000 else 1


def _need(device: Device, r: Requirement) -> Mapping[str, Fraction]:
    got = consumption(device, dict(r.capacity))
    assert got is not None  # candidates hold the share
    return got


def _room(device: Device, consumed: Mapping[DeviceId, Mapping[str, Fraction]]) -> dict[str, Fraction]:
    held = consumed.get(device.id, {})
    return {n: c.value - held.get(n, Fraction(0)) for n, c in device.capacity.items()}


def _slots(room: Mapping[str, Fraction], need: Mapping[str, Fraction]) -> int:
    """How many shares consuming `need` fit in `room`."""
    return min((max(floor(room[n] / q), 0) if q else MAX_SHARES for n, q in need.items()), default=MAX_SHARES)


def amount(obj: schema.Object, where: str, value: object) -> Fraction:
    """A quantity of device capacity, exactly (quantities may be fractional); InputError when it does not parse
    or is negative."""
    try:
        got = Fraction(parse_quantity(value))
    except ValueError as exc:
        raise InputError(obj.describe(), where, str(exc)) from None
    if got < 0 or got > MAX_UNITS:
        raise InputError(obj.describe(), where, f"expected a quantity from 0 to {MAX_UNITS}, got {shown(value)}")
    return got


def capacities(sl: schema.ResourceSlice, i: int, dev: schema.Device) -> dict[str, Capacity]:
    """A shared device's capacities and their requestPolicy."""
    out = {}
    for name, c in (dev.capacity or {}).items():
        where = f"spec.devices[{i}].capacity.{name}"
        value = amount(sl, f"{where}.value", c.value)
        policy = c.requestPolicy
        if policy is None:
            out[name] = Capacity(value)
            continue
        here = f"{where}.requestPolicy"
        default = None if policy.default is None else amount(sl, f"{here}.default", policy.default)
        valid = tuple(amount(sl, f"{here}.validValues[{k}]", q) for k, q in enumerate(policy.validValues or ()))
        if list(valid) != sorted(set(valid)):
            raise InputError(sl.describe(), f"{here}.validValues", "expected values in ascending order")
        bounds = policy.validRange
        if bounds is None:
            out[name] = Capacity(value, default, valid=valid)
            continue
        low = amount(sl, f"{here}.validRange.min", bounds.min)
        high = None if bounds.max is None else amount(sl, f"{here}.validRange.max", bounds.max)
        step = None if bounds.step is None else amount(sl, f"{here}.validRange.step", bounds.step)
        if high is not None and high < low:
            raise InputError(sl.describe(), f"{here}.validRange.max", "expected a maximum at least the minimum")
        out[name] = Capacity(value, default, low, high, step or None, valid)
    return out


def quantity(amount: Fraction) -> str:
    """An exact amount as a quantity (a decimal: quantities read are decimals, and rounding keeps them so)."""
    if amount.denominator == 1:
        return str(amount.numerator)
    text = format(Decimal(amount.numerator) / Decimal(amount.denominator), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def readable(amount: Fraction) -> str:
    """An amount for people: in the largest binary unit it is a whole number of (`100Gi`), else as a quantity."""
    for power, suffix in ((60, "Ei"), (50, "Pi"), (40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki")):
        if amount >= 2**power and (amount / 2**power).denominator == 1:
            return f"{amount / 2**power}{suffix}"
    return quantity(amount)


def consumed_capacity(
    claim: str, request: str, device: DeviceId, state: DeviceState, *, show: Callable[[Fraction], str] = quantity
) -> dict[str, str] | None:
    """What a claim's request allocated on `device` consumes of it, as quantities (or as `show` writes them):
    None unless it is shared; all of it for a request without capacity requests."""
    shared = state.devices[device]
    if not shared.shared:
        return None
    asked = state.request(claim, request).capacity
    took = consumption(shared, asked) if asked else full(shared)
    assert took is not None  # the assignment gave it only a device that holds it
    return {n: show(q) for n, q in sorted(took.items())}


def over_capacity(
    shares: Mapping[DeviceId, Sequence[Mapping[str, object]]], device_capacities: Mapping[DeviceId, Mapping]
) -> str | None:
    """Why the shares held of shared devices (each share's `consumedCapacity`) do not fit their capacities (as
    given in their ResourceSlice), or None when every device holds its shares."""
    for device, held in sorted(shares.items()):
        name = "/".join(device)
        if device not in device_capacities:
            return f"device {name} holds shares and allows no multiple allocations (or is gone)"
        for capacity, spec in sorted(device_capacities[device].items()):
            try:
                total = sum((Fraction(parse_quantity(c.get(capacity, 0))) for c in held), Fraction(0))
                value = Fraction(parse_quantity((spec or {}).get("value")))
            except (ValueError, TypeError, AttributeError):
                return f"device {name}: its {capacity} or a share of it does not parse"
            if total > value:
                return f"device {name}: its shares consume {quantity(total)} of {capacity}, above its {spec['value']}"
    return None


def share_id(claim: str, request: str, device: DeviceId) -> str:
    """The `shareID` of a claim's share of a device: a UUID, the same for the same allocation."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{claim}/{request}/{'/'.join(device)}"))
