"""`gangsolve bench`: every scheduler on the same snapshots, side by side in one run."""

from __future__ import annotations

import os
import platform
import sys
import tempfile
from collections.abc import Mapping
from datetime import UTC, datetime
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from gangsolve.bench import manifests, placement_metrics
from gangsolve.bench.live import LIVE_GRID_NAMES, LIVE_SCHEDULERS, REAL_PEERS, WAP
from gangsolve.bench.scenarios import GRIDS, SCENARIOS
from gangsolve.bench.static.runner import PEERS_ONLY, SCHEDULERS, Runner, add_gaps

TIMELINE_TIME_LIMIT = 0.5  # per cycle: the time-based mode runs hundreds of cycles


def _file_name(name: str) -> str:
    return name.replace("/", "__") + ".json"


def _times(text: str) -> tuple[float, ...]:
    try:
        times = tuple(sorted({float(t) for t in text.split(",") if t.strip()}))
    except ValueError:
        times = ()
    if not times or min(times) < 0.05:
        raise click.BadParameter(f"{text!r}: seconds >= 0.05, comma-separated", param_hint="--quality-times")
    return times


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    )


def run_static(
    names: list[str],
    schedulers: list[str],
    time_limit: float | None,
    repeat: int,
    snapshots: Path,
    console: Console,
    quality_times: tuple[float, ...] = (),
    quality_repeat: int = 1,
    settings: Mapping[str, Any] | None = None,
) -> list[dict]:
    """Each static scenario once per scheduler (`settings`: gangsolve's, the bench's `--set`)."""
    results: list[dict] = []
    if not names:
        return results
    with _progress(console) as progress, Runner() as runner:
        per_scenario = len(schedulers) + len(quality_times) * quality_repeat
        peers = sum(len(SCENARIOS[name].peers) for name in names)
        task = progress.add_task("scenarios", total=len(names) * per_scenario + peers)
        for name in names:
            scenario = SCENARIOS[name]
            progress.update(task, description=f"{name}: generating")
            objs = scenario.build()
            path = snapshots / _file_name(name)
            path.write_bytes(manifests.dumps(objs))
            limit = time_limit or scenario.time_limit
            runs = []
            usual = [s for s in schedulers if scenario.only is None or s in scenario.only]
            for scheduler in dict.fromkeys([*usual, *scenario.peers]):
                progress.update(task, description=f"{name}: {scheduler}")
                runs.append(runner.run(path, scheduler, limit, repeat, settings))
                progress.advance(task)
            add_gaps(runs)
            quality = []
            for t in quality_times:  # gangsolve alone at each time limit: quality against time
                for _ in range(quality_repeat):
                    progress.update(task, description=f"{name}: gangsolve at {t:g} s")
                    run = runner.run(path, "gangsolve", t, 1, settings)
                    if "error" not in run:
                        run["gap"] = placement_metrics.gap(run["gangs_placed"], run["best_bound"])
                    quality.append(run)
                    progress.advance(task)
            kinds = [o["kind"] for o in objs]
            results.append(
                {
                    "name": name,
                    "description": scenario.description,
                    "nodes": scenario.nodes,
                    "contended": scenario.contended,
                    "time_limit": limit,
                    "snapshot": path.name,
                    "objects": {
                        "nodes": kinds.count("Node"),
                        "pods": kinds.count("Pod"),
                        "podgroups": kinds.count("PodGroup"),
                    },
                    "runs": runs,
                    "quality": quality,
                }
            )
    return results


