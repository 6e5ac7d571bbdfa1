"""The docs cannot drift from the code: the generated references are what the code writes, every setting,
flag, metric, watched kind, RBAC rule and JSON sample the docs name is the code's, and every link leads to a
file and heading."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import replace
from itertools import product
from pathlib import Path

import click
import jsonschema
import pytest
from click.testing import CliRunner

from gangsolve import reference
from gangsolve.cli import cli
from gangsolve.edge.gangs import DEFINITION_GRACE, STARVATION_SECONDS
from gangsolve.live import config
from gangsolve.live.watchers import RESOURCES
from gangsolve.plugin import plugin
from tests.helm import Helm, render

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = {path.relative_to(ROOT).as_posix(): path.read_text() for path in [ROOT / "README.md", *DOCS.glob("*.md")]}
SCHEMA = json.loads((ROOT / "src" / "gangsolve" / "solve-output.schema.json").read_text())


@pytest.mark.parametrize("name", sorted(reference.REFERENCES))
def test_the_references_are_what_the_code_writes(name: str) -> None:
    written = reference.REFERENCES[name]()
    assert (DOCS / name).read_text() == written, f"docs/{name} is stale: python -m gangsolve.reference docs"


def test_every_setting_has_help_and_a_default_its_own_check_accepts() -> None:
    for name, field in config.SETTINGS.items():
        assert field.metadata["help"], name
        if field.default not in (None, ()) and field.metadata["shown"] is None:
            assert config.from_mapping({config.key_of(name): field.default}) == {name: field.default}


def _changed(value: object) -> object:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, tuple):
        return ("Trainer",)
    return "changed" if value is None or isinstance(value, str) else pytest.fail(f"no sample for {value!r}")


def test_solve_reads_exactly_the_settings_a_cycle_reads() -> None:
    """configuration.md marks the CYCLE_SETTINGS as read by `solve --config`: each changes what a cycle gets,
    and no other setting does."""
    base = config.Config(identity="x")

    def cycle_inputs(cfg: config.Config) -> tuple:
        return cfg.rules(), cfg.solve_config(), cfg.estimator()

    changes = {
        name
        for name, field in config.SETTINGS.items()
        if cycle_inputs(replace(base, **{name: _changed(getattr(base, name))})) != cycle_inputs(base)
    }
    assert changes == set(config.CYCLE_SETTINGS)


def _options(command: click.Command) -> list[click.Option]:
    options = [p for p in command.params if isinstance(p, click.Option)]
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            options += _options(sub)
    return options


COMMANDS = {name: cli.get_command(click.Context(cli), name) for name in cli.list_commands(click.Context(cli))}
COMMANDS |= plugin.commands  # `kubectl gangsolve why|queues|plan`
FLAGS = {
    name: {"--help"} | {o for p in _options(c) for o in (*p.opts, *p.secondary_opts)} for name, c in COMMANDS.items()
}


@pytest.mark.parametrize("command", ["run", "solve"])
def test_a_flags_default_is_its_settings_default(command: str) -> None:
    for option in _options(COMMANDS[command]):
        if option.name in config.SETTINGS and not option.multiple and option.default is not None:
            assert option.default == config.SETTINGS[option.name].default, option.name


def test_the_defaults_solve_help_names_are_the_codes() -> None:
    text = " ".join(CliRunner().invoke(cli, ["solve", "--help"]).stdout.split())
    assert f"starvation age by then ({STARVATION_SECONDS / 60:g} minutes" in text
    assert f"[default: {DEFINITION_GRACE:g}, as the live scheduler's definition-grace]" in text


# Flags of the other tools the docs show: kubectl, helm, kube-apiserver, kube-scheduler (the settings named
# after its flags), training-operator, hack/build-binaries.sh, hack/build-peers.sh; and the top command's own.
OTHER_TOOLS = {
    "--as",
    "--create-namespace",
    "--endpoint-reconciler-type",
    "--feature-gates",
    "--field-selector",
    "--gang-scheduler-name",
    "--kube-api-burst",
    "--kube-api-qps",
    "--leader-elect-lease-duration",
    "--leader-elect-renew-deadline",
    "--leader-elect-retry-period",
    "--namespace",
    "--print-dir",
    "--runtime-config",
    "--set",
    "--set-json",
    "--source",
    "--subresource",
    "--version",
}
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]")
_COMMAND_LINE = re.compile(r"\bgangsolve ([a-z-]+)([^`|#;&\n]*)")


def test_every_flag_the_docs_name_exists() -> None:
    """A flag after `gangsolve COMMAND` on one line is that command's; any other is some command's, or another
    tool's the docs show."""
    known = set().union(*FLAGS.values()) | OTHER_TOOLS
    wrong = []
    for page, text in PAGES.items():
        for match in _COMMAND_LINE.finditer(text):
            command, tail = match.groups()
            if command in FLAGS:
                wrong += [f"{page}: gangsolve {command} {f}" for f in _FLAG.findall(tail) if f not in FLAGS[command]]
        wrong += [f"{page}: {f}" for f in _FLAG.findall(text) if f not in known]
    assert wrong == []


