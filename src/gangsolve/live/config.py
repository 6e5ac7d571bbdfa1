"""`gangsolve run`'s settings: defaults, then the YAML config file, then flags given on the command line.

The file's keys are the flag names without dashes in front (`scheduler-name: gangsolve`). Anything wrong in
it is one line naming the key, e.g. `config gangsolve.yaml: time-limit: expected a number > 0, got 'soon'`.
"""

from __future__ import annotations

import math
import secrets
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import yaml

from gangsolve.edge.gangs import DEFINITION_GRACE, STARVATION_SECONDS
from gangsolve.solver import SolveConfig


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Config:
    kubeconfig: str | None = None
    scheduler_name: str = "gangsolve"
    group_label: str | None = None
    time_limit: float = SolveConfig.time_limit  # seconds per solve
    debounce: float = 0.2  # at most this long to wait for the rest of a gang before a cycle
    resync_period: float = 30.0  # every waiting gang solved again at least this often, changes or not
    # Pods that may still get a gang definition (a PDB or PodGroup created after them) wait this long for it.
    definition_grace: float = DEFINITION_GRACE
    training_kinds: tuple[str, ...] = ()  # owner kinds whose pods wait too, beside the known training jobs
    # Pending gangs that may preempt (preemptionPolicy not Never) evict lower-priority pods to fit; false turns
    # preemption off cluster-wide (nominations already made are still honoured).
    preemption: bool = True
    # Planning in time: gangs pending this long outrank their priority peers and may hold a reservation
    # (`reservations` per cycle, 0: none) from running pods' expected ends; a gang's runtime is what it
    # declares, else the history of its workload (`workload-label`'s value, else owner kind and name), else
    # `default-runtime` seconds (None: no estimate; capacity it holds is never assumed to free up).
    starvation_age: float = STARVATION_SECONDS
    reservations: int = SolveConfig.reservations
    workload_label: str | None = None
    default_runtime: float | None = None
    bind_concurrency: int = 64  # Binding calls in flight: each waits on the API server, not on us
    kube_api_qps: float = 50.0  # client-side rate limit on API requests, as kube-scheduler's --kube-api-qps
    kube_api_burst: int = 100
    shutdown_grace: float = 20.0  # SIGTERM: seconds binds in flight get to finish before the process exits
    leader_elect: bool = False
    lease_name: str = "gangsolve"
    lease_namespace: str = "kube-system"
    lease_duration: int = 15  # whole seconds: the Lease's leaseDurationSeconds
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    # Unique per process, like kube-scheduler's hostname_uuid: two replicas on one host never share it.
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}_{secrets.token_hex(4)}")
    metrics_addr: str = "0.0.0.0:8080"  # /metrics, /healthz, /readyz; "" turns it off
    event_interval: float = 60.0  # an identical event about one pod at most this often
    events_per_second: float = 20.0
    log_format: str = "text"  # text | json
    log_level: str = "info"

    @property
    def metrics_host_port(self) -> tuple[str, int] | None:
        if not self.metrics_addr:
            return None
        host, _, port = self.metrics_addr.rpartition(":")
        return host or "0.0.0.0", int(port)


def key_of(name: str) -> str:
    return name.replace("_", "-")


_CHOICES = {"log_format": ("text", "json"), "log_level": ("debug", "info", "warning", "error")}
_POSITIVE = {
    "time_limit",
    "debounce",
    "resync_period",
    "bind_concurrency",
    "lease_duration",
    "renew_deadline",
    "retry_period",
    "event_interval",
    "events_per_second",
    "kube_api_qps",
    "shutdown_grace",
    "starvation_age",
    "default_runtime",
}
_MAY_BE_ZERO = {"reservations"}


def _check(name: str, value: Any, where: str) -> Any:
    f = {f.name: f for f in fields(Config)}[name]
    kind = str(f.type)
    key = key_of(name)

    def bad(expected: str) -> ConfigError:
        return ConfigError(f"{where}{key}: expected {expected}, got {value!r}")

    if value is None and "None" in kind:
        return None
    kind = kind.removesuffix(" | None")
    if kind == "tuple[str, ...]":
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v for v in value):
            raise bad("a list of names")
        return tuple(value)
    if kind == "bool":
        if not isinstance(value, bool):
            raise bad("true or false")
    elif kind == "int":
        least = 0 if name in _MAY_BE_ZERO else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise bad(f"a whole number >= {least}")
    elif kind == "float":
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or (name in _POSITIVE and value <= 0)
            or value < 0
        ):
            raise bad("a number > 0" if name in _POSITIVE else "a number >= 0")
        value = float(value)
    else:
        if not isinstance(value, str):
            raise bad("a string")
        if name in _CHOICES and value not in _CHOICES[name]:
            raise bad("one of " + ", ".join(_CHOICES[name]))
        if name == "metrics_addr" and value:
            _host, sep, port = value.rpartition(":")
            if not sep or not port.isdigit() or int(port) > 65535:
                raise bad("HOST:PORT")
        if name == "scheduler_name" and not value:
            raise bad("a non-empty string")
    return value


def from_mapping(data: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    names = {key_of(f.name): f.name for f in fields(Config)}
    out = {}
    for key, value in data.items():
        if key not in names:
            raise ConfigError(f"{where}{key}: unknown key (known: {', '.join(sorted(names))})")
        out[names[key]] = _check(names[key], value, where)
    return out


def load_file(path: str) -> dict[str, Any]:
    where = f"config {path}: "
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as exc:
        raise ConfigError(f"{where}cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{where}invalid YAML{at}: {getattr(exc, 'problem', None) or exc}") from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}expected a mapping of settings, got {type(data).__name__}")
    return from_mapping(data, where)


def build(file: str | None = None, flags: Mapping[str, Any] | None = None) -> Config:
    """Defaults < file < flags (only those given on the command line)."""
    values = load_file(file) if file else {}
    values.update(from_mapping({key_of(k): v for k, v in (flags or {}).items()}, "flag --"))
    cfg = replace(Config(), **values)
    if cfg.leader_elect:
        # As client-go checks them: the leader stops before a successor can start, and retries before then.
        if cfg.renew_deadline >= cfg.lease_duration:
            raise ConfigError("renew-deadline: must be shorter than lease-duration")
        if cfg.retry_period >= cfg.renew_deadline:
            raise ConfigError("retry-period: must be shorter than renew-deadline")
    return cfg
