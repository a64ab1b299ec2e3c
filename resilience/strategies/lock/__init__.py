"""Lock strategy: the callable runs only while it holds a lease on its key (the lease engine is `resilience._lease`)."""

from resilience.strategies.lock._strategy import (
    LockEventArguments,
    LockStrategyOptions,
    OnLockLostArguments,
    lock_strategy,
)

__all__ = [
    "LockEventArguments",
    "LockStrategyOptions",
    "OnLockLostArguments",
    "lock_strategy",
]
