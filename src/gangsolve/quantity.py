"""Kubernetes resource quantities ("500m", "4Gi", "1e3") to integers in base units.

The official Python clients' parser lives in the synchronous `kubernetes` package only, so this is the small
grammar from k8s.io/apimachinery's resource.Quantity, kept strict: what the API server rejects, we reject.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_SUFFIX = {
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40, "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"),
    "T": Decimal("1e12"), "P": Decimal("1e15"), "E": Decimal("1e18"),
}  # fmt: skip
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$")


def parse_quantity(value: object) -> Decimal:
    if isinstance(value, bool):
        raise ValueError(f"quantity {value!r} does not parse")
    if isinstance(value, int | float):
        return Decimal(str(value))
    match = _QUANTITY.match(str(value).strip()) if isinstance(value, str) else None
    if not match:
        raise ValueError(f"quantity {value!r} does not parse")
    number, exponent, suffix = match.groups()
    try:
        if exponent:
            return Decimal(number + exponent)
        return Decimal(number) * _SUFFIX[suffix or ""]
    except InvalidOperation as exc:
        raise ValueError(f"quantity {value!r} does not parse") from exc


def to_units(resource: str, value: object) -> int:
    """Integer amount in the solver's unit: millicores for cpu, whole units (bytes, GPUs, pods) otherwise.
    Fractions round up, as the scheduler never hands out less than was asked for."""
    q = parse_quantity(value)
    if q < 0:
        raise ValueError(f"quantity {value!r} is negative")
    return math.ceil(q * 1000) if resource == "cpu" else math.ceil(q)
