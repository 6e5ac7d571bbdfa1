"""Results for people (a rich table, a markdown table, PNG plots) and programs (JSON), plus the target check."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from statistics import median

import matplotlib

matplotlib.use("Agg")  # files only: no display on CI or servers
import matplotlib.pyplot as plt
import orjson
from rich.console import Console
from rich.table import Table

from gangsolve.bench import tenants
from gangsolve.bench.metrics import priority_key, worth

BASELINES = ("per-pod-least", "per-pod-most", "greedy-gang", "tas-bestfit")
COLORS = {
    "kube-scheduler": "tab:gray",
    "kube-scheduler-wap": "tab:olive",
    "kube-scheduler-gang": "tab:green",
    "per-pod-least": "tab:gray",
    "per-pod-most": "tab:brown",
    "greedy-gang": "tab:blue",
    "easy-backfill": "tab:purple",
    "gangsolve": "tab:red",
}
MARKERS = {"synthetic": "o", "kube-perf": "s", "openb": "^"}


def _pct(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def _secs(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x * 1000:.0f}ms" if x < 1 else f"{x:.2f}s"


def _num(x: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


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
                    _pct(r["gpu_allocation"]),
                    _pct(r["gpu_useful"]),
                    f"{r['partial_gangs']} ({r['stranded_gpus']})",
                    _num(r["nodes_per_gang"]),
                    _secs(r["cycle_p50"]),
                    _secs(r["cycle_p99"]),
                    _pct(r.get("gap")),
                    _num(r["peak_rss_mib"], "{:.0f}"),
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
                    _num(r["racks_per_gang"], "{:.2f}"),
                    _num(r["racks_per_gang_p95"]),
                    _num(r["blocks_per_gang"], "{:.2f}"),
                    _num(r["blocks_per_gang_p95"]),
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


def _median(runs: list[dict], key: str) -> float:
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
                    f"{_median(runs, 'gangs_placed'):g}/{runs[0]['gangs']}{spread}",
                    "/".join(str(v) for v in priority_key(runs[len(runs) // 2])),
                    f"{_median(runs, 'best_bound'):g}",
                    _pct(gap),
                    f"{_median(runs, 'gpus_placed'):g}",
                    _secs(_median(runs, "cycle_p50")),
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


def _timeline_label(sc: dict) -> str:
    return f"{sc['name']} seed {sc['seed']} {sc['estimates']}"


def _timeline_row(label: str, scheduler: str, s: dict) -> tuple[str, ...]:
    return (
        label,
        scheduler,
        f"{s['started']}/{s['jobs']}",
        *(_num(s[key], fmt) for key, fmt in TIMELINE_METRICS),
        _pct(s["gpu_useful_mean"]),
        *(_num(s["queue_delay_by_size"][b]["p95"], "{:.0f}s") for b in SIZE_BUCKETS),
        _secs(s["cycle_p99"]),
    )


def timeline_rows(timeline: list[dict]) -> list[tuple[str, ...]]:
    return [_timeline_row(_timeline_label(sc), r["scheduler"], r["summary"]) for sc in timeline for r in sc["runs"]]


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


def print_timeline(timeline: list[dict], console: Console) -> None:
    console.print(_by_scenario("Time-based mode: medians over seeds", TIMELINE_COLUMNS, timeline_medians(timeline)))
    console.print(
        _by_scenario("Time-based mode: every seed and estimate mode", TIMELINE_COLUMNS, timeline_rows(timeline))
    )
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
        _pct(r["gpu_useful"]),
        _num(r.get("cpu_seconds")),
        _num(r.get("api_requests_per_pod"), "{:.2f}"),
        _num(r.get("peak_rss_mib"), "{:.0f}"),
        str(len(r["violations"]) + r.get("background_pods_lost", 0)),
    )
    bound = f"{r['pods_placed']}/{r['pending_pods']}"
    if mode == "burst":
        return (
            sc["name"],
            r["scheduler"],
            bound,
            _num(r["pods_per_second"]),
            _secs(r["first_bind_seconds"]),
            _secs(r["last_bind_seconds"]),
            *common,
        )
    asked = _num(r.get("rate"), "{:.0f}") if r.get("rate") else "max"
    return (
        sc["name"],
        r["scheduler"],
        f"{asked} ({_num(r.get('arrival_rate'), '{:.0f}')})",
        bound,
        _num(r["pods_per_second"]),
        _secs(r.get("gang_latency_p50")),
        _secs(r.get("gang_latency_p99")),
        "yes" if r.get("keeps_up") else "no",
        *common,
    )


def live_rows(live: list[dict], mode: str = "stream") -> list[tuple[str, ...]]:
    return [_live_row(sc, r, mode) for sc in live if sc.get("mode", "stream") == mode for r in sc["runs"]]


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
                    f"{_num(o['racks_per_gang'], '{:.2f}')} / {_num(o['racks_per_gang_p95'], '{:g}')}",
                    f"{_num(o['blocks_per_gang'], '{:.2f}')} / {_num(o['blocks_per_gang_p95'], '{:g}')}",
                    f"{_secs(o['time_to_place_p50'])} / {_secs(o['time_to_place_max'])}",
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
    for line in definition_waits(live):
        console.print(line)


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
            when = _secs(r["seconds_to_placement"]) + (f" ({rounds} rounds)" if rounds else "")
            out.append(
                (
                    sc["name"],
                    r["scheduler"],
                    f"{r['preemptors_placed']}/{r['preemptors']}",
                    str(r["pods_evicted"]),
                    str(r["gpus_evicted"]),
                    _num(r["gpus_evicted_per_gpu"], "{:.2f}"),
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
    if any(sc.get("quality") for sc in results["scenarios"]):
        lines += ["", *md(QUALITY_COLUMNS, quality_rows(results))]
    if results.get("timeline"):
        lines += ["", *md(TIMELINE_COLUMNS, timeline_medians(results["timeline"]))]
        lines += ["", *md(TIMELINE_COLUMNS, timeline_rows(results["timeline"]))]
        if shares := tenants.tenant_rows(results["timeline"]):
            lines += ["", *md(tenants.TENANT_COLUMNS, shares)]
    for mode, columns in LIVE_COLUMNS.items():
        if body := live_rows(results.get("live") or [], mode):
            lines += ["", *md(columns, body)]
    if oracle_rows := live_topology_rows(results.get("live") or []):
        lines += ["", *md(LIVE_TOPOLOGY_COLUMNS, oracle_rows)]
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


# --- targets --------------------------------------------------------------------------------------------------


def _run(sc: dict, scheduler: str) -> dict | None:
    r = next((r for r in sc["runs"] if r["scheduler"] == scheduler), None)
    return None if r is None or "error" in r else r


def live_targets(sc: dict, add: Callable[[str, str, str, bool], None]) -> None:
    """The live targets: burst pods/s at least kube-scheduler's; stream gang p99 at most native gang
    scheduling's wherever kube-scheduler keeps up; the users' TFJobs not the slowest; RSS within 1 GiB at 5,000
    nodes; never a partial gang."""
    gs, ks, native = _run(sc, "gangsolve"), _run(sc, "kube-scheduler"), _run(sc, "kube-scheduler-gang")
    if gs is None:
        return
    name = sc["name"]
    sound = not gs.get("partial_gangs") and not gs.get("violations") and not gs.get("background_pods_lost")
    if sc.get("late_definitions") and ks is not None:  # gangsolve waits for the definitions by design
        add(
            "live, gang definitions late: 0 partial gangs",
            name,
            f"partial gangs {gs['partial_gangs']} vs kube-scheduler's {ks['partial_gangs']}",
            sound,
        )
    elif sc.get("mode") == "burst" and ks is not None:
        add(
            "live burst: pods bound/s >= kube-scheduler's, 0 partial gangs",
            name,
            f"{_num(gs['pods_per_second'])} vs {_num(ks['pods_per_second'])} pods/s; partial gangs "
            f"{gs['partial_gangs']} vs {ks['partial_gangs']}",
            (gs["pods_per_second"] or 0) >= (ks["pods_per_second"] or 0) and sound,
        )
    elif sc.get("rate") and ks is not None and native is not None and ks.get("keeps_up"):
        mine, theirs = gs.get("gang_latency_p99"), native.get("gang_latency_p99")
        add(
            "live stream: gang latency p99 <= native gang scheduling's (where kube-scheduler keeps up)",
            name,
            f"{_secs(mine)} vs {_secs(theirs)}; gangs complete {gs['gangs_complete']} vs {native['gangs_complete']}",
            mine is not None and (theirs is None or mine <= theirs) and sound,
        )
    elif name == "live/tfjob":
        others = [r for r in sc["runs"] if r["scheduler"] != "gangsolve" and "error" not in r]
        slowest = min((r["pods_per_second"] or 0 for r in others), default=0)
        add(
            "live: the users' TFJobs, gangsolve not the slowest (pods/s), 0 partial gangs",
            name,
            f"{_num(gs['pods_per_second'])} pods/s vs "
            + ", ".join(f"{r['scheduler']} {_num(r['pods_per_second'])}" for r in others),
            (gs["pods_per_second"] or 0) > slowest and sound,
        )
    elif ks is not None:
        add(
            "live: pods bound/s >= kube-scheduler's, 0 partial gangs where it leaves some",
            name,
            f"{_num(gs['pods_per_second'])} vs {_num(ks['pods_per_second'])} pods/s; partial gangs "
            f"{gs['partial_gangs']} vs {ks['partial_gangs']}",
            (gs["pods_per_second"] or 0) >= (ks["pods_per_second"] or 0) and sound,
        )
    if sc.get("nodes", 0) >= 5000 and gs.get("peak_rss_mib") is not None:
        add("live: peak RSS <= 1 GiB at 5,000 nodes", name, f"{gs['peak_rss_mib']:.0f} MiB", gs["peak_rss_mib"] <= 1024)


def check_targets(results: dict) -> list[dict]:
    """The issue's targets, measured on whatever scenarios ran; each says what it measured."""
    out = []

    def add(target: str, scenario: str, measured: str, met: bool) -> None:
        out.append({"target": target, "scenario": scenario, "measured": measured, "met": bool(met)})

    for sc in results.get("live") or []:
        gs, native = _run(sc, "gangsolve"), _run(sc, "kube-scheduler-gang")
        if gs is not None and native is not None and "oracle" in gs and "oracle" in native:
            mine, peer = gs["oracle"], native["oracle"]
            add(
                "live topology: 0 required-level violations, gangs placed >= native's, fewer racks per gang",
                sc["name"],
                f"violations {mine['required_violations']}; {mine['gangs_placed']} vs {peer['gangs_placed']} gangs; "
                f"{_num(mine['racks_per_gang'], '{:.2f}')} vs {_num(peer['racks_per_gang'], '{:.2f}')} racks/gang",
                mine["required_violations"] == 0
                and mine["gangs_placed"] >= peer["gangs_placed"]
                and (mine["racks_per_gang"] or 0) < (peer["racks_per_gang"] or 0),
            )
        live_targets(sc, add)
    for key in PREEMPTION_TITLES:
        for sc in results.get(key) or []:
            preemption_targets(sc, add)
    for sc in results.get("timeline") or []:
        gs, greedy, easy = _run(sc, "gangsolve"), _run(sc, "greedy-gang"), _run(sc, "easy-backfill")
        if gs is None or greedy is None or easy is None:
            continue
        mine, g, e = gs["summary"], greedy["summary"], easy["summary"]
        label = _timeline_label(sc)
        for key, what in (("queue_delay_p95", "p95 queue delay"), ("jct_mean", "mean JCT")):
            add(
                f"timeline: {what} <= greedy-gang's and easy-backfill's",
                label,
                f"{mine[key]:.0f}s vs {g[key]:.0f}s / {e[key]:.0f}s",
                mine[key] <= min(g[key], e[key]),
            )
        add(
            "timeline: useful GPU allocation >= greedy-gang's and easy-backfill's",
            label,
            f"{_pct(mine['gpu_useful_mean'])} vs {_pct(g['gpu_useful_mean'])} / {_pct(e['gpu_useful_mean'])}",
            mine["gpu_useful_mean"] >= max(g["gpu_useful_mean"], e["gpu_useful_mean"]),
        )
        add(
            "timeline: p50 queue delay <= greedy-gang's",
            label,
            f"{mine['queue_delay_p50']:.0f}s vs {g['queue_delay_p50']:.0f}s",
            mine["queue_delay_p50"] <= g["queue_delay_p50"],
        )
    for sc in results["scenarios"]:
        quality_targets(sc, add)
        gs = _run(sc, "gangsolve")
        if gs is None:
            continue
        for name in BASELINES:
            base = _run(sc, name)
            if base is not None:
                mine, theirs = priority_key(gs), priority_key(base)
                add(
                    f"not below {name} (gangs placed per priority, highest first)",
                    sc["name"],
                    f"{'/'.join(map(str, mine))} vs {'/'.join(map(str, theirs))}",
                    mine >= theirs,
                )
        tas = _run(sc, "tas-bestfit")
        if tas is not None and gs.get("racks_per_gang") is not None:
            spans = sum(1 for v in gs["violations"] if ": spans " in v)
            add("0 required-level violations", sc["name"], f"{spans} gangs span more than one domain", spans == 0)
            add(
                "at least tas-bestfit's gangs placed, fewer racks per gang",
                sc["name"],
                f"{gs['gangs_placed']} vs {tas['gangs_placed']} gangs; "
                f"{gs['racks_per_gang']:.2f} vs {tas['racks_per_gang']:.2f} racks per gang",
                gs["gangs_placed"] >= tas["gangs_placed"] and gs["racks_per_gang"] < tas["racks_per_gang"],
            )
        greedy = _run(sc, "greedy-gang")
        if sc["contended"] and greedy is not None and gs["gpus_total"]:
            more = (gs["gpus_placed"] - greedy["gpus_placed"]) / max(greedy["gpus_placed"], 1)
            add(
                ">= +5% GPUs placed over greedy-gang (contended)",
                sc["name"],
                f"{gs['gpus_placed']} vs {greedy['gpus_placed']} GPUs ({more:+.1%})",
                more >= 0.05,
            )
        if sc["nodes"] <= 1000 and gs.get("gap") is not None:
            add(
                "optimality gap <= 1% (<= 1,000 nodes)",
                sc["name"],
                f"{gs['gangs_placed']} gangs, bound {gs['bound']} ({gs['gap']:.1%})",
                gs["gap"] <= 0.01,
            )
        if sc["name"] == "synthetic/1000nodes":
            add("cycle p99 <= 1 s (1,000 nodes, 200 gangs)", sc["name"], _secs(gs["cycle_p99"]), gs["cycle_p99"] <= 1)
        if sc["nodes"] >= 5000:
            add(
                "cycle p99 <= 5 s (5,000 nodes)",
                sc["name"],
                f"{_secs(gs['cycle_p99'])}, {gs['gangs']} gangs, {gs['pods']} pending pods",
                gs["cycle_p99"] <= 5,
            )
            add(
                "peak RSS <= 1 GiB (5,000 nodes)",
                sc["name"],
                f"{gs['peak_rss_mib']:.0f} MiB, {sc['objects']['pods']} pods in snapshot",
                gs["peak_rss_mib"] <= 1024,
            )
    return out


