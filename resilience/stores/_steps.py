"""Store work written once for both flavours: a generator of steps, driven sync or async.

A step is a client call's return value, yielded: `reply = yield conn.execute(...)`. A sync
client's call has already run when its value is yielded, and `run_steps` sends that value
back; an asyncio client's call returns an awaitable, which `run_steps_async` awaits, sending
back its result or throwing its error in at the `yield`. So one body, with its `try` blocks,
serves the sync method and its `_async` twin, which differ only by the client they pass.
A store that never suspends (in memory) makes its twins of its sync methods (`inline_twin`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, cast

if TYPE_CHECKING:
    from types import CoroutineType

__all__ = ["Steps", "checked", "inline_twin", "run_steps", "run_steps_async"]

_log = logging.getLogger("resilience")

_T = TypeVar("_T")
_P = ParamSpec("_P")

Steps = Generator[Any, Any, _T]
"""Steps that yield client calls' values (or awaitables) and return the answer."""


def run_steps(steps: Steps[_T]) -> _T:
    """The answer of `steps` over a sync client: each yielded value is its call's result."""
    reply = None
    try:
        while True:
            reply = steps.send(reply)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    finally:
        steps.close()  # an error raised here, between two steps, still runs the steps' cleanup


async def run_steps_async(steps: Steps[_T]) -> _T:
    """The answer of `steps` over an asyncio client: each yielded awaitable is awaited."""
    try:
        step = next(steps)
        while True:
            try:
                reply = await step
            except BaseException as exc:  # noqa: BLE001 - the call's error, raised where the steps made it
                step = steps.throw(exc)
            else:
                step = steps.send(reply)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    finally:
        steps.close()


def checked(is_free: Callable[[], Any]) -> Steps[bool]:
    """A waiter's check whether the key is free now (`is_free`, sync or async); one that fails is False.

    A release notification is a hint only: a failed check means "wait and see".
    """
    try:
        return bool((yield is_free()))
    except Exception:  # noqa: BLE001 -- a hint only
        _log.debug("release check failed", exc_info=True)
        return False


def inline_twin(
    method: Callable[Concatenate[Any, _P], _T],
) -> Callable[Concatenate[Any, _P], CoroutineType[Any, Any, _T]]:
    """The `_async` twin of a store's `method` that never suspends: its sync method answers.

    The twin calls the method by name, so a subclass's override of the sync method answers for both.
    """
    name = method.__name__

    @functools.wraps(method)
    async def twin(self: Any, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        answer: _T = getattr(self, name)(*args, **kwargs)
        return answer

    return cast("Callable[Concatenate[Any, _P], CoroutineType[Any, Any, _T]]", twin)  # an `async def` makes one
