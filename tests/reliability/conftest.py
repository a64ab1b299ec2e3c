"""Helpers of the reliability tests: worker processes, fault proxies, log readers."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import redis

from tests.reliability.faultproxy import FaultProxy

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.redis_support import RedisServer

ROOT = Path(__file__).resolve().parents[2]


class Workers:
    """Starts `python -m tests.reliability.worker` processes; kills what is left at teardown."""

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, mode: str, *, port: int, keys: str, log: str, **options: object) -> subprocess.Popen[bytes]:
        args = [
            sys.executable,
            "-m",
            "tests.reliability.worker",
            mode,
            "--port",
            str(port),
            "--keys",
            keys,
            "--log",
            log,
        ]
        for name, value in options.items():
            args += [f"--{name.replace('_', '-')}", str(value)]
        process = subprocess.Popen(args, cwd=ROOT, stderr=subprocess.PIPE)
        self.processes.append(process)
        return process

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)
            if process.stderr is not None:
                process.stderr.close()


@pytest.fixture
def workers() -> Iterator[Workers]:
    pool = Workers()
    yield pool
    pool.close()


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[Any]:
    connection = redis.Redis(port=redis_server.port, decode_responses=True)
    yield connection
    connection.close()


@pytest.fixture
def uid() -> str:
    return uuid.uuid4().hex[:12]


@pytest.fixture
def proxy(redis_server: RedisServer) -> Iterator[FaultProxy]:
    with FaultProxy(redis_server.port) as running:
        yield running


def wait_for(predicate: Any, timeout: float, interval: float = 0.02) -> float:
    """Poll until `predicate()` is true; the seconds it took. Fails after `timeout`."""
    started = time.monotonic()
    deadline = started + timeout
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic() - started
        time.sleep(interval)
    msg = f"not true within {timeout} s"
    raise AssertionError(msg)


def read_log(client: Any, log: str) -> list[list[str]]:
    return [line.split() for line in client.lrange(log, 0, -1)]
