"""The results as PNG plots: quality and latency against cluster size, timelines over time, live bindings."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on CI or servers
import matplotlib.pyplot as plt

from gangsolve.bench import tenants
from gangsolve.bench.report.curves import cpu_ms_per_pod, curve_points, deciding_ms_per_pod
from gangsolve.bench.report.tables import timeline_label

COLORS = {
    "kube-scheduler": "tab:gray",
    "kube-scheduler-wap": "tab:olive",
    "kube-scheduler-gang": "tab:green",
    "per-pod-least": "tab:gray",
    "per-pod-most": "tab:brown",
    "greedy-gang": "tab:blue",
    "easy-backfill": "tab:purple",
    "conservative-backfill": "tab:cyan",
    "gangsolve": "tab:red",
    "volcano": "tab:orange",
    "kai": "tab:pink",
    "kueue": "black",
}
MARKERS = {"synthetic": "o", "kube-perf": "s", "openb": "^"}


def color(scheduler: str) -> str | None:
    """A scheduler's colour; a variant of a peer (`kueue-unblocked`, `volcano-reclaim`) takes the peer's."""
    if scheduler in COLORS:
        return COLORS[scheduler]
    family = next((name for name in COLORS if scheduler.startswith(f"{name}-")), None)
    return COLORS[family] if family else None


def save(fig, path: Path) -> Path:
    """Lay the figure out, write it to `path` and free it."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


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
        ax.plot(xs, ys, style, marker=MARKERS.get(family, "x"), color=color(scheduler))
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
    handles = [Line2D([], [], color=color(s), label=s) for s in schedulers]
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
    paths.append(save(fig, out / "quality.png"))

    fig, ax = plt.subplots(figsize=(8, 5))
    _draw(ax, results, lambda r: r["cycle_p99"], "cycle time p99 (s)", logy=True)
    _legend(ax, results)
    ax.set_title("Latency against cluster size")
    paths.append(save(fig, out / "latency.png"))

    shown: set[str] = set()
    for sc in results.get("timeline") or []:
        if sc["name"] in shown:
            continue  # one plot per scenario: its first seed and estimate mode
        shown.add(sc["name"])
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
        for r in sc["runs"]:
            t = [c["time"] / 60 for c in r["cycles"]]
            tint = color(r["scheduler"])
            top.plot(t, [c["gpu_useful"] for c in r["cycles"]], color=tint, label=f"{r['scheduler']} (running jobs)")
            top.plot(
                t, [c["gpu_allocation"] for c in r["cycles"]], ":", color=tint, label=f"{r['scheduler']} (allocated)"
            )
            bottom.plot(t, [c["pending"] for c in r["cycles"]], color=tint, label=r["scheduler"])
        top.set_ylabel("GPU utilization")
        top.legend(fontsize=7)
        bottom.set_ylabel("pending jobs")
        bottom.set_xlabel("minutes")
        top.set_title(f"{timeline_label(sc)}: GPU utilization and queue over time")
        for ax in (top, bottom):
            ax.grid(True, alpha=0.3)
        paths.append(save(fig, out / f"timeline-{sc['name'].split('/')[-1]}.png"))
    paths += plot_shares(results.get("timeline") or [], out)
    return paths


