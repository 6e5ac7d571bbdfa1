"""Fixtures for end-to-end tests against the real local control plane (gangsolve.bench.devcluster).

- `control_plane`: one ControlPlane for the whole session (etcd, kube-apiserver, kube-controller-manager,
  kube-scheduler, kwok). Missing binaries make every e2e test fail (never skip) with the fix: `make binaries`.
- `namespace`: a fresh namespace per test (pods can be created in it at once), deleted afterwards.
- `make_nodes`: creates kwok nodes with unique names, waits until they are Ready, deletes them afterwards.
- `kube_client`: a kubernetes_asyncio ApiClient on the control plane (async tests).
- `kubectl`: runs the pinned kubectl against it (handy for assertions).
"""

from __future__ import annotations

import re
import secrets
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config
from live_helpers import POD_GROUP_APIS, Gangsolve, assert_cluster_sound, pod_group_crd, poll, unique

from gangsolve.bench.devcluster import ApiError, Binaries, BinariesMissing, ControlPlane, NodeSpec


def _say(msg: str) -> None:
    print(f"[control-plane] {msg}", flush=True)


@pytest.fixture(scope="session")
def binaries() -> Binaries:
    try:
        return Binaries.locate()
    except BinariesMissing as e:
        missing = str(e)
    pytest.fail(missing, pytrace=False)


@pytest.fixture(scope="session")
def control_plane(binaries: Binaries) -> Iterator[ControlPlane]:
    with ControlPlane(binaries=binaries, log=_say) as cp:
        yield cp


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
def gangsolve_factory(control_plane: ControlPlane, tmp_path: Path):
    """start(*extra_args, scheduler_name=None, wait_ready=True) -> a running Gangsolve; all are stopped after
    the test, their logs printed (shown when the test fails), and the cluster checked for soundness."""
    started: list[Gangsolve] = []
    name = unique()

    def start(
        *extra: str, scheduler_name: str | None = None, wait_ready: bool = True, env: Mapping[str, str] | None = None
    ) -> Gangsolve:
        g = Gangsolve(control_plane, scheduler_name or name, tmp_path, *extra, env=env)
        started.append(g)
        return g.start(wait_ready=wait_ready)

    start.scheduler_name = name  # type: ignore[attr-defined]
    yield start
    try:
        labels = [g.args[g.args.index("--group-label") + 1] for g in started if "--group-label" in g.args]
        assert_cluster_sound(control_plane, labels[0] if labels else None)
    finally:
        for g in started:
            g.stop()
            print(f"---- gangsolve log {g.log_path.name}\n{g.log()[-6000:]}")


@pytest.fixture(scope="session")
def pod_group_crds(control_plane: ControlPlane) -> None:
    """The two PodGroup CRDs (scheduler-plugins' and Volcano's), schema-less, with the status subresource."""
    for group, version in POD_GROUP_APIS.items():
        try:
            control_plane.request(
                "POST",
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                pod_group_crd(group, version, "pg" if group.endswith("x-k8s.io") else "vpg"),
            )
        except ApiError as e:
            if e.status != 409:
                raise

    def served(group: str, version: str) -> bool:
        try:
            return control_plane.get(f"/apis/{group}/{version}/podgroups") is not None
        except ApiError:  # 429 while the new storage initializes
            return False

    for group, version in POD_GROUP_APIS.items():
        poll(lambda g=group, v=version: served(g, v), timeout=60, what=f"the {group} PodGroup API")
