"""Leader election on a coordination.k8s.io/v1 Lease, in the manner of client-go's leaderelection.

A candidate takes the lease when it is free (no holder, as a leader leaves it on release) or when its record
has not changed for `lease_duration` seconds of the candidate's own clock. The leader renews every
`retry_period`. Its leadership is valid for `renew_deadline` seconds after the start of its last successful
renewal: `remaining()` counts them down, every write the scheduler makes as leader is given at most that long
(the fence), and at zero `keep()` raises LeadershipLost, which ends the process as kube-scheduler's does.
Another replica can take over only `lease_duration` seconds after it last saw the record change, which is
after that renewal started; so with renew_deadline < lease_duration no write of the old leader can still
be in flight when a successor starts.
"""

from __future__ import annotations

import math
import random
import time
from datetime import UTC, datetime

import aiohttp
import anyio

from gangsolve.live import logs
from gangsolve.live.kube import ApiError, Kube

RELEASE_TIMEOUT = 2.0  # seconds a shutting-down leader spends handing the lease back


class LeadershipLost(RuntimeError):
    pass


def _micro_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        kube: Kube,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration: int = 15,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_change=None,
        clock=time.monotonic,
    ) -> None:
        self.kube = kube
        self.name, self.namespace, self.identity = name, namespace, identity
        self.lease_duration, self.renew_deadline, self.retry_period = lease_duration, renew_deadline, retry_period
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self._clock = clock
        self._valid_until = -math.inf  # monotonic: last successful renewal's start + renew_deadline
        self.leading = False  # acquired, and neither released nor lost
        self._observed: object = None
        self._observed_at = 0.0
        self.on_change = on_change or (lambda leading: None)

    @property
    def lease(self) -> str:
        return f"{self.namespace}/{self.name}"

    def remaining(self) -> float:
        return max(0.0, self._valid_until - self._clock())

    def valid(self) -> bool:
        return self.remaining() > 0

    async def acquire(self) -> None:
        """Return once this replica leads."""
        logs.info("waiting for the lease", lease=self.lease, identity=self.identity)
        while True:
            started = self._clock()
            if await self._try(timeout=None):
                self._valid_until = started + self.renew_deadline
                self.leading = True
                self.on_change(True)
                logs.info("became leader", lease=self.lease, identity=self.identity)
                return
            await anyio.sleep(self.retry_period * random.uniform(1.0, 1.2))

    async def keep(self) -> None:
        """Renew until cancelled; raises LeadershipLost the moment leadership stops being valid."""
        while True:
            await anyio.sleep(min(self.retry_period, self.remaining()))
            with anyio.move_on_after(self.remaining()):
                while True:
                    started = self._clock()
                    if await self._try(timeout=self.remaining()):
                        self._valid_until = started + self.renew_deadline
                        break
                    await anyio.sleep(min(self.retry_period, 0.5))
            if not self.valid():
                self.leading = False
                self.on_change(False)
                logs.error("lost the lease", lease=self.lease, identity=self.identity)
                raise LeadershipLost(f"lease {self.lease} lost")

    async def release(self) -> None:
        """Hand the lease back so another replica can take it at once (shutdown). Best effort, bounded."""
        if not self.valid():
            return
        self._valid_until = -math.inf
        self.leading = False
        self.on_change(False)
        try:
            with anyio.fail_after(RELEASE_TIMEOUT):
                lease = await self.kube.get(f"{self.path}/{self.name}")
                if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                    return
                lease["spec"].update(holderIdentity=None, leaseDurationSeconds=1, renewTime=_micro_now())
                await self.kube.put(f"{self.path}/{self.name}", lease)
            logs.info("released the lease", lease=self.lease)
        except (ApiError, aiohttp.ClientError, OSError, TimeoutError) as exc:  # it expires anyway
            logs.warning("lease not released", error=f"{type(exc).__name__}: {exc}")

    async def _try(self, timeout: float | None) -> bool:
        """One attempt to take or renew the lease, within `timeout` seconds."""
        now = _micro_now()
        try:
            try:
                lease = await self.kube.get(f"{self.path}/{self.name}", timeout=timeout)
            except ApiError as exc:
                if exc.status != 404:
                    raise
                created = {
                    "holderIdentity": self.identity,
                    "leaseDurationSeconds": self.lease_duration,
                    "acquireTime": now,
                    "renewTime": now,
                    "leaseTransitions": 0,
                }
                body = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": created,
                }
                await self.kube.post(self.path, body, timeout=timeout)
                return True
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity")
            if holder and holder != self.identity:
                record = (holder, spec.get("renewTime"), spec.get("acquireTime"))
                if record != self._observed:
                    self._observed, self._observed_at = record, self._clock()
                duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
                if self._clock() - self._observed_at < duration:
                    return False
                logs.info("lease expired, taking over", holder=holder)
            if holder != self.identity:
                spec["acquireTime"] = now
                spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
            spec.update(holderIdentity=self.identity, leaseDurationSeconds=self.lease_duration, renewTime=now)
            lease["spec"] = spec
            # The resourceVersion the lease was read at makes this a compare-and-swap.
            await self.kube.put(f"{self.path}/{self.name}", lease, timeout=timeout)
            return True
        except ApiError as exc:
            if exc.status != 409:
                logs.warning("lease update failed", error=str(exc))
            return False
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            logs.warning("lease update failed", error=f"{type(exc).__name__}: {exc}")
            return False
