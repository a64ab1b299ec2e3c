from resilience import PipelineBuilder


def test_empty_pipeline_returns_the_result() -> None:
    """A pipeline with no strategies returns what the callable returns."""
    assert PipelineBuilder().build().execute(lambda x: x + 1, 1) == 2
