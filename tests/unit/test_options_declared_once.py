"""Each strategy's options dataclass is the one declaration of its option names, types and defaults.

The factory `x_strategy(...)` and the builder's `add_x(...)` repeat them as a signature (so that
editors and type checkers show them): this test proves the three agree, so an option added,
renamed or re-defaulted in one place and not the others fails here.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import pytest

import resilience.strategies
from resilience import ResiliencePipelineBuilder

FACTORIES = sorted(name for name in resilience.strategies.__all__ if name.endswith("_strategy"))


def _options_class(factory: Callable[..., Any]) -> type:
    annotation = inspect.signature(factory).return_annotation
    cls = getattr(resilience.strategies, annotation) if isinstance(annotation, str) else annotation
    assert dataclasses.is_dataclass(cls), factory
    return cls


def _declared(cls: type) -> list[tuple[str, str, object]]:
    """(name, annotation, default) of each field the options' constructor takes."""
    fields = []
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        default: object = field.default
        if default is dataclasses.MISSING:
            factory = field.default_factory
            default = inspect.Parameter.empty if factory is dataclasses.MISSING else factory()
        fields.append((field.name, str(field.type), default))
    return fields


def _signature(fn: Callable[..., Any], *, skip: int = 0) -> list[tuple[str, str, object]]:
    parameters = list(inspect.signature(fn).parameters.values())[skip:]
    return [(p.name, str(p.annotation), p.default) for p in parameters]


def test_every_strategy_has_a_factory_and_a_shortcut() -> None:
    assert len(FACTORIES) >= 12
    for name in FACTORIES:
        assert hasattr(ResiliencePipelineBuilder, "add_" + name.removesuffix("_strategy")), name


@pytest.mark.parametrize("name", FACTORIES)
def test_the_factory_repeats_the_options_dataclass(name: str) -> None:
    """Same names, annotations and defaults (the order may differ: a factory puts its positional options first)."""
    factory = getattr(resilience.strategies, name)
    assert sorted(_signature(factory), key=str) == sorted(_declared(_options_class(factory)), key=str)


@pytest.mark.parametrize("name", FACTORIES)
def test_the_shortcut_repeats_the_factory(name: str) -> None:
    factory = getattr(resilience.strategies, name)
    shortcut = getattr(ResiliencePipelineBuilder, "add_" + name.removesuffix("_strategy"))
    assert _signature(shortcut, skip=1) == _signature(factory)
    kinds = [p.kind for p in inspect.signature(shortcut).parameters.values()][1:]
    assert kinds == [p.kind for p in inspect.signature(factory).parameters.values()]
