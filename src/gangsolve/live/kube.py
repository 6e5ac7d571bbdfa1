"""A thin JSON client on kubernetes-asyncio: its configuration and auth (kubeconfig, in-cluster, token
refresh), but raw dicts in and out. Objects stay in the API's own shape (camelCase), as snapshots have them,
and responses the generated models cannot read (a Binding's) are no problem."""

from __future__ import annotations

import gc
import os
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import anyio
import orjson
import yaml
from aiolimiter import AsyncLimiter
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
# Past this many bytes an answer is decoded with the cycle collector paused (see `decode`).
LARGE_BODY = 1 << 20


class ApiError(Exception):
    def __init__(self, status: int, body: bytes | str = b"", method: str = "", path: str = "") -> None:
        self.status = status
        text = body.decode(errors="replace") if isinstance(body, bytes) else body
        try:
            self.reason = orjson.loads(text).get("reason", "") if text else ""
            self.message = orjson.loads(text).get("message", text) if text else ""
        except (orjson.JSONDecodeError, AttributeError):
            self.reason, self.message = "", text
        super().__init__(f"{method} {path}: HTTP {status} {self.reason}: {self.message[:500]}".strip())


def decode(data: bytes) -> Any:
    """JSON to Python; a large answer with the cycle collector paused, and its objects then frozen (moved out of
    the collector's generations). A list of 16,384 nodes is millions of new dicts and strings: every 700 of
    them set off a collection, and once decoded, the next collections of every generation would walk them all
    (together twice the decoding's own time). Decoded JSON holds no reference cycles, so no collection could
    free any of it: its objects are freed by their reference counts when the store lets go of them. (Freezing
    takes every object tracked at that moment, so a reference cycle made just before and dropped is never
    collected; large answers come at start and at a relist, so that is rare and small.)"""
    if len(data) < LARGE_BODY or not gc.isenabled():
        return orjson.loads(data)
    gc.disable()
    try:
        decoded = orjson.loads(data)
        gc.freeze()
        return decoded
    finally:
        gc.enable()


def default_kubeconfig() -> str | None:
    """kubectl's kubeconfig: the first file of $KUBECONFIG, else ~/.kube/config, if it exists."""
    default = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or os.path.expanduser("~/.kube/config")
    return default if os.path.exists(default) else None


async def load_configuration(kubeconfig: str | None, context: str | None = None) -> k8s_client.Configuration:
    """The given kubeconfig; else in-cluster config; else $KUBECONFIG / ~/.kube/config. `context`: one of the
    kubeconfig's contexts instead of its current one. A file that is no kubeconfig raises ConfigException
    naming it."""
    cfg = k8s_client.Configuration()
    if kubeconfig:
        await _load_kubeconfig(kubeconfig, context, cfg)
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        k8s_config.load_incluster_config(client_configuration=cfg)
    else:
        default = default_kubeconfig()
        if default is None:
            raise k8s_config.ConfigException("none found: pass --kubeconfig, set KUBECONFIG, or run inside a cluster")
        await _load_kubeconfig(default, context, cfg)
    return cfg


async def _load_kubeconfig(path: str, context: str | None, cfg: k8s_client.Configuration) -> None:
    # kubernetes-asyncio reads the document as it goes: where a field has the wrong shape (an empty file, a list
    # where a mapping belongs) it fails with whatever Python raised there. Those are the user's file's faults.
    try:
        with open(path, "rb") as f:
            document = yaml.safe_load(f)
    except yaml.YAMLError as exc:
        raise k8s_config.ConfigException(f"{path}: not YAML: {' '.join(str(exc).split())}") from None
    except OSError as exc:
        raise k8s_config.ConfigException(f"{path}: {exc.strerror}") from None
    if not isinstance(document, dict):
        found = "empty" if document is None else f"not a mapping of fields ({type(document).__name__})"
        raise k8s_config.ConfigException(f"{path}: {found}")
    try:
        await k8s_config.load_kube_config(config_file=path, context=context, client_configuration=cfg)
    except (TypeError, AttributeError, KeyError, IndexError, ValueError) as exc:
        raise k8s_config.ConfigException(f"{path}: a field has the wrong shape ({type(exc).__name__}: {exc})") from None


def env_proxy(url: str) -> str | None:
    """The proxy `HTTPS_PROXY` / `HTTP_PROXY` name for `url` unless `NO_PROXY` exempts its host."""
    parts = urllib.parse.urlsplit(url)
    if urllib.request.proxy_bypass(parts.netloc):
        return None
    return urllib.request.getproxies().get(parts.scheme)


