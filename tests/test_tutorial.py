"""The tutorial, followed literally: its files written, its commands run, its output compared.

`docs/tutorial.md` is read in order. A ```python title="x.py"``` block writes `x.py` into a fresh
directory (a later block of the same name replaces it, as the reader's editor would); each
`$ command` of a ```console``` block runs there with bash, against the test Redis, and every line
shown under it must appear in what it printed (`...` matches anything). A command ending with
`&` keeps running in the background until the end. ```sh``` blocks (installing, Docker) are the
reader's environment, which the test suite provides instead. The addresses the tutorial uses by
default are swapped for free ports and the throwaway Redis through the environment variables
the tutorial names.
"""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.test_examples import _dashboard_metrics, _free_port

if TYPE_CHECKING:
    from tests.redis_support import RedisServer

TUTORIAL = Path(__file__).parent.parent / "docs" / "tutorial.md"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
TITLE = re.compile(r'title="([^"]+)"')
DEFAULT_PORTS = {"API_PORT": "8765", "METRICS_PORT": "9464"}
DEADLINE = 120.0  # seconds for any one command, on a loaded machine


@dataclass
class Step:
    """A file to write, or a command with the lines it must print."""

    file: str | None = None
    text: str = ""
    command: str | None = None
    expected: list[str] = field(default_factory=list)


def steps() -> list[Step]:
    found: list[Step] = []
    for language, info, body in FENCE.findall(TUTORIAL.read_text(encoding="utf-8")):
        if language == "python":
            title = TITLE.search(info)
            assert title, f"every python block of the tutorial is a file the reader saves: {body[:60]!r}"
            found.append(Step(file=title.group(1), text=body))
        elif language == "console":
            for line in body.splitlines():
                if line.startswith("$ "):
                    found.append(Step(command=line[2:]))
                elif line.strip():
                    found[-1].expected.append(line)
    return found


def _pattern(expected: str, ports: dict[str, str]) -> re.Pattern[str]:
    for name, default in DEFAULT_PORTS.items():
        expected = expected.replace(default, ports[name])
    return re.compile(".*".join(re.escape(part) for part in expected.split("...")))


def _unmatched(expected: list[str], output: list[str], ports: dict[str, str]) -> list[str]:
    """The expected lines (other than a bare `...`) that no distinct output line matches."""
    remaining = list(output)
    missing = []
    for line in expected:
        if line.strip() == "...":
            continue
        pattern = _pattern(line, ports)
        hit = next((i for i, out in enumerate(remaining) if pattern.fullmatch(out)), None)
        if hit is None:
            missing.append(line)
        else:
            del remaining[hit]
    return missing


class Background:
    """A command left running: its output is read as it comes."""

    def __init__(self, command: str, cwd: Path, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(  # noqa: S602 - the tutorial's own command, as the reader types it
            command,
            shell=True,
            executable="/bin/bash",
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # one process group, ended together
        )
        self.lines: list[str] = []

    def read_until(self, done: object, timeout: float) -> None:
        """Collect lines until `done(lines)` holds, the process ends, or `timeout` passes."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while not done(self.lines) and time.monotonic() < deadline:  # type: ignore[operator]
            ready, _, _ = select.select([self.process.stdout], [], [], 0.2)
            if ready:
                line = self.process.stdout.readline()
                if not line:
                    return
                self.lines.append(line.rstrip("\n"))

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, 15)
        self.process.communicate(timeout=30)


@pytest.mark.redis
def test_the_tutorial_runs_end_to_end(tmp_path: Path, redis_server: RedisServer) -> None:
    """Every file and command of the tutorial, in order, on the test Redis: the outputs match."""
    ports = {"API_PORT": str(_free_port()), "METRICS_PORT": str(_free_port())}
    env = {
        **os.environ,
        **ports,
        "API_URL": f"http://127.0.0.1:{ports['API_PORT']}",
        "REDIS_URL": redis_server.url,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",  # `python` is ours
        "PYTHONUNBUFFERED": "1",
    }
    # A command that runs to its end buffers its output: two processes of one command
    # (`python nightly.py & ...; python nightly.py`) then each write theirs in one piece at
    # exit, where unbuffered `print`s (the text, then the newline) interleave mid-line.
    buffered = {name: value for name, value in env.items() if name != "PYTHONUNBUFFERED"}
    background: list[Background] = []
    ran: list[str] = []
    try:
        for step in steps():
            if step.file is not None:
                (tmp_path / step.file).write_text(step.text, encoding="utf-8")
                continue
            assert step.command is not None
            ran.append(step.command)
            if step.command.endswith("&"):
                job = Background(step.command[:-1], tmp_path, env)
                background.append(job)
                job.read_until(lambda lines, s=step: not _unmatched(s.expected, lines, ports), DEADLINE)
                output = job.lines
            else:
                completed = subprocess.run(  # noqa: S602 - the tutorial's own command
                    step.command,
                    shell=True,
                    executable="/bin/bash",
                    cwd=tmp_path,
                    env=buffered,
                    capture_output=True,
                    text=True,
                    timeout=DEADLINE,
                    check=False,
                )
                assert completed.returncode == 0, f"$ {step.command}\n{completed.stdout}{completed.stderr}"
                output = completed.stdout.splitlines()
            missing = _unmatched(step.expected, output, ports)
            assert not missing, f"$ {step.command}: not printed: {missing}\n" + "\n".join(output)
        # The last background job serves the metrics the dashboard queries.
        with urllib.request.urlopen(f"http://127.0.0.1:{ports['METRICS_PORT']}/metrics", timeout=10) as response:
            exported = response.read().decode()
    finally:
        for job in background:
            job.stop()
    assert ran == [
        "python flaky_api.py &",
        "python fetch.py",
        "python nightly.py & other=$!; python nightly.py; wait $other",
        "python stale_writer.py",
        "python nightly.py --every 10 &",
    ]
    # The nightly job has no circuit breaker and no concurrency limiter: those panels stay empty.
    wanted = {
        name for name in _dashboard_metrics() if not name.startswith(("resilience_circuit", "resilience_limiter"))
    }
    missing_metrics = sorted(name for name in wanted if f"\n{name}{{" not in exported)
    assert not missing_metrics, f"the dashboard would show nothing for {missing_metrics}"
    assert 'event_name="OnRetry"' in exported
    assert 'pipeline_name="nightly"' in exported


def test_the_matcher_needs_every_shown_line() -> None:
    """The comparison is not vacuous: a line the program did not print is reported."""
    ports = {"API_PORT": "1", "METRICS_PORT": "2"}
    assert _unmatched(["a ...", "...", "b"], ["a 1", "x", "b"], ports) == []
    assert _unmatched(["a ...", "c"], ["a 1", "b"], ports) == ["c"]
    assert _unmatched(["same", "same"], ["same"], ports) == ["same"]
    assert _unmatched(["on http://127.0.0.1:8765"], ["on http://127.0.0.1:1"], ports) == []


def test_the_tutorial_is_followable_in_one_shell() -> None:
    """Install from a clone first; background jobs stopped by the pids noted, never `kill %n`; a bare
    `wait` never waits for the API server; the 16-digit token explained before it is printed."""
    text = TUTORIAL.read_text(encoding="utf-8")
    installs = [line for line in text.splitlines() if line.startswith("pip install")]
    assert installs[0].startswith("pip install -e ")  # the clone, until the package is published
    assert "kill %" not in text
    assert not re.search(r"; wait\s*$", text, re.MULTILINE)
    started = re.findall(r"^\$ (.*)&$", text, re.MULTILINE)
    noted = re.findall(r"^(\w+_pid)=\$!$", text, re.MULTILINE) + re.findall(r"& (\w+_pid)=\$!`", text)
    assert len(noted) == len(started) + 1  # the second instance is started in the prose
    (stop,) = re.findall(r"`kill (\$\w+(?: \$\w+)*)`", text)
    assert sorted(stop.replace("$", "").split()) == sorted(noted)
    assert text.index("16-digit") < text.index("report written with fencing token")
