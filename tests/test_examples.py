"""Every example runs, as `make demo` runs it, and tells its story."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parent.parent / "examples"


def run(name: str, *args: str, timeout: float = 60) -> str:
    completed = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def test_every_example_is_covered_here() -> None:
    """A new example must get a test in this module."""
    tested = {"quickstart.py"}
    assert {p.name for p in EXAMPLES.glob("*.py")} <= tested


@pytest.mark.parametrize("name", ["quickstart.py"])
def test_quickstart_tells_its_story(name: str) -> None:
    """The quick start prints results, the failure, and the events."""
    out = run(name)
    assert "-> widget: 42.00" in out
    assert out.count("Retry: OnRetry after ConnectionError") >= 2
    assert "Timeout: OnTimeout" in out
    assert "failed: TimeoutRejectedError" in out
    assert "CircuitBreaker: OnCircuitOpened" in out
    assert "BrokenCircuitError" in out