def preemption_targets(sc: dict, add) -> None:
    """0 victim gangs broken, 0 futile evictions, and no more GPUs evicted than any peer (and no fewer
    preemptors placed, so evicting less by placing less does not count)."""
    gs = _run(sc, "gangsolve")
    if gs is None:
        return
    add(
        "preemption: 0 victim gangs broken, 0 futile evictions",
        sc["name"],
        f"{gs['victim_gangs_broken']} broken, {gs['futile_evictions']} futile",
        gs["victim_gangs_broken"] == 0 and gs["futile_evictions"] == 0,
    )
    for r in sc["runs"]:
        if r["scheduler"] == "gangsolve" or "error" in r:
            continue
        add(
            f"preemption: GPUs evicted <= {r['scheduler']}'s, as many preemptors placed",
            sc["name"],
            f"{gs['gpus_evicted']} vs {r['gpus_evicted']} GPUs ({gs['pods_evicted']} vs {r['pods_evicted']} pods); "
            f"placed {gs['preemptors_placed']} vs {r['preemptors_placed']}",
            gs["gpus_evicted"] <= r["gpus_evicted"] and gs["preemptors_placed"] >= r["preemptors_placed"],
        )


def quality_targets(sc: dict, add) -> None:
    """The quality-against-time targets: more time never worse; the gap at 1,000 and 5,000 nodes; the live
    limit's answer against a minute's."""
    times = by_time(sc)
    if len(times) >= 2:
        limits = list(times)
        # Every run at a longer limit against every run at a shorter one.
        worse = [
            (short, longer)
            for i, short in enumerate(limits)
            for longer in limits[i + 1 :]
            if min(worth(r) for r in times[longer]) < max(worth(r) for r in times[short])
        ]
        add(
            "more time never gives a worse answer (gangs per priority, then GPUs and cpu placed)",
            sc["name"],
            ", ".join(f"worse at {b:g} s than at {a:g} s" for a, b in worse)
            or f"non-decreasing over {', '.join(f'{t:g} s' for t in limits)}",
            not worse,
        )

    def gap_target(limit: float, most: float) -> None:
        runs = times.get(limit)
        if runs and all(r.get("gap") is not None for r in runs):
            gap = median(r["gap"] for r in runs)
            add(
                f"gap <= {most:.0%} with {limit:g} s ({sc['nodes']:,} nodes)",
                sc["name"],
                f"{_median(runs, 'gangs_placed'):g} gangs, bound {_median(runs, 'best_bound'):g} ({gap:.1%})",
                gap <= most,
            )

    if sc["name"] == "synthetic/1000nodes":
        gap_target(60, 0.05)
        gap_target(1, 0.10)
        if 1 in times and 60 in times:
            live, minute = _median(times[1], "gangs_placed"), _median(times[60], "gangs_placed")
            add(
                "1 s answer >= 98% of the 60 s answer's gangs (1,000 nodes)",
                sc["name"],
                f"{live:g} vs {minute:g} gangs ({live / minute:.1%})",
                live >= 0.98 * minute,
            )
    if sc["name"] == "synthetic/5000nodes":
        gap_target(60, 0.10)


