"""The results as tables: rich tables for people, markdown for the docs, JSON for programs."""

from __future__ import annotations

from pathlib import Path
from statistics import median

import orjson
from rich.console import Console
from rich.table import Table

from gangsolve.bench import tenants
from gangsolve.bench.placement_metrics import priority_key
from gangsolve.bench.report.curves import CURVE_COLUMNS, CURVE_TITLE, curve_rows
from gangsolve.bench.report.format import num, pct, secs

COLUMNS = (
    "scenario",
    "scheduler",
    "gangs placed",
    "by priority",
    "pods placed",
    "GPU alloc",
    "useful",
    "partial (GPUs)",
    "nodes/gang",
    "cycle p50",
    "cycle p99",
    "gap",
    "peak MiB",
)


def rows(results: dict) -> list[tuple[str, ...]]:
    out = []
    for sc in results["scenarios"]:
        for r in sc["runs"]:
            if "error" in r:
                out.append((sc["name"], r["scheduler"], "error: " + r["error"][:60], *[""] * (len(COLUMNS) - 3)))
                continue
            out.append(
                (
                    sc["name"],
                    r["scheduler"],
                    f"{r['gangs_placed']}/{r['gangs']}",
                    "/".join(str(v) for v in priority_key(r)),
                    f"{r['pods_placed']}/{r['pods']}",
                    pct(r["gpu_allocation"]),
                    pct(r["gpu_useful"]),
                    f"{r['partial_gangs']} ({r['stranded_gpus']})",
                    num(r["nodes_per_gang"]),
                    secs(r["cycle_p50"]),
                    secs(r["cycle_p99"]),
                    pct(r.get("gap")),
                    num(r["peak_rss_mib"], "{:.0f}"),
                )
            )
    return out


def _by_scenario(title: str, columns: tuple[str, ...], body: list[tuple[str, ...]]) -> Table:
    """A table with one section per scenario, its name shown once, gangsolve's rows in bold."""
    table = Table(title=title, title_justify="left")
    for c in columns:
        table.add_column(c, justify="left" if c in ("scenario", "scheduler") else "right")
    last = None
    for row in body:
        if last is not None and row[0] != last:
            table.add_section()
        table.add_row(*(row if row[0] != last else ("", *row[1:])), style="bold" if row[1] == "gangsolve" else None)
        last = row[0]
    return table


TOPOLOGY_COLUMNS = (
    "scenario",
    "scheduler",
    "gangs placed",
    "racks/gang",
    "p95",
    "blocks/gang",
    "p95",
    "racks partly used",
    "required-level violations",
)


SHARING_COLUMNS = (
    "scenario",
    "scheduler",
    "GPUs arrived",
    "GPUs allocated",
    "of capacity",
    "unallocated stranded",
    "pods placed",
    "cycle p50",
)
SHARING_TITLE = "GPU sharing: GPUs allocated, and unallocated GPUs stranded (FGD's fragmentation), against the arrived"


def sharing_rows(results: dict) -> list[tuple[str, ...]]:
    """Scenarios with GPU shares (openb/sharing-*): the GPUs each scheduler allocated and left stranded."""
    out: list[tuple[str, ...]] = []
    for sc in results["scenarios"]:
        for r in sc["runs"]:
            if "error" in r or r.get("gpu_allocated") is None:
                continue
            stranded = f"{r['gpu_stranded']:.0f} ({pct(r['gpu_stranded_share'])})"
            out.append(
                (
                    sc["name"],
                    r["scheduler"],
                    f"{r['gpu_arrived']:.0f}",
                    f"{r['gpu_allocated']:.1f}",
                    pct(r["gpu_allocated_share"], 2),
                    stranded,
                    f"{r['pods_placed']}/{r['pods']}",
                    secs(r.get("cycle_p50")),
                )
            )
    return out


