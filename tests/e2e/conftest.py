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
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import pytest_asyncio
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from gangsolve.bench.devcluster import Binaries, BinariesMissing, ControlPlane, NodeSpec


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
    await k8s_config.load_kube_config(config_file=str(control_plane.kubeconfig),
                                      client_configuration=configuration)
    async with k8s_client.ApiClient(configuration) as api:
        yield api


@pytest.fixture
def kubectl(control_plane: ControlPlane) -> Callable[..., subprocess.CompletedProcess[str]]:
    return control_plane.kubectl
