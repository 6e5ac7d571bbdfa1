"""How long `kubectl gangsolve` takes on a big cluster, side by side with `kubectl get pods -A -o json`.

    .venv/bin/python hack/time-plugin.py --scenario live/5000nodes-synthetic-burst --repeat 3

Puts a live scenario's objects on the dev cluster's API server (nodes, priority classes, PDBs, the background
pods bound to their nodes, the gangs pending), then runs each command once per round and prints the medians.
No kwok: at 5,000 nodes on 2 cores it cannot bring 40,000 pods to Running in the bench's 15 minutes, and the
plugin reads a bound, unfinished pod alike whatever its phase. The API server drops a Node's status on create,
so each node's status (Ready, allocatable) is written through the status subresource afterwards, and the taint
admission adds for a node without one is taken off.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import anyio

from gangsolve.bench import manifests
from gangsolve.bench.devcluster import ControlPlane, crds
from gangsolve.bench.live.live_scenarios import LIVE_SCENARIOS
from gangsolve.bench.live.populate import arrivals, create_all
from gangsolve.live.kube import Kube

ROOT = Path(__file__).resolve().parents[1]


async def _ready(kube: Kube, nodes: list[dict]) -> None:
    limiter = anyio.CapacityLimiter(32)

    async def one(node: dict) -> None:
        async with limiter:
            name, status = node["metadata"]["name"], dict(node["status"])
            status["capacity"] = status["allocatable"]
            await kube.patch(f"/api/v1/nodes/{name}/status", {"status": status})
            await kube.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": node["spec"].get("taints")}})

    async with anyio.create_task_group() as tg:
        for node in nodes:
            tg.start_soon(one, node)


def populate(cp: ControlPlane, scenario: str) -> str:
    """The scenario's objects on the API server; returns a pending pod to ask `why` about."""
    objs = LIVE_SCENARIOS[scenario].build()
    gangs = arrivals(objs, manifests.to_cluster(objs), "gangsolve")
    nodes = [o for o in objs if o["kind"] == "Node"]
    cp.create_namespace(manifests.NAMESPACE)
    crds.install(cp, crds.pod_group_crd())

    async def work() -> None:
        kube = await Kube.connect(str(cp.kubeconfig), qps=None)
        try:
            await create_all(kube, nodes)
            await _ready(kube, nodes)
            await create_all(kube, [o for o in objs if o["kind"] in ("PriorityClass", "PodDisruptionBudget")])
            await create_all(kube, [o for o in objs if o["kind"] == "Pod" and o["spec"].get("nodeName")])
            await create_all(kube, [o for a in gangs for o in (*a.groups, *a.pods)])
        finally:
            await kube.close()

    anyio.run(work)
    first = gangs[0].pods[0]["metadata"]
    return f"{first['namespace']}/{first['name']}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default="live/5000nodes-synthetic-burst", choices=sorted(LIVE_SCENARIOS))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    plugin = str(ROOT / ".venv" / "bin" / "kubectl-gangsolve")
    with ControlPlane(scheduler=False, kwok=False, log=lambda m: print(m, file=sys.stderr)) as cp:
        began = time.monotonic()
        target = populate(cp, args.scenario)
        print(f"{args.scenario} on the API server in {time.monotonic() - began:.0f} s", file=sys.stderr)
        config = f"--kubeconfig={cp.kubeconfig}"
        commands = {
            "kubectl get pods -A -o json": [str(cp.binaries.kubectl), config, "get", "pods", "-A", "-o", "json"],
            "kubectl gangsolve plan -o json": [plugin, "plan", config, "-o", "json"],
            "kubectl gangsolve queues -o json": [plugin, "queues", config, "-o", "json"],
            f"kubectl gangsolve why {target} -o json": [plugin, "why", target, config, "-o", "json"],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.repeat):
            for name, command in commands.items():  # a round runs each once: the machine's noise hits all alike
                began = time.perf_counter()
                subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
                times[name].append(time.perf_counter() - began)
    print("| command | wall, median | runs |\n| --- | --- | --- |")
    for name, runs in times.items():
        print(f"| `{name}` | {statistics.median(runs):.1f} s | {', '.join(f'{t:.1f}' for t in runs)} |")


if __name__ == "__main__":
    main()
