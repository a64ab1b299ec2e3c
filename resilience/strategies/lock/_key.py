"""The lock strategy's key and store options: checked at `build()`, resolved per execution.

Kept apart from the strategy's lease handling so that the rules users meet first — what a key
function looks like, which store to pass, what the default store does — live in one place.
"""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING

from resilience._validation import wrong_store
from resilience.exceptions import ValidationError

if TYPE_CHECKING:
    from collections.abc import Callable

    from resilience._context import ResilienceContext
    from resilience._validation import Problems

__all__ = ["check_key", "check_store_kind", "note_default_store", "resolve_key"]

_logger = logging.getLogger("resilience")
_KEY_HELP = "a non-empty string or a callable taking the context (lambda ctx: f'order:{ctx.operation_key}')"
_noted_default_store = False


def check_key(problems: Problems, key: object) -> None:
    """Record what is wrong with a `key` option (a string, or a function taking the context)."""
    if isinstance(key, str):
        if not key:
            problems.add("key", f"must be {_KEY_HELP}")
        return
    if not callable(key):
        problems.add("key", f"must be {_KEY_HELP}, got {type(key).__name__}")
        return
    try:
        signature = inspect.signature(key)
    except (TypeError, ValueError):  # a builtin without a signature: trust it
        return
    try:
        signature.bind(object())
    except TypeError:
        try:
            signature.bind()
        except TypeError:
            problems.add("key", f"the key function must take exactly one argument, the context; it takes {signature}")
        else:
            problems.add(
                "key",
                "the key function takes no argument, but it is called with the execution's context: "
                "pass the key itself (add_lock('nightly')) or write lambda ctx: ...",
            )


def check_store_kind(problems: Problems, store: object) -> None:
    """Record a store that is not a lock store, saying what to pass instead (never its whole repr)."""
    problems.add(
        "store", wrong_store(store, "RedisLockStore", "resilience.stores", "must implement LockStore or AsyncLockStore")
    )


def note_default_store(name: str) -> None:
    """Say once per process, at `build()`, that a lock without `store=` is local to this process.

    A log record at INFO (not a warning): tests and scripts that mean it are not nagged, while
    an application that configures logging sees it once.
    """
    global _noted_default_store  # noqa: PLW0603 - one line per process, by design
    if _noted_default_store:
        return
    _noted_default_store = True
    _logger.info(
        "%s: no store= given, so this lock excludes executions of this process only (a MemoryLockStore); "
        "pass store=RedisLockStore(redis_client(url)) to lock across processes and machines",
        name,
    )


def resolve_key(name: str, key: Callable[[ResilienceContext], str], context: ResilienceContext) -> str:
    """The key the key function gives this execution's lock; a `ValidationError` for a key that cannot be meant."""
    resolved: object = key(context)
    if not isinstance(resolved, str) or not resolved:
        msg = f"{name}.key: the key function returned {resolved!r:.60}; it must return a non-empty str"
        raise ValidationError(msg)
    if context.operation_key is None and "None" in resolved:
        # `lambda ctx: f"order:{ctx.operation_key}"` called without an operation key: every call
        # would share the key "order:None", serialising (or rejecting) unrelated work.
        msg = (
            f"{name}.key: the key function returned {resolved!r:.60} because this execution has no operation "
            "key; give each call one: with use_context(operation_key=order_id): pipeline.execute(...), "
            "or decorate with @pipeline(operation_key=lambda order_id: order_id)"
        )
        raise ValidationError(msg)
    return resolved
