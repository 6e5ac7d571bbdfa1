"""One cycle, offline and live: `gangsolve solve --skip-invalid` on a snapshot and the live solver actor on a store
fed the same objects decide the same bindings, nominations, evictions, device allocations and objects left out,
on the users' clusters, a preemption, DRA claims, a bad object and a gang the solver fails on."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import anyio
import orjson
import pytest
import yaml
from click.testing import CliRunner

import gangsolve.cycle as cycle_module
from gangsolve.cli import cli
from gangsolve.live.channels import Latest
from gangsolve.live.messages import CycleResult, GangPlan, Preemption, Resync
from gangsolve.live.store import ClusterStore
from gangsolve.live.watchers import RESOURCES
from tests.builders import (
    k8s_claim,
    k8s_device_class,
    k8s_gpu,
    k8s_node,
    k8s_pdb,
    k8s_pod,
    k8s_pod_group,
    k8s_slice,
    with_claims,
)
from tests.live.actors import solver_actor

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _objects(path: Path) -> list[dict]:
    out = []
    for doc in yaml.safe_load_all(path.read_text()):
        if doc:
            out += doc["items"] if doc.get("kind", "").endswith("List") else [doc]
    return out


def _gang(name: str, size: int, gpus: int = 1, **pod) -> list[dict]:
    objs = [k8s_pdb(name, size, {"job": name})]
    objs += [k8s_pod(f"{name}-{i}", gpus=gpus, labels={"job": name}, **pod) for i in range(size)]
    return objs


def _dra() -> list[dict]:
    objs: list[dict] = [k8s_device_class()]
    for n in ("n1", "n2"):
        objs += [k8s_node(n, gpus=0), k8s_slice(n, [k8s_gpu(f"gpu-{i}") for i in range(4)])]
    objs.append(k8s_pdb("train", 3, {"job": "train"}))
    for i in range(3):
        objs.append(k8s_claim(f"train-{i}", count=2))
        objs.append(with_claims(k8s_pod(f"train-{i}", labels={"job": "train"}), f"train-{i}"))
    return objs


def _bad_object() -> list[dict]:
    return [
        k8s_node("n1", gpus=8),
        *_gang("fine", 2, gpus=2),
        k8s_pod_group("bad", "many"),  # minMember is no number: left out, its pods wait for a readable one
        k8s_pod("b-0", gpus=1, labels={"scheduling.x-k8s.io/pod-group": "bad"}),
        k8s_pod("poison", cpu="1e16"),  # valid to the API server, past what the model counts
    ]


def _failing_gang() -> list[dict]:
    return [k8s_node("n1", gpus=8), *_gang("ok", 2, gpus=2), *_gang("cursed", 2, gpus=1)]


CASES = {
    "users-tfjob": (_objects(EXAMPLES / "tfjob-8.yaml"), "kube-batchd"),
    "preemption": (_objects(EXAMPLES / "tfjob-preempt.yaml"), "kube-batchd"),
    "dra-claims": (_dra(), "gangsolve"),
    "bad-object": (_bad_object(), "gangsolve"),
    "failing-gang": (_failing_gang(), "gangsolve"),
}


@pytest.fixture
def solver_fails_on_cursed(monkeypatch):
    """The solver raises on any cluster holding gang default/cursed, offline and live alike."""
    real = cycle_module.solve

    def cursed(cluster, config, previous=None):
        if any(g.name == "default/cursed" for g in cluster.gangs):
            raise OverflowError("Python int too large to convert to C long")
        return real(cluster, config, previous)

    monkeypatch.setattr(cycle_module, "solve", cursed)


def _offline(objs: list[dict], scheduler: str, now: datetime, tmp_path: Path) -> dict:
    path = tmp_path / "snap.json"
    path.write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    args = ["solve", str(path), "--scheduler-name", scheduler, "--skip-invalid", "-o", "json"]
    result = CliRunner().invoke(cli, [*args, "--now", now.strftime("%Y-%m-%dT%H:%M:%SZ")])
    assert result.exit_code == 0, result.output
    out = orjson.loads(result.stdout)
    return {
        "bindings": out["bindings"],
        "nominations": out["nominations"],
        "evictions": sorted((e["pod"], e["node"], e["for"]) for e in out["evictions"]),
        "allocations": {c: sorted(d["device"] for d in ds) for c, ds in out["allocations"].items()},
        "skipped": sorted(s["object"] for s in out["skipped"]),
    }


def _store(objs: list[dict]) -> ClusterStore:
    store = ClusterStore()
    for resource in RESOURCES:
        group = resource.api_version.split("/")[0] if "/" in resource.api_version else ""
        mine = [
            o
            for o in objs
            if o.get("kind") == resource.kind
            and (o.get("apiVersion", "").split("/")[0] if "/" in o.get("apiVersion", "") else "") == group
        ]
        for o in mine:
            o.setdefault("metadata", {}).setdefault("uid", f"uid-{o['metadata']['name']}")
            if o["kind"] in ("Pod", "PodDisruptionBudget", "PodGroup", "ResourceClaim"):
                o["metadata"].setdefault("namespace", "default")
        store.apply(Resync(resource, mine))
    return store


async def _live(objs: list[dict], scheduler: str) -> dict:
    actor = solver_actor(_store(objs), scheduler_name=scheduler, time_limit=2)
    send, receive = anyio.create_memory_object_stream[GangPlan | Preemption](math.inf)
    results: Latest[CycleResult] = Latest()
    await actor.cycle(send, results)
    result = await results.take()
    bindings, nominations, evictions, allocations = {}, {}, [], {}
    while True:
        try:
            message = receive.receive_nowait()
        except anyio.WouldBlock:
            break
        if isinstance(message, Preemption):
            nominations.update({key: node for key, _uid, node in message.nominations if node})
            evictions += [(v.pod, v.node, v.preemptor) for v in message.victims]
        else:
            bindings.update({key: node for key, _uid, node in message.pods})
            for w in message.claims:
                if w.allocation is not None:
                    allocations[w.claim] = sorted(r["device"] for r in w.allocation["devices"]["results"])
    return {
        "bindings": bindings,
        "nominations": nominations,
        "evictions": sorted(evictions),
        "allocations": allocations,
        "skipped": sorted(obj for obj, _why in result.skipped),
    }


@pytest.mark.asyncio
@pytest.mark.parametrize("case", sorted(CASES))
async def test_the_offline_and_the_live_cycle_decide_the_same(case, tmp_path, solver_fails_on_cursed):
    objs, scheduler = CASES[case]
    now = datetime.now(UTC).replace(microsecond=0)
    offline = _offline(objs, scheduler, now, tmp_path)
    live = await _live(objs, scheduler)
    assert live == offline
    assert offline["bindings"] or offline["nominations"]  # every case decides something
    if case == "bad-object":
        assert offline["skipped"] == ["Pod default/poison", "PodGroup default/bad"]
    if case == "failing-gang":
        assert offline["skipped"] == ["Pod default/cursed-0", "Pod default/cursed-1"]
        assert set(offline["bindings"]) == {"default/ok-0", "default/ok-1"}
    if case == "preemption":
        assert offline["evictions"]
    if case == "dra-claims":
        assert len(offline["allocations"]) == 3