def run_timelines(
    names: list[str],
    schedulers: list[str],
    time_limit: float,
    seeds: list[int],
    modes: list[str],
    snapshots: Path,
    console: Console,
    settings: dict | None = None,
) -> list[dict]:
    """Every timeline for every seed and estimate mode; schedulers that ignore estimates run once per seed and
    their result stands for every mode; `settings`: gangsolve's (`--set`)."""
    from gangsolve.bench.timeline.simulation import TIMELINES, USES_ESTIMATES, simulate

    results = []
    with _progress(console) as progress:
        for name in names:
            timeline = TIMELINES[name]
            for seed in seeds:
                objs = timeline.build(seed)
                (snapshots / _file_name(f"{name}-seed{seed}")).write_bytes(manifests.dumps(objs))
                once: dict[str, dict] = {}
                for mode in modes:
                    runs = []
                    for scheduler in dict.fromkeys([*schedulers, *timeline.peers]):
                        if scheduler not in USES_ESTIMATES and scheduler in once:
                            runs.append({**once[scheduler], "estimates": mode})
                            continue
                        task = progress.add_task(f"{name} seed {seed} {mode}: {scheduler}", total=timeline.max_cycles)
                        run = simulate(
                            objs,
                            scheduler,
                            time_limit,
                            on_cycle=partial(progress.advance, task),
                            estimates=mode,
                            seed=seed,
                            timeline=timeline,
                            settings=settings,
                        )
                        progress.update(task, total=len(run["cycles"]), completed=len(run["cycles"]))
                        once.setdefault(scheduler, run)
                        runs.append(run)
                    results.append(
                        {
                            "name": name,
                            "description": timeline.description,
                            "seed": seed,
                            "estimates": mode,
                            "runs": runs,
                        }
                    )
    return results


def run_live(
    names: list[str], schedulers: list[str], time_limit: float | None, quiet: float, log_dir: Path, console: Console
) -> list[dict]:
    from gangsolve.bench.live.runs import run_scenarios

    if not names:
        return []
    with _progress(console) as progress:
        task = progress.add_task("live", total=len(names) * len(schedulers))

        def started(name: str, scheduler: str) -> None:
            if progress.tasks[0].description != "live":
                progress.advance(task)
            progress.update(task, description=f"{name}: {scheduler} (live)")

        results = run_scenarios(names, schedulers, log_dir, time_limit=time_limit, quiet=quiet, on_run=started)
        progress.update(task, completed=len(names) * len(schedulers))
    return results


def run_preemption(names: list[str], time_limit: float | None, console: Console) -> list[dict]:
    from gangsolve.bench.static.preemption_rounds import PREEMPTION_SCHEDULERS, run_scenarios

    if not names:
        return []
    with _progress(console) as progress:
        task = progress.add_task("preemption", total=len(names) * len(PREEMPTION_SCHEDULERS))

        def started(name: str, scheduler: str) -> None:
            if progress.tasks[0].description != "preemption":
                progress.advance(task)
            progress.update(task, description=f"{name}: {scheduler}")

        results = run_scenarios(names, list(PREEMPTION_SCHEDULERS), time_limit, on_run=started)
        progress.update(task, completed=len(names) * len(PREEMPTION_SCHEDULERS))
    return results


def run_live_preemption(
    names: list[str], schedulers: list[str], time_limit: float | None, quiet: float, log_dir: Path, console: Console
) -> list[dict]:
    """The live preemption scenarios for `schedulers` (empty: kube-scheduler's two preemptions, gangsolve and the
    real peers that preempt, where built)."""
    from gangsolve.bench.live.live_preemption import PEERS, run_scenarios
    from gangsolve.bench.static.preemption_rounds import PREEMPTION_SCHEDULERS

    if not names:
        return []
    every = [*PREEMPTION_SCHEDULERS, *PEERS]
    chosen = [s for s in every if s in schedulers] if schedulers else every
    with _progress(console) as progress:
        task = progress.add_task("live preemption", total=len(names) * len(chosen))

        def started(name: str, scheduler: str) -> None:
            if progress.tasks[0].description != "live preemption":
                progress.advance(task)
            progress.update(task, description=f"{name}: {scheduler} (live)")

        results = run_scenarios(names, chosen, log_dir, time_limit=time_limit, quiet=quiet, on_run=started)
        progress.update(task, completed=len(names) * len(chosen))
    return results


