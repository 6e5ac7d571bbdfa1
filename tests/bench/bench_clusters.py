"""Small hand-made clusters, built as Kubernetes objects like the benchmark scenarios."""

from __future__ import annotations

from gangsolve.bench import manifests
from gangsolve.bench.scenarios import PRIORITY_CLASSES, gang_objects


def gpu_nodes(count: int, gpus: int = 4, **labels: str) -> list[dict]:
    return [manifests.node(f"n{i}", 32_000, 256 * 1024, gpus, dict(labels)) for i in range(count)]


def gang(
    name: str,
    pods: int,
    gpus: int,
    min_member: int | None = None,
    priority: str = "normal",
    created: float = 0,
    **kwargs,
) -> list[dict]:
    return gang_objects(name, created, [("worker", 1000, 1024, gpus)] * pods, min_member or pods, priority, **kwargs)


def cluster_objects(*parts: list[dict]) -> list[dict]:
    out = list(PRIORITY_CLASSES)
    for part in parts:
        out += part
    return out