# --- plots ----------------------------------------------------------------------------------------------------


def _family(name: str) -> str:
    return name.split("/")[0]


def _series(results: dict, metric) -> dict[tuple[str, str], list[tuple[int, float]]]:
    """(scheduler, family) -> [(nodes, value)] sorted by nodes."""
    out: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for sc in results["scenarios"]:
        for r in sc["runs"]:
            if "error" in r:
                continue
            value = metric(r)
            if value is not None:
                out.setdefault((r["scheduler"], _family(sc["name"])), []).append((sc["nodes"], value))
    return {k: sorted(v) for k, v in out.items()}


def _draw(ax, results: dict, metric, ylabel: str, logy: bool = False) -> None:
    for (scheduler, family), points in _series(results, metric).items():
        xs, ys = zip(*points, strict=True)
        style = "-" if family == "synthetic" else ":"
        ax.plot(xs, ys, style, marker=MARKERS.get(family, "x"), color=COLORS.get(scheduler))
    ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("nodes")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)


def _legend(ax, results: dict) -> None:
    """Colour says the scheduler, marker the scenario family."""
    from matplotlib.lines import Line2D

    schedulers = list(dict.fromkeys(r["scheduler"] for sc in results["scenarios"] for r in sc["runs"]))
    families = list(dict.fromkeys(_family(sc["name"]) for sc in results["scenarios"]))
    handles = [Line2D([], [], color=COLORS.get(s), label=s) for s in schedulers]
    handles += [Line2D([], [], color="black", marker=MARKERS.get(f, "x"), linestyle="", label=f) for f in families]
    ax.legend(handles=handles, fontsize=8)


