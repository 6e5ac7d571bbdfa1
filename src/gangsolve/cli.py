"""The `gangsolve` command line."""

from __future__ import annotations

import importlib
import math
import os
import sys
from datetime import UTC
from typing import TYPE_CHECKING

import click
from rich.console import Console

from gangsolve import __version__, cpsat_import
from gangsolve.edge.errors import InputError
from gangsolve.solver import SolveConfig

if TYPE_CHECKING:
    from datetime import datetime

    from gangsolve.cycle import Decisions
    from gangsolve.edge.estimates import Estimator
    from gangsolve.edge.snapshot import Snapshot
    from gangsolve.live.config import Config

# Commands that live in other packages, imported only when used: `gangsolve --version` and `solve` must not
# pay for the benchmark's plotting or the control plane's helpers.
LAZY_COMMANDS = {
    "bench": "gangsolve.bench.bench_cli:bench_command",
    "dev-cluster": "gangsolve.bench.devcluster.dev_cluster_cli:dev_cluster",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *LAZY_COMMANDS])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in LAZY_COMMANDS:
            module, attr = LAZY_COMMANDS[name].split(":")
            try:
                return getattr(importlib.import_module(module), attr)
            except ModuleNotFoundError as exc:
                if not (exc.name or "").startswith(("gangsolve.bench", "matplotlib", "cryptography")):
                    raise
                fail(f"gangsolve {name} needs the bench extra ({exc.name} is missing): pip install 'gangsolve[bench]'")
        return super().get_command(ctx, name)


@click.group(cls=LazyGroup)
@click.version_option(__version__, prog_name="gangsolve")
def cli() -> None:
    """An optimizing gang scheduler for Kubernetes."""


def fail(message: str) -> None:
    """Bad input: one line on stderr, exit code 2, nothing on stdout."""
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


class Seconds(click.ParamType):
    """A finite number of seconds, at least `least` (click's FloatRange lets nan and inf through)."""

    name = "seconds"

    def __init__(self, least: float) -> None:
        self.least = least

    def convert(self, value, param, ctx) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(seconds) or seconds < self.least:
            self.fail(f"{value!r} is not a number of seconds >= {self.least}", param, ctx)
        return seconds


