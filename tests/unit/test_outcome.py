import pickle

import pytest

from resilience import Err, Ok, Outcome


def test_ok_holds_a_value_and_no_error() -> None:
    """Ok exposes its value; its error is None."""
    outcome = Outcome.ok(3)
    assert isinstance(outcome, Ok)
    assert (outcome.value, outcome.error, outcome.is_ok, outcome.is_error) == (3, None, True, False)


def test_err_holds_an_error_and_no_value() -> None:
    """Err exposes its error; its value is None."""
    boom = ValueError("boom")
    outcome = Outcome.failure(boom)
    assert isinstance(outcome, Err)
    assert (outcome.value, outcome.error, outcome.is_ok, outcome.is_error) == (None, boom, False, True)


def test_unwrap_returns_the_value_or_reraises_with_traceback() -> None:
    """unwrap() returns an Ok's value and re-raises an Err's exception, traceback kept."""
    assert Ok("v").unwrap() == "v"
    try:
        raise KeyError("k")
    except KeyError as exc:
        err = Err(exc)
        original_tb = exc.__traceback__
    with pytest.raises(KeyError) as info:
        err.unwrap()
    assert info.value is err.error
    tb = info.value.__traceback__
    frames = []
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    assert original_tb in frames


def test_match_calls_the_right_branch() -> None:
    """match(ok=..., err=...) calls exactly one branch and returns its result."""
    assert Ok(2).match(ok=lambda v: v * 10, err=lambda e: -1) == 20
    assert Err(ValueError()).match(ok=lambda v: v, err=lambda e: type(e).__name__) == "ValueError"


def test_match_statement_destructures() -> None:
    """case Ok(value) / case Err(error) work in a match statement."""

    def describe(outcome: Ok[int] | Err) -> str:
        match outcome:
            case Ok(value):
                return f"ok {value}"
            case Err(error):
                return f"err {error}"

    assert describe(Ok(1)) == "ok 1"
    assert describe(Err(RuntimeError("x"))) == "err x"


def test_outcomes_are_frozen_and_compare_by_content() -> None:
    """Outcomes cannot be changed; Ok compares by value, Err by the identity of its error."""
    ok = Ok(1)
    with pytest.raises(AttributeError):
        ok.value = 2  # type: ignore[misc]
    with pytest.raises(AttributeError):
        Err(ValueError()).anything = 1  # type: ignore[attr-defined]
    assert Ok(1) == Ok(1)
    assert hash(Ok(1)) == hash(Ok(1))
    assert Ok(1) != Ok(2)
    error = ValueError()
    assert Err(error) == Err(error)
    assert hash(Err(error)) == hash(Err(error))
    assert Err(error) != Err(ValueError())
    assert Ok(1) != Err(error)
    assert repr(Ok(1)) == "Ok(1)"
    assert repr(Err(error)) == "Err(ValueError())"


def test_outcomes_pickle() -> None:
    """Outcomes survive pickling."""
    assert pickle.loads(pickle.dumps(Ok([1, 2]))) == Ok([1, 2])
    restored = pickle.loads(pickle.dumps(Err(ValueError("x"))))
    assert isinstance(restored, Err)
    assert isinstance(restored.error, ValueError)
    assert restored.error.args == ("x",)


def test_ok_and_err_cannot_be_subclassed() -> None:
    """Ok and Err are final at run time too."""
    with pytest.raises(TypeError, match="final"):
        type("MyOk", (Ok,), {})
    with pytest.raises(TypeError, match="final"):
        type("MyErr", (Err,), {})
