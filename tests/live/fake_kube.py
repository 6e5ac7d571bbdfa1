"""A fake of the live scheduler's API client (gangsolve.live.kube.Kube), at its seam: the methods the actors
call, with the API server's answers that matter to them (404, 409 on a stale resourceVersion, scripted watch
streams). Never a fake API server: anything more goes to the e2e tests on the real one."""

from __future__ import annotations

import copy
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio

from gangsolve.live.kube import ApiError


def _error(status: int, reason: str, message: str) -> ApiError:
    return ApiError(status, f'{{"reason":"{reason}","message":"{message}"}}'.encode(), "FAKE", "")


class FakeKube:
    request_timeout = 30.0

    def __init__(self) -> None:
        self.objects: dict[str, dict] = {}  # path -> object, for GET/PUT/POST of single objects (Leases)
        self.lists: dict[str, deque[dict]] = defaultdict(deque)  # collection path -> pages to answer LISTs
        self.watches: dict[str, deque[list[dict] | ApiError]] = defaultdict(deque)  # path -> scripted watches
        self.calls: list[tuple[str, str, dict]] = []  # (method, path, details)
        self.fail: dict[str, int] = {}  # substring of a path -> HTTP status to answer with
        self.delay = 0.0  # seconds every write takes
        self.gate: anyio.Event | None = None  # when set: every write waits for it, and `held` says one does
        self.held: anyio.Event | None = None
        self.bindings: list[tuple[str, str]] = []  # (pod name, node)
        self.patches: list[tuple[str, dict]] = []
        self.deletes: list[tuple[str, dict | None]] = []
        self.events: list[dict] = []
        self._rv = 100

    def _failing(self, path: str) -> None:
        for part, status in self.fail.items():
            if part in path:
                raise _error(status, "Injected", f"injected {status}")

    async def _write(self, method: str, path: str, timeout: float | None, details: dict) -> None:
        self.calls.append((method, path, {**details, "timeout": timeout}))
        if timeout is not None and timeout <= 0:
            raise TimeoutError("no time left")
        if self.gate is not None:
            if self.held is not None:
                self.held.set()
            await self.gate.wait()
        if self.delay:
            with anyio.fail_after(timeout if timeout is not None else self.request_timeout):
                await anyio.sleep(self.delay)
        await anyio.sleep(0)
        self._failing(path)

    async def get(self, path: str, timeout: float | None = None, **query: Any) -> dict:
        self.calls.append(("GET", path, dict(query)))
        self._failing(path)
        if path in self.lists:
            if not self.lists[path]:
                raise AssertionError(f"no LIST page scripted for {path}")
            return copy.deepcopy(self.lists[path].popleft())
        if path not in self.objects:
            raise _error(404, "NotFound", f"{path} not found")
        return copy.deepcopy(self.objects[path])

    async def post(self, path: str, body: dict, timeout: float | None = None) -> dict:
        await self._write("POST", path, timeout, {"body": body})
        if path.endswith("/binding"):
            self.bindings.append((body["metadata"]["name"], body["target"]["name"]))
            return {}
        if "/events" in path:
            self.events.append(body)
            return body
        name = body["metadata"]["name"]
        full = f"{path}/{name}"
        if full in self.objects:
            raise _error(409, "AlreadyExists", f"{name} exists")
        return self._store(full, body)

    async def put(self, path: str, body: dict, timeout: float | None = None) -> dict:
        await self._write("PUT", path, timeout, {"body": copy.deepcopy(body)})
        path = path.removesuffix("/status")  # a status subresource writes the same object
        current = self.objects.get(path)
        if current is None:
            raise _error(404, "NotFound", f"{path} not found")
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise _error(409, "Conflict", "the object has been modified")
        return self._store(path, body)

    async def patch(self, path: str, body: dict, content_type: str = "", timeout: float | None = None) -> dict:
        await self._write("PATCH", path, timeout, {"body": body})
        self.patches.append((path, body))
        return body

    async def delete(self, path: str, body: dict | None = None, timeout: float | None = None) -> dict:
        await self._write("DELETE", path, timeout, {"body": body})
        self.deletes.append((path, body))
        return {}

    def _store(self, path: str, body: dict) -> dict:
        self._rv += 1
        obj = copy.deepcopy(body)
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._rv)
        self.objects[path] = obj
        return copy.deepcopy(obj)

    def steal(self, path: str, holder: str) -> None:
        """Another replica writes the Lease."""
        lease = copy.deepcopy(self.objects[path])
        lease["spec"]["holderIdentity"] = holder
        lease["spec"]["renewTime"] = f"stolen-{self._rv}"
        self._store(path, lease)

    async def watch_lines(self, path: str, query: Mapping[str, Any], read_timeout: float) -> AsyncIterator[dict]:
        self.calls.append(("WATCH", path, dict(query)))
        if not self.watches[path]:
            await anyio.sleep_forever()  # nothing more scripted: the watch stays open and quiet
        script = self.watches[path].popleft()
        if isinstance(script, ApiError):
            raise script
        for event in script:
            await anyio.sleep(0)
            yield copy.deepcopy(event)
