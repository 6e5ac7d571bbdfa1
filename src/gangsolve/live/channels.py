"""The one channel the actors need beside anyio's memory streams: a mailbox that keeps only the latest value.

The solver actor puts each cycle's result; feedback takes the newest when it is free, so a slow API server
delays what users see but never the scheduling, and results it had no time for are simply superseded.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import anyio

T = TypeVar("T")


class Latest(Generic[T]):
    def __init__(self) -> None:
        self._value: T | None = None
        self._full = anyio.Event()

    def put(self, value: T) -> None:
        """Never blocks: replaces a value not taken yet."""
        self._value = value
        self._full.set()

    async def take(self) -> T:
        """The newest value put since the last take (waits for one)."""
        while self._value is None:
            await self._full.wait()
        value, self._value = self._value, None
        self._full = anyio.Event()
        return value
