"""Type-checked, never run: the pipeline registry as a user writes it."""

from __future__ import annotations

from typing import assert_type

from resilience import ResiliencePipeline, ResiliencePipelineBuilder, ResiliencePipelineRegistry
from resilience.testing import FakeTimeProvider


def configure(builder: ResiliencePipelineBuilder, host: str) -> None:
    builder.add_retry(max_retries=2).add_timeout(5)


def per_tenant(builder: ResiliencePipelineBuilder, key: tuple[str, int]) -> ResiliencePipelineBuilder:
    return builder.add_circuit_breaker()


def use() -> None:
    registry = ResiliencePipelineRegistry(name="http", time_provider=FakeTimeProvider())
    pipeline = registry.get_or_add("api.example.com", configure)
    assert_type(pipeline, ResiliencePipeline)
    assert_type(registry.get_or_add(("tenant", 1), per_tenant), ResiliencePipeline)
    assert_type(registry.get("api.example.com"), ResiliencePipeline)
    assert_type("api.example.com" in registry, bool)
    assert_type(len(registry), int)
    for key in registry:
        registry.reload(key)
    registry.clear()
