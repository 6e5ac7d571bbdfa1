"""The page of the plan (`gangsolve run --plan-page`): served only when on, read-only, its data from the solver
actor's cycles (pending gangs with the reason their pods show, running and planned gangs per node or node
group, queue shares over a bounded history), and names from the cluster never read as markup."""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime, timedelta

import anyio
import pytest
from aiohttp.test_utils import TestClient, TestServer

from gangsolve.edge.snapshot import Snapshot
from gangsolve.live import config, plan_page
from gangsolve.live.channels import Latest
from gangsolve.live.feedback import Feedback
from gangsolve.live.fence import Unfenced
from gangsolve.live.http import HealthServer
from gangsolve.live.messages import CycleResult, Event, GangPlan
from gangsolve.live.metrics import Metrics
from gangsolve.live.plan_page import PlanView, ShareHistory, node_groups
from gangsolve.solver import Cluster, Gang, GangResult, Placement, Pod, Reservation
from gangsolve.solver.model import Node, QueueResult, Running
from tests import browser
from tests.builders import k8s_pod
from tests.live import test_reservations as planning
from tests.live.fake_kube import FakeKube
from tests.live.resources import POD

HOSTILE = "default/<img src=x onerror=window.pwned=1>"
HOSTILE_REASON = "needs 4 nvidia.com/gpu; annotation says </script><script>window.pwned=2</script>"


@pytest.fixture(autouse=True)
def _clock_now() -> None:
    """The planning tests' builders make their cluster around their module's NOW: the time this test starts, not the
    time the suite imported them (as their own tests do)."""
    planning.NOW = datetime.now(UTC).replace(microsecond=0)


def server(plan=None) -> HealthServer:
    return HealthServer(Metrics(), "127.0.0.1", 0, healthy=lambda: None, ready=lambda: None, plan=plan)


async def get(s: HealthServer, path: str) -> tuple[int, dict[str, str], bytes]:
    async with TestClient(TestServer(s.app())) as client:
        response = await client.get(path)
        return response.status, dict(response.headers), await response.read()


async def one_cycle(actor) -> CycleResult:
    send, _receive = anyio.create_memory_object_stream[GangPlan](math.inf)
    results: Latest[CycleResult] = Latest()
    await actor.cycle(send, results)
    return await results.take()


def hostile_view(nodes: int = 3) -> PlanView:
    """A cycle whose names and reasons are markup: a pending gang with a forecast, a running pod, a queue."""
    now = 1_800_000_000.0
    names = [f"n<{i}>" for i in range(nodes)]
    gang = Gang(HOSTILE, (Pod(HOSTILE + "-0", {"pods": 1}),))
    cluster = Cluster(tuple(Node(n, {"pods": 10}) for n in names), (gang,), now=now)
    forecast = Reservation(HOSTILE, (names[0],), now + 600, bindings={HOSTILE + "-0": names[0]}, held=False)
    placement = Placement(
        {},
        (GangResult(HOSTILE, False, 1, 1, 0, 0, HOSTILE_REASON),),
        "OPTIMAL",
        0,
        0,
        0.0,
        forecasts=(forecast,),
        queues=(QueueResult("<b>q</b>", 1, {}, {}, 0.25, 0.5),),
    )
    running = (Running(names[1], {}, end=now + 300, name="default/<svg onload=window.pwned=3>"),)
    result = CycleResult(Snapshot(), cluster, placement)
    return PlanView(7, result, running, ((now, (("<b>q</b>", 0.25, 0.5),)),))


@pytest.mark.asyncio
async def test_without_the_page_neither_path_exists_and_the_rest_is_served():
    s = server(plan=None)
    for path in ("/plan", "/plan.json"):
        status, _headers, _body = await get(s, path)
        assert status == 404, path
    assert (await get(s, "/metrics"))[0] == 200
    assert config.build().plan_page is False
    assert config.build(flags={"plan_page": True}).plan_page is True


