"""What a live run measures: when each pending pod was bound and Running (a watch), the scheduler process's CPU
and memory, its API requests (the audit log), and from those the run's summary."""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from gangsolve.bench import manifests, placement_metrics
from gangsolve.bench.devcluster import ControlPlane
from gangsolve.bench.devcluster.controlplane import tls_context
from gangsolve.bench.live.live_scenarios import LiveScenario
from gangsolve.bench.live.populate import PENDING_LABEL, SCHEDULER_USER, Arrival, list_pods
from gangsolve.solver import Cluster

# The API server logs every request of the scheduler under test (and nothing else) for the request count.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata", "users": [SCHEDULER_USER]}, {"level": "None"}],
}


class BindWatch(threading.Thread):
    """Watches the pending pods (by label) and records, per pod, when it was first seen bound and Running
    (time.monotonic()), the start time the API shows for it, and when it was seen deleted."""

    def __init__(self, cp: ControlPlane, resource_version: str) -> None:
        super().__init__(daemon=True, name="bind-watch")
        self.cp = cp
        self.rv = resource_version
        self.ctx = tls_context(cp.ca.cert, cp.admin_cert)
        self.bound: dict[str, tuple[float, str]] = {}  # pod -> (when, node)
        self.running: dict[str, float] = {}
        # pod -> its status.startTime (seconds since the epoch, to the second), where a timeline's jobs count
        # their runtime from, as the schedulers read it
        self.started: dict[str, float] = {}
        # pod -> when its deletion was seen, or it was seen deleted and stopped (a timeline's evictions)
        self.gone: dict[str, float] = {}
        self.last_change = time.monotonic()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.errors = 0

    def _see(self, pod: dict) -> None:
        name = pod["metadata"]["name"]
        node = pod.get("spec", {}).get("nodeName")
        now = time.monotonic()
        phase = pod.get("status", {}).get("phase")
        with self.lock:
            if pod["metadata"].get("deletionTimestamp") and phase in ("Failed", "Succeeded"):
                # Deleted and stopped, kept only by a finalizer (Kueue's): gone, its node's room free again.
                self.gone.setdefault(name, now)
            if node and name not in self.bound:
                self.bound[name] = (now, node)
                self.last_change = now
            if phase == "Running" and name not in self.running:
                self.running[name] = now
                self.last_change = now
                stamp = pod["status"].get("startTime")
                self.started[name] = datetime.fromisoformat(stamp).timestamp() if stamp else time.time()

    def _relist(self) -> None:
        listing = list_pods(self.cp, f"?labelSelector={PENDING_LABEL}%3Dtrue")
        for pod in listing["items"]:
            self._see(pod)
        self.rv = listing["metadata"]["resourceVersion"]

    def catch_up(self) -> bool:
        """List the pods once: whether that shows a binding or a start the watch had not delivered yet."""
        with self.lock:
            seen = len(self.bound) + len(self.running)
        with contextlib.suppress(Exception):  # the API server is busy: the watch stays the only source
            self._relist()
        with self.lock:
            return len(self.bound) + len(self.running) > seen

    def run(self) -> None:
        while not self.stop.is_set():
            url = (
                f"{self.cp.server}/api/v1/namespaces/{manifests.NAMESPACE}/pods?watch=1&allowWatchBookmarks=true"
                f"&labelSelector={PENDING_LABEL}%3Dtrue&resourceVersion={self.rv}&timeoutSeconds=5"
            )
            try:
                with urllib.request.urlopen(url, timeout=15, context=self.ctx) as resp:
                    for line in resp:
                        event = json.loads(line)
                        obj = event.get("object", {})
                        if event.get("type") == "ERROR":  # 410 Gone: list again
                            self._relist()
                            break
                        self.rv = obj.get("metadata", {}).get("resourceVersion", self.rv)
                        if event.get("type") in ("ADDED", "MODIFIED"):
                            self._see(obj)
                        elif event.get("type") == "DELETED":
                            with self.lock:
                                self.gone.setdefault(obj["metadata"]["name"], time.monotonic())
                        if self.stop.is_set():
                            break
            except (urllib.error.URLError, OSError, ValueError):
                self.errors += 1
                time.sleep(0.2)
                with contextlib.suppress(Exception):  # the apiserver is busy: try the watch again
                    self._relist()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, and of the children it has waited for (gangsolve's
    processes for node pools: a scheduler's CPU is its whole tree's)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float | None:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return None