class Kube:
    """`await kube.get('/api/v1/nodes')`; `async for event in kube.watch_lines(path, query, timeout)`.

    Requests (not watches) share a client-side rate limit of `qps` a second with bursts of `burst`, as
    kube-scheduler's --kube-api-qps/--kube-api-burst: a scheduler binding thousands of pods must not flood the
    API server. Like kube-scheduler's separate event and leader-election clients, `limited()` gives a client on
    the same connections with a rate limit of its own (or none), so events cannot delay binds and nothing can
    starve the lease's renewal. Every call takes an optional `timeout`: writes made as leader pass the lease's
    remaining validity, so none can still be in flight once another replica may lead."""

    def __init__(
        self, api: k8s_client.ApiClient, request_timeout: float = 30.0, qps: float | None = 50.0, burst: int = 100
    ) -> None:
        self.api = api
        self.request_timeout = request_timeout
        self.limiter = AsyncLimiter(burst, burst / qps) if qps else None

    def limited(self, qps: float | None, burst: int = 1) -> Kube:
        """A client on the same connections with its own rate limit (None: unlimited)."""
        return Kube(self.api, self.request_timeout, qps, burst)

    @classmethod
    async def connect(
        cls,
        kubeconfig: str | None,
        connections: int = 32,
        qps: float | None = 50.0,
        burst: int = 100,
        context: str | None = None,
    ) -> Kube:
        cfg = await load_configuration(kubeconfig, context)
        cfg.connection_pool_maxsize = connections
        cfg.proxy = cfg.proxy or env_proxy(cfg.host or "")
        api = k8s_client.ApiClient(cfg)
        # The environment's proxy is read once, above, as client-go reads it. The client's session would look it
        # (and ~/.netrc) up again on two worker threads for every request: a tenth of a busy scheduler's CPU.
        api.rest_client.pool_manager._trust_env = False
        return cls(api, qps=qps, burst=burst)

    async def close(self) -> None:
        await self.api.close()

    async def _raw(
        self,
        method: str,
        path: str,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: aiohttp.ClientTimeout | float | None = None,
    ) -> aiohttp.ClientResponse:
        headers = {"Accept": JSON, "Content-Type": content_type}
        return await self.api.call_api(
            path,
            method,
            query_params=list((query or {}).items()),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=timeout if timeout is not None else self.request_timeout,
        )

    async def request(
        self,
        method: str,
        path: str,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: float | None = None,
    ) -> dict:
        limit = self.request_timeout if timeout is None else min(timeout, self.request_timeout)
        if limit <= 0:
            raise TimeoutError(f"{method} {path}: no time left to make the call")
        with anyio.fail_after(limit):  # waiting for the rate limiter counts too
            if self.limiter is not None:
                await self.limiter.acquire()
            resp = await self._raw(method, path, query, body, content_type, timeout=limit)
        try:
            data = await resp.read()
        finally:
            resp.release()
        if not 200 <= resp.status < 300:
            raise ApiError(resp.status, data, method, path)
        return decode(data) if data else {}

    async def get(self, path: str, timeout: float | None = None, **query: Any) -> dict:
        return await self.request("GET", path, query, timeout=timeout)

    async def post(self, path: str, body: Any, timeout: float | None = None) -> dict:
        return await self.request("POST", path, body=body, timeout=timeout)

    async def patch(self, path: str, body: Any, content_type: str = MERGE_PATCH, timeout: float | None = None) -> dict:
        return await self.request("PATCH", path, body=body, content_type=content_type, timeout=timeout)

    async def put(self, path: str, body: Any, timeout: float | None = None) -> dict:
        return await self.request("PUT", path, body=body, timeout=timeout)

    async def delete(self, path: str, body: Any = None, timeout: float | None = None) -> dict:
        return await self.request("DELETE", path, body=body, timeout=timeout)

    async def watch_lines(self, path: str, query: Mapping[str, Any], read_timeout: float) -> AsyncIterator[dict]:
        """The events of one watch request, decoded, until the server ends it."""
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=read_timeout)
        resp = await self._raw("GET", path, {**query, "watch": "true"}, timeout=timeout)
        try:
            if resp.status != 200:
                raise ApiError(resp.status, await resp.read(), "WATCH", path)
            while True:
                line = await resp.content.readline()
                if not line:
                    return
                if line.strip():
                    yield orjson.loads(line)
        finally:
            resp.release()
