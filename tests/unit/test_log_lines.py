"""What the `resilience` logger prints reads well without an instance name, and says 'handled'."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from resilience import LockLeaseLostError, LockLostError, ResiliencePipelineBuilder
from resilience.stores import MemoryLockStore


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "resilience"]


def test_the_source_leaves_out_a_missing_instance_name(caplog: pytest.LogCaptureFixture) -> None:
    """'nightly/Lock', not 'nightly//Lock'; with an instance: 'nightly/eu-1/Lock'."""
    with caplog.at_level(logging.DEBUG, logger="resilience"):
        ResiliencePipelineBuilder(name="nightly").add_lock("k", store=MemoryLockStore()).build().execute(lambda: 1)
        ResiliencePipelineBuilder(name="nightly", instance_name="eu-1").build().execute(lambda: 1)
    messages = _messages(caplog)
    assert any("Source: 'nightly/Lock'" in m for m in messages), messages
    assert any("Source: 'nightly/eu-1'" in m for m in messages), messages
    assert not any("//" in m for m in messages)


def test_a_failed_attempt_says_whether_it_was_handled(caplog: pytest.LogCaptureFixture) -> None:
    """An unhandled failure is logged at INFO (as Polly does) but says 'handled: False'."""
    pipeline = ResiliencePipelineBuilder(name="q").add_retry(max_retries=1, delay=0, handle=ConnectionError).build()
    with caplog.at_level(logging.INFO, logger="resilience"):
        pipeline.settle(lambda: 1 / 0)
    (attempt,) = [r for r in caplog.records if "EventName: 'ExecutionAttempt'" in r.getMessage()]
    assert attempt.levelno == logging.INFO
    assert attempt.getMessage().endswith("result: ZeroDivisionError: division by zero, attempt: 0, handled: False")


def test_lock_lease_lost_error_is_lock_lost_error_and_the_docs_say_how_it_prints() -> None:
    """One class, two names; the primitives page tells readers it prints as LockLostError."""
    assert LockLeaseLostError is LockLostError
    assert repr(LockLeaseLostError("k", 3)).startswith("LockLostError(")
    page = (Path(__file__).parents[2] / "docs" / "primitives.md").read_text(encoding="utf-8")
    assert "`repr` print `LockLostError`" in page
