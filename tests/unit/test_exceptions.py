import pickle

import pytest

import resilience
from resilience import (
    BrokenCircuitError,
    IsolatedCircuitError,
    LockLeaseLostError,
    LockLostError,
    LockNotAcquiredError,
    OperationAbortedError,
    RejectedError,
    ResilienceError,
    SemaphoreLeaseLostError,
    TimeoutRejectedError,
    ValidationError,
    is_rejection,
)

ALL_ERRORS = [
    ValidationError(["Retry.max_retries: must be >= 0", "Timeout.timeout: must be > 0"]),
    ValidationError("one problem"),
    OperationAbortedError(),
    RejectedError("rejected"),
    LockNotAcquiredError("order:1", 2.5),
    BrokenCircuitError(retry_after=1.5),
    IsolatedCircuitError(),
    TimeoutRejectedError(timeout=3.0),
    TimeoutRejectedError("custom message", timeout=None),
    LockLostError("job", 42),
    SemaphoreLeaseLostError("pool", 7),
]


def test_the_tree_matches_the_design() -> None:
    """The hierarchy is DESIGN §2.5's, including the builtin categories."""
    assert issubclass(ValidationError, ResilienceError)
    assert issubclass(ValidationError, ValueError)
    assert issubclass(TimeoutRejectedError, TimeoutError)
    assert issubclass(LockNotAcquiredError, RejectedError)
    assert issubclass(IsolatedCircuitError, BrokenCircuitError)
    assert issubclass(BrokenCircuitError, RejectedError)
    assert issubclass(SemaphoreLeaseLostError, LockLostError)
    assert LockLeaseLostError is LockLostError
    assert not issubclass(LockLostError, RejectedError)
    for name in ("OperationAbortedError", "RejectedError", "LockLostError", "TimeoutRejectedError"):
        assert issubclass(getattr(resilience, name), ResilienceError)


@pytest.mark.parametrize("error", ALL_ERRORS, ids=lambda e: type(e).__name__)
def test_every_error_pickles_with_its_attributes(error: Exception) -> None:
    """Every error survives pickle with its message and attributes."""
    restored = pickle.loads(pickle.dumps(error))
    assert type(restored) is type(error)
    assert str(restored) == str(error)
    assert restored.__dict__ == error.__dict__


def test_attributes_and_messages() -> None:
    """The attributes are the documented ones and messages say what happened."""
    problems = ["A.x: bad", "B.y: worse"]
    error = ValidationError(problems)
    assert error.problems == problems
    assert "A.x: bad" in str(error)
    assert "B.y: worse" in str(error)
    assert ValidationError("single").problems == ["single"]
    lock = LockNotAcquiredError("k", 1.0)
    assert (lock.key, lock.retry_after) == ("k", 1.0)
    assert "'k'" in str(lock)
    assert BrokenCircuitError(retry_after=2.0).retry_after == 2.0
    assert TimeoutRejectedError(timeout=1.5).timeout == 1.5
    assert "1.5s" in str(TimeoutRejectedError(timeout=1.5))
    assert TimeoutRejectedError("only message").args == ("only message",)
    lost = LockLostError("k", 9)
    assert (lost.key, lost.token) == ("k", 9)
    assert SemaphoreLeaseLostError("s", 1).key == "s"


def test_is_rejection() -> None:
    """Rejections are RejectedErrors, or groups made only of them."""
    assert is_rejection(LockNotAcquiredError("k"))
    assert is_rejection(BrokenCircuitError())
    assert not is_rejection(TimeoutRejectedError())
    assert not is_rejection(ValueError())
    assert is_rejection(
        ExceptionGroup("all", [BrokenCircuitError(), ExceptionGroup("inner", [IsolatedCircuitError()])])
    )
    assert not is_rejection(ExceptionGroup("mixed", [BrokenCircuitError(), ValueError()]))
