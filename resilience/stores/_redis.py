"""Lock and semaphore stores over Redis (standalone or Cluster), sync and asyncio.

Everything a lease needs is one script call: the stores use nothing but `EVALSHA` (and `EVAL`
once per script and server, when the server answers NOSCRIPT), so any client that offers those
works. Release notification additionally uses the client's `pubsub()` when it has one.

redis-py is an optional dependency: this module never imports it. Clients are told apart by
their class (an `.asyncio` module, a `RedisCluster` in the class hierarchy), which also covers
valkey-py.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import math
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Final, Literal

from resilience._runtime._closing import Closing
from resilience._validation import check_semaphore_permits, ttl_ms
from resilience.exceptions import ValidationError
from resilience.stores import _redis_scripts as scripts
from resilience.stores._info import (
    HolderInfo,
    HoldersFromInfo,
    LockInfo,
    acquire_answer,
    force_release_by_owner,
    lock_mode,
)
from resilience.stores._protocols import StoreCapabilities
from resilience.stores._redis_client import warn_if_untimed
from resilience.stores._redis_notify import AsyncReleaseListener, SyncReleaseListener
from resilience.stores._steps import Steps, run_steps, run_steps_async

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Hashable, Sequence

__all__ = [
    "RedisClientsStore",
    "RedisLockStore",
    "RedisSemaphoreStore",
    "companions",
    "redis_client_kind",
]

_ASKED_KEPT: Final = 100_000
"""At most this many refused async attempts remembered for their waits (a lock store's `_asked`)."""
_SYNC_HINT: Final = "client=redis.Redis(...) or a zero-argument factory of one"
_ASYNC_HINT: Final = "async_client=redis.asyncio.Redis(...), an awaitable or a factory of one"


def _is_client(value: object) -> bool:
    """A client instance (a class such as `redis.Redis` itself is a factory, not a client)."""
    return not isinstance(value, type) and callable(getattr(value, "evalsha", None))


def redis_client_kind(value: object) -> Literal["sync", "async"] | None:
    """Whether `value` is a sync or an asyncio Redis client (told apart by class), or neither (None)."""
    if not _is_client(value):
        return None
    return "async" if _is_asyncio_client(value) else "sync"


def _is_pipeline(value: object) -> bool:
    """A redis-py/valkey pipeline: it has `evalsha`, but queues commands instead of answering."""
    return any(name.endswith("Pipeline") for _, name in _class_names(value))


def _not_a_pipeline(value: object, owner: str) -> None:
    if _is_pipeline(value):
        msg = f"{owner}: {type(value).__name__} is a pipeline, not a client: pass the client it came from"
        raise ValidationError(msg)


def _class_names(value: object) -> list[tuple[str, str]]:
    return [(cls.__module__, cls.__name__) for cls in type(value).__mro__]


def _is_asyncio_client(value: object) -> bool:
    return any(".asyncio" in module for module, _ in _class_names(value))


def _is_cluster(value: object) -> bool:
    return any(name == "RedisCluster" for _, name in _class_names(value))


def _is_noscript(exc: Exception) -> bool:
    return type(exc).__name__ == "NoScriptError" or str(exc).startswith("NOSCRIPT")


def _check_str(option: str, value: object) -> str:
    if type(value) is not str and not isinstance(value, str):
        msg = f"{option}: must be a str, got {type(value).__name__}"
        raise ValidationError(msg)
    return value


def _unencodable(exc: UnicodeEncodeError) -> ValidationError:
    """A key (or owner) the client cannot encode, e.g. a lone surrogate: nothing was sent."""
    msg = f"key: {exc.object[:80]!r} cannot be sent to Redis ({exc.reason} at position {exc.start} in {exc.encoding})"
    return ValidationError(msg)


def companions(lock_key: str) -> tuple[str, str, str, str] | None:
    """The companion keys of a lock key, in the lock key's Cluster hash slot.

    Its fair queue's (arrivals, refreshed expiries), then its shared holds' (holders, waiters).
    A key with a hash tag keeps it when a suffix is appended; a key without one is wrapped in
    braces, so that its whole text becomes the tag (the slot it already hashes to). A key that
    has a `}` but no hash tag cannot be wrapped that way: None (such a lock is not queued).
    """
    start = lock_key.find("{")
    if start != -1 and lock_key.find("}", start + 1) > start + 1:
        base = lock_key
    elif "}" not in lock_key:
        base = "{" + lock_key + "}"
    else:
        return None
    return f"{base}:q", f"{base}:q:t", f"{base}:r", f"{base}:q:s"


def _lock_info(key: str, reply: Any) -> LockInfo | None:
    """`LOCK_INFO`'s reply as a `LockInfo`: waiters, mode, then per holder owner, token and ms left."""
    if reply is None:
        return None
    waiters, mode, *fields = reply
    holders = [
        HolderInfo(_text(owner), int(token), int(left_ms) / 1000 if int(left_ms) >= 0 else None)
        for owner, token, left_ms in zip(fields[0::3], fields[1::3], fields[2::3], strict=True)
    ]
    holders.sort(key=lambda holder: holder.token)
    shared = _text(mode) == "shared"
    return LockInfo(key, lock_mode(shared=shared), tuple(holders), int(waiters) if int(waiters) >= 0 else None)


def _semaphore_info(key: str, reply: Any) -> LockInfo | None:
    """`SEMAPHORE_INFO`'s reply as a `LockInfo`: each holder is four fields (owner, token, ms left, permits)."""
    waiters, *fields = reply
    holders = [
        HolderInfo(_text(fields[at]), int(fields[at + 1]), int(fields[at + 2]) / 1000, int(fields[at + 3]))
        for at in range(0, len(fields), 4)
    ]
    holders.sort(key=lambda holder: holder.token)
    return LockInfo(key, "semaphore", tuple(holders), int(waiters)) if holders else None


def _text(value: str | bytes) -> str:
    """A reply's string (a client without decode_responses answers bytes)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class _SyncClient:
    """The sync client, from a client or a zero-argument factory (called once, on first use)."""

    def __init__(self, source: Any, owner: str) -> None:
        _not_a_pipeline(source, owner)
        if _is_asyncio_client(source):
            msg = f"{owner}: client= takes a sync client; pass this asyncio client as async_client="
            raise ValidationError(msg)
        if not _is_client(source) and not callable(source):
            msg = f"{owner}: client= must be a redis client or a zero-argument factory of one, got {source!r}"
            raise ValidationError(msg)
        self._source = source
        self._owner = owner
        self._client: Any = source if _is_client(source) else None
        if self._client is not None:
            warn_if_untimed(source, owner)
        self._lock = threading.Lock()

    def get(self) -> Any:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    client = self._source()
                    if not _is_client(client) or _is_asyncio_client(client) or _is_pipeline(client):
                        msg = f"{self._owner}: the client= factory must return a sync redis client, got {client!r}"
                        raise ValidationError(msg)
                    warn_if_untimed(client, self._owner)
                    self._client = client
        return self._client

    def run(self, script: scripts.LuaScript, keys: Sequence[str], args: Sequence[object]) -> Any:
        client = self._client if self._client is not None else self.get()
        try:
            return client.evalsha(script.sha, len(keys), *keys, *args)
        except UnicodeEncodeError as exc:  # before anything was sent: a key that is not valid text
            raise _unencodable(exc) from exc
        except Exception as exc:
            if not _is_noscript(exc):
                raise
        # EVAL caches the script on the very node that serves the key: one round trip, no ACL
        # for SCRIPT LOAD, and the next EVALSHA finds it. (Written out for each flavour, not as
        # steps: a generator would add about a third to the client-side cost of every call.)
        return client.eval(script.source, len(keys), *keys, *args)


class _AsyncClient:
    """The asyncio client, from a client, an awaitable of one, or a (sync or async) factory."""

    def __init__(self, source: Any, owner: str) -> None:
        self._owner = owner
        self._client: Any = None
        self._pending: Any = None
        self._factory: Any = None
        self._resolving: asyncio.Future[Any] | None = None
        _not_a_pipeline(source, owner)
        if _is_client(source):
            if not _is_asyncio_client(source) and type(source).__module__.startswith(("redis.", "valkey.")):
                msg = f"{owner}: async_client= takes an asyncio client; pass this sync client as client="
                raise ValidationError(msg)
            warn_if_untimed(source, owner)
            self._client = source
        elif inspect.isawaitable(source):
            self._pending = source
        elif callable(source):
            self._factory = source
        else:
            msg = f"{owner}: async_client= must be an asyncio redis client, an awaitable or a factory, got {source!r}"
            raise ValidationError(msg)

    async def get(self) -> Any:
        if self._client is not None:
            return self._client
        if self._resolving is None or (self._resolving.done() and self._factory is not None):
            self._resolving = asyncio.ensure_future(self._resolve())
        return await asyncio.shield(self._resolving)

    async def _resolve(self) -> Any:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            client = await pending
        else:
            client = self._factory()
            if inspect.isawaitable(client):
                client = await client
        if not _is_client(client) or _is_pipeline(client):
            msg = f"{self._owner}: async_client= must produce an asyncio redis client, got {client!r}"
            raise ValidationError(msg)
        warn_if_untimed(client, self._owner)
        self._client = client
        return client

    def discard_pending(self) -> None:
        """Close an awaitable that was never awaited (no 'never awaited' warning)."""
        pending, self._pending = self._pending, None
        close = getattr(pending, "close", None)
        if callable(close):
            close()

    async def run(self, script: scripts.LuaScript, keys: Sequence[str], args: Sequence[object]) -> Any:
        client = self._client if self._client is not None else await self.get()
        try:
            return await client.evalsha(script.sha, len(keys), *keys, *args)
        except UnicodeEncodeError as exc:  # before anything was sent: a key that is not valid text
            raise _unencodable(exc) from exc
        except Exception as exc:
            if not _is_noscript(exc):
                raise
        return await client.eval(script.source, len(keys), *keys, *args)


_Call = tuple[list[str], list[object]]
"""One script call: its keys and its arguments."""


def _pipeline(client: Any) -> Any:
    """A pipeline of `client` with no MULTI: each script is atomic on its own.

    A Cluster client's pipeline sends each command to the node of its key's slot, one round
    trip per node; a standalone client's, all of them in one.
    """
    return client.pipeline() if _is_cluster(client) else client.pipeline(transaction=False)


def _queue(client: Any, pipe: Any, commands: Sequence[tuple[str | None, _Call]], source: str) -> None:
    # `execute_command`: redis-py's sync Cluster pipeline blocks its `evalsha` method, not the
    # command. On Cluster each command names its node (the master of its first key's slot, from
    # the client's slot table): without it, redis-py's sync Cluster pipeline asks the server
    # for the keys of every EVALSHA (`COMMAND GETKEYS`, one round trip each). A stale table
    # costs nothing more: the node answers MOVED and the pipeline sends that command again
    # where the slot now lives.
    node_of = client.get_node_from_key if _is_cluster(client) else None
    for sha, (keys, args) in commands:
        command = ("EVAL", source) if sha is None else ("EVALSHA", sha)
        target = {} if node_of is None else {"target_nodes": node_of(keys[0])}
        pipe.execute_command(*command, len(keys), *keys, *args, **target)


def _pipelined(client: Any, commands: Sequence[tuple[str | None, _Call]], source: str = "") -> list[Any]:
    with _pipeline(client) as pipe:
        _queue(client, pipe, commands, source)
        return list(pipe.execute(raise_on_error=False))


async def _pipelined_async(client: Any, commands: Sequence[tuple[str | None, _Call]], source: str = "") -> list[Any]:
    # Queued inside the block: entering redis-py's asyncio Cluster pipeline empties its stack.
    async with _pipeline(client) as pipe:
        _queue(client, pipe, commands, source)
        return list(await pipe.execute(raise_on_error=False))


class RedisClientsStore(Closing):
    """A store over Redis clients, checked once: its prefix, the flavours it serves, `close()` and repr.

    `_sync_client` and `_async_client` run the scripts on the client given for each flavour
    (None without one); `_sync_runner(method)` and `_async_runner(method)` return them or
    raise the `ValidationError` naming the client `method` needs. It serves the flavours it
    has a client for (`has_sync_client` / `has_async_client`, and its `capabilities`, which
    `serves(store, AsyncLockStore)` reads). `kind` names the store in errors.
    """

    capabilities = StoreCapabilities()

    def __init__(self, kind: str, client: Any, async_client: Any, prefix: str) -> None:
        if client is None and async_client is None:
            msg = f"{kind}: pass a sync client ({_SYNC_HINT}) and/or an asyncio client ({_ASYNC_HINT})"
            raise ValidationError(msg)
        given: object = prefix  # checked at run time: callers need not be typed
        if not isinstance(given, str) or not given:
            msg = f"{kind}: prefix must be a non-empty str, got {prefix!r}"
            raise ValidationError(msg)
        self._kind = kind
        self._prefix = prefix
        self._sync_client = None if client is None else _SyncClient(client, kind)
        self._async_client = None if async_client is None else _AsyncClient(async_client, kind)
        self.capabilities = dataclasses.replace(
            self.capabilities, serves_sync=client is not None, serves_async=async_client is not None
        )

    @property
    def prefix(self) -> str:
        """The key prefix: the store's keys are `<prefix>:...`."""
        return self._prefix

    @property
    def has_sync_client(self) -> bool:
        """Whether the sync methods work (a `client=` was given)."""
        return self._sync_client is not None

    @property
    def has_async_client(self) -> bool:
        """Whether the `_async` methods work (an `async_client=` was given)."""
        return self._async_client is not None

    def _sync_runner(self, method: str) -> _SyncClient:
        """The sync client's runner, or the `ValidationError` saying `method` needs one."""
        if self._sync_client is None:
            msg = f"{self._kind}.{method} needs a sync client: pass {_SYNC_HINT}"
            raise ValidationError(msg)
        return self._sync_client

    def _async_runner(self, method: str) -> _AsyncClient:
        """The asyncio client's runner, or the `ValidationError` saying `method` needs one."""
        if self._async_client is None:
            msg = f"{self._kind}.{method} needs an asyncio client: pass {_ASYNC_HINT}"
            raise ValidationError(msg)
        return self._async_client

    def close(self) -> None:
        """Close what the store opened: an awaitable async client never awaited (the clients stay yours)."""
        if self._async_client is not None:
            self._async_client.discard_pending()

    def __repr__(self) -> str:
        flavours = [name for name, ok in (("sync", self.has_sync_client), ("async", self.has_async_client)) if ok]
        return f"{type(self).__name__}(prefix={self._prefix!r}, flavours={'+'.join(flavours)})"

    def _run(self, method: str, script: scripts.LuaScript, call: _Call) -> Any:
        """`script` with `call`'s keys and arguments on the sync client (`method` names it in the error without one)."""
        return self._sync_runner(method).run(script, *call)

    async def _run_async(self, method: str, script: scripts.LuaScript, call: _Call) -> Any:
        """See `_run`: on the asyncio client."""
        return await self._async_runner(method).run(script, *call)


class _RedisStore(RedisClientsStore):
    """What the lock and semaphore stores share: clients, batched renewals, notification, closing.

    Every method exists whatever the clients (a fixed surface).
    """

    _kind: str = "RedisStore"
    # Waiters queue in the store (`acquire_or_queue`); `pool_key` is set per store.
    capabilities = StoreCapabilities(fair_queue=True)
    _renew_script: scripts.LuaScript
    _release_script: scripts.LuaScript
    _info_script: scripts.LuaScript
    _read_info: Callable[[str, Any], LockInfo | None]  # the info script's reply as a `LockInfo`
    # Every call's keys, in the order its scripts take them.
    _keys: Callable[[str], list[str]]
    release: Callable[[str, str], bool]  # each store's own, as its release script answers
    release_async: Callable[[str, str], Awaitable[bool]]
    # The Redis key named after a key: its release channel, and where Cluster serves it.
    _main_key: Callable[[str], str]
    _renew_args: Callable[[str, str, float], _Call]

    def __init__(self, client: Any, async_client: Any, prefix: str) -> None:
        super().__init__(self._kind, client, async_client, prefix)
        # Whose thread pool runs the lease engine's background calls: one per client (per
        # connection pool), however many stores are made on it (`lock(client)` per request);
        # without a sync client (None), the store's own.
        self.capabilities = dataclasses.replace(self.capabilities, pool_key=getattr(client, "connection_pool", client))
        self._publish: dict[object, str] = {}  # the publish command of each runner's server
        self._listener: SyncReleaseListener | None = None
        self._listener_lock = threading.Lock()
        self._async_listeners: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncReleaseListener] = (
            weakref.WeakKeyDictionary()
        )

    def renew(self, key: str, owner: str, ttl: float) -> bool:
        """Push `owner`'s live lease (the lock, a shared hold of it, or its slots) out to now + `ttl`.

        False if it is not ours any more: never re-acquires, a lease that ended stays ended.
        """
        return bool(self._run("renew", self._renew_script, self._renew_args(key, owner, ttl)))

    async def renew_async(self, key: str, owner: str, ttl: float) -> bool:
        """See `renew`."""
        return bool(await self._run_async("renew_async", self._renew_script, self._renew_args(key, owner, ttl)))

    def info(self, key: str) -> LockInfo | None:
        """The key's live holders (by token; time left on the server's clock) and live waiters; None when free.

        A lock's mode is "shared" when shared holders hold it; a semaphore's holders tell the
        permits each took.
        """
        return self._read_info(key, self._run("info", self._info_script, (self._keys(key), [])))

    async def info_async(self, key: str) -> LockInfo | None:
        """See `info`."""
        return self._read_info(key, await self._run_async("info_async", self._info_script, (self._keys(key), [])))

    def force_release(self, key: str) -> bool:
        """Free `key` whoever holds it (True if it was held): `release` of each holder `info` reads.

        The holder's own owner-checked release, so waiters are woken and the token kept as after
        any release; the holders' next renewal answers False (`SupportsInspection`).
        """
        return run_steps(force_release_by_owner(self.info, self.release, key))

    async def force_release_async(self, key: str) -> bool:
        """See `force_release`."""
        return await run_steps_async(force_release_by_owner(self.info_async, self.release_async, key))

    def renewal_group(self, key: str) -> Hashable:
        """The Cluster master that serves `key` (`SupportsRenewalGroups`); None on a standalone server."""
        client = self._sync_runner("renewal_group").get()
        return client.get_node_from_key(self._main_key(key)).name if _is_cluster(client) else None

    def renew_many(self, items: Sequence[tuple[str, str, float]]) -> list[bool | Exception]:
        """`renew(key, owner, ttl)` for each item in one pipelined round trip (per Cluster node).

        Each answer is what `renew` answers for that lease (the same script, owner-checked, on
        the server's clock), or the error its command alone raised; a failure of the round trip
        itself (a lost connection) raises. What the lease runtime batches renewals with
        (`SupportsRenewMany`).
        """
        return run_steps(self._renewals(self._sync_runner("renew_many"), _pipelined, items))

    async def renew_many_async(self, items: Sequence[tuple[str, str, float]]) -> list[bool | Exception]:
        """See `renew_many`."""
        return await run_steps_async(self._renewals(self._async_runner("renew_many_async"), _pipelined_async, items))

    def _renewals(
        self, runner: _SyncClient | _AsyncClient, pipelined: Callable[..., Any], items: Sequence[tuple[str, str, float]]
    ) -> Steps[list[bool | Exception]]:
        """`renew_many`'s work on `runner`: one pipeline (`pipelined`) of the renew script's calls.

        One round trip (per Cluster node); the replies that say NOSCRIPT go again as EVAL in a
        second one. An item whose arguments are refused is that item's `ValidationError`, not
        sent. A client without pipelines (EVALSHA only) runs each call alone.
        """
        script = self._renew_script
        calls: list[_Call | Exception] = []
        for key, owner, ttl in items:
            try:
                calls.append(self._renew_args(key, owner, ttl))
            except ValidationError as exc:
                calls.append(exc)
        client = yield runner.get()
        replies: list[Any] = list(calls)  # a refused call's error stays in its place
        if not callable(getattr(client, "pipeline", None)):  # a client with EVALSHA only: one call each
            for n, call in enumerate(calls):
                try:
                    replies[n] = call if isinstance(call, Exception) else (yield runner.run(script, *call))
                except Exception as exc:  # noqa: BLE001 - this call's answer
                    replies[n] = exc
        elif sent := [call for call in calls if not isinstance(call, Exception)]:
            try:
                sent_replies = yield pipelined(client, [(script.sha, call) for call in sent])
                # The calls whose replies say NOSCRIPT go again as EVAL (which caches the script).
                again = [
                    n for n, reply in enumerate(sent_replies) if isinstance(reply, Exception) and _is_noscript(reply)
                ]
                if again:
                    retried = yield pipelined(client, [(None, sent[n]) for n in again], script.source)
                    for n, reply in zip(again, retried, strict=True):
                        sent_replies[n] = reply
            except UnicodeEncodeError as exc:  # before anything was sent: a key that is not valid text
                raise _unencodable(exc) from exc
            answers = iter(sent_replies)  # each refused call's error back in its place
            replies = [call if isinstance(call, Exception) else next(answers) for call in calls]
        return [reply if isinstance(reply, Exception) else bool(reply) for reply in replies]

    def _release_steps(
        self, key: str, owner: str, runner_of: Callable[[str], _SyncClient | _AsyncClient], method: str
    ) -> Steps[bool]:
        """`release`'s run on the runner `runner_of(method)` gives, with the publish command its server takes.

        That command is learnt once per runner. The key and the owner are checked before the runner is asked for.
        """
        keys, args = self._keys(key), [_check_str("owner", owner), scripts.TOMBSTONE_MS]
        script, runner = self._release_script, runner_of(method)
        command = self._publish.get(runner)
        if command is None:
            command = self._publish[runner] = "SPUBLISH" if _is_cluster((yield runner.get())) else "PUBLISH"
        try:
            return bool((yield runner.run(script, keys, [*args, command])))
        except Exception as exc:
            # SPUBLISH needs Redis 7: on an older server, release without notifying. The script
            # publishes before it writes, so the failed run changed nothing.
            text = str(exc).lower()
            if command == "" or ("unknown command" not in text and "unknown redis command" not in text):
                raise
            self._publish[runner] = ""
            return bool((yield runner.run(script, keys, [*args, ""])))

    def _sync_listener(self, client: Any) -> SyncReleaseListener | None:
        with self._listener_lock:
            listener = self._listener
            if listener is None and callable(getattr(client, "pubsub", None)):
                listener = self._listener = SyncReleaseListener(
                    client.pubsub, sharded=_is_cluster(client), name=f"resilience-redis-{self._prefix}"
                )
        return listener

    def add_release_listener(
        self, key: str, callback: Callable[[], object], owner: str | None = None
    ) -> Callable[[], None]:
        """Call `callback()` (on the listener thread) when `key` is released; returns the remover.

        What a sync waiter sleeps on: woken by a release without polling (one `SUBSCRIBE` per
        key, shared by every waiter of the store). With `owner`, only when the release hands
        the turn to that queued waiter (for a semaphore: when the freed slots serve it). A
        release is announced only when somebody queues or watches (`wait_released`). Needs the
        sync client.
        """
        listener = self._sync_listener(self._sync_runner("add_release_listener").get())
        if listener is None:  # no pub/sub on this client: nothing will call back, nothing to remove
            return lambda: None
        return listener.listen(self._main_key(key), callback, owner)

    def _wait_sync(
        self, key: str, timeout: float, held: scripts.LuaScript, check: _Call, owner: str | None = None
    ) -> bool:
        """`wait_released` with the read-only script `held` as its check (True: the key is free for `owner`)."""
        runner = self._sync_runner("wait_released")

        def is_free() -> bool:
            return not runner.run(held, *check)

        listener = self._sync_listener(runner.get())
        if listener is None:  # no pub/sub on this client: the wait is a plain poll interval (an unset event's)
            return is_free() or threading.Event().wait(max(0.0, timeout))
        return listener.wait(self._main_key(key), timeout, is_free, owner)

    async def _wait_async(
        self,
        key: str,
        timeout: float,
        held: scripts.LuaScript,
        check: _Call,
        owner: str | None = None,
        *,
        since: float | None = None,
    ) -> bool:
        """See `_wait_sync`; `since`: when `owner`'s last refused attempt was sent."""
        runner = self._async_runner("wait_released_async")
        client = await runner.get()

        async def is_free() -> bool:
            return not await runner.run(held, *check)

        loop = asyncio.get_running_loop()
        listener = self._async_listeners.get(loop)
        if listener is None and callable(getattr(client, "pubsub", None)):
            sharded = _is_cluster(client)
            if sharded and callable(getattr(client, "initialize", None)):
                await client.initialize()  # the asyncio Cluster client learns its slots lazily
            # Another waiter may have made it meanwhile.
            listener = self._async_listeners.setdefault(loop, AsyncReleaseListener(client.pubsub, sharded=sharded))
        if listener is None:  # a plain poll interval, which answers False
            return await is_free() or await asyncio.sleep(max(0.0, timeout), result=False)
        return await listener.wait(self._main_key(key), timeout, is_free, owner, since=since)

    def close(self) -> None:
        """Stop the sync release listener and close its connection (clients stay open: they are yours)."""
        with self._listener_lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        super().close()

    async def aclose(self) -> None:
        """Stop this event loop's release listener (and the sync one); clients stay open."""
        with contextlib.suppress(RuntimeError):
            listener = self._async_listeners.pop(asyncio.get_running_loop(), None)
            if listener is not None:
                await listener.aclose()
        self.close()


