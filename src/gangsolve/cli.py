"""The `gangsolve` command line."""

from __future__ import annotations

import sys

import click
from rich.console import Console

from bench.cli import bench_command
from gangsolve import __version__
from gangsolve.devcluster.cli import dev_cluster
from gangsolve.errors import InputError

DEFAULT_TIME_LIMIT = 2.0


@click.group()
@click.version_option(__version__, prog_name="gangsolve")
def cli() -> None:
    """An optimizing gang scheduler for Kubernetes."""


def fail(message: str) -> None:
    """Bad input: one line on stderr, exit code 2, nothing on stdout."""
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


@cli.command()
@click.argument("snapshot")
@click.option("--scheduler-name", default="gangsolve", show_default=True, help="Schedule pods with this schedulerName.")
@click.option("--group-label", default=None, help="Pods of a namespace sharing this label's value form one gang.")
@click.option(
    "--time-limit", type=click.FloatRange(min=0.05), default=DEFAULT_TIME_LIMIT, show_default=True,
    help="Seconds for the whole cycle; the best plan found by then is returned.",
)
@click.option("--output", "-o", type=click.Choice(["table", "json"]), default="table", show_default=True)
def solve(snapshot: str, scheduler_name: str, group_label: str | None, time_limit: float, output: str) -> None:
    """Solve one scheduling cycle for SNAPSHOT (a file of Kubernetes objects, or - for stdin)."""
    from gangsolve import render
    from gangsolve.gangs import build_cluster
    from gangsolve.snapshot import read
    from solver import SolveConfig
    from solver import solve as solve_cycle

    try:
        cluster = build_cluster(read(snapshot), scheduler_name, group_label)
    except InputError as exc:
        fail(str(exc))
    placement = solve_cycle(cluster, SolveConfig(time_limit=time_limit))
    if output == "json":
        sys.stdout.buffer.write(render.to_json(placement))
    else:
        render.print_table(placement, Console())


cli.add_command(bench_command, name="bench")
cli.add_command(dev_cluster, name="dev-cluster")


def main() -> None:
    cli()