def decision_times(exposition: str, family: str, unit: float = 1.0) -> dict[str, Any] | None:
    """A scheduler's own histogram of its decisions (gangsolve's cycles, kube-scheduler's scheduling algorithm)
    from its /metrics text: how many, their mean and total, and the smallest bucket bound that holds 99% of them
    (None when that is the +Inf bucket), in seconds (`unit`: seconds per the metric's unit). Label sets are added
    up. None when the family is not there or counted nothing."""
    count = total = 0.0
    buckets: dict[float, float] = {}
    for metric in text_string_to_metric_families(exposition):
        if metric.name != family or metric.type != "histogram":
            continue
        for sample in metric.samples:
            if sample.name == family + "_count":
                count += sample.value
            elif sample.name == family + "_sum":
                total += sample.value
            elif sample.name == family + "_bucket":
                bound = float(sample.labels["le"])
                buckets[bound] = buckets.get(bound, 0.0) + sample.value
    if count <= 0:
        return None
    p99 = next((le for le in sorted(buckets) if buckets[le] >= 0.99 * count), math.inf)
    return {
        "metric": family,
        "count": int(count),
        "mean_seconds": total / count * unit,
        "p99_at_most_seconds": None if math.isinf(p99) else p99 * unit,
        "total_seconds": total * unit,
        "open_seconds": 0.0,
    }


def session_times(
    source: str, marks: Iterable[tuple[datetime, str, bool]], until: datetime | None = None
) -> dict[str, Any] | None:
    """The same figures from a scheduler's log, as (time, session id, opened) marks in log order: sessions that
    closed (their p99 exact), and how long one still open at the end had been open (`open_seconds`; a scheduler
    that binds inside its session may spend a whole burst in one). The end is `until` (the log's last line),
    else the last mark. None when no session opened."""
    opened: dict[str, datetime] = {}
    took: list[float] = []
    last = None
    for at, session, opens in marks:
        last = at
        if opens:
            opened[session] = at
        elif session in opened:
            took.append((at - opened.pop(session)).total_seconds())
    if last is None or not (took or opened):
        return None
    end = max(last, until or last)
    still = max(((end - at).total_seconds() for at in opened.values()), default=0.0)
    took.sort()
    return {
        "metric": source,
        "count": len(took),
        "mean_seconds": sum(took) / len(took) if took else None,
        "p99_at_most_seconds": took[math.ceil(0.99 * len(took)) - 1] if took else None,
        "total_seconds": sum(took) + still,
        "open_seconds": still,
    }


def api_requests(cp: ControlPlane, since: datetime) -> dict[str, int]:
    """The scheduler's API requests received since `since`, from the audit log: `verb resource` -> count."""
    seen: set[str] = set()
    out: dict[str, int] = {}
    for event in cp.audit_events():
        if event.get("user", {}).get("username") != SCHEDULER_USER or event["auditID"] in seen:
            continue
        received = datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))
        if received < since:
            continue
        seen.add(event["auditID"])
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", event.get("requestURI", "?"))
        if ref.get("subresource"):
            resource += "/" + ref["subresource"]
        key = f"{event['verb']} {resource}"
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


@dataclass
class Timing:
    t0: float  # monotonic: the first create (stream) or the scheduler's start (burst)
    created: dict[str, float] = field(default_factory=dict)  # pod name -> monotonic
    cpu_start: float = 0.0  # the scheduler's CPU seconds at t0