@click.command()
@click.option("--scenario", "names", multiple=True, metavar="NAME", help="A scenario to run (repeatable); see --list.")
@click.option(
    "--grid",
    type=click.Choice(sorted(GRIDS)),
    default=None,
    help="A named set of scenarios [default: quick when no --scenario is given].",
)
@click.option(
    "--scheduler",
    "schedulers",
    multiple=True,
    type=click.Choice([*SCHEDULERS, "easy-backfill", "conservative-backfill", "gangsolve-history"]),
    help="Only these schedulers (repeatable) [default: all; easy-backfill, conservative-backfill and "
    "gangsolve-history run in the time-based mode only].",
)
@click.option(
    "--time-limit",
    type=click.FloatRange(min=0.05),
    default=None,
    help="gangsolve's seconds per cycle [default: each scenario's latency target; 0.5 in the timeline].",
)
@click.option(
    "--repeat",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Cycles per static run, for cycle time percentiles.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("bench/results"),
    show_default=True,
    help="Where results.json, results.md and the PNG plots go.",
)
@click.option(
    "--write-snapshots",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Also keep every scenario's snapshot here (JSON that `gangsolve solve` reads).",
)
@click.option(
    "--quality-times",
    type=str,
    default=None,
    metavar="SECONDS,...",
    help="Also run gangsolve alone at each of these time limits (e.g. 1,5,60): gangs placed, bound and gap "
    "against time, and whether more time ever gave a worse answer.",
)
@click.option(
    "--quality-repeat",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Runs per time limit in the quality-against-time table (medians are shown).",
)
@click.option("--timeline", is_flag=True, help="Also run the time-based mode (jobs arrive, run and leave).")
@click.option(
    "--seed",
    "seeds",
    multiple=True,
    type=int,
    help="Time-based mode: a workload seed (repeatable) [default: 1, 2 and 3].",
)
@click.option(
    "--estimates",
    "modes",
    multiple=True,
    type=click.Choice(["exact", "noisy", "absent"]),
    help="Time-based mode: runtime estimates the jobs declare (repeatable) [default: all three].",
)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="NAME=VALUE",
    help="One of gangsolve's settings (repeatable): a SolveConfig field (reservations=32, plan_relaxation=0.25, "
    "order=arrival, parallel=2), or, in the time-based mode, how a gang starves (starvation_age=2700, "
    "starvation_by_width=false); shown in the results.",
)
@click.option(
    "--live",
    is_flag=True,
    help="Also run the live mode: each scheduler on its own real control plane with kwok nodes (needs "
    "`make binaries`; minutes). Alone, it runs only the live scenarios.",
)
@click.option(
    "--live-grid",
    type=click.Choice(LIVE_GRID_NAMES),
    default="small",
    show_default=True,
    help="Live scenarios --live runs: the small ones, the live timelines (jobs arriving and finishing, seeds 1-3), "
    "the live tenants timelines (teams sharing through queues, seeds 1-3), the live topology ones (one block, "
    "few racks, seeds 1-3), the scale ones at 1,000, 5,000 or 16,384 nodes, or the scale curve (one burst shape at "
    "all three sizes; see --list).",
)
@click.option(
    "--live-scheduler",
    "live_schedulers",
    multiple=True,
    type=click.Choice([*LIVE_SCHEDULERS, WAP, *REAL_PEERS]),
    help="Live mode: only these schedulers (repeatable) [default: all; the peers where `make peers` built them; "
    f"{WAP} (kube-scheduler's workload-aware preemption) in the live preemption scenarios only].",
)
@click.option(
    "--live-quiet",
    type=click.FloatRange(min=1),
    default=10.0,
    show_default=True,
    help="Live mode: a run ends when no pod was bound or started for this many seconds.",
)
@click.option(
    "--dra",
    "dra_seeds",
    type=click.IntRange(min=1),
    default=None,
    metavar="SEEDS",
    help="Only compare GPUs as DRA devices with GPUs as an extended resource on the synthetic 100- and "
    "1,000-node clusters, SEEDS clusters each (cycles of --repeat per seed; --time-limit, default 1).",
)
@click.option(
    "--plan-cost",
    "plan_seeds",
    type=click.IntRange(min=1),
    default=None,
    metavar="SEEDS",
    help="Only compare cycles with the plan off and on at 1,000 and 5,000 busy synthetic nodes with 1,000 pending "
    "gangs, SEEDS clusters each (cycles of --repeat per seed; --time-limit, default 1).",
)
@click.option(
    "--preemption",
    is_flag=True,
    help="Also run the preemption scenarios (gangsolve, kube-scheduler's per-pod and workload-aware preemption); "
    "with --live, on the real control plane too. Alone, it runs only those.",
)
@click.option("--list", "list_only", is_flag=True, help="List scenarios and grids, then exit.")
def bench_command(
    names,
    grid,
    schedulers,
    time_limit,
    repeat,
    out,
    write_snapshots,
    quality_times,
    quality_repeat,
    timeline,
    seeds,
    modes,
    settings,
    live,
    live_grid,
    live_schedulers,
    live_quiet,
    dra_seeds,
    plan_seeds,
    preemption,
    list_only,
) -> None:
    """Compare per-pod kube-scheduler, greedy gang allocation and gangsolve on the same snapshots."""
    from gangsolve.bench.live.live_preemption import LIVE_PREEMPTION_GRID, LIVE_PREEMPTION_SCENARIOS
    from gangsolve.bench.live.live_scenarios import LIVE_GRIDS, LIVE_SCENARIOS
    from gangsolve.bench.report import plots, tables, targets  # matplotlib: loaded only when benchmarking
    from gangsolve.bench.static.preemption_rounds import GRID as PREEMPTION_GRID
    from gangsolve.bench.static.preemption_rounds import SCENARIOS as PREEMPTION_SCENARIOS
    from gangsolve.bench.timeline.simulation import (
        ESTIMATES,
        HISTORY_ONLY,
        SEEDS,
        TIMELINE_GRIDS,
        TIMELINE_SCHEDULERS,
        TIMELINE_SETTINGS,
        TIMELINES,
        parse_settings,
    )

    try:
        typed_settings = parse_settings(settings)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--set") from None
    solve_settings = {k: v for k, v in typed_settings.items() if k not in TIMELINE_SETTINGS}  # (static scenarios)
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)  # logs and CI: keep the wide tables on one line per row
    if dra_seeds:
        _compare_dra(console, dra_seeds, repeat, time_limit or 1.0, solve_settings)
        return
    if plan_seeds:
        _compare_plan(console, plan_seeds, repeat, time_limit or 1.0, solve_settings)
        return
    if list_only:
        registries = (SCENARIOS, TIMELINES, LIVE_SCENARIOS, PREEMPTION_SCENARIOS, LIVE_PREEMPTION_SCENARIOS)
        described: dict[str, str] = {name: s.description for registry in registries for name, s in registry.items()}
        for name, description in described.items():
            console.print(f"[bold]{name}[/]  {description}")
        for g, members in GRIDS.items():
            console.print(f"grid [bold]{g}[/]: {', '.join(members + (TIMELINE_GRIDS[g] if timeline else []))}")
        for g, members in LIVE_GRIDS.items():
            console.print(f"live grid [bold]{g}[/]: {', '.join(members)}")
        return
    known = (SCENARIOS, TIMELINES, LIVE_SCENARIOS, PREEMPTION_SCENARIOS, LIVE_PREEMPTION_SCENARIOS)
    unknown = [n for n in names if not any(n in registry for registry in known)]
    if unknown:
        raise click.BadParameter(f"unknown scenario {', '.join(unknown)} (see --list)", param_hint="--scenario")
    live_names = [n for n in names if n in LIVE_SCENARIOS] or (LIVE_GRIDS[live_grid] if live and not preemption else [])
    preempt_names = [n for n in names if n in PREEMPTION_SCENARIOS] or (PREEMPTION_GRID if preemption else [])
    live_preempt_names = [n for n in names if n in LIVE_PREEMPTION_SCENARIOS] or (
        LIVE_PREEMPTION_GRID if live and preemption else []
    )
    if (names or live or preemption) and grid is None:
        static, timed = [n for n in names if n in SCENARIOS], [n for n in names if n in TIMELINES]
    else:
        grid = grid or "quick"
        static = list(dict.fromkeys([*GRIDS[grid], *(n for n in names if n in SCENARIOS)]))
        timed = TIMELINE_GRIDS[grid] if timeline else []
    timeline_schedulers = list(schedulers) or [
        s for s in TIMELINE_SCHEDULERS if s not in PEERS_ONLY and s not in HISTORY_ONLY
    ]
    schedulers = [s for s in schedulers if s in SCHEDULERS] or [s for s in SCHEDULERS if s not in PEERS_ONLY]
    times = _times(quality_times) if quality_times else ()

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        snapshots = write_snapshots or Path(tmp)
        snapshots.mkdir(parents=True, exist_ok=True)
        results = {
            "command": "gangsolve " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["bench"] else "gangsolve bench",
            "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "ortools": version("ortools"),
                "platform": platform.platform(),
            },
            "scenarios": run_static(
                static, schedulers, time_limit, repeat, snapshots, console, times, quality_repeat, solve_settings
            ),
            "timeline": run_timelines(
                timed,
                timeline_schedulers,
                time_limit or TIMELINE_TIME_LIMIT,
                list(seeds or SEEDS),
                list(modes or ESTIMATES),
                snapshots,
                console,
                typed_settings,
            ),
            "live": run_live(
                live_names,
                list(live_schedulers) or [*LIVE_SCHEDULERS, *REAL_PEERS],
                time_limit,
                live_quiet,
                out / "live-logs",
                console,
            ),
            "preemption": run_preemption(preempt_names, time_limit, console),
            "live_preemption": run_live_preemption(
                live_preempt_names, list(live_schedulers), time_limit, live_quiet, out / "live-logs", console
            ),
        }
    results["targets"] = targets.check_targets(results)
    tables.print_table(results, console)
    tables.write_json(results, out / "results.json")
    (out / "results.md").write_text(tables.markdown(results))
    paths = plots.plot(results, out)
    console.print(f"wrote {out / 'results.json'}, {out / 'results.md'}, " + ", ".join(str(p) for p in paths))