class RedisLockStore(_RedisStore):
    """A lock store over Redis: one hash key `<prefix>:<key>` per lock, one script per call.

    Args:
        client: a sync client (`redis.Redis`, `redis.cluster.RedisCluster`, valkey alike) or a
            zero-argument factory of one; enables `acquire`, `renew`, `release`,
            `acquire_or_ttl` and `wait_released`.
        async_client: an asyncio client (`redis.asyncio.Redis`, `redis.asyncio.RedisCluster`),
            an awaitable of one, or a sync or async zero-argument factory of one; enables the
            `_async` methods.
        prefix: the key namespace: keys are `<prefix>:<key>`.

    Tokens are the server's time in microseconds, or one more than the key's previous token:
    they only increase per key, across release, expiry, FLUSHALL and a restart without
    persistence, as long as the server's clock does not step back by more than the outage
    (docs/redis.md). The store closes only what it opened itself (release-notification
    connections); the clients stay yours.
    """

    _kind = "RedisLockStore"
    capabilities = StoreCapabilities(kind="lock", fair_queue=True)
    _renew_script, _release_script, _info_script = scripts.LOCK_RENEW, scripts.LOCK_RELEASE, scripts.LOCK_INFO
    _read_info = staticmethod(_lock_info)

    def __init__(self, client: Any = None, *, async_client: Any = None, prefix: str = "lock") -> None:
        super().__init__(client, async_client, prefix)
        # When each queued owner's last refused async attempt was sent (monotonic), for its wait
        # (`AsyncReleaseListener.wait`'s `since`); taken by that wait or by the owner's release.
        self._asked: dict[tuple[str, str], float] = {}

    def key(self, key: str) -> str:
        """The Redis key of lock `key`."""
        return f"{self._prefix}:{_check_str('key', key)}"

    def _main_key(self, key: str) -> str:
        return self.key(key)

    def queue_keys(self, key: str) -> tuple[str, str] | None:
        """The Redis keys of `key`'s waiter queue (arrivals, refreshed entry expiries), in its hash slot.

        None for a key that has a `}` but no hash tag: it cannot share a Cluster slot with
        companion keys, so its waiters are not queued (they poll, as before fair waiting).
        """
        found = companions(self.key(key))
        return None if found is None else found[:2]

    def _keys(self, key: str) -> list[str]:
        lock_key = self.key(key)
        found = companions(lock_key)
        return [lock_key] if found is None else [lock_key, *found]

    def _acquire_args(self, key: str, owner: str, ttl: float, entry_ms: int = 0, *, shared: bool = False) -> _Call:
        keys = self._keys(key)
        if shared and len(keys) == 1:
            msg = (
                f"{self._kind}: the key {key!r} has a '}}' but no hash tag: it cannot be held shared "
                "(its companion keys could not share its Cluster slot)"
            )
            raise ValidationError(msg)
        args: list[object] = [_check_str("owner", owner), ttl_ms(ttl), entry_ms, scripts.QUEUE_BOUND]
        return keys, [*args, "1"] if shared else args

    def _renew_args(self, key: str, owner: str, ttl: float) -> _Call:
        keys = self._keys(key)  # the lock key and, when it has companions, its shared holders (the fourth)
        return keys[:1] + keys[3:4], [_check_str("owner", owner), ttl_ms(ttl)]

    def _held_check(self, key: str, owner: str | None) -> _Call:
        return self._keys(key), ["" if owner is None else _check_str("owner", owner)]

    def acquire(self, key: str, owner: str, ttl: float) -> int | None:
        """Take the free lock for `owner` for `ttl` seconds: its token, or None if held by another.

        A free lock that waiters queue for goes to the first of them: anyone else is refused.
        """
        return self.acquire_or_ttl(key, owner, ttl)[0]

    def acquire_shared(self, key: str, owner: str, ttl: float) -> int | None:
        """A shared hold (`SupportsSharedHolds`): refused while an exclusive lease is held or waits first."""
        return self.acquire_or_ttl(key, owner, ttl, shared=True)[0]

    def acquire_or_ttl(
        self, key: str, owner: str, ttl: float, *, shared: bool = False
    ) -> tuple[int | None, float | None]:
        """`(token, None)` when acquired; `(None, seconds until it may be free)` when held by another.

        The seconds are the lease's remaining life (at least 1 ms), or, for a free key promised
        to the head of its waiter queue, the life left in the head's queue entry. With
        `shared`, a shared hold.
        """
        call = self._acquire_args(key, owner, ttl, shared=shared)
        return acquire_answer(self._run("acquire", scripts.LOCK_ACQUIRE, call))

    def acquire_or_queue(
        self, key: str, owner: str, ttl: float, *, shared: bool = False
    ) -> tuple[int | None, float | None]:
        """`acquire_or_ttl` for a caller that will wait: refused, `owner` joins the key's FIFO queue.

        The entry lives `QUEUE_ENTRY_MS` unless `owner` tries again; `release(key, owner)` by a
        waiter that gives up leaves the queue. A release hands the lock straight to the queue's
        live head and tells it so (`add_release_listener`); the head's next call here answers
        its token and sets its ttl.
        """
        call = self._acquire_args(key, owner, ttl, scripts.QUEUE_ENTRY_MS, shared=shared)
        return acquire_answer(self._run("acquire", scripts.LOCK_ACQUIRE, call))

    def release(self, key: str, owner: str) -> bool:
        """Give up the lock if `owner` holds it (True): to the live head of its queue, or free.

        Handed on, the lock belongs to the head at once (a fresh token, for as long as the
        head's queue entry had left) and the head alone is told. A waiter that does not hold
        the lock leaves the queue instead (False); a head that gives up after the lock was
        handed to it releases it like a holder (True).
        """
        return run_steps(self._release_steps(key, owner, self._sync_runner, "release"))

    def wait_released(self, key: str, timeout: float, owner: str | None = None) -> bool:
        """Block until `key` is released (True) or `timeout` seconds pass (False).

        True at once when the key is free for the caller: with `owner` (a queued waiter), when
        a release handed it the lock, or it is free and `owner` heads the queue; woken only when
        its turn comes. True is a hint
        to try again now; without pub/sub on the client a held key is simply waited out for
        `timeout` (a plain poll interval).
        """
        return self._wait_sync(key, timeout, scripts.LOCK_HELD, self._held_check(key, owner), owner)

    async def acquire_async(self, key: str, owner: str, ttl: float) -> int | None:
        """See `acquire`."""
        return (await self.acquire_or_ttl_async(key, owner, ttl))[0]

    async def acquire_shared_async(self, key: str, owner: str, ttl: float) -> int | None:
        """See `acquire_shared`."""
        return (await self.acquire_or_ttl_async(key, owner, ttl, shared=True))[0]

    async def acquire_or_ttl_async(
        self, key: str, owner: str, ttl: float, *, shared: bool = False
    ) -> tuple[int | None, float | None]:
        """See `acquire_or_ttl`."""
        call = self._acquire_args(key, owner, ttl, shared=shared)
        return acquire_answer(await self._run_async("acquire_async", scripts.LOCK_ACQUIRE, call))

    async def acquire_or_queue_async(
        self, key: str, owner: str, ttl: float, *, shared: bool = False
    ) -> tuple[int | None, float | None]:
        """See `acquire_or_queue`."""
        call = self._acquire_args(key, owner, ttl, scripts.QUEUE_ENTRY_MS, shared=shared)
        sent = time.monotonic()
        answer = acquire_answer(await self._run_async("acquire_async", scripts.LOCK_ACQUIRE, call))
        if answer[0] is None:
            if len(self._asked) >= _ASKED_KEPT:  # waits that never came (cancelled between the two)
                self._asked.clear()
            self._asked[key, owner] = sent
        return answer

    async def release_async(self, key: str, owner: str) -> bool:
        """See `release`."""
        self._asked.pop((key, owner), None)
        return await run_steps_async(self._release_steps(key, owner, self._async_runner, "release_async"))

    async def wait_released_async(self, key: str, timeout: float, owner: str | None = None) -> bool:
        """See `wait_released`."""
        check = self._held_check(key, owner)
        since = None if owner is None else self._asked.pop((key, owner), None)
        return await self._wait_async(key, timeout, scripts.LOCK_HELD, check, owner, since=since)


