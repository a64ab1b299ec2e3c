"""Quick start: one pipeline, sync and asyncio, and what happened.

Run it with `make demo`.
"""

from __future__ import annotations

import asyncio

from resilience import Err, Ok, ResiliencePipelineBuilder, use_context
from resilience.telemetry import TelemetryEvent, TelemetryOptions


def show(event: TelemetryEvent) -> None:
    outcome = "" if event.outcome is None else f" -> {event.outcome!r}"
    print(f"  [event] {event.name} ({event.severity.value}){outcome}")


pipeline = ResiliencePipelineBuilder(name="quickstart", telemetry=TelemetryOptions(listeners=[show])).build()


@pipeline
def charge(order_id: str, amount: int) -> str:
    if amount <= 0:
        raise ValueError(f"cannot charge {amount}")
    return f"charged {order_id}: {amount}"


async def refund(order_id: str) -> str:
    await asyncio.sleep(0)
    return f"refunded {order_id}"


def main() -> None:
    print("sync, decorated:")
    print(" ", charge("order-1", 10))

    print("sync, settled (never raises an Exception):")
    outcome = pipeline.settle(charge.__wrapped__, "order-2", 0)  # the undecorated function
    match outcome:
        case Ok(value):
            print("  ok:", value)
        case Err(error):
            print("  failed:", error)

    print("async, with a context:")
    with use_context(operation_key="order-3"):
        print(" ", asyncio.run(pipeline.execute_async(refund, "order-3")))


if __name__ == "__main__":
    main()
