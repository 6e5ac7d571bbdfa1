"""`gangsolve dev-cluster`: a local control plane for trying gangsolve by hand."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from types import FrameType

import click

from gangsolve.bench.devcluster.binaries import Binaries, BinariesMissing, cache_dir, read_versions
from gangsolve.bench.devcluster.controlplane import ControlPlane, ControlPlaneError
from gangsolve.bench.devcluster.fake_nodes import NodeSpec


@click.group()
def dev_cluster() -> None:
    """A local Kubernetes control plane (etcd, kube-apiserver, controller manager, scheduler, kwok)."""


@dev_cluster.command()
@click.option("--nodes", default=4, show_default=True, help="Number of fake (kwok) nodes.")
@click.option("--cpu", default="32", show_default=True, help="CPU capacity of each node.")
@click.option("--memory", default="256Gi", show_default=True, help="Memory capacity of each node.")
@click.option("--gpus", default=8, show_default=True, help="nvidia.com/gpu capacity of each node.")
@click.option("--pods", default=110, show_default=True, help="Pod capacity of each node.")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", help="Label every node (repeatable).")
@click.option("--taint", "taints", multiple=True, metavar="KEY[=VALUE]:EFFECT", help="Taint every node (repeatable).")
@click.option("--node-prefix", default="kwok-node-", show_default=True)
@click.option(
    "--scheduler/--no-scheduler",
    default=True,
    show_default=True,
    help="Run the default kube-scheduler (turn off when gangsolve should bind every pod).",
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep certificates, data, logs and the kubeconfig here (default: a temp dir, removed).",
)
def up(
    nodes: int,
    cpu: str,
    memory: str,
    gpus: int,
    pods: int,
    labels: tuple[str, ...],
    taints: tuple[str, ...],
    node_prefix: str,
    scheduler: bool,
    workdir: Path | None,
) -> None:
    """Start the control plane with fake nodes, print its kubeconfig, and run until Ctrl-C."""
    label_map = {}
    for item in labels:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--label")
        label_map[key] = value

    def say(msg: str) -> None:
        click.echo(f"[dev-cluster] {msg}", err=True)

    # Ctrl-C and SIGTERM (e.g. from a supervisor) tear down. SIGINT is set explicitly too: a shell starts
    # background jobs with SIGINT ignored, and Python then never raises KeyboardInterrupt.
    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    cp = ControlPlane(scheduler=scheduler, workdir=workdir, keep_workdir=workdir is not None, log=say)
    try:
        cp.start()
        specs = [
            NodeSpec(
                f"{node_prefix}{i}", cpu=cpu, memory=memory, gpus=gpus, pods=pods, labels=label_map, taints=list(taints)
            )
            for i in range(nodes)
        ]
        if specs:
            cp.add_nodes(specs)
            say(f"{len(specs)} kwok nodes Ready")
        click.echo(f"kubeconfig: {cp.kubeconfig}")
        click.echo(f"export KUBECONFIG={cp.kubeconfig}")
        click.echo(f"kubectl: {cp.binaries.kubectl}")
        say("running; press Ctrl-C to stop")
        while True:
            cp.check_alive()
            time.sleep(1)
    except KeyboardInterrupt:
        say("stopping")
    except (BinariesMissing, ControlPlaneError) as e:
        say(f"error: {e}")
        cp.stop(failed=True)
        sys.exit(1)
    finally:
        # A second Ctrl-C must not cut the teardown short and leave processes behind.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        cp.stop()
        say("stopped")


@dev_cluster.command()
def binaries() -> None:
    """Show the pinned versions and whether each binary is in the cache."""
    versions = read_versions()
    for key, value in versions.items():
        click.echo(f"{key}={value}")
    click.echo(f"cache: {cache_dir() / 'bin'}")
    try:
        b = Binaries.locate()
    except BinariesMissing as e:
        click.echo(str(e), err=True)
        sys.exit(1)
    for name in ("kube_apiserver", "kube_controller_manager", "kube_scheduler", "kubectl", "etcd", "kwok", "helm"):
        click.echo(f"{name.replace('_', '-')}: {getattr(b, name)}")
