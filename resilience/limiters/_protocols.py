"""What a rate-limit store must answer: one atomic decision per call, sync or asyncio."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from resilience.limiters._algorithms import RateLimitAlgorithm

__all__ = ["AsyncRateLimitStore", "RateLimitStore"]


@runtime_checkable
class RateLimitStore(Protocol):
    """A sync rate-limit store: `take` decides, atomically for its key, whether permits are free."""

    def take(  # noqa: PLR0917 - the protocol's positional signature
        self,
        key: str,
        limit: int,
        per: float,
        burst: int | None = None,
        algorithm: RateLimitAlgorithm = "token_bucket",
        permits: int = 1,
    ) -> float:
        """Take `permits` permits of `key`'s limit of `limit` per `per` seconds.

        Returns 0.0 when they were granted, else the seconds until they could be (nothing is
        taken then). `burst` is the token bucket's capacity (None: `limit`); the windows ignore
        it. Raises `ValidationError` for arguments that can never be granted.
        """
        ...


@runtime_checkable
class AsyncRateLimitStore(Protocol):
    """The asyncio flavour of `RateLimitStore`: same meaning, `take_async`."""

    async def take_async(  # noqa: PLR0917 - the protocol's positional signature
        self,
        key: str,
        limit: int,
        per: float,
        burst: int | None = None,
        algorithm: RateLimitAlgorithm = "token_bucket",
        permits: int = 1,
    ) -> float:
        """See `RateLimitStore.take`."""
        ...
