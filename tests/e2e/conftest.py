"""Fixtures for end-to-end tests against the real local control plane (gangsolve.bench.devcluster).

- `control_plane`: one ControlPlane for the whole session (etcd, kube-apiserver, kube-controller-manager,
  kube-scheduler, kwok). Missing binaries make every e2e test fail (never skip) with the fix: `make binaries`.
  A module may take one of its own instead (tests/e2e/clusters.py says when).
- `namespace`: a fresh namespace per test (pods can be created in it at once), deleted afterwards.
- `make_nodes`: creates kwok nodes with unique names, waits until they are Ready, deletes them afterwards.
- `kube_client`: a kubernetes_asyncio ApiClient on the control plane (async tests).
- `kubectl`: runs the pinned kubectl against it (handy for assertions).
- `scheduler_account`: the chart's ServiceAccount and RBAC, exactly as helm renders them, in namespace
  `gangsolve-e2e`; every `gangsolve run` of the suite runs as it, so the whole suite exercises the chart's
  permissions, and the API server's audit log records every request it makes (tests/e2e/test_rbac.py).
- `gangsolve_factory`: starts `gangsolve run` processes as that account; afterwards checks the cluster.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import clusters
import pytest
import pytest_asyncio
from clusters import SchedulerAccount, install_pod_group_crds, install_scheduler_account
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config
from live_helpers import assert_cluster_sound, unique

from gangsolve.bench.devcluster import ApiError, Binaries, ControlPlane, NodeSpec
from gangsolve.bench.devcluster.gangsolve_process import GangsolveProcess
from tests.helm import Helm


@pytest.fixture(scope="session")
def control_plane(binaries: Binaries) -> Iterator[ControlPlane]:
    with clusters.control_plane(binaries) as cp:
        yield cp


@pytest.fixture(scope="session")
def scheduler_account(
    control_plane: ControlPlane, helm: Helm, tmp_path_factory: pytest.TempPathFactory
) -> SchedulerAccount:
    return install_scheduler_account(control_plane, helm, tmp_path_factory.mktemp("account"))


def _dns_label(text: str, limit: int) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:limit].rstrip("-")


@pytest.fixture
def namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"{_dns_label(request.node.name, 40)}-{secrets.token_hex(3)}"
    control_plane.create_namespace(name)
    yield name
    control_plane.delete_namespace(name)


NodeFactory = Callable[..., list[str]]


@pytest.fixture
def make_nodes(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[NodeFactory]:
    """make_nodes(count=1, wait=True, **NodeSpec fields) -> node names (Ready unless wait=False)."""
    created: list[str] = []
    prefix = _dns_label(request.node.name, 30)

    def factory(count: int = 1, *, wait: bool = True, **spec: Any) -> list[str]:
        specs = [NodeSpec(f"{prefix}-{secrets.token_hex(3)}", **spec) for _ in range(count)]
        created.extend(s.name for s in specs)
        return control_plane.add_nodes(specs, wait=wait)

    yield factory
    for name in created:
        control_plane.delete_node(name)


@pytest_asyncio.fixture
async def kube_client(control_plane: ControlPlane) -> AsyncIterator[k8s_client.ApiClient]:
    configuration = k8s_client.Configuration()
    await k8s_config.load_kube_config(config_file=str(control_plane.kubeconfig), client_configuration=configuration)
    async with k8s_client.ApiClient(configuration) as api:
        yield api


@pytest.fixture
def kubectl(control_plane: ControlPlane) -> Callable[..., subprocess.CompletedProcess[str]]:
    return control_plane.kubectl


@pytest.fixture
def gangsolve_factory(control_plane: ControlPlane, scheduler_account: SchedulerAccount, tmp_path: Path):
    """start(*extra_args, scheduler_name=None, wait_ready=True) -> a running GangsolveProcess, authenticated as the
    chart's ServiceAccount, its Lease (with --leader-elect) the one the chart allows. All are stopped after
    the test, their logs printed (shown when the test fails), and the cluster checked for soundness."""
    started: list[GangsolveProcess] = []
    name = unique()
    lease = ["--lease-namespace", scheduler_account.namespace, "--lease-name", scheduler_account.name]

    def start(
        *extra: str, scheduler_name: str | None = None, wait_ready: bool = True, env: Mapping[str, str] | None = None
    ) -> GangsolveProcess:
        scheduler = scheduler_name or name
        g = GangsolveProcess(
            scheduler_account.kubeconfig,
            scheduler,
            tmp_path / f"gangsolve-{scheduler}-{secrets.token_hex(3)}.log",
            "--time-limit",
            "1",
            *extra,
            *lease,
            env={**os.environ, **(env or {})},
        )
        started.append(g)
        return g.start(wait_ready=wait_ready)

    start.scheduler_name = name  # type: ignore[attr-defined]
    start.lease_path = (  # type: ignore[attr-defined]
        f"/apis/coordination.k8s.io/v1/namespaces/{scheduler_account.namespace}/leases/{scheduler_account.name}"
    )
    yield start
    try:
        labels = [g.args[g.args.index("--group-label") + 1] for g in started if "--group-label" in g.args]
        assert_cluster_sound(control_plane, labels[0] if labels else None)
    finally:
        for g in started:
            g.stop()
            print(f"---- gangsolve log {g.log_path.name}\n{g.log()[-6000:]}")
        with contextlib.suppress(ApiError):  # the next test's scheduler starts with no leader
            control_plane.request("DELETE", start.lease_path)  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def pod_group_crds(control_plane: ControlPlane) -> None:
    install_pod_group_crds(control_plane)
