"""What the pipeline is calling, for the strategies that call something else instead (hedging).

A pipeline with such a strategy (one with `wants_invocation = True`) makes the call visible
as `INVOCATION` while its strategies run; a strategy that wants attempt n to call another
callable with the same arguments sets `SUBSTITUTE` to `(invocation, other)` in that attempt's
`contextvars` context. The pipeline's last step then calls `other(*args, **kwargs)`. The pair
names its invocation, so a nested execution inside `other` calls its own callable.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["INVOCATION", "SUBSTITUTE", "Invocation"]


class Invocation:
    """One execution's callable (its arguments stay with the pipeline)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def target(self) -> Callable[..., Any]:
        """The callable to call now: a substitute set for this invocation, else the original."""
        substitute = SUBSTITUTE.get()
        if substitute is not None and substitute[0] is self:
            return substitute[1]
        return self.fn


INVOCATION: Final[ContextVar[Invocation | None]] = ContextVar("resilience_invocation", default=None)
SUBSTITUTE: Final[ContextVar[tuple[Invocation, Callable[..., Any]] | None]] = ContextVar(
    "resilience_substitute", default=None
)
