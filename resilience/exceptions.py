"""The errors of `resilience`, all re-exported from the package root.

```
ResilienceError(Exception)
├── ValidationError(ResilienceError, ValueError)   bad options or misuse; .problems: list[str]
├── OperationAbortedError(ResilienceError)         default reason of Signal.abort()
├── RejectedError(ResilienceError)                 the callable never ran
│   ├── LockNotAcquiredError                       .key, .retry_after: float | None
│   ├── BrokenCircuitError                         .retry_after: float | None
│   │   └── IsolatedCircuitError
│   └── RateLimiterRejectedError                   .key, .retry_after: float | None
├── TimeoutRejectedError(ResilienceError, TimeoutError)   .timeout
└── LockLostError                                  .key, .token   (alias: LockLeaseLostError)
    └── SemaphoreLeaseLostError
```

Every error pickles with its attributes (`__reduce__` rebuilds the instance without calling
`__init__`, so keyword-only constructors survive a trip through `multiprocessing`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "BrokenCircuitError",
    "IsolatedCircuitError",
    "LockLeaseLostError",
    "LockLostError",
    "LockNotAcquiredError",
    "OperationAbortedError",
    "RateLimiterRejectedError",
    "RejectedError",
    "ResilienceError",
    "SemaphoreLeaseLostError",
    "TimeoutRejectedError",
    "ValidationError",
    "is_rejection",
]


def _rebuild(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> BaseException:
    exc = cls.__new__(cls, *args)
    exc.args = args
    exc.__dict__.update(state)
    return exc


class ResilienceError(Exception):
    """Base class of every error raised by `resilience` itself."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


class ValidationError(ResilienceError, ValueError):
    """Invalid options or misuse of the API.

    `problems` lists every problem found, each as `"<strategy>.<option>: <what is wrong>"`
    when it comes from `build()`; the message joins them.
    """

    problems: list[str]

    def __init__(self, problems: str | Iterable[str]) -> None:
        listed = [problems] if isinstance(problems, str) else list(problems)
        self.problems = listed
        if len(listed) == 1:
            message = listed[0]
        else:
            message = f"{len(listed)} problems:\n" + "\n".join(f"  - {p}" for p in listed)
        super().__init__(message)


class OperationAbortedError(ResilienceError):
    """The default reason of `Signal.abort()`: the operation was aborted by its caller."""

    def __init__(self, message: str = "the operation was aborted") -> None:
        super().__init__(message)


class RejectedError(ResilienceError):
    """A strategy refused to run the callable: it never ran (see `is_rejection`)."""


class LockNotAcquiredError(RejectedError):
    """The lock on `key` was held by someone else for longer than the wait allowed.

    `retry_after` is the remaining lease time of the holder, when the store reports it.
    """

    key: str
    retry_after: float | None

    def __init__(self, key: str, retry_after: float | None = None, *, message: str | None = None) -> None:
        self.key = key
        self.retry_after = retry_after
        super().__init__(message or f"lock {key!r} is held by someone else")


class BrokenCircuitError(RejectedError):
    """The circuit is open (or half-open with its probe in flight): the call was rejected.

    `retry_after` is the time left until the circuit lets a probe through, if known.
    """

    retry_after: float | None

    def __init__(self, message: str = "the circuit is open", *, retry_after: float | None = None) -> None:
        self.retry_after = retry_after
        super().__init__(message)


class IsolatedCircuitError(BrokenCircuitError):
    """The circuit was isolated by hand (`CircuitBreakerManualControl.isolate()`)."""

    def __init__(self, message: str = "the circuit is isolated", *, retry_after: float | None = None) -> None:
        super().__init__(message, retry_after=retry_after)


class RateLimiterRejectedError(RejectedError):
    """A rate limiter or a concurrency limiter refused the call: it never ran.

    `key` is the limiter's partition. `retry_after` is how long until a permit is free when
    the limiter knows it (exact for the rate limiter's algorithms; None for a concurrency
    limiter, whose permits free up when a holder finishes).
    """

    key: str
    retry_after: float | None

    def __init__(self, key: str, retry_after: float | None = None, *, message: str | None = None) -> None:
        self.key = key
        self.retry_after = retry_after
        if message is None:
            message = f"the limiter rejected the call (key {key!r})"
            if retry_after is not None:
                message += f"; a permit is free in {retry_after:.6g}s"
        super().__init__(message)


class TimeoutRejectedError(ResilienceError, TimeoutError):
    """The timeout strategy's own deadline passed; `timeout` is the limit in seconds."""

    timeout: float | None

    def __init__(self, message: str | None = None, *, timeout: float | None = None) -> None:
        self.timeout = timeout
        if message is None:
            message = "the operation timed out" if timeout is None else f"the operation timed out after {timeout:g}s"
        super().__init__(message)


class LockLostError(ResilienceError):
    """The lease on `key` (fencing token `token`) was lost while the callable ran.

    It is also the reason the callable's signal aborts with when the loss is noticed.
    """

    key: str
    token: int | None

    def __init__(self, key: str, token: int | None = None, *, message: str | None = None) -> None:
        self.key = key
        self.token = token
        super().__init__(message or f"the lease on {key!r} (token {token}) was lost")


LockLeaseLostError = LockLostError
"""Another name for `LockLostError` (the primitives' name for it): one class, printed as `LockLostError`."""


class SemaphoreLeaseLostError(LockLostError):
    """A semaphore slot's lease was lost while the callable ran."""

    def __init__(self, key: str, token: int | None = None, *, message: str | None = None) -> None:
        super().__init__(key, token, message=message or f"the semaphore slot on {key!r} (token {token}) was lost")


def is_rejection(exc: BaseException) -> bool:
    """True for a `RejectedError`, or an `ExceptionGroup` whose leaves all are rejections."""
    if isinstance(exc, BaseExceptionGroup):
        return all(is_rejection(inner) for inner in exc.exceptions)
    return isinstance(exc, RejectedError)
