"""The configuration and metrics references, written from the code so they cannot drift from it.

`python -m gangsolve.reference docs` rewrites docs/configuration.md (every setting of `gangsolve run`, from
gangsolve.live.config, with the flags of `run` and `solve` that set it) and docs/metrics.md (every series
gangsolve.live.metrics registers); tests/test_docs.py fails when the committed files differ from these.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import MISSING
from pathlib import Path

import click
from prometheus_client.metrics import MetricWrapperBase

from gangsolve.cli import cli
from gangsolve.live import config
from gangsolve.live.metrics import Metrics

GENERATED = "<!-- Written by `python -m gangsolve.reference docs` from the code; edit the code, not this file. -->"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return lines + ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]


def _flags(command: str) -> dict[str, str]:
    """Setting name -> the flag of `gangsolve COMMAND` that sets it, as written on the command line."""
    out = {}
    for param in cli.commands[command].params:
        if isinstance(param, click.Option) and param.name in config.SETTINGS:
            flag = "/".join(param.opts + param.secondary_opts)
            out[param.name] = f"`{flag} {param.metavar}`" if param.metavar else f"`{flag}`"
    return out


def _default(name: str) -> str:
    field = config.SETTINGS[name]
    if field.metadata["shown"] is not None:
        return f"`{field.metadata['shown']}`"
    value = field.default
    assert value is not MISSING, f"{name}: a default made per process needs `shown`"
    if value is None or value == ():
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`"


def configuration() -> str:
    run, solve = _flags("run"), _flags("solve")

    def offline(name: str) -> str:
        if name not in config.CYCLE_SETTINGS:
            return ""
        return solve.get(name, "from the file")

    rows = (
        (
            f"`{config.key_of(name)}`",
            config.expected(name),
            _default(name),
            run.get(name, ""),
            offline(name),
            field.metadata["help"],
        )
        for name, field in config.SETTINGS.items()
    )
    lines = [
        "# Configuration reference",
        "",
        GENERATED,
        "",
        "`gangsolve run --config FILE` reads a YAML mapping of these keys; flags given on the command line win over",
        "the file, the file over the defaults. Most settings have no flag: the `run` column names the flags there",
        "are. `gangsolve solve --config FILE` reads the same file for the settings one cycle reads (the `solve`",
        "column: its flag, else the file's value) and leaves the live scheduler's own settings alone, so a live",
        "cycle replays offline with the settings it had ([solve.md](solve.md)).",
        "",
        *_table(("key", "value", "default", "`run` flag", "`solve`", "meaning"), rows),
        "",
        "A mistake in the file is one line naming the key, and exit status 2:",
        "",
        "```",
        "error: config /etc/gangsolve/config.yaml: time-limit: expected a number > 0, got 'soon'",
        "```",
        "",
    ]
    return "\n".join(lines)


def _labels(metric: MetricWrapperBase) -> str:
    return ", ".join(f"`{label}`" for label in metric._labelnames)  # no public accessor for a family's labels


def metrics() -> str:
    rows = []
    for metric in vars(Metrics()).values():
        if not isinstance(metric, MetricWrapperBase):
            continue
        (family,) = metric.describe()
        name = family.name + ("_total" if family.type == "counter" else "")
        rows.append((f"`{name}`", family.type, _labels(metric), family.documentation))
    lines = [
        "# Metrics reference",
        "",
        GENERATED,
        "",
        "`gangsolve run` serves these on `GET /metrics` (Prometheus text format) at `metrics-addr`",
        "([configuration.md](configuration.md)); the chart's Service and ServiceMonitor expose them. Names follow",
        "kube-scheduler's and Volcano's where they have one. A histogram's series are its name with `_bucket`,",
        "`_sum` and `_count`.",
        "",
        *_table(("metric", "type", "labels", "meaning"), rows),
        "",
    ]
    return "\n".join(lines)


REFERENCES = {"configuration.md": configuration, "metrics.md": metrics}


def main(argv: Sequence[str]) -> None:
    """Write every reference into the folder given (docs/)."""
    (folder,) = argv
    for name, write in REFERENCES.items():
        (Path(folder) / name).write_text(write())


if __name__ == "__main__":
    main(sys.argv[1:])
