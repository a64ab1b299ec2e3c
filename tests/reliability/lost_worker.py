"""A process that holds a lock whose key is force-released, and exits right after the execution.

`python -m tests.reliability.lost_worker PORT KEY FLAVOUR WHEN` prints, in order, what it saw:
`lost-done` when its `on_lock_lost` (slow: 0.2 s) finished, then `returned <events>` right after
`execute` returned (with the lock events emitted by then), then it exits at once. FLAVOUR is
`sync` or `async` (the lock strategy), or `primitive` / `primitive-async` (`lock(client).run`,
which has no `on_lock_lost`: only its `OnLockLost` event is told); WHEN is `renewal` (the key is deleted, a renewal finds the loss in the
background while the body waits on its signal) or `release` (the key is deleted as the body
ends: the final release finds the loss).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from typing import Any

import redis
import redis.asyncio

from resilience import LockLostError, ResiliencePipelineBuilder, get_context
from resilience.primitives import LockHandle, lock
from resilience.stores import RedisLockStore
from resilience.testing import capture_events

TTL = 0.6


def _said(line: str) -> None:
    os.write(1, f"{line}\n".encode())  # unbuffered: nothing waits in a buffer at exit


def _on_lost(_arguments: Any) -> None:
    time.sleep(0.2)
    _said("lost-done")


async def _on_lost_async(_arguments: Any) -> None:
    await asyncio.sleep(0.2)
    _said("lost-done")


def main() -> None:
    port, key, flavour, when = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    admin = redis.Redis(port=port)
    with capture_events() as events:
        if flavour == "sync":
            store = RedisLockStore(redis.Redis(port=port))
            pipeline = ResiliencePipelineBuilder().add_lock(key, ttl=TTL, store=store, on_lock_lost=_on_lost).build()

            def body() -> str:
                context = get_context()
                assert context is not None
                admin.delete(store.key(key))  # force-released by an operator
                if when == "renewal":
                    assert context.signal.wait(timeout=5)  # the next renewal (ttl/3) finds it
                return "done"

            pipeline.execute(body)
        elif flavour == "primitive":
            client = redis.Redis(port=port)
            locks = lock(client, ttl=TTL)

            def held(handle: LockHandle) -> None:
                admin.delete(f"lock:{key}")
                if when == "renewal":
                    assert handle.signal.wait(timeout=5)

            with contextlib.suppress(LockLostError):
                locks.run(key, held)
        elif flavour == "primitive-async":

            async def run_primitive() -> None:
                locks = lock(redis.asyncio.Redis(port=port), ttl=TTL)

                async def held(handle: LockHandle) -> None:
                    admin.delete(f"lock:{key}")
                    if when == "renewal":
                        assert await handle.signal.wait_async(timeout=5)

                with contextlib.suppress(LockLostError):
                    await locks.run_async(key, held)

            asyncio.run(run_primitive())
        else:

            async def run() -> None:
                store = RedisLockStore(async_client=redis.asyncio.Redis(port=port))
                options = {"ttl": TTL, "store": store, "on_lock_lost": _on_lost_async}
                pipeline = ResiliencePipelineBuilder().add_lock(key, **options).build()

                async def body() -> str:
                    context = get_context()
                    assert context is not None
                    admin.delete(store.key(key))
                    if when == "renewal":
                        assert await context.signal.wait_async(timeout=5)
                    return "done"

                await pipeline.execute_async(body)

            asyncio.run(run())
        _said("returned " + ",".join(event.name for event in events if event.name.startswith("OnLock")))
    os._exit(0)  # at once: no interpreter shutdown that could give a late callback its chance


if __name__ == "__main__":
    main()
