"""Where the library's background threads start, and the one fork hook of the process.

Every thread the library starts is a daemon started by `start_thread` (docs/guarantees.md
counts them per feature). A module whose state does not survive `os.fork()` (a lock a parent
thread may hold, threads that do not exist in the child) registers its repair with
`on_fork_in_child`; the hooks run in the child in the order they were registered.
`run_logged` runs a callback a background thread must survive, and `resolve_threadsafe` wakes
an asyncio future from any thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable

__all__ = ["interrupts_caller", "on_fork_in_child", "resolve_threadsafe", "run_logged", "start_thread"]

_logger = logging.getLogger("resilience")
_IN_CHILD: list[Callable[[], object]] = []
_Hook = TypeVar("_Hook", bound="Callable[[], object]")


def start_thread(target: Callable[..., object], *args: object, name: str) -> threading.Thread:
    """Start `target(*args)` on a new daemon thread called `name`; the thread, started."""
    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    thread.start()
    return thread


def interrupts_caller(error: BaseException) -> bool:
    """Whether `error`, raised by a callback, is the caller's to see rather than a log line's.

    Python delivers Ctrl-C to the main thread wherever it is, and the callbacks the library
    runs there (a loss's callbacks as a lease ends, a signal's callbacks on the aborting
    thread) are places it can land: logging it would swallow the user's interrupt. So a
    `KeyboardInterrupt` or `SystemExit` on the main thread propagates (after the other
    callbacks of the batch have run), as asyncio does with its callbacks. On any other
    thread there is nobody to raise it to: it is logged like any error.
    """
    return isinstance(error, KeyboardInterrupt | SystemExit) and threading.current_thread() is threading.main_thread()


def run_logged(job: Callable[[], object], what: str) -> None:
    """Run `job()`, logging anything it raises (a background thread must not die of it).

    On the main thread a Ctrl-C or an exit propagates instead (`interrupts_caller`).
    """
    try:
        job()
    except BaseException as error:
        if interrupts_caller(error):
            raise
        _logger.exception("%s raised", what)


def resolve_threadsafe(loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> None:
    """Resolve `future` (with None) on `loop`, from any thread; nothing if it is done or the loop closed."""

    def resolve() -> None:
        if not future.done():
            future.set_result(None)

    with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
        loop.call_soon_threadsafe(resolve)


def on_fork_in_child(hook: _Hook) -> _Hook:
    """Run `hook()` in a child process right after `os.fork()` (usable as a decorator)."""
    _IN_CHILD.append(hook)
    return hook


def _run_in_child() -> None:  # pragma: no cover - runs in a forked child (tests/unit/test_lock_fork.py)
    for hook in _IN_CHILD:
        try:
            hook()
        except Exception:
            _logger.exception("a fork hook of the child failed")  # the others still run, as os's own hooks do


if hasattr(os, "register_at_fork"):  # pragma: no branch - POSIX
    os.register_at_fork(after_in_child=_run_in_child)