@cli.command()
@click.argument("snapshot")
@click.option(
    "--config",
    "config_file",
    default=None,
    metavar="FILE",
    help="The YAML settings file `gangsolve run` reads; the settings a cycle reads apply "
    "(docs/configuration.md), and the flags given here win over them.",
)
@click.option("--scheduler-name", default="gangsolve", show_default=True, help="Schedule pods with this schedulerName.")
@click.option("--group-label", default=None, help="Pods of a namespace sharing this label's value form one gang.")
@click.option(
    "--time-limit",
    type=Seconds(0.05),
    default=SolveConfig.time_limit,
    show_default=True,
    help="Seconds for the whole cycle; the best plan found by then is returned.",
)
@click.option("--output", "-o", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option(
    "--now",
    type=click.DateTime(["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%SZ"]),
    default=None,
    help="The cycle's clock (RFC 3339): gangs pending longer than the starvation age by then (30 minutes, "
    "sooner for gangs wider than a node) rank as starving, the others by how long they have waited for their "
    "runtime (queue-order), gangs that cannot start are planned from running pods' expected ends, and pods that may "
    "still get a gang definition wait for it, as in the live scheduler. Default: the time "
    "`gangsolve export` took the snapshot; without either, no gang is starving and no pod waits.",
)
@click.option(
    "--definition-grace",
    type=Seconds(0),
    default=None,
    help="Seconds from their creation that pods which may still get a gang definition wait for it "
    "[default: 10, as the live scheduler's definition-grace].",
)
@click.option(
    "--training-kind",
    "training_kinds",
    multiple=True,
    help="An owner kind whose pods wait for their gang definition, beside the known training jobs (repeatable).",
)
@click.option(
    "--preemption/--no-preemption",
    default=True,
    show_default=True,
    help="Pending gangs that may preempt evict lower-priority pods to fit (docs/preemption.md).",
)
@click.option(
    "--default-runtime",
    default=None,
    metavar="DURATION",
    help="With --now: the runtime (a Go duration, e.g. 1h) of gangs and running pods that declare none "
    "(annotation gangsolve.io/expected-runtime, activeDeadlineSeconds); a guess: starts planned on it are shown, "
    "not held [default: none, they run for ever].",
)
@click.option(
    "--skip-invalid",
    is_flag=True,
    help="Leave out objects that cannot be read, as the live scheduler does, and list them under `skipped` "
    "(default: the first one is an error). For exports of clusters where a tenant's object is bad.",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Refuse fields the objects' Kubernetes API types do not have, as the API server does (default: a "
    "warning on stderr for each, e.g. a misspelt spec.nodeSelector).",
)
@click.pass_context
def solve(
    ctx: click.Context,
    snapshot: str,
    config_file: str | None,
    output: str,
    now,
    skip_invalid: bool,
    strict: bool,
    **flags,
) -> None:
    """Solve one scheduling cycle for SNAPSHOT (a file of Kubernetes objects, or - for stdin)."""
    from gangsolve import render
    from gangsolve.edge import unknown_fields
    from gangsolve.edge.hints import hints, unsolvable
    from gangsolve.edge.quantity import parse_duration
    from gangsolve.edge.snapshot import read
    from gangsolve.live.config import ConfigError, build

    given = given_flags(ctx, flags)
    if "default_runtime" in given:
        text = given["default_runtime"]
        try:
            given["default_runtime"] = parse_duration(text)
        except ValueError:
            fail(f"--default-runtime: expected a duration such as 90m or 1h30m, got {text!r}")
        if given["default_runtime"] <= 0:
            fail(f"--default-runtime: must be positive, got {text!r}")
    try:
        cfg = build(config_file, given)
    except ConfigError as exc:
        fail(str(exc))
    if now is not None and now.tzinfo is None:
        now = now.replace(tzinfo=UTC)  # the Z form parses naive
    try:
        snap = read(snapshot)
        missing = unsolvable(snap)
        if missing:
            fail(missing)
        unknown = unknown_fields.in_snapshot(snap)
        if unknown and strict:
            fail(unknown[0] + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""))
        decisions = offline_cycle(snap, cfg, now, strict=not skip_invalid)
    except InputError as exc:
        fail(str(exc))
    for field in unknown:  # beside an answer: an error is one line alone
        click.echo(f"warning: {field}", err=True)
    if output == "json":
        sys.stdout.buffer.write(render.to_json(decisions))
    else:
        render.print_table(decisions, Console())
    for line in hints(decisions.snapshot, cfg.scheduler_name, decisions.origins):
        click.echo(line, err=True)


def offline_cycle(snap: Snapshot, cfg: Config, now: datetime | None, strict: bool) -> Decisions:
    """The cycle `solve` runs on a snapshot (and `kubectl gangsolve` on the cluster's), as the live scheduler
    would: its runtime history learnt from the snapshot's pods that succeeded, its clock `now`, else the time the
    snapshot was taken. `strict`: the first unreadable object is an error, instead of left out."""
    from gangsolve import cycle

    estimator = cfg.estimator()
    learn_history(estimator, snap, cfg.scheduler_name, strict=strict)
    rules, config = cfg.rules(), cfg.solve_config()
    return cycle.run(snap, rules, config, now=now or snap.taken_at, estimator=estimator, strict=strict)


def given_flags(ctx: click.Context, flags: dict) -> dict:
    """The flags given on the command line (not left at their defaults): they win over the config file."""
    from click.core import ParameterSource

    return {k: v for k, v in flags.items() if ctx.get_parameter_source(k) != ParameterSource.DEFAULT}


def learn_history(estimator: Estimator, snap: Snapshot, scheduler_name: str, strict: bool) -> None:
    """The runtime history learns from the snapshot's pods of ours that succeeded (what `gangsolve export`
    lists for it), as the live scheduler's learns from its watch of them. A pod whose times do not parse is an
    error, or with --skip-invalid is not learned from, as live."""
    from gangsolve.edge import schema

    for pod in snap.pods:
        status = pod.get("status")
        if not isinstance(status, dict) or status.get("phase") != "Succeeded":
            continue
        try:
            if schema.check(pod, "Pod").scheduler == scheduler_name:
                estimator.learn([pod])
        except InputError:
            if strict:
                raise


