"""The test servers skip without redis-server, except under CI=true, where that is a failure."""

from __future__ import annotations

import pytest

from tests import redis_support


def test_a_missing_binary_skips_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="not installed"):
        redis_support._binary("no-such-redis-server")


def test_a_missing_binary_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="not installed"):
        redis_support._binary("no-such-redis-server")


def test_free_ports_avoid_6379_and_keep_the_bus_port_free() -> None:
    port = redis_support.free_port(with_bus=True)
    assert port != 6379
    assert port + 10000 <= 65535
