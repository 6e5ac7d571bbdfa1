"""GPU shares as users ask for them: KAI Scheduler's pod annotations, read into the solver's milli-GPU.

- `gpu-fraction: "0.5"`: half of one GPU (a share in (0, 1]);
- `gpu-memory: "2000"`: 2000 MiB of one GPU, a share of the chosen node's GPU memory (its label
  `nvidia.com/gpu.memory`, MiB, as GPU feature discovery writes it);
- `gangsolve.io/gpu-index: "3"`: on a bound pod, the GPU of its node it holds a share of (the binder writes it
  before binding): how a restarted scheduler knows which devices are shared.

A share is counted in thousandths of a GPU, rounded up (a GPU is never promised more than it has).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from gangsolve.edge import schema
from gangsolve.edge.errors import InputError, shown
from gangsolve.solver.model import GPU, GPU_MEMORY_LABEL, SHARE, WHOLE, Pod

FRACTION = "gpu-fraction"
MEMORY = "gpu-memory"
INDEX = "gangsolve.io/gpu-index"
_DECIMAL = re.compile(r"^(?:0|[1-9][0-9]{0,8})?(?:\.[0-9]{1,9})?$")  # 0.5, .25, 1, 1.0 (no signs, no exponents)
_WHOLE_NUMBER = re.compile(r"^[0-9]{1,9}$")


@dataclass(frozen=True)
class Asked:
    """A pod's GPU share: `milli` for a fraction, `memory` (MiB) for a memory request (its milli depends on
    the node)."""

    milli: int = 0
    memory: int = 0

    def on(self, gpu_memory: int) -> int:
        """The milli-GPU this asks of a GPU with `gpu_memory` MiB."""
        return self.milli or math.ceil(WHOLE * self.memory / gpu_memory)


def _field(name: str) -> str:
    return f"metadata.annotations.{name}"


def asked(obj: schema.Pod, requests: dict[str, int]) -> Asked | None:
    """The share `obj` asks for (None: no share), its annotations checked: a fraction in (0, 1], a memory in
    whole MiB above 0, not both, and not beside whole GPUs."""
    annotations = obj.metadata.annotations
    fraction, memory = annotations.get(FRACTION), annotations.get(MEMORY)
    if fraction is None and memory is None:
        return None
    if fraction is not None and memory is not None:
        raise InputError(obj.describe(), _field(MEMORY), f"a pod asks for {FRACTION} or {MEMORY}, not both")
    if requests.get(GPU, 0):
        which = FRACTION if fraction is not None else MEMORY
        raise InputError(obj.describe(), _field(which), f"a pod asks for a GPU share or for {GPU}, not both")
    if fraction is not None:
        value = float(fraction) if _DECIMAL.match(fraction) and fraction not in ("", ".") else math.nan
        if not 0 < value <= 1:
            message = f"expected a share of one GPU in (0, 1] such as '0.5', got {shown(fraction)}"
            raise InputError(obj.describe(), _field(FRACTION), message)
        return Asked(milli=max(1, math.ceil(round(value * WHOLE, 6))))
    assert memory is not None
    if not _WHOLE_NUMBER.match(memory) or int(memory) == 0:
        message = f"expected MiB of one GPU, a whole number above 0 such as '2000', got {shown(memory)}"
        raise InputError(obj.describe(), _field(MEMORY), message)
    return Asked(memory=int(memory))


def gpu_memory(obj: schema.Node) -> int:
    """MiB of each of the node's GPUs (its label), 0 when it is not labelled."""
    text = obj.metadata.labels.get(GPU_MEMORY_LABEL)
    if text is None:
        return 0
    if not _WHOLE_NUMBER.match(text) or int(text) == 0:
        message = f"expected MiB of one GPU, a whole number above 0, got {shown(text)}"
        raise InputError(obj.describe(), f"metadata.labels.{GPU_MEMORY_LABEL}", message)
    return int(text)


def on_node(obj: schema.Pod, share: Asked, node: str, gpus: int, memory: int) -> tuple[int | None, int]:
    """A bound pod's (device index, milli-GPU) on its node, which has `gpus` GPUs of `memory` MiB each. The
    index is None when the pod does not say (no annotation)."""
    if share.memory:
        if not memory:
            message = f"node {node} has no label {GPU_MEMORY_LABEL}: its GPUs' memory is unknown"
            raise InputError(obj.describe(), _field(MEMORY), message)
        if share.memory > memory:
            message = f"{share.memory} MiB is above the {memory} MiB of node {node}'s GPUs"
            raise InputError(obj.describe(), _field(MEMORY), message)
    text = obj.metadata.annotations.get(INDEX)
    if text is None:
        return None, share.on(memory)
    if not _WHOLE_NUMBER.match(text) or int(text) >= gpus:
        message = f"expected the index of one of node {node}'s {gpus} GPUs (0 to {gpus - 1}), got {shown(text)}"
        raise InputError(obj.describe(), _field(INDEX), message)
    return int(text), share.on(memory)


def planned(obj: schema.Pod, share: Asked, memories: list[int]) -> tuple[int, int]:
    """A pending pod's (milli-GPU to plan with, MiB asked): a memory request is planned as its share of the
    smallest GPU memory among the nodes' (`memories`) that holds it; above every GPU's memory, or with no
    node labelled, it is refused."""
    if not share.memory:
        return share.milli, 0
    if not memories:
        message = f"no node has label {GPU_MEMORY_LABEL}: no GPU's memory is known"
        raise InputError(obj.describe(), _field(MEMORY), message)
    holding = [m for m in memories if m >= share.memory]
    if not holding:
        message = f"{share.memory} MiB is above every GPU's memory (the largest has {max(memories)} MiB)"
        raise InputError(obj.describe(), _field(MEMORY), message)
    return share.on(min(holding)), share.memory


def planned_pod(pod: Pod, obj: schema.Pod, memories: list[int]) -> Pod:
    """A pending pod asking for GPU memory with the share it is planned with (`planned`); others as they are."""
    if not pod.gpu_memory:
        return pod
    milli, memory = planned(obj, Asked(memory=pod.gpu_memory), memories)
    return replace(pod, requests={**pod.requests, SHARE: milli}, gpu_memory=memory)


def held(shares: Iterable[tuple[str, int, int | None]]) -> dict[str, dict[int, int]]:
    """Per node, the milli-GPU held on each of its GPUs, from bound pods' (node, milli, GPU index). A share whose
    GPU is not named holds a GPU of its own (a negative index): no room is ever assumed on it."""
    out: dict[str, dict[int, int]] = {}
    for node, milli, index in shares:
        if not milli:
            continue
        devices = out.setdefault(node, {})
        key = index if index is not None else -1 - sum(1 for d in devices if d < 0)
        devices[key] = devices.get(key, 0) + milli
    return out
