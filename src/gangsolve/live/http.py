"""/metrics, /healthz and /readyz on one small aiohttp server."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gangsolve.live import logs
from gangsolve.live.metrics import Metrics


class HealthServer:
    def __init__(
        self,
        metrics: Metrics,
        host: str,
        port: int,
        *,
        healthy: Callable[[], str | None],
        ready: Callable[[], str | None],
    ) -> None:
        self.metrics, self.host, self.port = metrics, host, port
        self.healthy, self.ready = healthy, ready  # each returns None when fine, else what is wrong
        self.runner: web.AppRunner | None = None

    async def _metrics(self, _req: web.Request) -> web.Response:
        body = generate_latest(self.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    @staticmethod
    def _check(check: Callable[[], str | None]) -> web.Response:
        problem = check()
        return web.Response(text="ok\n") if problem is None else web.Response(status=503, text=problem + "\n")

    async def start(self) -> int:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", lambda _r: self._check_async(self.healthy))
        app.router.add_get("/readyz", lambda _r: self._check_async(self.ready))
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, self.host, self.port)
        await site.start()
        addresses = self.runner.addresses  # the port actually bound (for port 0)
        port = int(addresses[0][1]) if addresses else self.port
        logs.info("serving", addr=f"{self.host}:{port}", paths="/metrics /healthz /readyz")
        return port

    async def _check_async(self, check: Callable[[], str | None]) -> web.Response:
        return self._check(check)

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
