"""The page of the plan in a real browser (the distribution's headless Chromium) against a live scheduler on the
real control plane: the page loads, lists exactly the gangs the API says are pending, and, once capacity is
added, shows the gang that was waiting running, without a reload.

With GANGSOLVE_SCREENSHOTS=docs/images it saves the screenshots docs/operating.md shows (1280x800)."""

from __future__ import annotations

import contextlib
import time

import pytest
import yaml
from live_helpers import bound, create, pod, pods, poll

from gangsolve.bench.devcluster import ApiError, NodeSpec
from tests import browser

pytestmark = pytest.mark.e2e

RUNTIME = "gangsolve.io/expected-runtime"
GROUP = "scheduling.k8s.io/group-name"  # a Volcano PodGroup's members
QUEUES = "/apis/scheduling.volcano.sh/v1beta1/queues"
NAMESPACES = ("research", "vision")


def volcano_gang(cp, scheduler: str, namespace: str, name: str, size: int, gpus: int, runtime: str | None, queue: str):
    create(
        cp,
        namespace,
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": {"minMember": size, "queue": queue},
        },
    )
    annotations = {GROUP: name, **({RUNTIME: runtime} if runtime else {})}
    for i in range(size):
        member = pod(f"{name}-{i}", scheduler=scheduler, gpus=gpus, cpu="4", annotations=annotations)
        member["spec"]["nodeSelector"] = {"gangsolve.dev/pool": "plan-page"}
        create(cp, namespace, member)


def pending_gangs(cp) -> set[str]:
    """What the API says: the gangs (namespace/PodGroup) with a member not bound."""
    return {
        f"{ns}/{p['metadata']['annotations'][GROUP]}"
        for ns in NAMESPACES
        for p in pods(cp, ns)
        if not p["spec"].get("nodeName")
    }


def page_reason(page, gang: str) -> str:
    return page.locator(f"#pending tr[data-gang='{gang}'] td.reason").inner_text()


def condition_message(cp, gang: str) -> str | None:
    """The PodScheduled condition's message of a pending member of `gang` (namespace/PodGroup), from the API."""
    ns, name = gang.split("/")
    for p in pods(cp, ns):
        if p["metadata"]["annotations"].get(GROUP) == name and not p["spec"].get("nodeName"):
            for c in (p.get("status") or {}).get("conditions") or []:
                if c["type"] == "PodScheduled":
                    return c.get("message")
    return None


def test_the_page_lists_the_pending_gangs_the_api_shows_and_follows_a_binding(
    control_plane, gangsolve_factory, pod_group_crds, tmp_path
):
    path = browser.chromium()
    from playwright.sync_api import sync_playwright

    cp = control_plane
    began = time.monotonic()
    shots = browser.screenshots()
    nodes = [f"gpu-{i}" for i in range(1, 5)]
    config = tmp_path / "gangsolve.yaml"
    config.write_text(yaml.safe_dump({"resync-period": 1}))
    for ns in NAMESPACES:
        cp.create_namespace(ns)
    try:
        for name, weight in (("research", 2), ("vision", 1)):
            create(
                cp,
                "",
                {
                    "apiVersion": "scheduling.volcano.sh/v1beta1",
                    "kind": "Queue",
                    "metadata": {"name": name},
                    "spec": {"weight": weight},
                },
            )
        pool = {"gangsolve.dev/pool": "plan-page"}
        cp.add_nodes([NodeSpec(n, gpus=8, labels=pool) for n in nodes[:2]], wait=True)
        g = gangsolve_factory("--plan-page", "--config", str(config))
        s = g.scheduler_name
        volcano_gang(cp, s, "research", "train-a", 2, 4, "2h", "research")
        volcano_gang(cp, s, "vision", "train-b", 2, 4, "1h", "vision")
        poll(lambda: len(bound(pods(cp, "research") + pods(cp, "vision"))) == 4, what="the first two gangs bound")
        volcano_gang(cp, s, "research", "big", 2, 8, "1h", "research")
        volcano_gang(cp, s, "vision", "wide", 3, 4, "30m", "vision")
        volcano_gang(cp, s, "vision", "eval", 1, 2, None, "vision")
        waiting = {"research/big", "vision/wide", "vision/eval"}
        poll(lambda: pending_gangs(cp) == waiting, what="the three gangs pending")

        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=path, args=browser.ARGS)
            page = b.new_page(viewport=browser.VIEWPORT)
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            response = page.goto(f"http://127.0.0.1:{g.port}/plan")
            assert response is not None
            assert response.status == 200
            assert page.title() == "gangsolve: the plan"
            page.evaluate("window.loadedOnce = true")  # gone if the page reloads

            def shown() -> set[str]:
                return set(page.eval_on_selector_all("#pending tbody tr", "rows => rows.map(r => r.dataset.gang)"))

            # Exactly what the API says is pending, once a cycle has planned it (and still so after).
            poll(lambda: shown() == pending_gangs(cp), what="the page's pending gangs to be the API's")
            assert shown() == pending_gangs(cp) == waiting
            reasons = dict(
                zip(
                    sorted(shown()),
                    [page_reason(page, n) for n in sorted(shown())],
                    strict=True,
                )
            )
            # Each reason is what the gang's pods say (their PodScheduled condition, read through the API); here
            # every queue is past its fair share, so the gangs wait for idle capacity and hold no reservation.
            poll(
                lambda: all(page_reason(page, n) == condition_message(cp, n) for n in shown()),
                what="the page's reasons to be the pods' conditions",
            )
            assert reasons["research/big"].startswith("queue research is at its fair share")
            running = page.eval_on_selector_all("#gantt g.bar.running", "bars => bars.map(b => b.dataset.gang)")
            assert {"research/train-a", "vision/train-b"} <= set(running)
            for queue in NAMESPACES:  # a queue of each name
                assert page.locator(f"#queues svg.queue[data-queue='{queue}']").count() == 1
            if shots is not None:
                page.screenshot(path=str(shots / "plan-page.png"))

            # Capacity arrives: gangs bind (which ones is the solver's choice, fair shares first), and the page
            # shows them running and no longer pending, without a reload.
            cp.add_nodes([NodeSpec(n, gpus=8, labels=pool) for n in nodes[2:]], wait=True)
            poll(lambda: pending_gangs(cp) != waiting, what="a waiting gang bound")
            poll(lambda: shown() == pending_gangs(cp), what="the page's pending gangs to follow the API's")
            for gang in waiting - pending_gangs(cp):
                poll(
                    lambda gang=gang: page.locator(f"#gantt g.bar.running[data-gang='{gang}']").count() > 0,
                    what=f"{gang} running on the page",
                )
            assert page.evaluate("window.loadedOnce") is True
            if shots is not None:
                page.screenshot(path=str(shots / "plan-page-after-binding.png"))
            assert errors == []
            b.close()
        print(f"plan page e2e: {time.monotonic() - began:.1f}s")
    finally:
        for ns in NAMESPACES:
            cp.delete_namespace(ns)
        for n in nodes:
            with contextlib.suppress(ApiError):
                cp.delete_node(n)
        for name in NAMESPACES:
            with contextlib.suppress(ApiError):
                cp.request("DELETE", f"{QUEUES}/{name}")


def test_the_page_does_not_exist_unless_enabled(gangsolve_factory):
    g = gangsolve_factory()
    for path in ("/plan", "/plan.json"):
        assert g.get(path)[0] == 404, path
    assert g.get("/metrics")[0] == 200