def topology_rows(results: dict) -> list[tuple[str, ...]]:
    """Scenarios with racks and blocks: how far each scheduler spreads gangs, and the racks it leaves broken."""
    out: list[tuple[str, ...]] = []
    for sc in results["scenarios"]:
        for r in sc["runs"]:
            if "error" in r or r.get("racks_per_gang") is None or sc["name"].split("/")[0] != "topology":
                continue
            out.append(
                (
                    sc["name"],
                    r["scheduler"],
                    f"{r['gangs_placed']}/{r['gangs']}",
                    num(r["racks_per_gang"], "{:.2f}"),
                    num(r["racks_per_gang_p95"]),
                    num(r["blocks_per_gang"], "{:.2f}"),
                    num(r["blocks_per_gang_p95"]),
                    f"{r['racks_partly_used']}/{r['racks']}",
                    str(sum(1 for v in r["violations"] if ": spans " in v)),
                )
            )
    return out


QUALITY_COLUMNS = (
    "scenario",
    "time limit",
    "gangs placed",
    "by priority",
    "bound",
    "gap",
    "GPUs placed",
    "cycle",
    "status",
)


def by_time(sc: dict) -> dict[float, list[dict]]:
    """The scenario's quality runs (gangsolve alone) per time limit, errors left out."""
    out: dict[float, list[dict]] = {}
    for r in sc.get("quality") or []:
        if "error" not in r:
            out.setdefault(r["time_limit"], []).append(r)
    return dict(sorted(out.items()))


def run_median(runs: list[dict], key: str) -> float:
    return median(r[key] for r in runs)