def _metric_names() -> set[str]:
    names = set()
    for row in (DOCS / "metrics.md").read_text().splitlines():
        cells = [c.strip(" `") for c in row.strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("gangsolve_"):
            name, kind = cells[0], cells[1]
            names |= {name} | ({f"{name}_{s}" for s in ("bucket", "sum", "count")} if kind == "histogram" else set())
    return names


def test_every_metric_the_docs_name_exists() -> None:
    """Names in metrics.md are the code's (the reference test above); every other page names only those.
    `gangsolve_queue_*` names a family by its prefix."""
    names = _metric_names()
    assert len(names) > 20
    wrong = []
    for page, text in PAGES.items():
        for found in re.findall(r"\bgangsolve_[a-z0-9_]+", text):
            ok = any(n.startswith(found) for n in names) if found.endswith("_") else found in names
            if not ok:
                wrong.append(f"{page}: {found}")
    assert wrong == []


def _table(text: str, header: str) -> list[list[str]]:
    """The rows of the first markdown table after `header` (a line of its own, e.g. a heading or an intro)."""
    lines = text[text.index(header) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_the_watched_kinds_in_the_docs_are_the_watchers() -> None:
    """compatibility.md's table of what the scheduler reads is `live/watchers.py`'s RESOURCES: each kind with its
    API versions, and whether the cluster must serve it; the other pages link to it."""
    documented = set()
    for kinds, apis, note in _table(PAGES["docs/compatibility.md"], "### What the scheduler reads"):
        names = [k.strip() for k in re.sub(r"\(.*?\)", "", kinds).split(",")]
        optional = note.startswith("optional")
        documented |= {(k, a, optional) for k, a in product(names, re.findall(r"`([^`]+)`", apis))}
    assert documented == {(r.kind, r.api_version, r.optional) for r in RESOURCES}


def _rules(rows: list[list[str]]) -> set[tuple[str, str, str]]:
    """(group, resource, verb) of every row of a permissions table: `core` is the empty group, and words in
    parentheses explain."""
    out = set()
    for groups, resources, verbs in rows:
        out |= set(
            product(("" if g == "core" else g for g in _words(groups)), _words(resources), _words(verbs.split("(")[0]))
        )
    return out


def _words(cell: str) -> list[str]:
    return [w.strip() for w in re.sub(r"\(.*?\)", "", cell).split(",") if w.strip()]


def _granted(role: dict) -> set[tuple[str, str, str]]:
    return {
        (g, r, v) for rule in role["rules"] for g, r, v in product(rule["apiGroups"], rule["resources"], rule["verbs"])
    }


def test_the_permissions_in_install_md_are_the_charts_rules(helm: Helm) -> None:
    docs = render(helm)
    cluster_role, role = (next(d for d in docs if d["kind"] == kind) for kind in ("ClusterRole", "Role"))
    text = PAGES["docs/install.md"]
    assert _rules(_table(text, "The ClusterRole is exactly")) == _granted(cluster_role)
    assert _rules(_table(text, "and a Role in the release namespace")) == _granted(role)

    # What the chart lets the scheduler list and watch is what it watches (the succeeded pods too are pods).
    watched = {
        (r.path.split("/")[2] if r.path.startswith("/apis/") else "", r.path.rsplit("/", 1)[1]) for r in RESOURCES
    }
    for verb in ("list", "watch"):
        assert {(g, r) for g, r, v in _granted(cluster_role) if v == verb} == watched


def _json_samples() -> list[tuple[str, dict]]:
    """Every ```json block of the README and the docs: each is a `gangsolve solve -o json` sample."""
    return [
        (page, json.loads(block))
        for page, text in PAGES.items()
        for block in re.findall(r"```json\n(.*?)```", text, re.DOTALL)
    ]


def test_the_json_samples_in_the_docs_are_valid_solve_output() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    samples = _json_samples()
    assert "docs/solve.md" in {page for page, _sample in samples}
    for _page, sample in samples:
        jsonschema.validate(sample, SCHEMA, cls=jsonschema.Draft202012Validator)


@pytest.mark.parametrize(
    "args",
    [
        ["examples/tfjob-8.yaml", "--scheduler-name", "kube-batchd"],
        ["examples/tfjob-10.yaml", "--scheduler-name", "kube-batchd"],
        ["examples/tfjob-preempt.yaml", "--scheduler-name", "kube-batchd"],
        ["examples/gpu-sharing.yaml"],
        ["examples/dra-shares.yaml"],
        ["examples/tfjob-8.yaml"],  # nothing of ours: every list empty
    ],
)
def test_solve_output_on_the_examples_is_what_the_schema_says(args: list[str], monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(cli, ["solve", *args, "--time-limit", "0.5", "-o", "json"])
    assert result.exit_code == 0, result.stderr
    jsonschema.validate(json.loads(result.stdout), SCHEMA, cls=jsonschema.Draft202012Validator)


_FENCED = re.compile(r"^```.*?^```", re.S | re.M)
_LINK = re.compile(r"\]\(([^)\s]+)\)")


@functools.cache
def _anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: the text without markup, lower case, punctuation dropped,
    spaces as hyphens; a repeated one gets -1, -2, ..."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} (.+)$", _FENCED.sub("", page.read_text()), re.M):
        plain = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").replace("*", "").strip().lower()
        anchor = re.sub(r"[^\w\- ]", "", plain).replace(" ", "-")
        anchors.add(f"{anchor}-{seen[anchor]}" if anchor in seen else anchor)
        seen[anchor] = seen.get(anchor, 0) + 1
    return anchors


def test_every_link_in_the_docs_leads_somewhere() -> None:
    """A relative link names a file of the repository, and a #fragment one of its headings: the docs link
    across pages to their figures, and a section moved or renamed must take its links along."""
    pages = {**PAGES, "CHANGELOG.md": (ROOT / "CHANGELOG.md").read_text()}
    broken = []
    for page, text in pages.items():
        for link in _LINK.findall(_FENCED.sub("", text)):
            if re.match(r"[a-z]+:", link):  # https:, mailto:
                continue
            path, _, fragment = link.partition("#")
            target = (ROOT / page).parent / path if path else ROOT / page
            if not target.exists():
                broken.append(f"{page}: {link} (no such file)")
            elif fragment and target.suffix == ".md" and fragment not in _anchors(target.resolve()):
                broken.append(f"{page}: {link} (no such heading)")
    assert broken == []
