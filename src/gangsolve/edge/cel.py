"""CEL device selectors of Dynamic Resource Allocation, evaluated with Google's CEL (cel-expr-python, C++).

The supported subset of Kubernetes' DRA CEL environment (resource.k8s.io/v1 CELDeviceSelector):
- the input `device`: `device.driver` (string), `device.attributes["<domain>"].<name>` (int, bool, string or
  version; attribute names without a domain belong to the driver's), `device.capacity["<domain>"].<name>`
  (a quantity), `device.allowMultipleAllocations` (bool); an unknown domain is an empty map, an unknown name an
  evaluation error, as in Kubernetes;
- standard CEL: operators, `has()`, macros (`all`, `exists`, `exists_one`, `map`, `filter`), `size`,
  `matches`, `startsWith`, `endsWith`, `contains`; the strings extension (`lowerAscii`, `split`, ...);
  optional types (`.?name`, `orValue`); `cel.bind`;
- quantities: `quantity("40Gi")`, and on quantities `compareTo`, `isGreaterThan`, `isLessThan`, `add`, `sub`,
  `sign`, `isInteger`, `asInteger`, `asApproximateFloat` (exact to a thousandth of a unit: `1n` reads as `1m`);
- versions: `semver("1.2.3")`, and on versions `compareTo`, `isGreaterThan`, `isLessThan`, `major`, `minor`,
  `patch`.
Anything else (Kubernetes' lists, regex, URL, IP/CIDR and format libraries, `includes()` of list attributes) is
not declared here: the expression does not compile and the pod using it is reported, never guessed at.

Quantities are integers of thousandths and versions are strings inside the evaluator, so an expression that
compares them with a plain number or string (which the API server's type check rejects at admission) is not
rejected here: it compares the representations.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings

from gangsolve.edge.quantity import parse_quantity

_T = cel.Type
_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)
# Domains an expression names literally, e.g. device.attributes["gpu.example.com"]: they are given as empty
# maps when a device has none, as Kubernetes returns an empty map for an unknown domain.
_DOMAIN = re.compile(r"""(?:attributes|capacity)\s*\[\s*(?:"([^"\\]*)"|'([^'\\]*)')\s*\]""")


class CelError(Exception):
    """An expression that does not compile, or whose evaluation fails or yields no bool."""


def quantity_milli(value: object) -> int:
    """A Kubernetes quantity as an integer number of thousandths (rounded up)."""
    return math.ceil(parse_quantity(value) * 1000)


def _quantity(text: str) -> int:
    return quantity_milli(text)


def _semver_key(version: str) -> tuple[Any, ...]:
    """Semantic Versioning 2.0 precedence: numbers, then a release above its pre-releases, then identifiers."""
    match = _SEMVER.match(version)
    if not match:
        raise ValueError(f"{version!r} is not a semantic version")
    major, minor, patch, pre, _build = match.groups()
    ids = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split(".")) if pre else ()
    return (int(major), int(minor), int(patch), not pre, ids)


def _semver(text: str) -> str:
    _semver_key(text)
    return text


def _compare(a: Any, b: Any) -> int:
    return (a > b) - (a < b)


def _version_compare(a: str, b: str) -> int:
    return _compare(_semver_key(a), _semver_key(b))


def _whole(milli: int) -> int:
    if milli % 1000:
        raise ValueError("quantity is not an integer")
    return milli // 1000


def _member(name: str, ret: Any, impl: Any, *params: Any) -> cel.Overload:
    return cel.Overload(f"{name}_{'_'.join(p.name() for p in params)}", ret, list(params), is_member=True, impl=impl)


