"""The two ways to run a plain function through a pipeline: the `mode` parameter of many tests."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from resilience import ResiliencePipeline

MODES = ["sync", "async"]


async def run(pipeline: ResiliencePipeline, fn: Callable[[], Any], mode: str) -> Any:
    """Run `fn` through the pipeline: `execute` in sync mode, else as an async callable."""
    if mode == "sync":
        return pipeline.execute(fn)

    async def afn() -> Any:
        return fn()

    return await pipeline.execute_async(afn)
