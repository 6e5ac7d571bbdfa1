"""The `gangsolve` command line."""

import click

from gangsolve import __version__


@click.group()
@click.version_option(__version__, prog_name="gangsolve")
def cli() -> None:
    """An optimizing gang scheduler for Kubernetes."""


def main() -> None:
    cli()
