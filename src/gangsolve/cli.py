"""The `gangsolve` command line."""

from __future__ import annotations

import sys

import importlib

import click
from rich.console import Console

from gangsolve import __version__
from gangsolve.errors import InputError

DEFAULT_TIME_LIMIT = 2.0

# Commands that live in other packages, imported only when used: `gangsolve --version` and `solve` must not
# pay for the benchmark's plotting or the control plane's helpers.
LAZY_COMMANDS = {
    "bench": "bench.cli:bench_command",
    "dev-cluster": "gangsolve.devcluster.cli:dev_cluster",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *LAZY_COMMANDS])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in LAZY_COMMANDS:
            module, attr = LAZY_COMMANDS[name].split(":")
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, name)


@click.group(cls=LazyGroup)
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




def main() -> None:
    cli()
