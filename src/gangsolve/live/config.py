"""`gangsolve run`'s settings: defaults, then the YAML config file, then flags given on the command line.

The file's keys are the settings' names with dashes (`scheduler-name: gangsolve`); a setting that has a flag
has it under the same name. Anything wrong in the file is one line naming the key, e.g.
`config gangsolve.yaml: time-limit: expected a number > 0, got 'soon'`. docs/configuration.md is written from
this module (gangsolve.reference): every setting, what it must be, its default and its help.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from gangsolve.cycle import Rules
from gangsolve.edge.estimates import Estimator
from gangsolve.edge.gangs import DEFINITION_GRACE, STARVATION_FLOOR, STARVATION_SECONDS, Grace
from gangsolve.solver import SolveConfig
from gangsolve.solver.model import ORDERS


class ConfigError(ValueError):
    pass


def given_cores(cgroup: Path = Path("/sys/fs/cgroup/cpu.max")) -> int | None:
    """The cores this process was given: its cgroup's CPU limit (a pod's `limits.cpu`, rounded up), capped by its
    CPU affinity (exclusive cores, as the kubelet's static CPU manager gives); None when it has neither, only a
    share of the machine."""
    machine = os.cpu_count() or 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else machine  # (not on macOS)
    given = cores if cores < machine else None
    with contextlib.suppress(OSError, ValueError):
        quota, period = cgroup.read_text().split()[:2]
        if quota != "max":
            given = min(cores, max(1, math.ceil(int(quota) / int(period))))
    return given


def default_workers() -> int:
    """One CP-SAT worker per core given, less one for watching and binding; one where none were given."""
    return max(1, (given_cores() or 1) - 1)


def setting(default: Any = None, help: str = "", *, shown: str | None = None, factory: Any = None) -> Any:
    """One setting: its default, and its help for the configuration reference (`shown`: the default as the
    reference prints it, for a default made per process)."""
    metadata = {"help": help, "shown": shown}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Config:
    """Every setting of `gangsolve run` (docs/configuration.md is written from these fields)."""

    kubeconfig: str | None = setting(None, "kubeconfig file; none: in-cluster config, else `$KUBECONFIG`")
    scheduler_name: str = setting("gangsolve", "pods whose `spec.schedulerName` is this are ours")
    group_label: str | None = setting(None, "pods of a namespace sharing this label's value form one gang")
    time_limit: float = setting(SolveConfig.time_limit, "seconds for the whole cycle; the best plan by then is used")
    debounce: float = setting(
        0.2,
        "at most this long (seconds) to wait for the rest of a gang; a gang that has all its members is solved at once",
    )
    cycle_interval: float = setting(
        0.2,
        "at least this long (seconds) from one cycle's start to the next's: gangs that arrive in between are solved "
        "together, in fewer cycles (less CPU, binds up to this much later); 0: each gang as soon as it is complete",
    )
    resync_period: float = setting(
        30.0, "every waiting gang is solved again at least this often (seconds), changes or not"
    )
    definition_grace: float = setting(
        DEFINITION_GRACE,
        "seconds from their creation that pods which may still get a gang definition (a PodGroup or PDB created "
        "after them) wait for it (docs/gangs.md#late-gang-definitions); 0 turns it off",
    )
    training_kinds: tuple[str, ...] = setting(
        (), "owner kinds whose pods wait for a gang definition too, beside the known training jobs (a YAML list)"
    )
    preemption: bool = setting(
        True,
        "pending gangs that may preempt (`preemptionPolicy` not `Never`) evict lower-priority pods to fit; false "
        "turns preemption off cluster-wide (nominations already made are still honoured)",
    )
    starvation_age: float = setting(
        STARVATION_SECONDS,
        "seconds pending after which a gang outranks its priority peers and may hold a reservation "
        "(docs/planning.md); for a gang wider than the widest node, that node's share of it, at least "
        f"{STARVATION_FLOOR:g} (or the age, if shorter)",
    )
    queue_order: str = setting(
        SolveConfig.order,
        "how gangs of one priority and fair-share standing are ordered: expansion (the largest expansion factor "
        "first, (wait + runtime) / runtime, so a short job passes a long one only until it has waited its share; "
        "docs/planning.md) or arrival (first come first served)",
    )
    reservations: int = setting(
        SolveConfig.reservations,
        "pending gangs planned per cycle, queue order: each that cannot start holds a reservation at its expected "
        "start, which no gang started later delays (docs/planning.md); 0 turns the plan off",
    )
    plan_relaxation: float = setting(
        SolveConfig.plan_relaxation,
        "relaxed backfill: a gang's reservation is held no sooner than (1 + this) times its wait for room, and at "
        "most this times its runtime past it, so more gangs start now on its nodes (not while queues compete); 0 "
        "holds every reservation from its earliest start (docs/planning.md)",
    )
    solver_workers: int = setting(
        help="threads CP-SAT searches a cycle's placement on; by default one per core the pod is given (its CPU "
        "limit, or exclusive cores) less one for watching and binding, and 1 where it has only a CPU request",
        shown="cores given less one, at least 1",
        factory=default_workers,
    )
    solver_processes: int = setting(
        SolveConfig.parallel,
        "processes a cycle's node pools (pending gangs whose pods may use no node in common) are solved in at "
        "once, each pool on its own nodes; 1 solves every cycle whole. Measured, it pays from about 16,384 nodes: "
        "set it to the cores the pod is given there (docs/how-it-works.md#node-pools)",
    )
    preempt_min_runtime: float = setting(
        SolveConfig.preempt_min_runtime,
        "seconds a running pod must have run before a higher priority may preempt it; a Queue's "
        "`gangsolve.io/min-runtime` annotation overrides it for its pods (docs/queues.md)",
    )
    reclaim_min_runtime: float = setting(
        SolveConfig.reclaim_min_runtime,
        "seconds a running pod must have run before another queue may reclaim it for its fair share; a Queue's "
        "`gangsolve.io/min-runtime` annotation overrides it for its pods (docs/queues.md)",
    )
    usage_half_life: float = setting(
        0.0,
        "seconds: fair shares count each queue's past use, halved every this long (Slurm's "
        "PriorityDecayHalfLife); the history is kept on each Queue as annotation `gangsolve.io/usage`; 0: fair "
        "shares forget (docs/queues.md)",
    )
    workload_label: str | None = setting(
        None,
        "pods sharing this label's value are one workload for the runtime history; none: owner kind and name "
        "without generated suffixes",
    )
    default_runtime: float | None = setting(
        None,
        "seconds a gang (and a running pod of ours) is expected to run when it declares nothing and its workload "
        "has no history; a guess: the plan shows starts from it but holds none (docs/planning.md); none: such "
        "pods are never expected to end",
    )
    bind_concurrency: int = setting(
        64, "Binding calls in flight at once (each waits on the API server, not on us), and gangs being bound"
    )
    kube_api_qps: float = setting(
        50.0,
        "client-side rate limit on API requests, as kube-scheduler's `--kube-api-qps`; events and statuses "
        "have a limit of their own, the Lease none",
    )
    kube_api_burst: int = setting(100, "burst of that rate limit, as kube-scheduler's `--kube-api-burst`")
    shutdown_grace: float = setting(20.0, "at SIGTERM, seconds binds in flight get to finish before the process exits")
    leader_elect: bool = setting(False, "elect a leader on a Lease before scheduling")
    lease_name: str = setting("gangsolve", "the Lease's name")
    lease_namespace: str = setting("kube-system", "the Lease's namespace")
    lease_duration: int = setting(
        15, "whole seconds: the Lease's `leaseDurationSeconds`, as kube-scheduler's `--leader-elect-lease-duration`"
    )
    renew_deadline: float = setting(
        10.0, "seconds a leader's renewal stays valid; shorter than `lease-duration` (`--leader-elect-renew-deadline`)"
    )
    retry_period: float = setting(
        2.0, "seconds between tries to acquire or renew; shorter than `renew-deadline` (`--leader-elect-retry-period`)"
    )
    # Unique per process, like kube-scheduler's hostname_uuid: two replicas on one host never share it.
    identity: str = setting(
        help="this replica's name in the Lease and in events",
        shown="<hostname>_<8 random hex digits>",
        factory=lambda: f"{socket.gethostname()}_{secrets.token_hex(4)}",
    )
    metrics_addr: str = setting(
        "0.0.0.0:8080", "HOST:PORT for `/metrics`, `/healthz` and `/readyz`; empty turns it off"
    )
    plan_page: bool = setting(
        False,
        "also serve `/plan` (a read-only page of the plan: pending gangs, a Gantt chart of nodes, queue shares) and "
        "`/plan.json` on `metrics-addr` (docs/operating.md#the-page-of-the-plan)",
    )
    event_interval: float = setting(60.0, "an identical event about one pod at most this often (seconds)")
    events_per_second: float = setting(20.0, "all events but `Preempted` together at most this many per second")
    log_format: str = setting("text", "`text` (`msg key=value ...`) or `json` (one object a line)")
    log_level: str = setting("info", "the least severe log level written")

    @property
    def metrics_host_port(self) -> tuple[str, int] | None:
        if not self.metrics_addr:
            return None
        host, _, port = self.metrics_addr.rpartition(":")
        return host or "0.0.0.0", int(port)

    # The one mapping of settings to what a cycle reads, for `gangsolve run` and `gangsolve solve --config`.
    def rules(self) -> Rules:
        grace = Grace(self.definition_grace).with_kinds(self.training_kinds)
        return Rules(self.scheduler_name, self.group_label, grace, self.starvation_age, self.usage_half_life)

    def solve_config(self) -> SolveConfig:
        return SolveConfig(
            time_limit=self.time_limit,
            workers=self.solver_workers,
            parallel=self.solver_processes,
            preemption=self.preemption,
            reservations=self.reservations,
            plan_relaxation=self.plan_relaxation,
            order=self.queue_order,
            preempt_min_runtime=self.preempt_min_runtime,
            reclaim_min_runtime=self.reclaim_min_runtime,
        )

    def estimator(self) -> Estimator:
        return Estimator(default=self.default_runtime, label=self.workload_label)


# The settings a cycle reads (the rest are the live scheduler's own): `gangsolve solve --config` uses these.
CYCLE_SETTINGS = (
    "scheduler_name",
    "group_label",
    "time_limit",
    "definition_grace",
    "training_kinds",
    "preemption",
    "starvation_age",
    "queue_order",
    "reservations",
    "plan_relaxation",
    "solver_workers",
    "solver_processes",
    "preempt_min_runtime",
    "reclaim_min_runtime",
    "usage_half_life",
    "workload_label",
    "default_runtime",
)


SETTINGS = {f.name: f for f in fields(Config)}


def key_of(name: str) -> str:
    return name.replace("_", "-")


_CHOICES = {
    "log_format": ("text", "json"),
    "log_level": ("debug", "info", "warning", "error"),
    "queue_order": ORDERS,
}
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


def _kind(name: str) -> str:
    return str(SETTINGS[name].type).removesuffix(" | None")


def expected(name: str) -> str:
    """What a setting's value must be, in the words its errors and the configuration reference use."""
    kind = _kind(name)
    if kind == "tuple[str, ...]":
        return "a list of names"
    if kind == "bool":
        return "true or false"
    if kind == "int":
        return f"a whole number >= {0 if name in _MAY_BE_ZERO else 1}"
    if kind == "float":
        return "a number > 0" if name in _POSITIVE else "a number >= 0"
    if name in _CHOICES:
        return "one of " + ", ".join(_CHOICES[name])
    if name == "metrics_addr":
        return "HOST:PORT"
    if name == "scheduler_name":
        return "a non-empty string"
    return "a string"


def _check(name: str, value: Any, where: str) -> Any:
    kind = _kind(name)
    bad = ConfigError(f"{where}{key_of(name)}: expected {expected(name)}, got {value!r}")
    if value is None and "None" in str(SETTINGS[name].type):
        return None
    if kind == "tuple[str, ...]":
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v for v in value):
            raise bad
        return tuple(value)
    if kind == "bool":
        if not isinstance(value, bool):
            raise bad
    elif kind == "int":
        least = 0 if name in _MAY_BE_ZERO else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise bad
    elif kind == "float":
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or (name in _POSITIVE and value <= 0)
            or value < 0
        ):
            raise bad
        value = float(value)
    else:
        if not isinstance(value, str) or (name in _CHOICES and value not in _CHOICES[name]):
            raise bad
        if name == "metrics_addr" and value:
            _host, sep, port = value.rpartition(":")
            if not sep or not port.isdigit() or int(port) > 65535:
                raise bad
        if name == "scheduler_name" and not value:
            raise bad
    return value


def from_mapping(data: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    names = {key_of(name): name for name in SETTINGS}
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
