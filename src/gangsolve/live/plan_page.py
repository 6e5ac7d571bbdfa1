"""The page of the plan: what `/plan` shows and `/plan.json` serves (`gangsolve run --plan-page`).

The solver actor owns every piece of it: after each cycle it replaces its `PlanView` (frozen, holding only
immutable data: the cycle's result, the running pods it knows with their expected ends, and the queue shares
sampled so far) in one assignment; the HTTP server only reads the latest and turns it into JSON on request, so
a cycle pays nothing for a page nobody looks at. The page itself (plan_page.html) is one document with its own
CSS and script, which fetches /plan.json every few seconds and draws it with DOM calls that set text, never
markup: a name is never read as HTML.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import math
import re
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import resources

import orjson

from gangsolve.edge import reservations
from gangsolve.live.messages import CycleResult
from gangsolve.solver import Cluster, Placement
from gangsolve.solver.model import Node, QueueResult, Running

SHARE_INTERVAL = 60.0  # seconds per queue-share sample: the last cycle of each minute is kept
SHARE_SPAN = 6 * 3600.0  # the page shows the queue shares of the last six hours
MAX_ROWS = 40  # more nodes than this: the Gantt chart shows node groups
MAX_BARS = 12  # per row, planned gangs first; the rest is counted, not drawn (the page stays short on a big cluster)
# Node labels that name a group of nodes (a topology level, a cloud's node pool), tried before node names.
GROUP_LABELS = (
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "cloud.google.com/gke-nodepool",
    "eks.amazonaws.com/nodegroup",
    "karpenter.sh/nodepool",
    "node.kubernetes.io/instance-type",
)

# (cycle time, ((queue, share, fair share), ...))
Sample = tuple[float, tuple[tuple[str, float, float], ...]]


class ShareHistory:
    """Queue shares over the last `span` seconds, one sample per `interval` (the latest cycle of it): bounded
    however long the scheduler runs and however often it cycles."""

    def __init__(self, interval: float = SHARE_INTERVAL, span: float = SHARE_SPAN) -> None:
        self.interval = interval
        self._samples: deque[Sample] = deque(maxlen=max(1, math.ceil(span / interval)))

    def record(self, now: float, queues: Iterable[QueueResult]) -> None:
        sample = (now, tuple((q.name, q.share, q.fair_share) for q in queues))
        if self._samples and self._samples[-1][0] // self.interval == now // self.interval:
            self._samples[-1] = sample  # the same minute: the latest cycle of it stands for it
        else:
            self._samples.append(sample)

    def samples(self) -> tuple[Sample, ...]:
        return tuple(self._samples)


@dataclass(frozen=True)
class PlanView:
    """What the page shows, as of one cycle. `running`: the bound pods the scheduler knows with their expected
    ends (on the cycle's clock, as `Running.end`), the gangs this cycle started among them."""

    cycle: int
    result: CycleResult
    running: tuple[Running, ...]
    shares: tuple[Sample, ...]


def started_now(cluster: Cluster, placement: Placement) -> tuple[Running, ...]:
    """The pods a cycle placed, as running from its clock for their gang's estimated runtime."""
    out = []
    for gang in cluster.gangs:
        end = cluster.now + gang.runtime if gang.runtime is not None else None
        for p in gang.pods:
            node = placement.bindings.get(p.name)
            if node is not None:
                out.append(Running(node=node, requests={}, end=end, name=p.name, gang=gang.name, queue=gang.queue))
    return tuple(out)


def carried_running(
    previous: Iterable[Running], known: Iterable[Running], still_running: Callable[[str], bool]
) -> tuple[Running, ...]:
    """Running pods of the last view that this cycle's partial view did not read (a partial view holds only
    the pending pods and their gangs' members) and that still run."""
    seen = {r.name for r in known}
    return tuple(r for r in previous if r.name not in seen and still_running(r.name))


def node_groups(nodes: Iterable[Node], max_rows: int = MAX_ROWS) -> tuple[str, dict[str, str]]:
    """How the Gantt chart's rows are chosen, and node -> its row: one row per node up to `max_rows`; past that,
    the node label of GROUP_LABELS that splits them most finely into at most `max_rows` groups, else their
    names less trailing digits, else runs of nodes in name order."""
    names = sorted(n.name for n in nodes)
    if len(names) <= max_rows:
        return "node", {n: n for n in names}
    by_name = {n.name: n for n in nodes}
    best: tuple[int, str] | None = None
    for label in GROUP_LABELS:
        values = {by_name[n].labels.get(label) for n in names}
        if None not in values and 1 < len(values) <= max_rows and (best is None or len(values) > best[0]):
            best = (len(values), label)
    if best is not None:
        return f"label {best[1]}", {n: f"{best[1].rsplit('/', 1)[-1]}={by_name[n].labels[best[1]]}" for n in names}
    prefixes = {n: re.sub(r"[-_.]?\d+$", "", n) or n for n in names}
    if 1 < len(set(prefixes.values())) <= max_rows:
        return "name prefix", {n: f"{p}*" for n, p in prefixes.items()}
    size = math.ceil(len(names) / max_rows)
    rows = {}
    for i in range(0, len(names), size):
        run = names[i : i + size]
        label = f"{run[0]} … {run[-1]}" if len(run) > 1 else run[0]
        rows.update(dict.fromkeys(run, label))
    return "name order", rows


_ORDER = {"held": 0, "forecast": 1, "running": 2}


def _gantt(view: PlanView, plan: list[dict]) -> dict:
    """Rows (nodes or node groups) of bars: running gangs until their expected end (null: no estimate), planned
    gangs from their expected start; one bar per gang and row. Times are formatted only for the bars drawn: a
    big cluster runs tens of thousands of pods."""
    result = view.result
    grouped_by, row_of = node_groups(result.cluster.nodes)
    ends: dict[str, dict[str, float]] = {row: {} for row in dict.fromkeys(row_of.values())}  # gang -> last end
    planned: dict[str, dict[tuple[str, str], dict]] = {row: {} for row in ends}
    for r in view.running:
        where = row_of.get(r.node)
        if where is not None:
            gang, end = r.gang or r.name, math.inf if r.end is None else r.end
            ends[where][gang] = max(end, ends[where].get(gang, end))  # the gang's last pod on the row ends it
    for entry in plan:
        if any(pod in result.placement.bindings for pod in entry["pods"]):
            continue  # started this cycle: among the running already
        kind = "held" if entry["held"] else "forecast"
        for node in dict.fromkeys(entry["pods"].values()):
            where = row_of.get(node)
            if where is not None:
                bar = {"gang": entry["gang"], "start": entry["start"], "end": entry["end"], "kind": kind}
                planned[where].setdefault((entry["gang"], kind), bar)
    members = Counter(row_of.values())
    out = []
    for row, running in ends.items():
        # The plan first (what holds the nodes next), then the running gangs that end soonest.
        plan_bars = sorted(planned[row].values(), key=lambda b: (_ORDER[b["kind"]], b["start"] or "~", b["gang"]))
        soonest = sorted(running.items(), key=lambda item: (item[1], item[0]))[: max(0, MAX_BARS - len(plan_bars))]
        bars = plan_bars[:MAX_BARS] + [
            {
                "gang": gang,
                "start": None,
                "end": reservations.rfc3339(None if end == math.inf else end),
                "kind": "running",
            }
            for gang, end in soonest
        ]
        more = len(plan_bars) + len(running) - len(bars)
        out.append({"name": row, "nodes": members[row], "bars": bars, "more": more})
    return {"grouped_by": grouped_by, "rows": out}


def _pending(result: CycleResult) -> list[dict]:
    """The gangs the cycle left pending, in queue order, each with why (the text its pods' condition carries)
    and when it is expected to start."""
    placement, now = result.placement, result.cluster.now
    planned = {r.gang: r for r in (*placement.reservations, *placement.forecasts)}
    out = []
    for gang, res in zip(result.cluster.gangs, result.placement.gangs, strict=True):
        if res.placed:
            continue
        r = planned.get(gang.name)
        out.append(
            {
                "gang": gang.name,
                "queue": gang.queue,
                "priority": res.priority,
                "min_member": res.min_member,
                "pods": res.pods,
                # The text its pods' PodScheduled condition carries (feedback writes the same).
                "reason": reservations.pending_message(res.reason, r, now) or "waiting for the rest of the gang",
                "start": reservations.rfc3339(r.start) if r is not None else None,
                "held": r.held if r is not None else None,
                "guessed": r.guessed if r is not None else None,
                "nodes": list(r.nodes) if r is not None else [],
            }
        )
    return out


def _queues(samples: tuple[Sample, ...]) -> list[dict]:
    series: dict[str, list[tuple[str | None, float, float]]] = {}
    for at, queues in samples:
        for name, share, fair in queues:
            series.setdefault(name, []).append((reservations.rfc3339(at), share, fair))
    return [{"name": name, "samples": points} for name, points in sorted(series.items())]


def as_json(view: PlanView | None) -> dict:
    """The data of the page (the shape docs/operating.md describes)."""
    if view is None:
        return {"cycle": None}
    result = view.result
    plan = reservations.plan_json(result.placement, result.cluster.gangs, result.cluster.now)
    return {
        "cycle": view.cycle,
        "now": reservations.rfc3339(result.cluster.now),
        "status": result.placement.status,
        "pending": _pending(result),
        "waiting_for_definition": sorted(result.waiting),
        "plan": plan,
        "gantt": _gantt(view, plan),
        "queues": _queues(view.shares),
    }


def encode(data: Mapping) -> bytes:
    """JSON in which `<`, `>` and `&` are escaped too: safe even where some page inlines it in a script."""
    text = orjson.dumps(data).decode()
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()


def _inline_hash(html: str, tag: str) -> str:
    body = re.search(rf"<{tag}>(.*?)</{tag}>", html, re.S)
    assert body is not None, f"plan_page.html has no <{tag}>"
    return "'sha256-" + base64.b64encode(hashlib.sha256(body.group(1).encode()).digest()).decode() + "'"


@functools.cache
def page() -> tuple[bytes, dict[str, str]]:
    """The HTML document and its headers: a Content-Security-Policy that runs only its own script and style
    (by hash: an injected handler or script never runs) and lets it connect only to its own origin."""
    html = resources.files("gangsolve.live").joinpath("plan_page.html").read_text(encoding="utf-8")
    policy = (
        f"default-src 'none'; script-src {_inline_hash(html, 'script')}; style-src {_inline_hash(html, 'style')}; "
        "connect-src 'self'; img-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
    headers = {
        "Content-Type": "text/html; charset=utf-8",
        "Content-Security-Policy": policy,
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "no-store",
    }
    return html.encode(), headers
