"""The `gangsolve` command line."""

import click

from gangsolve import __version__
from gangsolve.devcluster.cli import dev_cluster


@click.group()
@click.version_option(__version__, prog_name="gangsolve")
def cli() -> None:
    """An optimizing gang scheduler for Kubernetes."""


cli.add_command(dev_cluster, name="dev-cluster")


def main() -> None:
    cli()
