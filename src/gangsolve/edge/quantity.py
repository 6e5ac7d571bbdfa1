"""Kubernetes resource quantities ("500m", "4Gi", "1e3") to integers in base units.

The official Python clients' parser lives in the synchronous `kubernetes` package only, so this is the small
grammar from k8s.io/apimachinery's resource.Quantity, kept strict: what the API server rejects, we reject.

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


def to_units(resource: str, value: object) -> int:
    """Integer amount in the solver's unit: millicores for cpu, whole units (bytes, GPUs, pods) otherwise.
    Fractions round up, as the scheduler never hands out less than was asked for. Raises ValueError for
    quantities that do not parse, are negative, or exceed MAX_UNITS."""
    short = isinstance(value, str) and len(value) <= 64
    return _text_units(resource, value) if short else _units(resource, value)


@functools.lru_cache(maxsize=4096)  # a cluster's pods repeat a few quantities ("1", "4Gi") tens of thousands of times
def _text_units(resource: str, text: str) -> int:
    return _units(resource, text)


def _units(resource: str, value: object) -> int:
    q = parse_quantity(value)
    if q < 0:
        raise ValueError(f"quantity {shown(value)} is negative")
    per_unit = 1000 if resource == "cpu" else 1
    if q > Decimal(MAX_UNITS) / per_unit:  # compared as a Decimal: 1e999999 must not become a huge int
        most = f"{MAX_UNITS} millicores" if resource == "cpu" else f"{MAX_UNITS}"
        raise ValueError(f"quantity {shown(value)} is above the most gangsolve represents ({most})")
    return math.ceil(q * per_unit)
