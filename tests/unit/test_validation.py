import datetime as dt
import math

import pytest

from resilience._validation import Problems, generated_seconds, to_seconds
from resilience.exceptions import ValidationError


@pytest.mark.parametrize(
    ("value", "kwargs", "expected"),
    [
        (1, {}, 1.0),
        (0.5, {}, 0.5),
        (dt.timedelta(milliseconds=250), {}, 0.25),
        (0, {}, 0.0),
        (math.inf, {"allow_inf": True}, math.inf),
        (None, {"allow_none": True}, None),
        (0.001, {"minimum": 0.001}, 0.001),
    ],
)
def test_valid_durations_come_back_in_seconds(value: object, kwargs: dict[str, bool], expected: float | None) -> None:
    """Accepted durations are converted to float seconds and nothing is recorded."""
    problems = Problems("S.")
    assert problems.duration("d", value, **kwargs) == expected  # type: ignore[arg-type]
    assert not problems


@pytest.mark.parametrize(
    ("value", "kwargs", "message"),
    [
        (None, {}, "S.d: must be a duration (int, float or timedelta), got None"),
        (True, {}, "S.d: must be a duration (int, float or timedelta), got True"),
        ("1", {}, "S.d: must be a duration (int, float or timedelta), got '1'"),
        (math.nan, {}, "S.d: must be a number, got NaN"),
        (math.inf, {}, "S.d: must be finite, got inf"),
        (-math.inf, {"allow_inf": True}, "S.d: must be finite, got -inf"),
        (-1, {}, "S.d: must be >= 0, got -1"),
        (0, {"positive": True}, "S.d: must be > 0, got 0"),
        (0.0001, {"minimum": 0.001}, "S.d: must be >= 0.001 seconds, got 0.0001"),
        (dt.timedelta(seconds=-1), {}, "S.d: must be >= 0, got timedelta(seconds=-1)"),
    ],
)
def test_invalid_durations_are_recorded(value: object, kwargs: dict[str, bool], message: str) -> None:
    """Each rejected duration yields one problem that names the option."""
    problems = Problems("S.")
    assert problems.duration("d", value, **kwargs) is None  # type: ignore[arg-type]
    assert problems.items == [message]


def test_integers_callables_and_names() -> None:
    """Integer, callable and name checks word their problems the same way."""
    problems = Problems()
    assert problems.integer("n", 3, minimum=0) == 3
    assert problems.integer("n", True, minimum=0) is None
    assert problems.integer("n", 1.5, minimum=0) is None
    assert problems.integer("n", -1, minimum=0) is None
    assert problems.callable("cb", print) is print
    assert problems.callable("cb", None) is None
    assert problems.callable("cb", None, allow_none=False) is None
    assert problems.callable("cb", 3) is None
    problems.name("name", None, allow_none=True)
    problems.name("name", "")
    problems.name("name", "x" * 100)
    assert problems.items == [
        "n: must be an int, got True",
        "n: must be an int, got 1.5",
        "n: must be >= 0, got -1",
        "cb: is required",
        "cb: must be callable, got 3",
        "name: must be a non-empty string, got ''",
    ]


def test_long_values_are_shortened_in_messages() -> None:
    """A huge value is cut in the message."""
    problems = Problems()
    problems.duration("d", "y" * 200)
    assert len(problems.items[0]) < 120
    assert problems.items[0].endswith("...")
    assert to_seconds(dt.timedelta(minutes=1)) == 60


@pytest.mark.parametrize(
    ("value", "expected"), [(None, 7.0), (2, 2.0), (0.5, 0.5), (dt.timedelta(seconds=3), 3.0), (-1, -1.0)]
)
def test_generated_seconds_accepts_numbers_timedeltas_and_none(value: object, expected: float) -> None:
    """A generator's duration comes back as float seconds; None gives the default; range checks are the caller's."""
    assert generated_seconds(value, 7.0, "delay_generator", "seconds") == expected


@pytest.mark.parametrize(
    ("value", "shown"), [(math.nan, "NaN"), (True, "True"), ("soon", "'soon'"), (object, "<class 'object'>")]
)
def test_generated_seconds_names_the_generator_and_the_value(value: object, shown: str) -> None:
    """Every strategy refuses a bad generated duration with the same wording."""
    with pytest.raises(ValidationError, match=rf"^x_generator returned {shown}: return seconds or None$"):
        generated_seconds(value, 1.0, "x_generator", "seconds or None")
