"""`gangsolve export`: what the live scheduler reads, listed once, as one `kind: List` that `gangsolve solve`
reads: the objects a cycle reads, and the succeeded pods its runtime history learns from."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson

from gangsolve.edge.snapshot import TAKEN_AT_ANNOTATION
from gangsolve.live.kube import Kube
from gangsolve.live.watchers import RESOURCES, Watcher, succeeded_pods


async def export(kubeconfig: str | None, scheduler_name: str = "gangsolve", context: str | None = None) -> bytes:
    """Also records when it listed (an annotation on the List), which `gangsolve solve` takes as the cycle's
    clock, and lists the pods of `scheduler_name` that succeeded, as a leader does when it starts, so a live
    cycle replays offline exactly: starving gangs, pods waiting for their gang and runtime estimates included."""
    return orjson.dumps(await listing(kubeconfig, scheduler_name, context), option=orjson.OPT_INDENT_2) + b"\n"


async def listing(kubeconfig: str | None, scheduler_name: str = "gangsolve", context: str | None = None) -> dict:
    """What `export` writes, as the List object (`kubectl gangsolve` reads it without writing it out)."""
    kube = await Kube.connect(kubeconfig, context=context)
    items: list[dict] = []
    taken = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        for resource in (*RESOURCES, succeeded_pods(scheduler_name)):
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
    return {
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"annotations": {TAKEN_AT_ANNOTATION: taken}},
        "items": items,
    }
