"""The retry decisions as pure code: delays per backoff, jitter bounds, caps, generated delays."""

from __future__ import annotations

import datetime as dt
import math
import random
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from resilience import ValidationError
from resilience.strategies._common import Handler
from resilience.strategies.retry._core import RetryCore, decorrelated_jitter


def core(
    *,
    delay: float = 2.0,
    backoff: str = "constant",
    jitter: bool = False,
    max_delay: float | None = None,
    max_retries: int = 3,
    seed: int = 7,
) -> RetryCore:
    return RetryCore(
        max_retries=max_retries,
        delay=delay,
        backoff=backoff,  # type: ignore[arg-type]
        jitter=jitter,
        max_delay=max_delay,
        handler=Handler(None),
        random=random.Random(seed),
    )


def delays(retry: RetryCore, count: int) -> list[float]:
    state = 0.0
    out = []
    for attempt in range(count):
        delay, state = retry.backoff_delay(attempt, state)
        out.append(delay)
    return out


@pytest.mark.parametrize(
    ("backoff", "expected"),
    [
        ("constant", [2.0, 2.0, 2.0, 2.0]),
        ("linear", [2.0, 4.0, 6.0, 8.0]),
        ("exponential", [2.0, 4.0, 8.0, 16.0]),
    ],
)
def test_delay_sequences_without_jitter(backoff: str, expected: list[float]) -> None:
    """Constant `delay`, linear `delay*(attempt+1)`, exponential `delay*2**attempt`."""
    assert delays(core(backoff=backoff), 4) == expected


@pytest.mark.parametrize("backoff", ["constant", "linear", "exponential"])
def test_max_delay_caps_every_delay(backoff: str) -> None:
    """`max_delay` caps each delay of every backoff, with or without jitter."""
    for jitter in (False, True):
        assert all(d <= 3.0 for d in delays(core(backoff=backoff, jitter=jitter, max_delay=3.0), 8))


def test_zero_delay_is_allowed() -> None:
    """A zero base delay retries at once."""
    assert delays(core(delay=0.0, backoff="exponential"), 3) == [0.0, 0.0, 0.0]


def test_huge_exponential_does_not_overflow() -> None:
    """A delay past any float saturates instead of raising OverflowError."""
    delay, _ = core(backoff="exponential").backoff_delay(5000)
    assert math.isfinite(delay)
    assert delay > 1e8


@given(
    base=st.floats(min_value=0.001, max_value=100.0),
    attempt=st.integers(min_value=0, max_value=30),
    seed=st.integers(min_value=0, max_value=2**32),
    backoff=st.sampled_from(["constant", "linear"]),
)
def test_jitter_stays_within_25_percent(base: float, attempt: int, seed: int, backoff: str) -> None:
    """Jitter keeps constant and linear delays within ±25% of the un-jittered value."""
    plain, _ = core(delay=base, backoff=backoff).backoff_delay(attempt)
    jittered, _ = core(delay=base, backoff=backoff, jitter=True, seed=seed).backoff_delay(attempt)
    assert plain * 0.75 - 1e-9 <= jittered <= plain * 1.25 + 1e-9


@given(seed=st.integers(min_value=0, max_value=2**32), base=st.floats(min_value=0.001, max_value=10.0))
def test_decorrelated_jitter_is_never_negative(seed: int, base: float) -> None:
    """Decorrelated jitter yields non-negative, finite delays attempt after attempt."""
    assert all(0.0 <= d < math.inf for d in delays(core(delay=base, backoff="exponential", jitter=True, seed=seed), 12))


def _median_jittered(attempt: int, rng: random.Random) -> float:
    samples = []
    for _ in range(3000):
        state = 0.0
        delay = 0.0
        for n in range(attempt + 1):
            delay, state = decorrelated_jitter(n, 1.0, state, rng.random())
        samples.append(delay)
    return statistics.median(samples)


def test_decorrelated_jitter_medians_are_near_the_unjittered_delays() -> None:
    """DESIGN §2.6: every attempt's median is near `delay * 2**attempt` (Polly's curve, rescaled)."""
    rng = random.Random(99)
    medians = [_median_jittered(attempt, rng) for attempt in range(6)]
    for attempt, median in enumerate(medians):
        assert 0.8 * 2**attempt <= median <= 1.25 * 2**attempt, (attempt, median)


def test_jitter_is_deterministic_with_a_seed() -> None:
    """The same seed gives the same jittered sequence."""
    assert delays(core(backoff="exponential", jitter=True, seed=5), 5) == delays(
        core(backoff="exponential", jitter=True, seed=5), 5
    )


def test_should_retry_needs_handled_budget_and_no_abort() -> None:
    """Retry only a handled failure, within `max_retries`, while the signal is not aborted."""
    retry = core(max_retries=2)
    assert retry.should_retry(handled=True, attempt=0, aborted=False)
    assert retry.should_retry(handled=True, attempt=1, aborted=False)
    assert not retry.should_retry(handled=True, attempt=2, aborted=False)
    assert not retry.should_retry(handled=False, attempt=0, aborted=False)
    assert not retry.should_retry(handled=True, attempt=0, aborted=True)


def test_generated_delay_rules() -> None:
    """None keeps the backoff; timedelta and numbers are seconds; negative is 0; max_delay caps."""
    retry = core(max_delay=10.0)
    assert retry.generated_delay(None, 2.0) == 2.0
    assert retry.generated_delay(dt.timedelta(seconds=3), 2.0) == 3.0
    assert retry.generated_delay(4, 2.0) == 4.0
    assert retry.generated_delay(-1.0, 2.0) == 0.0
    assert retry.generated_delay(60.0, 2.0) == 10.0


@pytest.mark.parametrize("bad", [float("nan"), "1", True])
def test_generated_delay_refuses_garbage(bad: object) -> None:
    """A delay generator returning NaN or a non-duration is misuse."""
    with pytest.raises(ValidationError, match="delay_generator"):
        core().generated_delay(bad, 1.0)


def test_decorrelated_jitter_saturates_instead_of_overflowing() -> None:
    """Past what a float holds, decorrelated jitter returns a huge finite delay and stays there."""
    delay, state = decorrelated_jitter(5000, 1.0, 0.0, 0.5)
    assert math.isfinite(delay)
    assert math.isinf(state)
    again, _ = decorrelated_jitter(5001, 1.0, state, 0.5)
    assert again == delay
