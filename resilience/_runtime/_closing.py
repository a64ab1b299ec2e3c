"""`Closing`: `with` and `async with` for the objects that own background work (pipelines, stores, primitives)."""

from __future__ import annotations

from typing import Self

__all__ = ["Closing"]


class Closing:
    """A base for objects with `close()` (and maybe `aclose()`): both context-manager protocols."""

    __slots__ = ()

    def close(self) -> None:
        """Release what the object owns; idempotent."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """The asyncio twin of `close` (by default `close` itself)."""
        self.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
