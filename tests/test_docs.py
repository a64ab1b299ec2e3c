"""Every ```python block in README.md and docs/ runs as it is (```py blocks are illustrations)."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _blocks() -> list[tuple[str, str]]:
    found = []
    for path in DOCS:
        for index, match in enumerate(BLOCK.finditer(path.read_text(encoding="utf-8"))):
            found.append((f"{path.relative_to(ROOT)}#{index}", match.group(1)))
    return found


@pytest.mark.parametrize(("where", "code"), _blocks(), ids=[where for where, _ in _blocks()])
def test_documentation_code_runs(where: str, code: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The block executes without error."""
    module = types.ModuleType(f"docs_block_{abs(hash(where))}")
    sys.modules[module.__name__] = module  # dataclasses and typing look modules up by name
    try:
        exec(compile(code, where, "exec"), module.__dict__)  # noqa: S102 - our own documentation
    finally:
        del sys.modules[module.__name__]
