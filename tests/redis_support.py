"""Throwaway redis-server processes for the tests: never the user's database.

Each server runs on a free local port in its own temp directory, without persistence
(`--save "" --appendonly no`), and can be stopped, restarted on the same port and flushed
for fault tests. `tests/conftest.py` registers the fixtures:

- `redis_server`: one standalone server for the whole session (tests use unique keys);
- `fresh_redis_server`: a server of the test's own, for destructive tests (restart, stop);
- `redis_cluster`: a 3-master Redis Cluster for the whole session.

Without a `redis-server` binary these fixtures skip, or fail under `CI=true`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["RedisCluster", "RedisServer", "Roundtrips", "fresh_redis_server", "redis_cluster", "redis_server"]

_START_TIMEOUT = 10.0


def _binary(name: str) -> str:
    """The path of `name`, or skip (fail under CI=true) when it is not installed."""
    path = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
    if path is None:
        reason = f"{name} is not installed (apt-get install redis-server); the Redis tests need it"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return path


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(*, with_bus: bool = False) -> int:
    """A free local port (and, for Cluster, its bus port + 10000 free as well)."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if port == 6379 or (with_bus and (port > 55535 or not _port_free(port + 10000))):
            continue
        return port
    msg = "no free port found"
    raise RuntimeError(msg)


def _command(port: int, *args: str, timeout: float = 1.0) -> str:
    """Send one inline command over a raw socket; the raw reply (no client library needed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(("*" + str(len(args)) + "\r\n" + "".join(f"${len(a)}\r\n{a}\r\n" for a in args)).encode())
        data = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            chunk = sock.recv(65536)
            data += chunk
            if not chunk or data.endswith(b"\r\n"):
                break
        return data.decode(errors="replace")


class RedisServer:
    """One redis-server process on a fixed local port, in its own temp directory."""

    def __init__(self, *, cluster: bool = False, workdir: Path | None = None) -> None:
        self.binary = _binary("redis-server")
        self.cluster = cluster
        self.port = free_port(with_bus=cluster)
        self.host = "127.0.0.1"
        self._own_dir = workdir is None
        self.dir = workdir or Path(tempfile.mkdtemp(prefix="resilience-redis-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """`redis://127.0.0.1:<port>/0`."""
        return f"redis://{self.host}:{self.port}/0"

    @property
    def running(self) -> bool:
        """Whether the process is alive."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the server (on the same port as before) and wait until it answers PING."""
        if self.running:
            return
        args = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.dir),
            "--logfile",
            str(self.dir / f"redis-{self.port}.log"),
            "--maxmemory-policy",
            "noeviction",
        ]
        if self.cluster:
            args += [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                str(self.dir / f"nodes-{self.port}.conf"),
                "--cluster-node-timeout",
                "5000",
            ]
        self._process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + _START_TIMEOUT
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                log = (self.dir / f"redis-{self.port}.log").read_text(errors="replace")[-2000:]
                msg = f"redis-server exited with {self._process.returncode}:\n{log}"
                raise RuntimeError(msg)
            with contextlib.suppress(OSError):
                # Answered by this process, not by another test run's server that took the port
                # between `free_port` and this start (xdist workers pick ports side by side).
                if f"process_id:{self._process.pid}\r\n" in _command(self.port, "INFO", "server", timeout=0.2):
                    return
            time.sleep(0.02)
        self.stop()
        msg = f"redis-server did not answer on port {self.port}"
        raise RuntimeError(msg)

    def stop(self) -> None:
        """Stop the server (its data is gone: there is no persistence)."""
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    def restart(self) -> None:
        """Stop and start again on the same port: an empty server, like a restart without persistence."""
        self.stop()
        self.start()

    def flushall(self) -> None:
        """Drop every key (FLUSHALL)."""
        reply = _command(self.port, "FLUSHALL")
        assert reply.startswith("+OK"), reply

    def command(self, *args: str) -> str:
        """Run one command and return the raw reply (for assertions and fault injection)."""
        return _command(self.port, *args)

    def close(self) -> None:
        """Stop the server and remove its directory."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


class RedisCluster:
    """A Redis Cluster of three masters (no replicas) on free local ports."""

    def __init__(self, masters: int = 3) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="resilience-redis-cluster-"))
        self.nodes = [RedisServer(cluster=True, workdir=self.dir / str(i)) for i in range(masters)]

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        """`(host, port)` of every master."""
        return [(node.host, node.port) for node in self.nodes]

    @property
    def port(self) -> int:
        """The port of the first master (enough to bootstrap a cluster client)."""
        return self.nodes[0].port

    def start(self) -> None:
        """Start the nodes, create the cluster and wait until every node reports it ok."""
        for node in self.nodes:
            node.start()
        cli = _binary("redis-cli")
        addresses = [f"{host}:{port}" for host, port in self.startup_nodes]
        subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=30,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if all("cluster_state:ok" in node.command("CLUSTER", "INFO") for node in self.nodes):
                return
            time.sleep(0.05)
        msg = "the Redis Cluster did not become ok"
        raise RuntimeError(msg)

    def flushall(self) -> None:
        """FLUSHALL on every master."""
        for node in self.nodes:
            node.flushall()

    def close(self) -> None:
        """Stop every node and remove the directories."""
        for node in self.nodes:
            node.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A standalone redis-server shared by the session: use unique keys, never FLUSHALL it."""
    server = RedisServer()
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture
def fresh_redis_server() -> Iterator[RedisServer]:
    """A redis-server of this test's own, to stop, restart or flush at will."""
    server = RedisServer()
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """A 3-master Redis Cluster shared by the session."""
    cluster = RedisCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


class Roundtrips:
    """Counts the pipelines a client executes (with the commands each holds) and its single EVALSHAs.

    Wraps the client's `pipeline()` and `evalsha()` in place (sync or asyncio: the wrappers
    return whatever the originals return).
    """

    def __init__(self, client: Any) -> None:
        self.pipelines: list[int] = []
        self.singles = 0
        original_pipeline, original_evalsha = client.pipeline, client.evalsha
        counter = self

        def pipeline(*args: Any, **kwargs: Any) -> Any:
            pipe = original_pipeline(*args, **kwargs)
            execute = pipe.execute

            def counted(*a: Any, **k: Any) -> Any:
                counter.pipelines.append(len(pipe))
                return execute(*a, **k)

            pipe.execute = counted
            return pipe

        def evalsha(*args: Any, **kwargs: Any) -> Any:
            counter.singles += 1
            return original_evalsha(*args, **kwargs)

        client.pipeline = pipeline
        client.evalsha = evalsha

    def frozen(self) -> Roundtrips:
        """A copy of the counts so far (what a later release or clean-up sends is not in it)."""
        copy = object.__new__(Roundtrips)
        copy.pipelines, copy.singles = list(self.pipelines), self.singles
        return copy