def plot(results: dict, out: Path) -> list[Path]:
    paths = plot_live(results.get("live") or [], out)
    if not results["scenarios"] and not results.get("timeline"):
        return paths
    fig, axes = plt.subplots(1, 3, figsize=(17, 5))
    _draw(axes[0], results, lambda r: r["gangs_placed"] / r["gangs"] if r["gangs"] else None, "gangs placed / pending")
    _draw(axes[1], results, lambda r: r["gpu_useful"], "GPU allocation without stranded GPUs")
    _draw(axes[2], results, lambda r: r["stranded_gpus"] if r["gpus_total"] else None, "GPUs stranded by partial gangs")
    _legend(axes[0], results)
    fig.suptitle("Placement quality against cluster size (one cycle)")
    fig.tight_layout()
    paths.append(out / "quality.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 5))
    _draw(ax, results, lambda r: r["cycle_p99"], "cycle time p99 (s)", logy=True)
    _legend(ax, results)
    ax.set_title("Latency against cluster size")
    fig.tight_layout()
    paths.append(out / "latency.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    shown: set[str] = set()
    for sc in results.get("timeline") or []:
        if sc["name"] in shown:
            continue  # one plot per scenario: its first seed and estimate mode
        shown.add(sc["name"])
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
        for r in sc["runs"]:
            t = [c["time"] / 60 for c in r["cycles"]]
            color = COLORS.get(r["scheduler"])
            top.plot(t, [c["gpu_useful"] for c in r["cycles"]], color=color, label=f"{r['scheduler']} (running jobs)")
            top.plot(
                t, [c["gpu_allocation"] for c in r["cycles"]], ":", color=color, label=f"{r['scheduler']} (allocated)"
            )
            bottom.plot(t, [c["pending"] for c in r["cycles"]], color=color, label=r["scheduler"])
        top.set_ylabel("GPU utilization")
        top.legend(fontsize=7)
        bottom.set_ylabel("pending jobs")
        bottom.set_xlabel("minutes")
        top.set_title(f"{_timeline_label(sc)}: GPU utilization and queue over time")
        for ax in (top, bottom):
            ax.grid(True, alpha=0.3)
        fig.tight_layout()
        paths.append(out / f"timeline-{sc['name'].split('/')[-1]}.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    paths += tenants.plot_shares(results.get("timeline") or [], out)
    return paths


def plot_live(live: list[dict], out: Path) -> list[Path]:
    """Per live scenario: pods bound against time, one line per scheduler (stream: pods created dashed), and
    for streams the CDF of gang latency."""
    paths = []
    for sc in live:
        runs = [r for r in sc["runs"] if "error" not in r and r["bound_over_time"]]
        stream = sc.get("mode", "stream") == "stream"
        fig, axes = plt.subplots(1, 2 if stream else 1, figsize=(14 if stream else 8, 5), squeeze=False)
        ax = axes[0][0]
        for r in runs:
            times = [0.0, *r["bound_over_time"]]
            ax.step(times, range(len(times)), where="post", color=COLORS.get(r["scheduler"]), label=r["scheduler"])
            if stream and r.get("created_over_time"):
                made = [0.0, *r["created_over_time"]]
                ax.step(made, range(len(made)), where="post", color=COLORS.get(r["scheduler"]), alpha=0.4, ls="--")
        origin = "the first pending pod was created" if stream else "the scheduler started"
        ax.set_xlabel(f"seconds since {origin}")
        ax.set_ylabel("pods bound" + (" (dashed: created)" if stream else ""))
        ax.set_title(f"{sc['name']}: bindings over time")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        if stream:
            cdf = axes[0][1]
            for r in runs:
                lat = r.get("gang_latencies") or []
                if lat:
                    cdf.step(
                        lat,
                        [(i + 1) / len(lat) for i in range(len(lat))],
                        where="post",
                        color=COLORS.get(r["scheduler"]),
                        label=f"{r['scheduler']} ({len(lat)} gangs)",
                    )
            cdf.set_xscale("log")
            cdf.set_xlabel("gang latency: last member created -> gang bound (s)")
            cdf.set_ylabel("share of complete gangs")
            cdf.set_title("gang latency CDF")
            cdf.grid(True, which="both", alpha=0.3)
            cdf.legend(fontsize=8)
        fig.tight_layout()
        paths.append(out / f"live-{sc['name'].split('/')[-1]}.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths
