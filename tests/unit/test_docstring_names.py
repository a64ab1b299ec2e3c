"""Comments stay true: every name a docstring puts in backticks exists.

A backticked token that looks like a Python name (`retry_strategy`, `RetryCore.delay`,
`time.monotonic`, `lease.key`, `_core.py`) must resolve: to an object of the package, of the
standard library or of a dependency (followed attribute by attribute); to an attribute or
parameter the package defines when its head is a local variable (`store.renew`); to a file next
to the module (`_core.py`). Commands of other systems are written in capitals (`PEXPIRE`,
`LISTEN`) and pass. Names of other libraries that the docstrings compare with are listed in
`FOREIGN` with where they come from: a renamed or deleted name fails the test instead of
living on in a docstring.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import importlib
import keyword
import pkgutil
import re
from pathlib import Path
from types import ModuleType

import resilience

ROOT = Path(resilience.__file__).parent
FOREIGN = {
    # Polly and .NET
    "AddStandardHedgingHandler": ".NET's Microsoft.Extensions.Http.Resilience",
    "AddStandardResilienceHandler": ".NET's Microsoft.Extensions.Http.Resilience",
    "ChaosStrategy.ShouldInjectAsync": "Polly",
    "DecorrelatedJitterBackoffV2": "Polly.Contrib.WaitAndRetry",
    "ExecuteOutcomeAsync": "Polly",
    "QueueLimit": ".NET's System.Threading.RateLimiting",
    "ResilienceEventSeverity": "Polly",
    "RetryHelper": "Polly",
    "AbortSignal": "the web platform",
    "fail_max": "pybreaker",
    # Lua inside Redis, SQL inside PostgreSQL
    "cjson": "Redis's Lua",
    "redis.call": "Redis's Lua",
    "tostring": "Lua",
    "clock_timestamp": "PostgreSQL",
    # Fields of Redis hashes, named in the scripts' contracts
    "ep": "the shared circuit's hash",
    "mn": "the shared circuit's hash",
    "st": "the shared circuit's hash",
    "un": "the shared circuit's hash",
    "wq": "the shared circuit's hash",
    "seq": "the lock's token hash",
    "w": "the lock's hash (a caller outside the queue watches it)",
    # OpenTelemetry's semantic conventions
    "server.address": "OpenTelemetry",
    # an example's parameter
    "order_id": "an example in a docstring",
}
TOKEN = re.compile(r"`([^`\s]+)`")
NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*(\(\))?$")
FILE = re.compile(r"^[\w/]+\.py$")


def _modules() -> dict[str, ModuleType]:
    found = {"resilience": resilience}
    for info in pkgutil.walk_packages(resilience.__path__, "resilience."):
        found[info.name] = importlib.import_module(info.name)
    return found


MODULES = _modules()
OBJECTS: dict[str, list[object]] = {}
DEFINED = set(dir(builtins)) | set(keyword.kwlist)
STRINGS: set[str] = set()  # telemetry names and attributes (`lock.mode`) are strings in the code
for _name, _module in MODULES.items():
    DEFINED.update(_name.split("."))
    for _attribute, _value in vars(_module).items():
        OBJECTS.setdefault(_attribute, []).append(_value)
    for _node in ast.walk(ast.parse(Path(_module.__file__ or "").read_text(encoding="utf-8"))):
        if isinstance(_node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            DEFINED.add(_node.name)
        elif isinstance(_node, ast.arg):
            DEFINED.add(_node.arg)
        elif isinstance(_node, ast.Name):
            DEFINED.add(_node.id)
        elif isinstance(_node, ast.Attribute):
            DEFINED.add(_node.attr)
        elif isinstance(_node, ast.keyword) and _node.arg:
            DEFINED.add(_node.arg)
        elif isinstance(_node, ast.Constant) and isinstance(_node.value, str):
            STRINGS.add(_node.value)  # a slot, a field, an event or an attribute named in a string


def _follow(start: object, parts: list[str]) -> bool:
    current = start
    for part in parts:
        found = getattr(current, part, None)
        if found is None and isinstance(current, ModuleType):
            try:
                found = importlib.import_module(f"{current.__name__}.{part}")
            except ImportError:
                found = None
        if found is None and isinstance(current, type):
            annotated = {name for klass in current.__mro__ for name in getattr(klass, "__annotations__", {})}
            found = part if part in annotated else None
        if found is None:
            return False
        current = found
    return True


def _resolves(token: str, folder: Path) -> bool:
    if FILE.match(token):
        return any((base / token).exists() for base in (folder, folder.parent, ROOT.parent))
    name = token.removesuffix("()")
    if name in FOREIGN or name in STRINGS or name.replace("_", "").isupper():
        return True
    head, *rest = name.split(".")
    if not rest:
        if head in DEFINED:
            return True
        try:
            importlib.import_module(head)
        except ImportError:
            return False
        return True
    starts: list[object] = list(OBJECTS.get(head, []))
    if hasattr(builtins, head):
        starts.append(getattr(builtins, head))
    with contextlib.suppress(ImportError):
        starts.append(importlib.import_module(head))
    if any(_follow(start, rest) for start in starts):
        return True
    return head not in OBJECTS and all(part in DEFINED for part in rest)  # a variable's attributes


def _docstrings(tree: ast.Module) -> list[tuple[int, str]]:
    """Module, class, function and attribute docstrings: every string that is a statement."""
    return [
        (node.lineno, node.value.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    ]


def test_every_backticked_name_in_a_docstring_exists() -> None:
    paths = [Path(module.__file__ or "") for module in MODULES.values()]
    unresolved = [
        f"{path.relative_to(ROOT.parent)}:{line}: `{token}`"
        for path in paths
        for line, text in _docstrings(ast.parse(path.read_text(encoding="utf-8")))
        for token in TOKEN.findall(text)
        if (NAME.match(token) or FILE.match(token)) and not _resolves(token, path.parent)
    ]
    assert unresolved == []


def test_the_foreign_names_are_still_used() -> None:
    """A foreign name no docstring mentions any more leaves the list."""
    text = "\n".join(Path(module.__file__ or "").read_text(encoding="utf-8") for module in MODULES.values())
    assert [name for name in FOREIGN if f"`{name}" not in text] == []


def test_no_issue_numbers_in_the_code() -> None:
    """Code says what is true now; the history lives in git and the changelog."""
    pattern = re.compile(r"(?<![\w&])#\d{1,4}\b|\b[Ii]ssue \d+")
    found = [
        f"{path.relative_to(ROOT.parent)}:{number}"
        for path in sorted(ROOT.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert found == []
