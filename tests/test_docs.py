"""Every ```python block in README.md and docs/ runs as it is (```py blocks are illustrations).

A block that uses Redis talks to `redis://localhost:6379`, as a reader's would; here that
address leads to the throwaway server the tests started (never a real one on 6379). The
tutorial's blocks are files run in order against the same server (`tests/test_tutorial.py`).
"""

from __future__ import annotations

import functools
import re
import sys
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.redis_support import RedisServer

ROOT = Path(__file__).parent.parent
DOCS = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md") if p.name != "tutorial.md")]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _blocks() -> list[tuple[str, str]]:
    found = []
    for path in DOCS:
        for index, match in enumerate(BLOCK.finditer(path.read_text(encoding="utf-8"))):
            found.append((f"{path.relative_to(ROOT)}#{index}", match.group(1)))
    return found


@pytest.mark.parametrize(("where", "code"), _blocks(), ids=[where for where, _ in _blocks()])
def test_documentation_code_runs(
    where: str, code: str, capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest
) -> None:
    """The block executes without error."""
    if "redis" in code:
        redirect_default_redis(request.getfixturevalue("redis_server"), request.getfixturevalue("monkeypatch"))
    module = types.ModuleType(f"docs_block_{abs(hash(where))}")
    sys.modules[module.__name__] = module  # dataclasses and typing look modules up by name
    try:
        exec(compile(code, where, "exec"), module.__dict__)  # noqa: S102 - our own documentation
    finally:
        del sys.modules[module.__name__]


def redirect_default_redis(server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Connections to the default address (localhost:6379) go to the test server instead."""
    import redis.asyncio.connection
    import redis.connection

    for cls in (redis.connection.Connection, redis.asyncio.connection.Connection):
        original = cls.__init__

        @functools.wraps(original)
        def init(self: Any, *args: Any, __original: Any = original, **kwargs: Any) -> None:
            if args:  # redis-py passes host and port as keywords; anything else is left alone
                __original(self, *args, **kwargs)
                return
            if kwargs.get("host", "localhost") in {"localhost", "127.0.0.1"} and int(kwargs.get("port", 6379)) == 6379:
                kwargs.update(host=server.host, port=server.port)
            __original(self, **kwargs)

        monkeypatch.setattr(cls, "__init__", init)


def test_the_help_example_runs(request: pytest.FixtureRequest) -> None:
    """`help(resilience)` opens with a per-order Redis lock; it runs as shown."""
    import textwrap

    import resilience

    redirect_default_redis(request.getfixturevalue("redis_server"), request.getfixturevalue("monkeypatch"))
    doc = resilience.__doc__ or ""
    example = doc[doc.index("    from resilience import") : doc.index("Inside a lock")]
    namespace: dict[str, Any] = {}
    exec(compile(textwrap.dedent(example), "help(resilience)", "exec"), namespace)  # noqa: S102 - our docstring
    assert namespace["charge"]("44").startswith("charged 44 with fencing token ")


def test_pages_say_what_the_library_does() -> None:
    """Claims that once were wrong: pybreaker's shared state exists; a sync timeout is cooperative."""
    migration = (ROOT / "docs" / "migration.md").read_text(encoding="utf-8")
    (row,) = [line for line in migration.splitlines() if line.startswith("| `CircuitRedisStorage`")]
    assert "RedisCircuitStateStore" in row
    assert "not offered" not in row
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "**A sync timeout is cooperative.**" in readme
    assert "its late value is returned" in readme
    cli = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert "learns that its lease is lost" not in cli
    assert "still returns it from `execute`" in cli
    assert "at most that)" not in (ROOT / "docs" / "redis.md").read_text(encoding="utf-8")