def _declarations() -> list[cel.FunctionDecl]:
    i, s, b, d = _T.INT, _T.STRING, _T.BOOL, _T.DOUBLE
    q = {
        "compareTo": [_member("compareTo", i, _compare, i, i), _member("compareTo", i, _version_compare, s, s)],
        "isGreaterThan": [
            _member("isGreaterThan", b, lambda x, y: x > y, i, i),
            _member("isGreaterThan", b, lambda x, y: _version_compare(x, y) > 0, s, s),
        ],
        "isLessThan": [
            _member("isLessThan", b, lambda x, y: x < y, i, i),
            _member("isLessThan", b, lambda x, y: _version_compare(x, y) < 0, s, s),
        ],
        "add": [_member("add", i, lambda x, y: x + y, i, i)],
        "sub": [_member("sub", i, lambda x, y: x - y, i, i)],
        "sign": [_member("sign", i, lambda x: _compare(x, 0), i)],
        "isInteger": [_member("isInteger", b, lambda x: x % 1000 == 0, i)],
        "asInteger": [_member("asInteger", i, _whole, i)],
        "asApproximateFloat": [_member("asApproximateFloat", d, lambda x: x / 1000, i)],
        "major": [_member("major", i, lambda v: _semver_key(v)[0], s)],
        "minor": [_member("minor", i, lambda v: _semver_key(v)[1], s)],
        "patch": [_member("patch", i, lambda v: _semver_key(v)[2], s)],
    }
    decls = [cel.FunctionDecl(name, overloads) for name, overloads in q.items()]
    decls.append(cel.FunctionDecl("quantity", [cel.Overload("quantity_string", i, [s], impl=_quantity)]))
    decls.append(cel.FunctionDecl("semver", [cel.Overload("semver_string", s, [s], impl=_semver)]))
    return decls


@functools.cache
def _env() -> cel.Env:
    return cel.NewEnv(
        variables={"device": _T.DYN},
        functions=_declarations(),
        extensions=[ext_strings.ExtStrings(), ext_optional.ExtOptional(), ext_bindings.ExtBindings()],
    )


class Selector:
    """One compiled CEL device selector."""

    def __init__(self, expression: str) -> None:
        self.expression = expression
        try:
            self._program = _env().compile(expression)
        except RuntimeError as exc:
            raise CelError(_first_line(str(exc))) from None
        self._domains = {a or b for a, b in _DOMAIN.findall(expression)}

    def matches(self, device: Mapping[str, Any]) -> bool:
        """Whether the device (as `device_input` builds it) is selected; CelError when evaluation fails."""
        data = dict(device)
        for key in ("attributes", "capacity"):
            missing = self._domains - device[key].keys()
            if missing:
                data[key] = {**device[key], **{domain: {} for domain in missing}}
        result = self._program.eval(data={"device": data})
        if result.type() == _T.BOOL:
            return bool(result.value())
        if result.type() == _T.ERROR:
            raise CelError(_first_line(str(result.value())))
        raise CelError(f"evaluated to {result.type().name()}, not a bool")


_compiled: dict[str, Selector | CelError] = {}


def compile_selector(expression: str) -> Selector:
    """The selector, compiled once per expression (a bad one too: its error is kept); CelError when it does
    not compile."""
    got = _compiled.get(expression)
    if got is None:
        try:
            got = Selector(expression)
        except CelError as exc:
            got = exc
        if len(_compiled) >= 4096:  # expressions come from the cluster: keep the cache bounded
            _compiled.clear()
        _compiled[expression] = got
    if isinstance(got, CelError):
        raise got
    return got


def device_input(driver: str, device: Mapping[str, Any]) -> dict[str, Any]:
    """The CEL `device` of a ResourceSlice device: attributes and capacities grouped by domain (a name without
    one is in the driver's), attribute values unwrapped from their type field, capacities as thousandths."""
    attributes: dict[str, dict[str, Any]] = {}
    for name, value in (device.get("attributes") or {}).items():
        domain, _, short = name.rpartition("/")
        attributes.setdefault(domain or driver, {})[short] = attribute_value(value)
    capacity: dict[str, dict[str, int]] = {}
    for name, value in (device.get("capacity") or {}).items():
        domain, _, short = name.rpartition("/")
        capacity.setdefault(domain or driver, {})[short] = quantity_milli(value["value"])
    return {
        "driver": driver,
        "attributes": attributes,
        "capacity": capacity,
        "allowMultipleAllocations": bool(device.get("allowMultipleAllocations")),
    }


def attribute_value(value: Mapping[str, Any]) -> Any:
    """A DeviceAttribute's one value (int, bool, string or version; the list forms as lists)."""
    for field in ("int", "bool", "string", "version", "ints", "bools", "strings", "versions"):
        if value.get(field) is not None:
            return value[field]
    return None


def _first_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[0].strip() if lines else text
