"""The event every strategy emits, and its severity."""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from resilience._outcome import Outcome

__all__ = ["Severity", "TelemetryEvent"]


class Severity(enum.Enum):
    """How important an event is (Polly's `ResilienceEventSeverity`); `NONE` suppresses it."""

    NONE = "None"
    DEBUG = "Debug"
    INFORMATION = "Information"
    WARNING = "Warning"
    ERROR = "Error"
    CRITICAL = "Critical"

    _level: int  # set below for every member: a plain attribute read on the hot path

    @property
    def log_level(self) -> int:
        """The stdlib logging level of this severity (`NONE` maps above every level)."""
        return self._level


# In the members' order: NONE maps above every level. An attribute, not a dict keyed by the
# member: such a lookup goes through Enum.__hash__ (a Python call).
_LOG_LEVELS = (logging.CRITICAL + 100, logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL)
for _severity, _level in zip(Severity, _LOG_LEVELS, strict=True):
    _severity._level = _level


@dataclass(frozen=True, slots=True)
class TelemetryEvent:
    """One event of one strategy (or of the pipeline), as listeners and exporters receive it.

    `arguments` is the event's frozen arguments object (e.g. `OnRetryArguments`), or None.
    """

    name: str
    severity: Severity
    pipeline_name: str | None
    pipeline_instance: str | None
    strategy_name: str | None
    operation_key: str | None
    outcome: Outcome[Any] | None
    arguments: object | None