def _compare_dra(console: Console, seeds: int, repeat: int, time_limit: float, settings: dict) -> None:
    from gangsolve.bench.static import dra_comparison

    results = {n: dra_comparison.compare(n, seeds, repeat, time_limit, settings) for n in dra_comparison.SIZES}
    title = f"GPUs as DRA devices vs extended resources ({seeds} seeds x {repeat} cycles, {time_limit:g} s)"
    _print_comparison(console, title, dra_comparison.table(results), results)


def _compare_plan(console: Console, seeds: int, repeat: int, time_limit: float, settings: dict) -> None:
    from gangsolve.bench.static import plan_cost

    results = {n: plan_cost.compare(n, seeds, repeat, time_limit, settings) for n in plan_cost.SIZES}
    title = f"The plan's cost per cycle ({seeds} seeds x {repeat} cycles, {time_limit:g} s)"
    _print_comparison(console, title, plan_cost.table(results), results)


def _print_comparison(console: Console, title: str, rows: list[list[str]], results: dict) -> None:
    """A side-by-side comparison's table (its first row the header), then every validator violation counted."""
    from rich.table import Table

    out = Table(title=title)
    for column in rows[0]:
        out.add_column(column)
    for row in rows[1:]:
        out.add_row(*row)
    console.print(out)
    bad = sum(v.violations for variants in results.values() for v in variants.values())
    console.print(f"validator violations: {bad}")
