"""The documentation as a whole: organised, complete, and free of internal references."""

from __future__ import annotations

import importlib
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.unit.test_public_surface import PUBLIC_MODULES

ROOT = Path(__file__).parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
INTERNAL = re.compile(r"DESIGN|§")
SECTIONS = ["Home", "Tutorial", "How-to guides", "Reference", "Explanation"]


def _nav() -> list[dict[str, object]]:
    # mkdocs.yml uses no custom tags; the safe loader reads it.
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    nav: list[dict[str, object]] = config["nav"]
    return nav


def _nav_files(entry: object) -> list[str]:
    if isinstance(entry, str):
        return [entry]
    if isinstance(entry, list):
        return [name for item in entry for name in _nav_files(item)]
    assert isinstance(entry, dict)
    return [name for value in entry.values() for name in _nav_files(value)]


@pytest.mark.parametrize("page", PAGES, ids=[str(page.relative_to(ROOT)) for page in PAGES])
def test_no_page_cites_the_internal_design(page: Path) -> None:
    """Readers cannot open the internal design document, so no page sends them there."""
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        assert not INTERNAL.search(line), f"{page.name}:{number}: {line.strip()}"


def _public_docstrings() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        found.append((module_name, module.__doc__ or ""))
        for name in module.__all__:
            obj = getattr(module, name)
            found.append((f"{module_name}.{name}", getattr(obj, "__doc__", None) or ""))
            if inspect.isclass(obj):
                for member_name, member in vars(obj).items():
                    doc = getattr(member, "__doc__", None)
                    if not member_name.startswith("_") and isinstance(doc, str):
                        found.append((f"{module_name}.{name}.{member_name}", doc))
    return found


def test_no_public_docstring_cites_the_internal_design() -> None:
    """What `help()` and the API page show never cites the internal design document."""
    offenders = [where for where, doc in _public_docstrings() if INTERNAL.search(doc)]
    assert offenders == []


def test_no_source_comment_cites_the_internal_design() -> None:
    """Private docstrings and comments are read too (by contributors, in tracebacks): they point at docs/."""
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "resilience").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "DESIGN" in line
    ]
    assert offenders == []


def test_the_nav_runs_tutorial_how_to_reference_explanation() -> None:
    """The site reads as a course: learn, then do, then look up, then understand."""
    assert [next(iter(entry)) for entry in _nav()] == SECTIONS


def test_every_page_is_in_the_nav() -> None:
    """A page outside the nav cannot be found; put a new page in the section that fits it."""
    in_nav = set(_nav_files(_nav()))
    pages = {str(page.relative_to(ROOT / "docs")) for page in (ROOT / "docs").glob("*.md")}
    assert pages - in_nav == set()


def test_help_names_every_public_module() -> None:
    """`help(resilience)` lists the public modules, so a reader finds them from the REPL."""
    import resilience

    doc = resilience.__doc__ or ""
    assert [name for name in PUBLIC_MODULES[1:] if name not in doc] == []


@pytest.mark.once  # a docs build: the same on every interpreter
def test_every_public_name_is_on_the_api_page(tmp_path: Path) -> None:
    """The API page documents every name of every `__all__` (re-exports under their home module)."""
    site = tmp_path / "site"
    subprocess.run(  # our own docs build, the same as `make docs`
        [sys.executable, "-m", "mkdocs", "build", "--quiet", "--site-dir", str(site)],
        cwd=ROOT,
        check=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    anchors = set(re.findall(r'id="([^"]+)"', (site / "api" / "index.html").read_text(encoding="utf-8")))
    homes: dict[str, set[str]] = {}
    for module_name in PUBLIC_MODULES:
        for name in importlib.import_module(module_name).__all__:
            homes.setdefault(name, set()).add(f"{module_name}.{name}")
    missing = sorted(name for name, places in homes.items() if not places & anchors)
    assert missing == [], "add them to docs/api.md (and give each a docstring)"
