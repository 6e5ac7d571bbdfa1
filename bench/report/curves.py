"""The scale curve: one live shape run at several cluster sizes, each scheduler's decision time, CPU per bound pod
and memory against the nodes, side by side (the table; plots.plot_curves draws it)."""

from __future__ import annotations

import re

from gangsolve.bench.report.format import num, secs

# What one of a scheduler's decisions is, by where the bench read them (bench/live/peers.py).
DECISION = {
    "gangsolve_scheduling_cycle_duration_seconds": "cycle",
    "scheduler_scheduling_algorithm_duration_seconds": "pod",
    "scheduler_podgroup_scheduling_algorithm_duration_seconds": "pod group",
    "vc-scheduler log": "session",
    "kai-scheduler log": "session",
}
CURVE_COLUMNS = (
    "shape",
    "scheduler",
    "nodes",
    "pods/s",
    "first bind",
    "decision",
    "decisions",
    "decision mean",
    "decision p99 at most",
    "deciding ms per bound pod",
    "CPU ms per bound pod",
    "peak RSS MiB",
)
CURVE_TITLE = (
    "Live scale curve: the same shape at each cluster size run. Decisions as each scheduler times them: "
    "gangsolve's cycles and kube-scheduler's scheduling algorithm from their histograms (p99: the bucket bound "
    "that holds it), Volcano's and KAI's sessions from their logs (+1 open: a session still open when the run "
    "ended, counted in the time deciding)"
)
_SIZED = re.compile(r"live/(\d+)nodes-(.+)")


def curve_points(live: list[dict]) -> dict[tuple[str, str], list[tuple[int, dict]]]:
    """(shape, scheduler) -> [(nodes, run)] by nodes, for shapes run at two sizes or more."""
    out: dict[tuple[str, str], list[tuple[int, dict]]] = {}
    for sc in live:
        sized = _SIZED.fullmatch(sc["name"])
        if sized is None:
            continue
        for r in sc["runs"]:
            if "error" not in r:
                out.setdefault((sized[2], r["scheduler"]), []).append((int(sized[1]), r))
    sizes: dict[str, set[int]] = {}
    for (shape, _), points in out.items():
        sizes.setdefault(shape, set()).update(n for n, _ in points)
    return {k: sorted(v, key=lambda p: p[0]) for k, v in out.items() if len(sizes[k[0]]) > 1}


def cpu_ms_per_pod(r: dict) -> float | None:
    placed = r.get("pods_placed")
    return r["cpu_seconds"] / placed * 1000 if placed and r.get("cpu_seconds") is not None else None


def deciding_ms_per_pod(r: dict) -> float | None:
    placed, decided = r.get("pods_placed"), r.get("decisions")
    return decided["total_seconds"] / placed * 1000 if placed and decided else None


def curve_rows(live: list[dict]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for (shape, scheduler), points in curve_points(live).items():
        for nodes, r in points:
            d = r.get("decisions") or {}
            count = f"{d['count']:,}" + (" +1 open" if d.get("open_seconds") else "") if d else "-"
            rows.append(
                (
                    shape,
                    scheduler,
                    f"{nodes:,}",
                    num(r.get("pods_per_second")),
                    secs(r.get("first_bind_seconds")),
                    DECISION.get(d.get("metric", ""), "-"),
                    count,
                    secs(d.get("mean_seconds")),
                    secs(d.get("p99_at_most_seconds")),
                    num(deciding_ms_per_pod(r), "{:.2f}"),
                    num(cpu_ms_per_pod(r)),
                    num(r.get("peak_rss_mib"), "{:.0f}"),
                )
            )
    return rows
