"""The house rules of docs/architecture.md, checked on the source: a change that breaks one fails here.

Imports go down the layer list; no private name crosses a package; the ambient context has
one accessor pair; nothing probes a trait or a private attribute by name; only the clock's own
modules ask which clock they have; threads and fork hooks start in `_runtime/` only; no
private API of asyncio or httpx; and the code does not grow (a ceiling on its lines, lowered
as the house is simplified: new features are paid for by simplification).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from functools import cache
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parent.parent / "resilience"

# The layer of each module, by the longest dotted prefix (docs/architecture.md, "The layers").
LAYERS = {
    "resilience.exceptions": 0,
    "resilience._outcome": 0,
    "resilience._validation": 0,
    "resilience._version": 0,
    "resilience._invocation": 0,
    "resilience._time": 1,
    "resilience._runtime": 1,
    "resilience._signal": 2,
    "resilience._context": 2,
    "resilience.telemetry": 3,
    "resilience.stores": 3,
    "resilience.limiters": 3,
    "resilience._lease": 4,
    "resilience.strategies": 5,
    "resilience._pipeline": 6,
    "resilience._builder": 6,
    "resilience._registry": 6,
    "resilience.primitives": 6,
    "resilience.testing": 6,
    "resilience": 7,
}
TRAITS = frozenset({"sync_problem", "async_problem", "wants_invocation", "inert"})
"""What a strategy declares in `StrategyTraits`: never read by name."""

CODE_LINE_CEILING = 14_478
"""Lines of code in `resilience/` (no blanks, comments or docstrings) today; the goal is 14,500."""


def _layer(module: str) -> int:
    prefixes = [prefix for prefix in LAYERS if module == prefix or module.startswith(prefix + ".")]
    return LAYERS[max(prefixes, key=len)]


def _module(path: Path) -> str:
    parts = path.relative_to(SOURCE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package(path: Path) -> str:
    module = _module(path)
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


@cache
def _sources() -> dict[Path, tuple[str, ast.Module]]:
    """Each module of the package: its text and its tree."""
    sources = {}
    for path in sorted(SOURCE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        sources[path] = (text, ast.parse(text))
    return sources


def _runtime_imports(tree: ast.Module) -> list[tuple[str, list[str], int]]:
    """`(module, names, line)` of every import that runs (those under `if TYPE_CHECKING:` do not)."""
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for statement in node.body
        for inner in ast.walk(statement)
    }
    found = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, [alias.name for alias in node.names], node.lineno))
        elif isinstance(node, ast.Import):
            found.extend((alias.name, [], node.lineno) for alias in node.names)
    return found


def _imported_package(module: str) -> str:
    """The package a `from <module> import name` takes `name` from."""
    path = SOURCE.parent.joinpath(*module.split("."))
    return module if (path / "__init__.py").exists() else module.rpartition(".")[0]


def _code_lines(text: str, tree: ast.Module) -> int:
    docstrings: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                docstrings.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    layout = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type not in layout:
            lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines - docstrings)


def _code(text: str) -> list[tuple[int, str]]:
    """Each line's code, its comment cut off."""
    return [(number, line.split("#", 1)[0]) for number, line in enumerate(text.splitlines(), 1)]


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(SOURCE.parent)}:{line}"


def test_imports_go_down_the_layers() -> None:
    upward = [
        f"{_where(path, line)} -> {target}"
        for path, (_, tree) in _sources().items()
        for target, _names, line in _runtime_imports(tree)
        if target.startswith("resilience")
        and (
            _layer(target) > _layer(_module(path))
            or (_module(path).startswith("resilience.primitives") and target.startswith("resilience.strategies"))
        )
    ]
    assert upward == []


def test_no_private_name_crosses_a_package() -> None:
    crossing = [
        f"{_where(path, line)} {target}.{name}"
        for path, (_, tree) in _sources().items()
        for target, names, line in _runtime_imports(tree)
        if target.startswith("resilience")
        for name in names
        if name.startswith("_") and not name.startswith("__") and _imported_package(target) != _package(path)
    ]
    assert crossing == []


def test_the_ambient_context_variable_stays_in_its_module() -> None:
    importers = [
        _where(path, line)
        for path, (_, tree) in _sources().items()
        for _target, names, line in _runtime_imports(tree)
        if "_CURRENT" in names
    ]
    assert importers == []


def test_nothing_probes_a_trait_or_a_private_attribute_by_name() -> None:
    probes = [
        f"{_where(path, node.lineno)} {node.args[1].value}"
        for path, (_, tree) in _sources().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in {"getattr", "hasattr"}
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
        and (node.args[1].value in TRAITS or re.match(r"_(?!_)", node.args[1].value))
    ]
    assert probes == []


def _outside(*places: str) -> dict[Path, str]:
    return {
        path: text
        for path, (text, _) in _sources().items()
        if not any(place in path.relative_to(SOURCE.parent).as_posix() for place in places)
    }


def test_only_the_clocks_own_modules_ask_which_clock_they_have() -> None:
    asking = [
        _where(path, number)
        for path, text in _outside("resilience/_time.py", "resilience/testing.py", "resilience/_runtime/").items()
        for number, code in _code(text)
        if "auto_advance" in code or re.search(r"(type\(|isinstance\()[^)]*\b(System|Fake)TimeProvider\b", code)
    ]
    assert asking == []


def test_threads_and_fork_hooks_start_in_the_runtime_only() -> None:
    outside = _outside("resilience/_runtime/")
    assert [
        path.name for path, text in outside.items() if re.search(r"threading\.Thread\(|\bThread\(target", text)
    ] == []
    assert [path for path, (text, _) in _sources().items() if "register_at_fork" in text] == [
        SOURCE / "_runtime" / "_threads.py"
    ]


def test_no_strategy_is_told_apart_by_its_module() -> None:
    assert [
        path.name
        for path, (text, _) in _sources().items()
        if re.search(r"__module__\.startswith\(\s*[\"']resilience", text)
    ] == []


def test_no_private_api_of_asyncio_or_httpx() -> None:
    """`asyncio._get_running_loop`, `httpx.Response._request`, a request built by `__dict__.update`."""
    private = [
        _where(path, number)
        for path, (text, _) in _sources().items()
        for number, code in _code(text)
        if re.search(r"\basyncio\._[a-z]|\._request\b", code)
        or ("/http/" in path.as_posix() and ".__dict__.update(" in code)
    ]
    assert private == []


@pytest.mark.once
def test_the_code_does_not_grow() -> None:
    lines = sum(_code_lines(text, tree) for text, tree in _sources().values())
    assert lines <= CODE_LINE_CEILING, f"{lines} lines of code in resilience/: simplify to make room"