def quality_rows(results: dict) -> list[tuple[str, ...]]:
    """Quality against time: per scenario and time limit, the median over runs (the range when they differ)."""
    out: list[tuple[str, ...]] = []
    for sc in results["scenarios"]:
        for t, runs in by_time(sc).items():
            gangs = sorted(r["gangs_placed"] for r in runs)
            spread = f" ({gangs[0]}-{gangs[-1]})" if gangs[0] != gangs[-1] else ""
            gap = median(r["gap"] for r in runs) if all(r.get("gap") is not None for r in runs) else None
            out.append(
                (
                    sc["name"],
                    f"{t:g} s",
                    f"{run_median(runs, 'gangs_placed'):g}/{runs[0]['gangs']}{spread}",
                    "/".join(str(v) for v in priority_key(runs[len(runs) // 2])),
                    f"{run_median(runs, 'best_bound'):g}",
                    pct(gap),
                    f"{run_median(runs, 'gpus_placed'):g}",
                    secs(run_median(runs, "cycle_p50")),
                    "/".join(sorted({r["status"] for r in runs})),
                )
            )
    return out


def print_table(results: dict, console: Console) -> None:
    table = _by_scenario("gangsolve bench: one scheduling cycle per scenario", COLUMNS, rows(results))
    if results["scenarios"]:
        console.print(table)
    if topology_rows(results):
        title = "Topology: racks and blocks per placed gang, racks left partly used"
        console.print(_by_scenario(title, TOPOLOGY_COLUMNS, topology_rows(results)))
    if sharing_rows(results):
        console.print(_by_scenario(SHARING_TITLE, SHARING_COLUMNS, sharing_rows(results)))
    if any(sc.get("quality") for sc in results["scenarios"]):
        title = "gangsolve's quality against its time limit (gangsolve alone; medians over runs)"
        console.print(_by_scenario(title, QUALITY_COLUMNS, quality_rows(results)))
    if results.get("timeline"):
        print_timeline(results["timeline"], console)
    if results.get("live"):
        print_live(results["live"], console)
    for key, title in PREEMPTION_TITLES.items():
        if results.get(key):
            console.print(_by_scenario(title, PREEMPTION_COLUMNS, preemption_rows(results[key])))
    if results.get("targets"):
        targets = Table(title="Targets", title_justify="left")
        for c in ("target", "scenario", "measured", "met"):
            targets.add_column(c)
        for t in results["targets"]:
            targets.add_row(t["target"], t["scenario"], t["measured"], "[green]yes[/]" if t["met"] else "[red]no[/]")
        console.print(targets)


TIMELINE_COLUMNS = (
    "scenario",
    "scheduler",
    "started",
    "queue delay p50",
    "p95",
    "p99",
    "JCT mean",
    "JCT p95",
    "bounded slowdown",
    "useful GPU",
    "delay p95: 1 GPU",
    "2-8",
    ">8",
    "cycle p99",
)
TIMELINE_METRICS = (
    ("queue_delay_p50", "{:.0f}s"),
    ("queue_delay_p95", "{:.0f}s"),
    ("queue_delay_p99", "{:.0f}s"),
    ("jct_mean", "{:.0f}s"),
    ("jct_p95", "{:.0f}s"),
    ("bounded_slowdown_mean", "{:.2f}"),
)
SIZE_BUCKETS = ("1 GPU", "2-8 GPUs", ">8 GPUs")


def timeline_label(sc: dict) -> str:
    return f"{sc['name']} seed {sc['seed']} {sc['estimates']}"


def _timeline_row(label: str, scheduler: str, s: dict) -> tuple[str, ...]:
    return (
        label,
        scheduler,
        f"{s['started']}/{s['jobs']}",
        *(num(s[key], fmt) for key, fmt in TIMELINE_METRICS),
        pct(s["gpu_useful_mean"]),
        *(num(s["queue_delay_by_size"][b]["p95"], "{:.0f}s") for b in SIZE_BUCKETS),
        secs(s["cycle_p99"]),
    )


def timeline_rows(timeline: list[dict]) -> list[tuple[str, ...]]:
    return [_timeline_row(timeline_label(sc), r["scheduler"], r["summary"]) for sc in timeline for r in sc["runs"]]


def _median_of(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return float(median(values)) if values else None


def timeline_medians(timeline: list[dict]) -> list[tuple[str, ...]]:
    """Per scenario and estimate mode, each scheduler's median over the seeds, metric by metric."""
    groups: dict[tuple[str, str], dict[str, list[dict]]] = {}
    for sc in timeline:
        for r in sc["runs"]:
            groups.setdefault((sc["name"], sc["estimates"]), {}).setdefault(r["scheduler"], []).append(r["summary"])
    out = []
    for (name, mode), by_scheduler in groups.items():
        for scheduler, summaries in by_scheduler.items():
            m: dict = {key: _median_of([s[key] for s in summaries]) for key, _fmt in TIMELINE_METRICS}
            m["gpu_useful_mean"] = _median_of([s["gpu_useful_mean"] for s in summaries])
            m["cycle_p99"] = _median_of([s["cycle_p99"] for s in summaries])
            m["queue_delay_by_size"] = {
                b: {"p95": _median_of([s["queue_delay_by_size"][b]["p95"] for s in summaries])} for b in SIZE_BUCKETS
            }
            m["started"] = sum(s["started"] for s in summaries)
            m["jobs"] = sum(s["jobs"] for s in summaries)
            out.append(_timeline_row(f"{name} {mode} (median of {len(summaries)} seeds)", scheduler, m))
    return out


PROMISE_COLUMNS = (
    "timeline",
    "jobs judged",
    "start - first shown p5",
    "p50",
    "p95",
    "max",
    "later by > 1 cycle",
    "never started",
    "held a reservation",
    "start - first held p95",
    "max",
    "later by > 1 cycle",
    "never started",
)


def promise_rows(timeline: list[dict]) -> list[tuple[str, ...]]:
    """gangsolve's promises, per run: each job's start minus the first start it was shown (one never started:
    the run's end)."""
    out = []
    for sc in timeline:
        for r in sc["runs"]:
            if p := r["summary"].get("promises"):
                held = p.get("held", {})  # results written before promises were told apart have none
                out.append(
                    (
                        timeline_label(sc),
                        str(p["jobs"]),
                        *(num(p[key], "{:.0f}s") for key in ("p5", "p50", "p95", "max")),
                        str(p["late"]),
                        str(p.get("unstarted", "-")),  # results written before it was counted have none
                        str(held.get("jobs", "-")),
                        *(num(held.get(key), "{:.0f}s") for key in ("p95", "max")),
                        str(held.get("late", "-")),
                        str(held.get("unstarted", "-")),
                    )
                )
    return out


def print_timeline(timeline: list[dict], console: Console) -> None:
    console.print(_by_scenario("Time-based mode: medians over seeds", TIMELINE_COLUMNS, timeline_medians(timeline)))
    console.print(
        _by_scenario("Time-based mode: every seed and estimate mode", TIMELINE_COLUMNS, timeline_rows(timeline))
    )
    if rows := promise_rows(timeline):
        console.print(_by_scenario("gangsolve's promises: start minus the first start shown", PROMISE_COLUMNS, rows))
    if rows := tenants.tenant_rows(timeline):
        console.print(_by_scenario("Tenants: GPU shares against weighted fair shares", tenants.TENANT_COLUMNS, rows))


# The columns every live mode ends with (`_live_row`'s `common`).
_LIVE_COMMON = (
    "gangs complete",
    "partial (GPUs)",
    "GPU useful",
    "CPU s",
    "API req/pod",
    "peak RSS MiB",
    "violations",
)
LIVE_COLUMNS = {
    "stream": (
        "scenario",
        "scheduler",
        "pods/s asked (got)",
        "pods bound",
        "pods/s",
        "gang p50",
        "gang p99",
        "keeps up",
        *_LIVE_COMMON,
    ),
    "burst": ("scenario", "scheduler", "pods bound", "pods/s", "first bind", "last bind", *_LIVE_COMMON),
}
LIVE_TITLES = {
    "stream": "Live, stream: pods arrive while the scheduler runs (times from the first pod created; gang latency: "
    "last member created -> the gang's minimum bound)",
    "burst": "Live, burst: every pod created, then the scheduler starts (times and pods/s from its start)",
}


def _live_row(sc: dict, r: dict, mode: str) -> tuple[str, ...]:
    columns = LIVE_COLUMNS[mode]
    if "error" in r:
        return (sc["name"], r["scheduler"], "error: " + r["error"].splitlines()[0][:80], *[""] * (len(columns) - 3))
    common = (  # _LIVE_COMMON
        f"{r['gangs_complete']}/{r['gangs']}",
        f"{r['partial_gangs']} ({r['stranded_gpus']})",
        pct(r["gpu_useful"]),
        num(r.get("cpu_seconds")),
        num(r.get("api_requests_per_pod"), "{:.2f}"),
        num(r.get("peak_rss_mib"), "{:.0f}"),
        str(len(r["violations"]) + r.get("background_pods_lost", 0)),
    )
    bound = f"{r['pods_placed']}/{r['pending_pods']}"
    if mode == "burst":
        return (
            sc["name"],
            r["scheduler"],
            bound,
            num(r["pods_per_second"]),
            secs(r["first_bind_seconds"]),
            secs(r["last_bind_seconds"]),
            *common,
        )
    asked = num(r.get("rate"), "{:.0f}") if r.get("rate") else "max"
    return (
        sc["name"],
        r["scheduler"],
        f"{asked} ({num(r.get('arrival_rate'), '{:.0f}')})",
        bound,
        num(r["pods_per_second"]),
        secs(r.get("gang_latency_p50")),
        secs(r.get("gang_latency_p99")),
        "yes" if r.get("keeps_up") else "no",
        *common,
    )


def live_rows(live: list[dict], mode: str = "stream") -> list[tuple[str, ...]]:
    return [_live_row(sc, r, mode) for sc in live if sc.get("mode", "stream") == mode for r in sc["runs"]]


LIVE_TIMELINE_COLUMNS = (
    "scenario",
    "scheduler",
    "jobs started (done)",
    "wait p50",
    "wait p95",
    "mean JCT",
    "GPU useful",
    "evicted (GPU lost)",
    "nodes overcommitted",
    "CPU s",
    "peak RSS MiB",
)
LIVE_TIMELINE_TITLE = (
    "Live timeline: jobs arriving and finishing on the real control plane, faster than the timeline's clock "
    "(figures in the timeline's seconds; over-time check from bind and end times)"
)


def live_timeline_rows(live: list[dict]) -> list[tuple[str, ...]]:
    out = []
    for sc in live:
        if sc.get("mode") != "timeline":
            continue
        for r in sc["runs"]:
            t = r.get("timeline")
            if t is None:
                reason = r.get("error", "no figures").splitlines()[0][:80]
                out.append((sc["name"], r["scheduler"], "error: " + reason, *[""] * 8))
                continue
            out.append(
                (
                    sc["name"],
                    r["scheduler"],
                    f"{t['started']}/{t['jobs']} ({t['finished']})",
                    *(num(t[key], "{:,.0f}s") for key in ("queue_delay_p50", "queue_delay_p95", "jct_mean")),
                    pct(t["gpu_useful_mean"]),
                    # (absent from results measured before the timelines counted evictions)
                    f"{t.get('evictions', 0)} ({pct(t.get('gpu_lost_mean') or 0.0)})",
                    str(len(t["overcommitted"])),
                    num(r.get("cpu_seconds")),
                    num(r.get("peak_rss_mib"), "{:.0f}"),
                )
            )
    return out


LIVE_TOPOLOGY_COLUMNS = (
    "scenario",
    "scheduler",
    "gangs placed",
    "high/normal/low",
    "pods bound",
    "partial",
    "required-level violations",
    "racks/gang (mean / p95)",
    "blocks/gang (mean / p95)",
    "time to place (p50 / last)",
)


def live_topology_rows(live: list[dict]) -> list[tuple[str, ...]]:
    """Live scenarios checked by an oracle (live/topology): what the real bindings did to the gangs."""
    out: list[tuple[str, ...]] = []
    for sc in live:
        for r in sc["runs"]:
            o = r.get("oracle")
            if o is None:
                continue
            by = o["placed_by_class"]
            out.append(
                (
                    sc["name"],
                    r["scheduler"],
                    f"{o['gangs_placed']}/{o['gangs']}",
                    "/".join(str(by.get(c, 0)) for c in ("high", "normal", "low")),
                    f"{o['pods_bound']}/{o['pods']}",
                    str(o["partial_gangs"]),
                    str(o["required_violations"]),
                    f"{num(o['racks_per_gang'], '{:.2f}')} / {num(o['racks_per_gang_p95'], '{:g}')}",
                    f"{num(o['blocks_per_gang'], '{:.2f}')} / {num(o['blocks_per_gang_p95'], '{:g}')}",
                    f"{secs(o['time_to_place_p50'])} / {secs(o['time_to_place_max'])}",
                )
            )
    return out


LIVE_SHARING_COLUMNS = (
    "scenario",
    "scheduler",
    "shares bound",
    "pods/s",
    "GPUs shared",
    "GPU held",
    "GPUs over 100%",
    "nodes with a whole GPU shared",
    "shares without a GPU index",
)
LIVE_SHARING_TITLE = "Live GPU sharing: the GPUs as the API's nodes and pods show them after the run"


def live_sharing_rows(live: list[dict]) -> list[tuple[str, ...]]:
    """Live scenarios whose GPUs were checked from the API after the run (live/openb-shares)."""
    out: list[tuple[str, ...]] = []
    for sc in live:
        for r in sc["runs"]:
            c = r.get("api_check")
            if c is None:
                continue
            out.append(
                (
                    sc["name"],
                    r["scheduler"],
                    f"{c['fractional_pods_bound']}/{r['pending_pods']}",
                    num(r["pods_per_second"], "{:.1f}"),
                    f"{c['gpus_shared']}/{c['gpus']}",
                    f"{c['gpu_thousandths_held'] / (1000 * c['gpus']):.1%}" if c["gpus"] else "-",
                    str(c["devices_over_100"]),
                    str(c["nodes_with_a_whole_gpu_shared"]),
                    str(c["fractional_pods_without_a_gpu_index"]),
                )
            )
    return out


def print_live(live: list[dict], console: Console) -> None:
    for mode, columns in LIVE_COLUMNS.items():
        if body := live_rows(live, mode):
            console.print(_by_scenario(LIVE_TITLES[mode], columns, body))
    if rows := live_topology_rows(live):
        title = "Live topology: gangs, required level and spans from the final bindings (oracle on node labels)"
        console.print(_by_scenario(title, LIVE_TOPOLOGY_COLUMNS, rows))
    if rows := live_sharing_rows(live):
        console.print(_by_scenario(LIVE_SHARING_TITLE, LIVE_SHARING_COLUMNS, rows))
    if rows := live_timeline_rows(live):
        console.print(_by_scenario(LIVE_TIMELINE_TITLE, LIVE_TIMELINE_COLUMNS, rows))
    if rows := curve_rows(live):
        console.print(_by_scenario(CURVE_TITLE, CURVE_COLUMNS, rows))
    if rows := tenants.live_tenant_rows(live):
        title = "Live tenants: GPU shares of running jobs against weighted fair shares (timeline seconds)"
        console.print(_by_scenario(title, tenants.LIVE_TENANT_COLUMNS, rows))
    for line in [*definition_waits(live), *peer_notes(live)]:
        console.print(line)


def peer_notes(live: list[dict]) -> list[str]:
    """The real peers that did not run in a scenario and why, and the configuration each one ran with."""
    out = [f"{sc['name']}: {peer} not run: {why}" for sc in live for peer, why in (sc.get("not_run") or {}).items()]
    configurations = {r["scheduler"]: r["peer"] for sc in live for r in sc["runs"] if "peer" in r}
    for peer, about in configurations.items():
        if "scheduler_conf" in about:
            conf = about["scheduler_conf"]
            plugins = "; ".join(", ".join(map(_plugin, tier["plugins"])) for tier in conf.get("tiers", []))
            queues = "".join(f"; {_kai_queue(q)}" for q in about.get("queues") or [])
            if about.get("hypernodes"):
                queues += f"; {about['hypernodes']} HyperNodes from the nodes' topology labels"
            if about.get("topology"):
                queues += "; Topology levels " + ", ".join(level["nodeLabel"] for level in about["topology"]["levels"])
            out.append(f"{peer} {about['version']}: actions {conf.get('actions')}; plugin tiers: {plugins}{queues}")
        elif "manager_config" in about:
            out.append(f"{peer} {about['version']}: {_kueue_note(about['manager_config'], about.get('queues') or [])}")
    return out


def _kueue_note(conf: dict, queues: list[dict]) -> str:
    """Kueue's manager configuration and ClusterQueues in one line: what decides its admissions."""
    ready = conf.get("waitForPodsReady")
    parts = [
        "waitForPodsReady "
        + (f"(timeout {ready.get('timeout')}, blockAdmission {ready.get('blockAdmission')})" if ready else "off"),
        "frameworks " + ", ".join((conf.get("integrations") or {}).get("frameworks") or []),
    ]
    if "fairSharing" in conf:
        parts.append("fair sharing (" + ", ".join(conf["fairSharing"].get("preemptionStrategies") or []) + ")")
    if "admissionFairSharing" in conf:
        parts.append(f"admission fair sharing (half-life {conf['admissionFairSharing'].get('usageHalfLifeTime')})")
    for cq in (q for q in queues if q["kind"] == "ClusterQueue"):
        spec = cq["spec"]
        quotas = [
            f"{f['name']} " + ", ".join(f"{r['name']}={r['nominalQuota']}" for r in f["resources"])
            for group in spec["resourceGroups"]
            for f in group["flavors"]
        ]
        extra = "".join(f", {key} {spec[key]}" for key in ("cohortName", "fairSharing", "preemption") if key in spec)
        strategy = spec.get("queueingStrategy", "BestEffortFIFO")
        parts.append(f"ClusterQueue {cq['metadata']['name']} ({strategy}{extra}): " + "; ".join(quotas))
    return "; ".join(parts)


def _kai_queue(queue: dict) -> str:
    """A KAI Queue as `queue <name> [under <parent>] (gpu quota Q limit L weight W, ...)`."""
    parent = f" under {queue['parentQueue']}" if queue.get("parentQueue") else ""
    resources = ", ".join(
        f"{r} quota {v.get('quota')} limit {v.get('limit')} weight {v.get('overQuotaWeight')}"
        for r, v in (queue.get("resources") or {}).items()
    )
    return f"queue {queue['name']}{parent} ({resources})"


def _plugin(plugin: dict) -> str:
    """A scheduler plugin as `name`, or `name (key: value, ...)` when it has arguments."""
    arguments = ", ".join(f"{k}: {v}" for k, v in (plugin.get("arguments") or {}).items())
    return f"{plugin['name']} ({arguments})" if arguments else plugin["name"]


def definition_waits(live: list[dict]) -> list[str]:
    """What gangsolve's definition grace added to latency: pods that waited for a PodGroup or PDB that might
    still come, per scenario, from gangsolve's own histogram."""
    out = []
    for sc in live:
        for r in sc["runs"]:
            m = r.get("gangsolve_metrics") or {}
            count = int(m.get("gangsolve_definition_wait_seconds_count", 0))
            if "gangsolve_definition_wait_seconds_count" in m:
                mean = m["gangsolve_definition_wait_seconds_sum"] / count if count else 0.0
                waited = f"{count} pods waited, {mean:.2f} s on average from creation" if count else "no pod waited"
                out.append(f"{sc['name']}: definition grace: {waited}")
    return out


PREEMPTION_TITLES = {
    "preemption": "Preemption: each scheduler round by round until nothing changes (static)",
    "live_preemption": "Preemption on the real control plane (live)",
}
PREEMPTION_COLUMNS = (
    "scenario",
    "scheduler",
    "preemptors placed",
    "pods evicted",
    "GPUs evicted",
    "per GPU placed",
    "victim gangs",
    "broken",
    "PDB violations",
    "futile",
    "time to placement",
)


def preemption_rows(scenarios: list[dict]) -> list[tuple[str, ...]]:
    out = []
    for sc in scenarios:
        for r in sc["runs"]:
            if "error" in r:
                out.append((sc["name"], r["scheduler"], "error: " + r["error"][:60], *[""] * 8))
                continue
            rounds = r.get("rounds_to_placement")
            when = secs(r["seconds_to_placement"]) + (f" ({rounds} rounds)" if rounds else "")
            out.append(
                (
                    sc["name"],
                    r["scheduler"],
                    f"{r['preemptors_placed']}/{r['preemptors']}",
                    str(r["pods_evicted"]),
                    str(r["gpus_evicted"]),
                    num(r["gpus_evicted_per_gpu"], "{:.2f}"),
                    str(r["victim_gangs"]),
                    str(r["victim_gangs_broken"]),
                    str(r["pdb_violations"]),
                    str(r["futile_evictions"]),
                    when if r["seconds_to_placement"] is not None else "-",
                )
            )
    return out


def markdown(results: dict) -> str:
    def md(columns: tuple[str, ...], body: list[tuple[str, ...]]) -> list[str]:
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        return lines + ["| " + " | ".join(r) + " |" for r in body]

    lines = md(COLUMNS, rows(results)) if results["scenarios"] else []
    if topology_rows(results):
        lines += ["", *md(TOPOLOGY_COLUMNS, topology_rows(results))]
    if sharing_rows(results):
        lines += ["", *md(SHARING_COLUMNS, sharing_rows(results))]
    if any(sc.get("quality") for sc in results["scenarios"]):
        lines += ["", *md(QUALITY_COLUMNS, quality_rows(results))]
    if results.get("timeline"):
        lines += ["", *md(TIMELINE_COLUMNS, timeline_medians(results["timeline"]))]
        lines += ["", *md(TIMELINE_COLUMNS, timeline_rows(results["timeline"]))]
        if promises := promise_rows(results["timeline"]):
            lines += ["", *md(PROMISE_COLUMNS, promises)]
        if shares := tenants.tenant_rows(results["timeline"]):
            lines += ["", *md(tenants.TENANT_COLUMNS, shares)]
    for mode, columns in LIVE_COLUMNS.items():
        if body := live_rows(results.get("live") or [], mode):
            lines += ["", *md(columns, body)]
    if oracle_rows := live_topology_rows(results.get("live") or []):
        lines += ["", *md(LIVE_TOPOLOGY_COLUMNS, oracle_rows)]
    if sharing := live_sharing_rows(results.get("live") or []):
        lines += ["", *md(LIVE_SHARING_COLUMNS, sharing)]
    if timelines := live_timeline_rows(results.get("live") or []):
        lines += ["", *md(LIVE_TIMELINE_COLUMNS, timelines)]
    if curve := curve_rows(results.get("live") or []):
        lines += ["", *md(CURVE_COLUMNS, curve)]
    if shares := tenants.live_tenant_rows(results.get("live") or []):
        lines += ["", *md(tenants.LIVE_TENANT_COLUMNS, shares)]
    if notes := peer_notes(results.get("live") or []):
        lines += ["", *(f"- {note}" for note in notes)]
    for key in PREEMPTION_TITLES:
        if results.get(key):
            lines += ["", *md(PREEMPTION_COLUMNS, preemption_rows(results[key]))]
    if results.get("targets"):
        lines += [
            "",
            *md(
                ("target", "scenario", "measured", "met"),
                [
                    (t["target"], t["scenario"], t["measured"], "yes" if t["met"] else "**no**")
                    for t in results["targets"]
                ],
            ),
        ]
    return "\n".join(lines) + "\n"


def write_json(results: dict, path: Path) -> None:
    path.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n")
