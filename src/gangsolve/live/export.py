"""`gangsolve export`: the objects a cycle reads, listed once, as one `kind: List` that `gangsolve solve` reads."""

from __future__ import annotations

import orjson

from gangsolve.live.kube import Kube
from gangsolve.live.watchers import RESOURCES, Watcher


async def export(kubeconfig: str | None) -> bytes:
    kube = await Kube.connect(kubeconfig)
    items: list[dict] = []
    try:
        for resource in RESOURCES:
            watcher = Watcher(kube, resource)
            try:
                objs, _rv = await watcher.list()
            except Exception as exc:
                if resource.optional and getattr(exc, "status", None) == 404:
                    continue  # a PodGroup CRD that is not installed
                raise
            for obj in objs:
                (obj.get("metadata") or {}).pop("managedFields", None)
            items.extend(objs)
    finally:
        await kube.close()
    return orjson.dumps({"apiVersion": "v1", "kind": "List", "items": items}, option=orjson.OPT_INDENT_2) + b"\n"
