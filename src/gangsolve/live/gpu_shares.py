"""Which GPU of its node each fractional pod bound or assumed there holds, for the store's node views.

A bound pod names its GPU by its annotation `gangsolve.io/gpu-index` (the binder writes it before the bind); a
pod the solver placed and the binder has not bound yet holds the GPU the cycle chose for it. That is how a
restarted scheduler knows which GPUs are shared. A share the store cannot place on a GPU (no annotation, an
index the node does not have, a memory request its node's label cannot measure) holds a GPU of its own, all of
it for a memory share it cannot measure: a GPU is never thought freer than it is.
"""

from __future__ import annotations

from collections.abc import Iterable

from gangsolve.edge import schema, shares
from gangsolve.edge.errors import InputError
from gangsolve.solver.model import GPU, WHOLE, Node


class GpuShares:
    def __init__(self) -> None:
        self._asked: dict[str, tuple[schema.Pod, shares.Asked]] = {}  # pod key -> the pod and the share it asks

    def __bool__(self) -> bool:
        return bool(self._asked)

    def observe(self, key: str, pod: schema.Pod | None, requests: dict[str, int] | None) -> bool:
        """File the pod's share (None: gone or unreadable); True when it asks for one now or did before."""
        asked = shares.asked(pod, requests) if pod is not None and requests is not None else None
        had = self._asked.pop(key, None) is not None
        if pod is not None and asked is not None:
            self._asked[key] = (pod, asked)
        return had or asked is not None

    def held(self, node: Node, bound: Iterable[str], assumed: Iterable[tuple[str, int | None]]) -> dict[int, int]:
        """GPU index -> milli-GPU that the fractional pods `bound` there (keys) and `assumed` there (key, GPU
        chosen) hold; a share whose GPU is unknown under a negative index (see `shares.held`)."""
        if not self._asked:
            return {}
        out = []
        for key in bound:
            if key in self._asked:
                out.append((node.name, *self._on(node, key)))
        for key, gpu in assumed:
            if key in self._asked:
                milli, _index = self._on(node, key)
                out.append((node.name, milli, gpu))
        return shares.held(out).get(node.name, {})

    def _on(self, node: Node, key: str) -> tuple[int, int | None]:
        pod, asked = self._asked[key]
        try:
            index, milli = shares.on_node(pod, asked, node.name, node.allocatable.get(GPU, 0), node.gpu_memory)
        except InputError:  # (a cycle that reads the pod says why)
            return asked.milli or WHOLE, None
        return milli, index