@cli.command()
@click.option("--kubeconfig", default=None, help="Kubeconfig file; in-cluster config when omitted (else $KUBECONFIG).")
@click.option(
    "--scheduler-name", default="gangsolve", show_default=True, help="Schedule pending pods with this schedulerName."
)
@click.option("--group-label", default=None, help="Pods of a namespace sharing this label's value form one gang.")
@click.option(
    "--config",
    "config_file",
    default=None,
    metavar="FILE",
    help="YAML file of settings: every key of docs/configuration.md, most of which have no flag here (a flag's "
    "key is its name without the dashes). Flags given on the command line win over the file.",
)
@click.option("--leader-elect/--no-leader-elect", default=False, help="Elect a leader on a Lease before scheduling.")
@click.option(
    "--metrics-addr",
    default="0.0.0.0:8080",
    show_default=True,
    help="HOST:PORT for /metrics, /healthz and /readyz; empty turns it off.",
)
@click.option(
    "--plan-page/--no-plan-page",
    default=False,
    show_default=True,
    help="Also serve /plan (a read-only page of the plan) and /plan.json on --metrics-addr.",
)
@click.option("--time-limit", type=float, default=SolveConfig.time_limit, show_default=True, help="Seconds per solve.")
@click.option(
    "--preemption/--no-preemption",
    default=True,
    show_default=True,
    help="Pending gangs that may preempt evict lower-priority pods to fit.",
)
@click.option("--lease-namespace", default="kube-system", show_default=True)
@click.option("--lease-name", default="gangsolve", show_default=True)
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option(
    "--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info", show_default=True
)
@click.pass_context
def run(ctx: click.Context, config_file: str | None, **flags) -> None:
    """Schedule gangs on a live cluster, beside kube-scheduler (pods naming --scheduler-name only)."""
    from gangsolve.live.config import ConfigError, build

    try:
        cfg = build(config_file, given_flags(ctx, flags))
    except ConfigError as exc:
        fail(str(exc))

    import anyio
    from kubernetes_asyncio.config import ConfigException

    from gangsolve.live.leader import LeadershipLost
    from gangsolve.live.run import main as run_main

    if cfg.kubeconfig and not os.path.isfile(cfg.kubeconfig):
        fail(f"kubeconfig {cfg.kubeconfig}: no such file")
    try:
        code = anyio.run(run_main, cfg)
    except KeyboardInterrupt:
        code = 0
    except BaseException as exc:
        if isinstance(exc, SystemExit):
            raise
        from gangsolve.live import logs

        leaves = exc.exceptions if isinstance(exc, BaseExceptionGroup) else [exc]
        if any(isinstance(leaf, ConfigException) for leaf in leaves):
            fail(f"kubeconfig: {next(leaf for leaf in leaves if isinstance(leaf, ConfigException))}")
        for leaf in leaves:
            expected = isinstance(leaf, LeadershipLost)
            logs.logger.error(
                "exiting",
                exc_info=None if expected else leaf,
                extra={"fields": {"error": f"{type(leaf).__name__}: {leaf}"}},
            )
        code = 1
    sys.exit(code)


@cli.command()
@click.option("--kubeconfig", default=None, help="Kubeconfig file; in-cluster config when omitted (else $KUBECONFIG).")
@click.option(
    "--scheduler-name",
    default="gangsolve",
    show_default=True,
    help="Also write this scheduler's pods that succeeded, which its runtime history learns from.",
)
@click.option("--output", "-o", "output", default="-", show_default=True, help="File to write, - for stdout.")
def export(kubeconfig: str | None, scheduler_name: str, output: str) -> None:
    """Write what the live scheduler reads (every kind it watches, and the pods that succeeded) as a snapshot
    `gangsolve solve` replays."""
    import anyio

    from gangsolve.live.export import export as run_export

    if kubeconfig and not os.path.isfile(kubeconfig):
        fail(f"kubeconfig {kubeconfig}: no such file")
    try:
        data = anyio.run(run_export, kubeconfig, scheduler_name)
    except Exception as exc:
        fail(f"export: {type(exc).__name__}: {exc}")
    if output == "-":
        sys.stdout.buffer.write(data)
    else:
        with open(output, "wb") as f:
            f.write(data)


def main() -> None:
    cpsat_import.install()  # a command people type should not wait for pandas (see there)
    cli()
