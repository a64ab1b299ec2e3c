"""The public face: sorted __all__, everything importable, the package typed."""

import importlib
import inspect
import pathlib

import pytest

PUBLIC_MODULES = [
    "resilience",
    "resilience.exceptions",
    "resilience.http",
    "resilience.http.requests",
    "resilience.limiters",
    "resilience.primitives",
    "resilience.strategies",
    "resilience.stores",
    "resilience.telemetry",
    "resilience.testing",
]


def _isort_key(name: str) -> tuple[int, str]:
    # ruff's RUF022 order: SCREAMING_CASE, then CamelCase, then the rest.
    if name.isupper():
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_all_is_sorted_and_importable(module_name: str) -> None:
    """__all__ is sorted and every name in it exists."""
    module = importlib.import_module(module_name)
    names = list(module.__all__)
    assert names == sorted(names, key=_isort_key)
    for name in names:
        assert hasattr(module, name), f"{module_name}.{name}"


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_public_name_has_a_docstring(module_name: str) -> None:
    """Every public class and function says what it is."""
    module = importlib.import_module(module_name)
    assert module.__doc__
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__doc__, f"{module_name}.{name} has no docstring"


def test_the_package_ships_py_typed() -> None:
    """py.typed marks the package as typed."""
    import resilience

    assert (pathlib.Path(resilience.__file__).parent / "py.typed").exists()
