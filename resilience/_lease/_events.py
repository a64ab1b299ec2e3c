"""The lock events and the held-lock set, shared by the lock strategy and the primitives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from resilience._context import ResilienceContext, ResiliencePropertyKey
from resilience._outcome import Err
from resilience.telemetry._event import Severity

if TYPE_CHECKING:
    from resilience._lease._lease import LeaseBase
    from resilience._time import TimeProvider
    from resilience.telemetry._source import TelemetrySource

__all__ = ["HELD_LOCKS", "LockEventArguments", "LockEvents"]

HELD_LOCKS: Final[ResiliencePropertyKey[frozenset[tuple[int, str]]]] = ResiliencePropertyKey("resilience._held_locks")
"""(store id, key) of every lock the execution chain holds: locks are not reentrant."""


@dataclass(frozen=True, slots=True)
class LockEventArguments:
    """The `arguments` of every lock event (`OnLockAcquired`, `OnLockRejected`, ...).

    Durations are seconds: `wait_duration` (acquisition, on `OnLockAcquired`/`OnLockRejected`),
    `hold_duration` (acquired until released or lost, on `OnLockReleased`/`OnLockLost`).
    `retry_after` is the holder's time left on `OnLockRejected` when the store reports it;
    `error` is the renewal's exception on `OnLockRenewalFailed`. `context` is the execution's
    (None for the primitives, which run outside a pipeline). `mode` is how the key is held:
    `"exclusive"` (a lock) or `"semaphore"` (a permit).
    """

    context: ResilienceContext | None
    key: str
    token: int | None = None
    wait_duration: float | None = None
    hold_duration: float | None = None
    retry_after: float | None = None
    error: BaseException | None = None
    mode: str = "exclusive"


class LockEvents:
    """The five lock events, emitted the same way by the strategy and the primitives.

    Durations are measured on `time_provider`. Debug events build nothing unless someone
    listens (`TelemetrySource.enabled`). `mode` goes on every event (`lock.mode`) and on the
    `resilience.lock.held` state metric, which reads `held`: every lease acquired and not yet
    released or lost. An owner holding keys in several modes keeps one
    `LockEvents` per mode.
    """

    __slots__ = ("__weakref__", "_telemetry", "_time_provider", "held", "mode")

    def __init__(self, telemetry: TelemetrySource, time_provider: TimeProvider, mode: str = "exclusive") -> None:
        self._telemetry = telemetry
        self._time_provider = time_provider
        self.mode = mode
        self.held: set[LeaseBase] = set()  # add and discard are atomic: no lock
        telemetry.observe("resilience.lock.held", self, lambda events: len(events.held), {"lock.mode": mode})

    def _emit(self, name: str, severity: Severity, context: ResilienceContext | None, key: str, **facts: Any) -> None:
        error = facts.get("error")
        self._telemetry.emit(
            name,
            severity,
            operation_key=None if context is None else context.operation_key,
            # A renewal's error is the event's outcome, so metrics get its `exception.type`.
            outcome=Err(error) if isinstance(error, Exception) else None,
            arguments=LockEventArguments(context, key, mode=self.mode, **facts),
        )

    def acquired(self, context: ResilienceContext | None, key: str, lease: LeaseBase, started: float) -> None:
        """`OnLockAcquired` (Debug), with the time waited since `started`."""
        self.held.add(lease)
        if (context is None or not context._quiet) and self._telemetry.enabled(Severity.DEBUG):
            waited = self._time_provider.monotonic() - started
            self._emit("OnLockAcquired", Severity.DEBUG, context, key, token=lease.token, wait_duration=waited)

    def rejected(self, context: ResilienceContext | None, key: str, started: float, retry_after: float | None) -> None:
        """`OnLockRejected` (Information), with the time waited and the holder's time left."""
        waited = self._time_provider.monotonic() - started
        self._emit("OnLockRejected", Severity.INFORMATION, context, key, wait_duration=waited, retry_after=retry_after)

    def released(self, context: ResilienceContext | None, key: str, lease: LeaseBase) -> None:
        """`OnLockReleased` (Debug), with the hold time."""
        self.held.discard(lease)
        if (context is None or not context._quiet) and self._telemetry.enabled(Severity.DEBUG):
            held = self._time_provider.monotonic() - lease.acquired_at
            self._emit("OnLockReleased", Severity.DEBUG, context, key, token=lease.token, hold_duration=held)

    def lost(self, context: ResilienceContext | None, key: str, lease: LeaseBase) -> None:
        """`OnLockLost` (Error), with the hold time until the loss was handled."""
        self.held.discard(lease)
        held = self._time_provider.monotonic() - lease.acquired_at
        self._emit("OnLockLost", Severity.ERROR, context, key, token=lease.token, hold_duration=held)

    def renewal_failed(self, context: ResilienceContext | None, key: str, token: int, error: Exception) -> None:
        """`OnLockRenewalFailed` (Warning), with the renewal's error."""
        self._emit("OnLockRenewalFailed", Severity.WARNING, context, key, token=token, error=error)