def plot_shares(timeline: list[dict], out: Path) -> list[Path]:
    """Per scheduler, each tenant's share of the GPUs over time against its weighted fair share."""
    paths = []
    plotted = set()
    for sc in timeline:
        runs = [r for r in sc["runs"] if r["summary"].get("fairness")]
        if not runs or sc["name"] in plotted:
            continue  # one plot per scenario: its first seed and estimate mode
        plotted.add(sc["name"])
        fig, axes = plt.subplots(len(runs), 1, figsize=(10, 2.6 * len(runs)), sharex=True, squeeze=False)
        for ax, r in zip(axes[:, 0], runs, strict=True):
            tenants_ = r["summary"]["fairness"]["tenants"]
            weights = {t: f["weight"] for t, f in tenants_.items()}
            parents = {t: f.get("parent", "") for t, f in tenants_.items()}
            capacity = r["summary"]["gpus"]
            t = [c["time"] / 60 for c in r["cycles"]]
            split = [tenants.tree_split(capacity, weights, parents, c["demand"], {}) for c in r["cycles"]]
            for i, tenant in enumerate(q for q in weights if q not in parents.values()):  # the teams
                tint = f"C{i}"
                ax.plot(t, [c["held"].get(tenant, 0) / capacity for c in r["cycles"]], color=tint, label=tenant)
                ax.plot(t, [fair[tenant] / capacity for fair in split], "--", color=tint, linewidth=0.8)
            ax.set_ylabel("GPU share")
            ax.set_title(f"{r['scheduler']} (solid: held; dashed: weighted fair share)", fontsize=9)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7, loc="upper right")
        axes[-1, 0].set_xlabel("minutes")
        fig.suptitle(f"{sc['name']} seed {sc['seed']} {sc['estimates']}: tenants' GPU shares over time")
        paths.append(save(fig, out / f"shares-{sc['name'].split('/')[-1]}.png"))
    return paths


def plot_curves(live: list[dict], out: Path) -> list[Path]:
    """Per shape run at several sizes: time deciding and CPU per bound pod, and peak RSS, against nodes, one line
    per scheduler."""
    paths = []
    points = curve_points(live)
    panels = (
        (deciding_ms_per_pod, "ms deciding per bound pod"),
        (cpu_ms_per_pod, "CPU ms per bound pod"),
        (lambda r: r.get("peak_rss_mib"), "peak RSS (MiB)"),
    )
    for shape in dict.fromkeys(shape for shape, _ in points):
        fig, axes = plt.subplots(1, 3, figsize=(17, 5))
        for (of_shape, scheduler), runs in points.items():
            for ax, (metric, _label) in zip(axes, panels, strict=True):
                xy = [(n, metric(r)) for n, r in runs if of_shape == shape and metric(r) is not None]
                if xy:
                    xs, ys = zip(*xy, strict=True)
                    ax.plot(xs, ys, "-o", color=color(scheduler), label=scheduler)
        for ax, (_metric, label) in zip(axes, panels, strict=True):
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("nodes")
            ax.set_ylabel(label)
            ax.grid(True, which="both", alpha=0.3)
        axes[1].legend(fontsize=8)  # CPU: every run has it
        fig.suptitle(f"live {shape}: cost against cluster size")
        paths.append(save(fig, out / f"scale-curve-{shape}.png"))
    return paths


def plot_live(live: list[dict], out: Path) -> list[Path]:
    """Per live scenario: pods bound against time, one line per scheduler (stream: pods created dashed), and
    for streams the CDF of gang latency; the scale curves."""
    paths = plot_curves(live, out)
    for sc in live:
        runs = [r for r in sc["runs"] if "error" not in r and r["bound_over_time"]]
        stream = sc.get("mode", "stream") == "stream"
        fig, axes = plt.subplots(1, 2 if stream else 1, figsize=(14 if stream else 8, 5), squeeze=False)
        ax = axes[0][0]
        for r in runs:
            times = [0.0, *r["bound_over_time"]]
            ax.step(times, range(len(times)), where="post", color=color(r["scheduler"]), label=r["scheduler"])
            if stream and r.get("created_over_time"):
                made = [0.0, *r["created_over_time"]]
                ax.step(made, range(len(made)), where="post", color=color(r["scheduler"]), alpha=0.4, ls="--")
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
                        color=color(r["scheduler"]),
                        label=f"{r['scheduler']} ({len(lat)} gangs)",
                    )
            cdf.set_xscale("log")
            cdf.set_xlabel("gang latency: last member created -> gang bound (s)")
            cdf.set_ylabel("share of complete gangs")
            cdf.set_title("gang latency CDF")
            cdf.grid(True, which="both", alpha=0.3)
            cdf.legend(fontsize=8)
        paths.append(save(fig, out / f"live-{sc['name'].split('/')[-1]}.png"))
    return paths
