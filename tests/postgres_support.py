"""Throwaway PostgreSQL clusters for the tests: never the server on 5432.

Each cluster is made by `initdb` in its own temp directory and served by `pg_ctl` on a free
local port (TCP on 127.0.0.1 only, trust authentication, `fsync=off`: a crash of the server
process still keeps what it wrote, only an OS crash could lose it). Run as root, the binaries
run as the unprivileged `postgres` user (`runuser`), who owns the directory.

- `postgres_server`: one cluster for the whole session (tests use unique keys or tables);
- `fresh_postgres_server`: a cluster of the test's own, to stop, crash or restart.

Without the binaries (Debian package `postgresql`) these fixtures skip, or fail under `CI=true`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.redis_support import free_port

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["PostgresServer", "fresh_postgres_server", "postgres_server"]

_START_TIMEOUT = 30


def _bindir() -> Path:
    """The directory of `initdb` and `pg_ctl`, or skip (fail under CI=true) when not installed."""
    candidates = [shutil.which("pg_ctl"), shutil.which("initdb")]
    candidates += sorted((str(path) for path in Path("/usr/lib/postgresql").glob("*/bin/pg_ctl")), reverse=True)
    for candidate in candidates:
        if candidate is None:
            continue
        directory = Path(candidate).resolve().parent
        if (directory / "pg_ctl").exists() and (directory / "initdb").exists():
            return directory
    reason = "PostgreSQL is not installed (apt-get install postgresql); the PostgreSQL tests need initdb and pg_ctl"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


class PostgresServer:
    """One PostgreSQL cluster in a temp directory, served on a fixed free local port."""

    def __init__(self) -> None:
        self.bindir = _bindir()
        self.port = free_port()
        if self.port == 5432:  # pragma: no cover - free_port never picks it while a server runs
            self.port = free_port()
        self.host = "127.0.0.1"
        self.dir = Path(tempfile.mkdtemp(prefix="resilience-pg-"))
        self.data = self.dir / "data"
        self._as_user: list[str] = []
        if os.geteuid() == 0:  # initdb refuses root: run as the unprivileged postgres user
            shutil.chown(self.dir, user="postgres")
            self._as_user = ["runuser", "-u", "postgres", "--"]
        self._initialised = False

    @property
    def dsn(self) -> str:
        """`postgresql://postgres@127.0.0.1:<port>/postgres`.

        The connect timeout is generous: on two busy cores (a venv being written beside it) a
        new backend has taken over 5 s to answer; a stopped server still refuses at once.
        """
        return f"postgresql://postgres@{self.host}:{self.port}/postgres?connect_timeout=30"

    def _run(self, *args: str, timeout: float = _START_TIMEOUT) -> None:
        result = subprocess.run(
            [*self._as_user, *args], capture_output=True, text=True, timeout=timeout, check=False, cwd=self.dir
        )
        if result.returncode != 0:
            log = (self.dir / "server.log").read_text(errors="replace")[-2000:] if self._log_exists() else ""
            msg = f"{args[0]} failed ({result.returncode}): {result.stdout}{result.stderr}\n{log}"
            raise RuntimeError(msg)

    def _log_exists(self) -> bool:
        return (self.dir / "server.log").exists()

    def start(self) -> None:
        """Create the cluster on first use, then start it and wait until it accepts connections."""
        if not self._initialised:
            self._run(
                str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
                "-E", "UTF8", "--no-sync", "--no-instructions",
            )  # fmt: skip
            self._initialised = True
        options = (
            f"-p {self.port} -c listen_addresses={self.host} -k {self.dir} -c fsync=off"
            " -c full_page_writes=off -c max_connections=200"
        )
        self._run(
            str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "server.log"),
            "-o", options, "-w", "-t", str(_START_TIMEOUT), "start",
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: `fast` (clean shutdown) or `immediate` (a crash: recovery on start)."""
        if (self.data / "postmaster.pid").exists():
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self, mode: str = "fast") -> None:
        """Stop (`fast`, or `immediate` for a crash) and start again on the same port."""
        self.stop(mode)
        self.start()

    def close(self) -> None:
        """Stop the server and remove its directory."""
        try:
            self.stop("immediate")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL cluster shared by the session: use unique keys (or tables)."""
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture
def fresh_postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL cluster of this test's own, to stop, crash or restart at will."""
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.close()
