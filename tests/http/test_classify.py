"""The pure HTTP rules: transient outcomes, who may be retried, Retry-After, authorities, options."""

from __future__ import annotations

import datetime as dt
import email.utils

import httpx
import pytest

from resilience import Err, Ok, PipelineBuilder, TimeoutRejectedError, ValidationError
from resilience.http import (
    RETRY_EXTENSION,
    current_request,
    http_circuit_breaker_strategy,
    http_retry_strategy,
    http_timeout_strategy,
    is_transient,
    parse_retry_after,
    retry_allowed,
    standard_pipeline,
)
from resilience.http._classify import REQUEST, authority

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("status", "transient"),
    [
        (200, False),
        (204, False),
        (400, False),
        (404, False),
        (407, False),
        (408, True),
        (429, True),
        (499, False),
        (500, True),
        (501, True),
        (503, True),
        (599, True),
    ],
)
def test_transient_statuses(status: int, transient: bool) -> None:
    assert is_transient(Ok(httpx.Response(status))) is transient


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (httpx.ConnectError("refused"), True),
        (httpx.ReadTimeout("slow"), True),
        (httpx.PoolTimeout("busy"), True),
        (httpx.RemoteProtocolError("hung up"), True),
        (httpx.ReadError("reset"), True),
        (httpx.ProxyError("proxy"), True),
        (TimeoutRejectedError(timeout=1.0), True),
        (httpx.LocalProtocolError("our bug"), False),
        (httpx.UnsupportedProtocol("ftp"), False),
        (ValueError("no"), False),
    ],
)
def test_transient_errors(error: Exception, transient: bool) -> None:
    assert is_transient(Err(error)) is transient


def test_a_value_that_is_not_a_response_is_not_transient() -> None:
    assert is_transient(Ok("text")) is False


def request(method: str = "GET", **options: object) -> httpx.Request:
    return httpx.Request(method, "https://example.com/x", **options)  # type: ignore[arg-type]


def test_idempotent_methods_are_retried_others_only_when_allowed() -> None:
    for method in ("GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"):
        assert retry_allowed(request(method))
    for method in ("POST", "PATCH", "CONNECT"):
        assert not retry_allowed(request(method))
        assert retry_allowed(request(method), unsafe_methods=True)
    assert retry_allowed(request("POST", headers={"Idempotency-Key": "k1"}))
    assert retry_allowed(request("POST", extensions={RETRY_EXTENSION: True}))
    assert not retry_allowed(request("GET", extensions={RETRY_EXTENSION: False}), unsafe_methods=True)
    assert retry_allowed(None)


def test_the_request_is_the_one_being_sent_else_the_responses() -> None:
    sent = request("POST")
    assert current_request(Ok(httpx.Response(503, request=sent))) is sent
    assert current_request(Ok(httpx.Response(503))) is None
    assert current_request(None) is None
    sending = request("PUT")
    token = REQUEST.set((sending, "https://example.com:443"))
    try:
        assert current_request(Ok(httpx.Response(503, request=sent))) is sending
    finally:
        REQUEST.reset(token)


def response(retry_after: str | None) -> httpx.Response:
    return httpx.Response(503, headers={} if retry_after is None else {"Retry-After": retry_after})


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        (None, None),
        ("120", 120.0),
        (" 3 ", 3.0),
        ("0", 0.0),
        ("0.25", 0.25),
        ("-1", None),
        ("inf", None),
        ("nan", None),
        ("soon", None),
        ("", None),
        (email.utils.formatdate(NOW + 30, usegmt=True), 30.0),
        (email.utils.formatdate(NOW - 30, usegmt=True), 0.0),
        ("Wed, 21 Oct 2026 07:28:00 -0000", dt.datetime(2026, 10, 21, 7, 28, tzinfo=dt.UTC).timestamp() - NOW),
        ("Sunday, 06-Nov-94 08:49:37 GMT", 0.0),
    ],
)
def test_retry_after_in_both_forms(header: str | None, seconds: float | None) -> None:
    found = parse_retry_after(response(header), NOW)
    if seconds is None:
        assert found is None
    else:
        assert found == pytest.approx(max(seconds, 0.0))


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("https://example.com/a", "https://example.com:443"),
        ("http://example.com/a", "http://example.com:80"),
        ("https://Example.com:8443/a?q=1", "https://example.com:8443"),
        ("http://127.0.0.1:9000", "http://127.0.0.1:9000"),
    ],
)
def test_authority_is_scheme_host_and_port(url: str, key: str) -> None:
    assert authority(httpx.URL(url)) == key


def test_every_bad_option_is_reported_at_once() -> None:
    with pytest.raises(ValidationError) as caught:
        standard_pipeline(max_retries=-1, attempt_timeout=0, total_timeout="30", failure_ratio=2.0, retry_delay=-1)  # type: ignore[arg-type]
    assert sorted(caught.value.problems) == [
        "AttemptTimeout.timeout: must be > 0, got 0",
        "CircuitBreaker.failure_ratio: must be > 0 and <= 1, got 2.0",
        "Retry.delay: must be >= 0, got -1",
        "Retry.max_retries: must be >= 0, got -1",
        "TotalTimeout.timeout: must be a duration (int, float or timedelta), got '30'",
    ]


def test_the_http_options_check_their_own_fields() -> None:
    builder = (
        PipelineBuilder()
        .add(http_retry_strategy(use_retry_after="yes", retry_unsafe_methods=1, handle=3))  # type: ignore[arg-type]
        .add(http_circuit_breaker_strategy(per_authority=None, handle="x"))  # type: ignore[arg-type]
        .add(http_timeout_strategy(-1))
    )
    with pytest.raises(ValidationError) as caught:
        builder.build()
    assert sorted(caught.value.problems) == [
        "CircuitBreaker.handle: must be an exception type, a tuple of them, or a predicate, got 'x'",
        "CircuitBreaker.per_authority: must be a bool, got None",
        "Retry.handle: must be callable, got 3",
        "Retry.retry_unsafe_methods: must be a bool, got 1",
        "Retry.use_retry_after: must be a bool, got 'yes'",
        "Timeout.timeout: must be > 0, got -1",
    ]


def test_a_timedelta_works_wherever_a_duration_does() -> None:
    pipeline = standard_pipeline(total_timeout=dt.timedelta(seconds=5), attempt_timeout=dt.timedelta(seconds=1))
    assert "DeadlineTimeout" in repr(pipeline)
    assert [repr(s) for s in pipeline.strategies if "Deadline" in repr(s)] == [
        "<DeadlineTimeout timeout=5>",
        "<DeadlineTimeout timeout=1>",
    ]
