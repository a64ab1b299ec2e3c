"""A lock store wrapper that records calls and can suspend one call at a chosen point."""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["GatedStore"]


class GatedStore:
    """Wraps an async lock store; `point` = `"<method>:before"` or `"<method>:after"` suspends the
    first such call (before sending it, or after its reply arrived) until `opened` is set.

    `method` is `acquire` (both `acquire_async` and `acquire_or_ttl_async`), `renew` or `release`.
    """

    def __init__(self, inner: Any, point: str | None = None) -> None:
        self.inner = inner
        self.point = point
        self.reached = asyncio.Event()
        self.opened = asyncio.Event()
        self.calls: list[tuple[str, str, str]] = []  # (method, key, owner)
        self._fired = False

    async def _gate(self, method: str, phase: str) -> None:
        if self.point == f"{method}:{phase}" and not self._fired:
            self._fired = True
            self.reached.set()
            await self.opened.wait()

    async def _call(self, method: str, name: str, key: str, owner: str, *args: Any) -> Any:
        self.calls.append((method, key, owner))
        await self._gate(method, "before")
        result = await getattr(self.inner, name)(key, owner, *args)
        await self._gate(method, "after")
        return result

    async def acquire_async(self, key: str, owner: str, ttl: float) -> int | None:
        return await self._call("acquire", "acquire_async", key, owner, ttl)

    async def acquire_or_ttl_async(self, key: str, owner: str, ttl: float) -> tuple[int | None, float | None]:
        return await self._call("acquire", "acquire_or_ttl_async", key, owner, ttl)

    async def renew_async(self, key: str, owner: str, ttl: float) -> bool:
        return await self._call("renew", "renew_async", key, owner, ttl)

    async def release_async(self, key: str, owner: str) -> bool:
        return await self._call("release", "release_async", key, owner)
