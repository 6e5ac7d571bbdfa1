"""The fake nodes kwok runs: how one is described (NodeSpec, its Taints) and when it is ready for pods."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gangsolve.bench.devcluster import kwok as kwok_config

GPU_RESOURCE = "nvidia.com/gpu"


@dataclass
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"

    @classmethod
    def parse(cls, text: str) -> Taint:
        """`key=value:Effect`, `key:Effect` or `key` (NoSchedule), as kubectl writes taints."""
        rest, _, effect = text.partition(":")
        key, _, value = rest.partition("=")
        return cls(key=key, value=value, effect=effect or "NoSchedule")

    def as_dict(self) -> dict[str, str]:
        d = {"key": self.key, "effect": self.effect}
        if self.value:
            d["value"] = self.value
        return d


@dataclass
class NodeSpec:
    """A fake node: capacity (= allocatable), labels and taints. kwok makes it Ready."""

    name: str
    cpu: str = "32"
    memory: str = "256Gi"
    pods: int = 110
    gpus: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[Taint | str | Mapping[str, str]] = ()
    extra_resources: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    def capacity(self) -> dict[str, str]:
        cap = {"cpu": str(self.cpu), "memory": str(self.memory), "pods": str(self.pods)}
        if self.gpus:
            cap[GPU_RESOURCE] = str(self.gpus)
        cap.update({k: str(v) for k, v in self.extra_resources.items()})
        return cap

    def manifest(self) -> dict[str, Any]:
        key, value = kwok_config.MANAGED_ANNOTATION
        taints = []
        for t in self.taints:
            if isinstance(t, str):
                t = Taint.parse(t)
            taints.append(t.as_dict() if isinstance(t, Taint) else dict(t))
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
            **self.labels,
        }
        capacity = self.capacity()
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": labels,
                "annotations": {key: value, "node.alpha.kubernetes.io/ttl": "0", **self.annotations},
            },
            "spec": {"taints": taints} if taints else {},
            "status": {"capacity": capacity, "allocatable": dict(capacity)},
        }


def schedulable(node: Mapping[str, Any]) -> bool:
    """Ready=True, and no not-ready/unreachable taint left."""
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in node.get("status", {}).get("conditions", [])
    )
    lifecycle_taints = {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
    tainted = any(t.get("key") in lifecycle_taints for t in node.get("spec", {}).get("taints", []) or [])
    return ready and not tainted
