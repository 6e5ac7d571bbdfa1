"""Kubernetes resource quantities ("500m", "4Gi", "1e3") to integers in base units.

The official Python clients' parser lives in the synchronous `kubernetes` package only, so this is the small
grammar from k8s.io/apimachinery's resource.Quantity, kept strict: what the API server rejects, we reject. In pods
and nodes it holds extended resources (`nvidia.com/gpu`) to whole numbers, as the API server does.

The solver computes with int64 arrays and CP-SAT, whose linear sums must fit in int64. No quantity may exceed
MAX_UNITS base units (2**46: 64 Ti bytes of memory, about 70 billion cores in millicores, 7e13 GPUs), so a
sum of 100,000 of them (the largest cluster we support, in nodes or pods) stays below 2**63.
"""

from __future__ import annotations

import functools
import math
import re
from decimal import Decimal, DecimalException, Overflow

from gangsolve.edge.errors import shown

MAX_UNITS = 2**46
SUPPORTED_OBJECTS = 100_000  # MAX_UNITS * SUPPORTED_OBJECTS < 2**63

_SUFFIX = {
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40, "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"),
    "T": Decimal("1e12"), "P": Decimal("1e15"), "E": Decimal("1e18"),
}  # fmt: skip
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$")


def _unparsable(value: object) -> ValueError:
    return ValueError(f"quantity {shown(value)} does not parse")


def parse_quantity(value: object) -> Decimal:
    if isinstance(value, bool):
        raise _unparsable(value)
    if isinstance(value, int | float):
        q = Decimal(value) if isinstance(value, int) else Decimal(repr(value))
        if not q.is_finite():
            raise _unparsable(value)
        return q
    match = _QUANTITY.match(value.strip()) if isinstance(value, str) else None
    if not match:
        raise _unparsable(value)
    number, exponent, suffix = match.groups()
    try:
        if exponent:
            return Decimal(number + exponent)
        return Decimal(number) * _SUFFIX[suffix or ""]
    except Overflow:
        raise ValueError(f"quantity {shown(value)} is too large") from None
    except DecimalException:
        raise _unparsable(value) from None


HUGEPAGES = "hugepages-"  # hugepages-2Mi: memory in pages of that size


def native(resource: str) -> bool:
    """In the kubernetes.io/ namespace (cpu, memory, hugepages-2Mi): a name without a domain is."""
    return "/" not in resource or "kubernetes.io/" in resource


def overcommits(resource: str) -> bool:
    """A container's request may be below its limit: native resources but hugepages. The API server holds the
    others (extended resources, hugepages) to a request equal to the limit."""
    return native(resource) and not resource.startswith(HUGEPAGES)


def to_units(resource: str, value: object, *, whole: bool = True) -> int:
    """Integer amount in the solver's unit: millicores for cpu, whole units (bytes, GPUs, pods) otherwise.
    Fractions round up, as the scheduler never hands out less than was asked for. Raises ValueError for
    quantities that do not parse, are negative, or exceed MAX_UNITS, and (`whole`, as the API server validates
    pods and nodes) for pods or a resource outside kubernetes.io (`nvidia.com/gpu: 500m`) not in whole units.
    `whole=False` reads what a custom resource may hold (a Volcano Queue's capability)."""
    short = isinstance(value, str) and len(value) <= 64
    return _text_units(resource, value, whole) if short else _units(resource, value, whole)


@functools.lru_cache(maxsize=4096)  # a cluster's pods repeat a few quantities ("1", "4Gi") tens of thousands of times
def _text_units(resource: str, text: str, whole: bool) -> int:
    return _units(resource, text, whole)


def _units(resource: str, value: object, whole: bool) -> int:
    q = parse_quantity(value)
    if q < 0:
        raise ValueError(f"quantity {shown(value)} is negative")
    per_unit = 1000 if resource == "cpu" else 1
    if q > Decimal(MAX_UNITS) / per_unit:  # compared as a Decimal: 1e999999 must not become a huge int
        most = f"{MAX_UNITS} millicores" if resource == "cpu" else f"{MAX_UNITS}"
        raise ValueError(f"quantity {shown(value)} is above the most gangsolve represents ({most})")
    if (
        whole and (resource == "pods" or not native(resource)) and math.ceil(q * 1000) % 1000
    ):  # on milli-units, as the API server tests
        raise ValueError(f"invalid value {shown(value)}: must be an integer")
    return math.ceil(q * per_unit)


def whole_pages(resource: str, units: int) -> bool:
    """`units` bytes of `resource` (hugepages-2Mi) are a whole number of its pages, as the API server requires of
    a container's hugepages; a page size that does not parse holds no whole number."""
    try:
        page = parse_quantity(resource.removeprefix(HUGEPAGES))
    except ValueError:
        return False
    return page > 0 and page == page.to_integral_value() and units % int(page) == 0


_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Seconds in a Go duration (time.ParseDuration): an optional sign, then numbers with units, e.g.
    `1h30m`, `1.5h`, `300ms`; `0` alone is zero. Raises ValueError otherwise."""
    s = text.strip()
    sign = -1.0 if s.startswith("-") else 1.0
    s = s[1:] if s[:1] in "+-" else s
    if s == "0":
        return 0.0
    if not s:
        raise ValueError(f"invalid duration {text!r}")
    total, pos = 0.0, 0
    while pos < len(s):
        m = _DURATION.match(s, pos)
        if m is None or m.group(1) in ("", "."):
            raise ValueError(f"invalid duration {text!r}")
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    return sign * total
