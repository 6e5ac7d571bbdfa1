"""Leader election on a coordination.k8s.io/v1 Lease, in the manner of client-go's leaderelection.

A candidate takes the lease when it is free (no holder, as a leader leaves it on release) or when its
record has not changed for `lease_duration` seconds of the candidate's own clock. The leader renews every
`retry_period`; if it cannot renew for `renew_deadline` (< lease_duration) it stops binding at once
(`valid()` turns False) and `keep()` raises LeadershipLost, which ends the process, as kube-scheduler does.
So the old leader has stopped before any other replica can have taken over.
"""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime

import aiohttp
import anyio

from gangsolve.live import logs
from gangsolve.live.kube import ApiError, Kube


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
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_change=None,
    ) -> None:
        self.kube = kube
        self.name, self.namespace, self.identity = name, namespace, identity
        self.lease_duration, self.renew_deadline, self.retry_period = lease_duration, renew_deadline, retry_period
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.leading = False
        self.last_renew = 0.0
        self._observed: object = None
        self._observed_at = 0.0
        self.on_change = on_change or (lambda leading: None)

    def valid(self) -> bool:
        """True while this replica may act as leader: it renewed within the renew deadline."""
        return self.leading and time.monotonic() - self.last_renew < self.renew_deadline

    async def acquire(self) -> None:
        """Return once this replica leads."""
        logs.info("waiting for the lease", lease=f"{self.namespace}/{self.name}", identity=self.identity)
        while True:
            started = time.monotonic()
            if await self._try():
                self.leading, self.last_renew = True, started
                self.on_change(True)
                logs.info("became leader", lease=f"{self.namespace}/{self.name}", identity=self.identity)
                return
            await anyio.sleep(self.retry_period * random.uniform(1.0, 1.2))

    async def keep(self) -> None:
        """Renew forever; raises LeadershipLost when the renew deadline passes without a renewal."""
        while True:
            await anyio.sleep(self.retry_period)
            started = time.monotonic()
            ok = False
            with anyio.move_on_after(max(0.1, self.last_renew + self.renew_deadline - started)):
                while not ok and time.monotonic() - self.last_renew < self.renew_deadline:
                    ok = await self._try()
                    if not ok:
                        await anyio.sleep(min(self.retry_period, 0.5))
            if ok:
                self.last_renew = started
            elif not self.valid():
                self.leading = False
                self.on_change(False)
                logs.error("lost the lease", lease=f"{self.namespace}/{self.name}", identity=self.identity)
                raise LeadershipLost(f"lease {self.namespace}/{self.name} lost")

    async def release(self) -> None:
        """Hand the lease back so another replica can take it at once (shutdown)."""
        if not self.leading:
            return
        self.leading = False
        self.on_change(False)
        try:
            lease = await self.kube.get(f"{self.path}/{self.name}")
            if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            lease["spec"].update(holderIdentity=None, leaseDurationSeconds=1, renewTime=_micro_now())
            await self.kube.put(f"{self.path}/{self.name}", lease)
            logs.info("released the lease", lease=f"{self.namespace}/{self.name}")
        except Exception as exc:
            logs.warning("lease not released", error=str(exc))

    async def _try(self) -> bool:
        """One attempt to take or renew the lease."""
        now = _micro_now()
        try:
            try:
                lease = await self.kube.get(f"{self.path}/{self.name}")
            except ApiError as exc:
                if exc.status != 404:
                    raise
                await self.kube.post(
                    self.path,
                    {
                        "apiVersion": "coordination.k8s.io/v1",
                        "kind": "Lease",
                        "metadata": {"name": self.name, "namespace": self.namespace},
                        "spec": {
                            "holderIdentity": self.identity,
                            "leaseDurationSeconds": int(self.lease_duration),
                            "acquireTime": now,
                            "renewTime": now,
                            "leaseTransitions": 0,
                        },
                    },
                )
                return True
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity")
            if holder and holder != self.identity:
                record = (holder, spec.get("renewTime"), spec.get("acquireTime"))
                if record != self._observed:
                    self._observed, self._observed_at = record, time.monotonic()
                duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
                if time.monotonic() - self._observed_at < duration:
                    return False
                logs.info("lease expired, taking over", holder=holder)
            if holder != self.identity:
                spec["acquireTime"] = now
                spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
            spec.update(holderIdentity=self.identity, leaseDurationSeconds=int(self.lease_duration), renewTime=now)
            lease["spec"] = spec
            await self.kube.put(f"{self.path}/{self.name}", lease)  # resourceVersion makes this a compare-and-swap
            return True
        except ApiError as exc:
            if exc.status != 409:
                logs.warning("lease update failed", error=str(exc))
            return False
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            logs.warning("lease update failed", error=f"{type(exc).__name__}: {exc}")
            return False
