"""`gangsolve export`: the objects a cycle reads, listed once, as one `kind: List` that `gangsolve solve` reads."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson

from gangsolve.edge.snapshot import TAKEN_AT_ANNOTATION
from gangsolve.live.kube import Kube
from gangsolve.live.watchers import RESOURCES, Watcher


async def export(kubeconfig: str | None) -> bytes:
    """Also records when it listed (an annotation on the List), which `gangsolve solve` takes as the cycle's
    clock, so a live cycle replays offline exactly: starving gangs and pods waiting for their gang included."""
    kube = await Kube.connect(kubeconfig)
    items: list[dict] = []
    taken = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
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
    listing = {
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"annotations": {TAKEN_AT_ANNOTATION: taken}},
        "items": items,
    }
    return orjson.dumps(listing, option=orjson.OPT_INDENT_2) + b"\n"