def summarize(
    scenario: LiveScenario,
    scheduler: str,
    cluster: Cluster,
    gangs: list[Arrival],
    final: dict[str, str],
    watch: BindWatch,
    timing: Timing,
    gs_metrics: dict[str, float],
    *,
    timed_out: bool,
    time_limit: float | None,
    timeline: dict | None = None,
) -> dict:
    """The run's figures. A timeline's (`timeline`: live_timeline.measure's) replace the placement's: its final
    bindings are every job's over time, not one placement."""
    quality = placement_metrics.quality(cluster, final) if timeline is None else {"timeline": timeline}
    need = {g.name: g.need for g in cluster.gangs}
    t0 = timing.t0

    bind_times = sorted(t - t0 for t, _node in watch.bound.values())
    create_times = sorted(t - t0 for t in timing.created.values())
    last_bind = bind_times[-1] if bind_times else None
    latencies: list[float] = []  # per complete gang: last member created -> its minimum bound
    complete_pods: list[str] = []
    for gang in gangs:
        names = [p["metadata"]["name"] for p in gang.pods]
        bound = sorted(watch.bound[n][0] for n in names if f"{manifests.NAMESPACE}/{n}" in final and n in watch.bound)
        if len(bound) < max(need[gang.gang], 1):
            continue
        complete_pods += [n for n in names if f"{manifests.NAMESPACE}/{n}" in final]
        made = [timing.created[n] for n in names if n in timing.created]
        if made and scenario.mode == "stream":
            latencies.append(max(0.0, bound[max(need[gang.gang], 1) - 1] - max(made)))
    runs = [watch.running.get(n) for n in complete_pods]
    running = [t for t in runs if t is not None]
    all_running = max(running) - t0 if running and len(running) == len(runs) else None
    out: dict[str, Any] = {
        "scheduler": scheduler,
        "mode": scenario.mode,
        "time_limit": time_limit,
        "pending_pods": sum(len(g.pods) for g in gangs),
        "first_bind_seconds": bind_times[0] if bind_times else None,
        "last_bind_seconds": last_bind,
        "pods_per_second": len(bind_times) / last_bind if last_bind else None,
        "all_placeable_running_seconds": all_running,
        "gangs_complete": len(_complete(gangs, final, need)),
        "bound_over_time": [round(t, 3) for t in bind_times],
        "timed_out": timed_out,
        "watch_errors": watch.errors,
        **quality,
    }
    if scenario.mode == "stream":
        span = create_times[-1] - create_times[0] if len(create_times) > 1 else 0.0
        out.update(
            rate=scenario.rate,
            created_over_time=[round(t, 3) for t in create_times],
            arrival_rate=(len(create_times) - 1) / span if span > 0 else None,
            gang_latencies=[round(x, 4) for x in sorted(latencies)],
            gang_latency_p50=placement_metrics.percentile(latencies, 50),
            gang_latency_p99=placement_metrics.percentile(latencies, 99),
            keeps_up=_keeps_up(complete_pods, timing, watch, max((len(g.pods) for g in gangs), default=0)),
        )
    if gs_metrics:
        out["gangsolve_metrics"] = {
            k: v for k, v in gs_metrics.items() if k.startswith("gangsolve_") and not k.endswith("_created")
        }
    return out


def _keeps_up(placeable: list[str], timing: Timing, watch: BindWatch, largest_gang: int) -> bool:
    """When the last pod was created, the scheduler was at most a second of arrivals (and a gang still
    arriving) behind: of the pods that ended up bound, no more than that were still waiting. A scheduler that
    falls behind builds a queue that grows with the stream's length."""
    made = [timing.created[n] for n in placeable if n in timing.created]
    if len(made) < 2:
        return True
    first, last = min(made), max(made)
    per_second = (len(made) - 1) / (last - first) if last > first else math.inf
    bound = sum(1 for n in placeable if n in watch.bound and watch.bound[n][0] <= last)
    return len(made) - bound <= per_second + largest_gang


def _complete(gangs: list[Arrival], final: dict[str, str], need: dict[str, int]) -> set[str]:
    out = set()
    for gang in gangs:
        got = sum(1 for p in gang.pods if f"{manifests.NAMESPACE}/{p['metadata']['name']}" in final)
        if got >= max(need[gang.gang], 1):
            out.add(gang.gang)
    return out