class RedisSemaphoreStore(_RedisStore, HoldersFromInfo):
    """A semaphore store over Redis: up to `limit` slots per key, each holder with its own token.

    A holder takes `permits` slots at once, all or none (`SupportsPermits`). Keys
    `{<prefix>:<key>}` (the holders, a sorted set scored by server-time expiry, pruned by every
    script), `{<prefix>:<key>}:tokens` (a hash of the holders' tokens and permits and the last
    token issued) and, while callers wait, `{<prefix>:<key>}:q`, `:q:t` and `:q:p` (their FIFO
    queue and the permits each asks for) and `:q:w` (watched by waiters outside the queue); the
    braces keep them all in one Cluster hash slot. A release wakes only the queued waiters its
    freed slots serve. Same client forms as `RedisLockStore`.
    """

    _kind = "RedisSemaphoreStore"
    # Its `acquire_or_ttl` takes the limit too.
    capabilities = StoreCapabilities(kind="semaphore", fair_queue=True, lease_info_takes_limit=True)
    _renew_script, _release_script = scripts.SEMAPHORE_RENEW, scripts.SEMAPHORE_RELEASE
    _info_script, _read_info = scripts.SEMAPHORE_INFO, staticmethod(_semaphore_info)

    def __init__(self, client: Any = None, *, async_client: Any = None, prefix: str = "semaphore") -> None:
        super().__init__(client, async_client, prefix)

    def _main_key(self, key: str) -> str:
        """The holders' sorted set of `key`: its braces make the key's hash tag."""
        return "{" + f"{self._prefix}:{_check_str('key', key)}" + "}"

    def keys(self, key: str) -> tuple[str, str]:
        """The Redis keys of semaphore `key`: the holders' sorted set and the token hash."""
        holders = self._main_key(key)
        return holders, f"{holders}:tokens"

    def queue_keys(self, key: str) -> tuple[str, str]:
        """The Redis keys of `key`'s waiter queue (arrivals, entry expiries), in its hash slot."""
        holders = self._main_key(key)
        return f"{holders}:q", f"{holders}:q:t"

    def _keys(self, key: str) -> list[str]:
        # Every script call's keys (the hot path): the holders' key written out, not a call of `_main_key`.
        holders = "{" + f"{self._prefix}:{_check_str('key', key)}" + "}"
        return [holders, f"{holders}:tokens", f"{holders}:q", f"{holders}:q:t", f"{holders}:q:w", f"{holders}:q:p"]

    @staticmethod
    def _limit(limit: object, permits: object = 1) -> list[object]:
        """`[limit]`, or `[limit, permits]` when more than one; `ValidationError` when out of range."""
        check_semaphore_permits(limit, permits)
        return [limit] if permits == 1 else [limit, permits]

    def _acquire_args(self, key: str, owner: str, ttl: float, limit: int, permits: int, *, entry_ms: int = 0) -> _Call:
        limit_and_permits = self._limit(limit, permits)
        args = [_check_str("owner", owner), ttl_ms(ttl), limit, scripts.TOMBSTONE_MS, entry_ms, scripts.QUEUE_BOUND]
        return self._keys(key), [*args, *limit_and_permits[1:]]

    def _renew_args(self, key: str, owner: str, ttl: float) -> _Call:
        return list(self.keys(key)), [_check_str("owner", owner), ttl_ms(ttl), scripts.TOMBSTONE_MS]

    def _wait_check(
        self, key: str, timeout: float, owner: str | None, limit: int | None, permits: int
    ) -> tuple[scripts.LuaScript, _Call, str | None]:
        """What a wait checks, and for whom: a queued waiter (`owner` and `limit`) its turn, anyone else held slots."""
        if owner is not None and limit is not None:
            turn = [_check_str("owner", owner), *self._limit(limit, permits)]
            return scripts.SEMAPHORE_TURN, (self._keys(key), turn), owner
        watch_ms = max(1, min(86_400_000, math.ceil(max(0.0, timeout) * 1000)))  # the wait's (ms): a day at most
        return scripts.SEMAPHORE_HELD, (self._keys(key), [watch_ms]), None

    def acquire(self, key: str, owner: str, ttl: float, limit: int, permits: int = 1) -> int | None:
        """Take `permits` slots for `owner` if that many are free: its token, or None.

        Slots that waiters queue for go to the first of them: anyone else is refused.
        """
        call = self._acquire_args(key, owner, ttl, limit, permits)
        return acquire_answer(self._run("acquire", scripts.SEMAPHORE_ACQUIRE, call))[0]

    def acquire_or_ttl(
        self, key: str, owner: str, ttl: float, limit: int, permits: int = 1
    ) -> tuple[int | None, float | None]:
        """`(token, None)` when the slots are taken; `(None, seconds until the first holder's lease ends)`.

        `(None, None)` when enough slots are free but promised to waiters queued ahead.
        """
        call = self._acquire_args(key, owner, ttl, limit, permits)
        return acquire_answer(self._run("acquire_or_ttl", scripts.SEMAPHORE_ACQUIRE, call))

    def acquire_or_queue(
        self, key: str, owner: str, ttl: float, limit: int, permits: int = 1
    ) -> tuple[int | None, float | None]:
        """`acquire_or_ttl` for a caller that will wait: refused, `owner` joins the key's FIFO queue.

        Free slots go to the live entries in arrival order while they fit (or to anyone when
        the whole queue fits too). The entry lives `QUEUE_ENTRY_MS` unless `owner` tries
        again; `release(key, owner)` by a waiter that gives up leaves the queue.
        """
        call = self._acquire_args(key, owner, ttl, limit, permits, entry_ms=scripts.QUEUE_ENTRY_MS)
        return acquire_answer(self._run("acquire_or_ttl", scripts.SEMAPHORE_ACQUIRE, call))

    def release(self, key: str, owner: str) -> bool:
        """Free `owner`'s slots (True only if it held some) and wake the waiters they serve.

        Only the queued waiters that the freed slots now serve are woken (one message each),
        in arrival order. A waiter that holds no slot leaves the queue instead (False), and
        the waiters the free slots then serve are woken.
        """
        return run_steps(self._release_steps(key, owner, self._sync_runner, "release"))

    def wait_released(
        self, key: str, timeout: float, owner: str | None = None, limit: int | None = None, permits: int = 1
    ) -> bool:
        """Block until slots of `key` are released (True) or `timeout` passes (False); True at once with no holder.

        With `owner` and `limit` (a queued waiter asking for `permits`): True at once when its
        slots are free for it, and woken only by a release whose slots serve it.
        """
        return self._wait_sync(key, timeout, *self._wait_check(key, timeout, owner, limit, permits))

    async def acquire_async(self, key: str, owner: str, ttl: float, limit: int, permits: int = 1) -> int | None:
        """See `acquire`."""
        call = self._acquire_args(key, owner, ttl, limit, permits)
        return acquire_answer(await self._run_async("acquire_async", scripts.SEMAPHORE_ACQUIRE, call))[0]

    async def acquire_or_ttl_async(
        self, key: str, owner: str, ttl: float, limit: int, permits: int = 1
    ) -> tuple[int | None, float | None]:
        """See `acquire_or_ttl`."""
        call = self._acquire_args(key, owner, ttl, limit, permits)
        return acquire_answer(await self._run_async("acquire_or_ttl_async", scripts.SEMAPHORE_ACQUIRE, call))

    async def acquire_or_queue_async(
        self, key: str, owner: str, ttl: float, limit: int, permits: int = 1
    ) -> tuple[int | None, float | None]:
        """See `acquire_or_queue`."""
        call = self._acquire_args(key, owner, ttl, limit, permits, entry_ms=scripts.QUEUE_ENTRY_MS)
        return acquire_answer(await self._run_async("acquire_or_ttl_async", scripts.SEMAPHORE_ACQUIRE, call))

    async def release_async(self, key: str, owner: str) -> bool:
        """See `release`."""
        return await run_steps_async(self._release_steps(key, owner, self._async_runner, "release_async"))

    async def wait_released_async(
        self, key: str, timeout: float, owner: str | None = None, limit: int | None = None, permits: int = 1
    ) -> bool:
        """See `wait_released`."""
        return await self._wait_async(key, timeout, *self._wait_check(key, timeout, owner, limit, permits))
