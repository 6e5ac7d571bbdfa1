"""/metrics, /healthz and /readyz on one small aiohttp server; with the page of the plan on, /plan and
/plan.json too (read-only: GET routes only, serving the solver actor's latest `PlanView`)."""

from __future__ import annotations

from collections.abc import Callable

import anyio
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gangsolve.live import logs, plan_page
from gangsolve.live.metrics import Metrics
from gangsolve.live.plan_page import PlanView


class HealthServer:
    def __init__(
        self,
        metrics: Metrics,
        host: str,
        port: int,
        *,
        healthy: Callable[[], str | None],
        ready: Callable[[], str | None],
        plan: Callable[[], PlanView | None] | None = None,
    ) -> None:
        self.metrics, self.host, self.port = metrics, host, port
        self.healthy, self.ready = healthy, ready  # each returns None when fine, else what is wrong
        self.plan = plan  # the latest view of the plan (None before the first cycle); None: no page served
        self._encoded: tuple[PlanView | None, bytes] | None = None  # the last view served and its JSON
        self.runner: web.AppRunner | None = None

    async def _metrics(self, _req: web.Request) -> web.Response:
        body = generate_latest(self.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _plan_page(self, _req: web.Request) -> web.Response:
        body, headers = plan_page.page()
        return web.Response(body=body, headers=headers)

    async def _plan_json(self, _req: web.Request) -> web.Response:
        assert self.plan is not None
        view = self.plan()
        if self._encoded is None or self._encoded[0] is not view:  # a new cycle since: encode it once
            # In a worker thread (the view is immutable): on a big cluster it takes a while, and the event loop
            # renews the lease and binds.
            body = await anyio.to_thread.run_sync(lambda: plan_page.encode(plan_page.as_json(view)))
            self._encoded = (view, body)
        headers = {"Content-Type": "application/json", "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
        return web.Response(body=self._encoded[1], headers=headers)

    @staticmethod
    def _check(check: Callable[[], str | None]) -> web.Response:
        problem = check()
        return web.Response(text="ok\n") if problem is None else web.Response(status=503, text=problem + "\n")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        if self.plan is not None:
            app.router.add_get("/plan", self._plan_page)
            app.router.add_get("/plan.json", self._plan_json)
        return app

    async def start(self) -> int:
        self.runner = web.AppRunner(self.app(), access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, self.host, self.port)
        await site.start()
        addresses = self.runner.addresses  # the port actually bound (for port 0)
        port = int(addresses[0][1]) if addresses else self.port
        paths = "/metrics /healthz /readyz" + (" /plan /plan.json" if self.plan is not None else "")
        logs.info("serving", addr=f"{self.host}:{port}", paths=paths)
        return port

    async def _healthz(self, _req: web.Request) -> web.Response:
        return self._check(self.healthy)

    async def _readyz(self, _req: web.Request) -> web.Response:
        return self._check(self.ready)

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