@pytest.mark.asyncio
async def test_the_page_is_read_only_and_runs_only_its_own_script():
    s = server(plan=lambda: None)
    methods = {r.method for r in s.app().router.routes()}
    assert methods <= {"GET", "HEAD"}
    status, headers, body = await get(s, "/plan")
    assert status == 200
    assert headers["Content-Type"].startswith("text/html")
    html = body.decode()
    script = re.search(r"<script>(.*?)</script>", html, re.S)
    assert script is not None
    # Names are set as text: no call that parses markup, and no form to post from.
    assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(", script.group(1))
    assert "<form" not in html
    assert "script-src 'sha256-" in headers["Content-Security-Policy"]
    assert "unsafe-inline" not in headers["Content-Security-Policy"]
    status, _headers, body = await get(s, "/plan.json")
    assert (status, json.loads(body)) == (200, {"cycle": None})  # before the first cycle (or on a follower)


@pytest.mark.asyncio
async def test_a_cycle_shows_the_pending_gang_with_its_pods_reason_and_start_and_the_running_pod_until_its_end():
    started = planning.NOW - timedelta(minutes=10)
    s = planning.store_with([planning.running("long", 3, started, "30m"), *planning.big_gang(timedelta(hours=2))])
    actor = planning.actor(s, plan_page=True)
    result = await one_cycle(actor)
    status, _headers, body = await get(server(plan=lambda: actor.page), "/plan.json")
    data = json.loads(body)

    assert status == 200
    assert data["cycle"] == 1
    (pending,) = data["pending"]
    expected_start = (started + timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert (pending["gang"], pending["start"], pending["held"], pending["guessed"], pending["nodes"]) == (
        "default/big",
        expected_start,
        True,
        False,  # the running pod declares its 30 minutes
        ["n1"],
    )
    fb = Feedback(FakeKube(), s, Metrics(), Unfenced(), identity="t", scheduler_name="gangsolve")
    assert pending["reason"] == fb.reasons(result)["default/big-0"]  # what the pod's condition says
    (row,) = data["gantt"]["rows"]
    bars = {(b["gang"], b["kind"]): (b["start"], b["end"]) for b in row["bars"]}
    assert bars == {
        ("default/long", "running"): (None, expected_start),
        ("default/big", "held"): (expected_start, None),  # the big gang declares no runtime
    }
    assert data["queues"] == [{"name": "default", "samples": [[data["now"], 0.75, 1.0]]}]


@pytest.mark.asyncio
async def test_gangs_it_started_stay_on_the_page_while_they_run_though_later_views_read_only_pending_pods():
    s = planning.store_with([])
    actor = planning.actor(s, plan_page=True)
    s.apply(Event(POD, "ADDED", k8s_pod("first", gpus=1)))
    await one_cycle(actor)
    assert {b["gang"] for b in plan_page.as_json(actor.page)["gantt"]["rows"][0]["bars"]} == {"default/first"}

    s.apply(Event(POD, "ADDED", k8s_pod("second", gpus=1)))
    await one_cycle(actor)  # a partial view: the pending pod and its gang, not "first" (assumed, then bound)
    bars = plan_page.as_json(actor.page)["gantt"]["rows"][0]["bars"]
    assert {(b["gang"], b["kind"]) for b in bars} == {("default/first", "running"), ("default/second", "running")}

    s.apply(Event(POD, "DELETED", s.pod("default/first")))
    await one_cycle(actor)
    assert {b["gang"] for b in plan_page.as_json(actor.page)["gantt"]["rows"][0]["bars"]} == {"default/second"}


@pytest.mark.asyncio
async def test_with_the_page_off_the_actor_keeps_nothing_for_it():
    s = planning.store_with(planning.big_gang(timedelta(hours=2)))
    actor = planning.actor(s)
    await one_cycle(actor)
    assert actor.page is None


@pytest.mark.asyncio
async def test_names_and_reasons_are_data_never_markup_in_the_json():
    view = hostile_view()
    status, headers, body = await get(server(plan=lambda: view), "/plan.json")
    assert status == 200
    assert headers["Content-Type"] == "application/json"
    assert b"<" not in body
    assert b">" not in body
    data = json.loads(body)
    assert [p["gang"] for p in data["pending"]] == [HOSTILE]
    assert data["pending"][0]["reason"].startswith(HOSTILE_REASON)
    assert data["queues"][0]["name"] == "<b>q</b>"


def test_one_row_per_node_up_to_forty_then_groups():
    few = [Node(f"gpu-{i}", {}) for i in range(40)]
    assert node_groups(few) == ("node", {n.name: n.name for n in few})

    zones = [Node(f"n{i}", {}, labels={"topology.kubernetes.io/zone": f"z{i % 3}"}) for i in range(100)]
    grouped_by, rows = node_groups(zones)
    assert grouped_by == "label topology.kubernetes.io/zone"
    assert set(rows.values()) == {"zone=z0", "zone=z1", "zone=z2"}

    pools = [Node(f"{pool}-{i:03d}", {}) for pool in ("a100", "h100") for i in range(60)]
    assert node_groups(pools)[0] == "name prefix"
    assert set(node_groups(pools)[1].values()) == {"a100*", "h100*"}

    same = [Node(f"node-{i:04d}", {}) for i in range(1000)]
    grouped_by, rows = node_groups(same)
    assert grouped_by == "name order"
    assert len(set(rows.values())) <= plan_page.MAX_ROWS
    assert rows.keys() == {n.name for n in same}
    assert rows["node-0000"] == "node-0000 … node-0024"


def test_the_gantt_chart_of_many_nodes_has_at_most_forty_rows_and_bars_per_row_are_capped():
    view = hostile_view(nodes=500)
    gantt = plan_page.as_json(view)["gantt"]
    assert gantt["grouped_by"] == "name order"
    assert len(gantt["rows"]) <= plan_page.MAX_ROWS
    assert sum(r["nodes"] for r in gantt["rows"]) == 500
    many = tuple(Running("n<0>", {}, end=None, name=f"default/p{i}") for i in range(plan_page.MAX_BARS + 5))
    row = plan_page.as_json(PlanView(1, view.result, many, ()))["gantt"]["rows"][0]
    assert (len(row["bars"]), row["more"]) == (plan_page.MAX_BARS, len(many) + 1 - plan_page.MAX_BARS)
    assert row["bars"][0]["kind"] == "forecast"  # the plan is never what is left out


def test_the_share_history_keeps_one_sample_a_minute_for_six_hours_however_long_it_runs():
    history = ShareHistory()
    queue = QueueResult("q", 1, {}, {}, 0.0, 0.5)
    start = 1_800_000_000.0
    cycles = range(0, 24 * 3600, 7)  # a cycle every 7 s for a day
    for second in cycles:
        history.record(start + second, [QueueResult("q", 1, {}, {}, second / 1e6, 0.5)])
    samples = history.samples()
    assert len(samples) == 360
    assert samples[-1][0] == start + cycles[-1]  # the latest cycle stands for its minute
    assert samples[0][0] >= start + cycles[-1] - 6 * 3600
    minutes = [at // 60 for at, _queues in samples]
    assert minutes == sorted(set(minutes))  # one a minute, oldest first
    history.record(samples[-1][0] + 1, [queue])
    assert len(history.samples()) == 360
    assert history.samples()[-1][1] == (("q", 0.0, 0.5),)


@pytest.mark.asyncio
async def test_in_a_browser_hostile_names_show_as_text_and_run_nothing():
    path = browser.chromium()
    from playwright.async_api import async_playwright

    view = hostile_view(nodes=60)
    s = server(plan=lambda: view)
    port = await s.start()
    try:
        async with async_playwright() as p:
            b = await p.chromium.launch(executable_path=path, args=browser.ARGS)
            page = await b.new_page(viewport=browser.VIEWPORT)
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            await page.goto(f"http://127.0.0.1:{port}/plan")
            await page.wait_for_selector("body[data-cycle='7']")
            assert await page.evaluate("window.pwned") is None
            assert await page.locator("img, b, script:not(:first-of-type)").count() == 0
            assert await page.locator("#pending tbody tr").get_attribute("data-gang") == HOSTILE
            assert await page.locator("#pending td.gang").inner_text() == HOSTILE
            assert HOSTILE_REASON in await page.locator("#pending td.reason").inner_text()
            assert "<b>q</b>: 25.0% held" in await page.locator("#queues figcaption").inner_text()
            assert await page.locator("#rows-by").inner_text() == "node groups (by name order)"
            assert await page.locator("#gantt g.bar").count() == 2  # the running pod and the forecast
            assert errors == []
            await b.close()
    finally:
        await s.stop()
