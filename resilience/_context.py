"""`ResilienceContext`, its properties, and the ambient context that follows `contextvars`.

A context is never mutated by the library: each execution, and each strategy scope that can
abort (timeout, lock) or renumber attempts (retry), derives a child with the same
`operation_key`, copy-on-write `properties`, a child `signal` and its own `attempt`.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final, Generic, Protocol, Self, TypeVar, cast, overload

from resilience._runtime._threads import on_fork_in_child
from resilience._signal import Signal

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

__all__ = [
    "LOCK_TOKEN",
    "LazyDeadline",
    "ResilienceContext",
    "ResilienceProperties",
    "ResiliencePropertyKey",
    "current_context",
    "execution_context",
    "get_context",
    "get_lock_token",
    "reset_context",
    "set_context",
    "use_context",
]

T = TypeVar("T")
D = TypeVar("D")


class LazyDeadline(Protocol):
    """A deadline on a scope's signal that schedules nothing until someone can observe the signal.

    Give one to `ResilienceContext.derive_scope(deadline=...)`. Most callables never read their
    signal; then nobody can see an abort before the callable ends, and no timer is needed.
    The sync timeout strategy is written this way (see docs/custom-strategies.md).
    """

    def arm(self, signal: Signal, /) -> None:
        """The scope's signal was just made: abort it at the deadline (at once if it passed)."""
        ...

    def passed(self) -> bool:
        """Whether the deadline passed while the scope runs (the scope then makes its signal)."""
        ...


_KEYS: weakref.WeakValueDictionary[str, ResiliencePropertyKey[Any]] = weakref.WeakValueDictionary()
"""The property key of each name (`ResiliencePropertyKey.__new__`)."""

# Guards the rare creations: a lazily linked signal (`ResilienceContext._link_signal`), a
# property key. One lock for the process, re-entrant (a finalizer that the collector runs
# while it is held may name a key), replaced in a forked child, where no thread can hold it.
_MAKE_LOCK = threading.RLock()


@on_fork_in_child
def _new_make_lock_after_fork() -> None:
    global _MAKE_LOCK  # noqa: PLW0603 - the module's one lock, replaced only in a forked child
    _MAKE_LOCK = threading.RLock()


class ResiliencePropertyKey(Generic[T]):
    """A typed key for `ResilienceContext.properties`; frozen, hashable, equal by name.

    There is one key object per name while any is referenced: equal by name is then the same
    object, so a property read hashes the key in C (a hash of the name through a Python
    `__hash__` cost 0.15 us per read).
    """

    __slots__ = ("__weakref__", "_name")
    _name: str

    def __new__(cls, name: str) -> Self:
        with _MAKE_LOCK:  # two threads naming a new key at once get the same object
            key = _KEYS.get(name)
            if key is None:
                key = _KEYS[name] = object.__new__(cls)
                object.__setattr__(key, "_name", name)
        return cast("Self", key)

    @property
    def name(self) -> str:
        """The key's name."""
        return self._name

    def __setattr__(self, name: str, value: object) -> None:
        msg = "ResiliencePropertyKey is immutable"
        raise AttributeError(msg)

    def __repr__(self) -> str:
        return f"ResiliencePropertyKey({self._name!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (ResiliencePropertyKey, (self._name,))


LOCK_TOKEN: Final[ResiliencePropertyKey[int]] = ResiliencePropertyKey("resilience.lock_token")
"""The property under which a lock's derived context carries its fencing token."""

_MISSING: Any = object()


class ResilienceProperties:
    """Typed properties of a context. A child reads through to its parent; writes stay local."""

    __slots__ = ("_own", "_parent")

    def __init__(
        self,
        initial: Mapping[ResiliencePropertyKey[Any], Any] | None = None,
        *,
        parent: ResilienceProperties | None = None,
    ) -> None:
        self._own: dict[ResiliencePropertyKey[Any], Any] | None = dict(initial) if initial else None
        self._parent = parent

    @overload
    def get(self, key: ResiliencePropertyKey[T]) -> T | None: ...
    @overload
    def get(self, key: ResiliencePropertyKey[T], default: D) -> T | D: ...
    def get(self, key: ResiliencePropertyKey[T], default: object = None) -> object:
        """The value under `key`, or `default`."""
        props: ResilienceProperties | None = self
        while props is not None:
            own = props._own
            if own is not None:
                value = own.get(key, _MISSING)
                if value is not _MISSING:
                    return value
            props = props._parent
        return default

    def __getitem__(self, key: ResiliencePropertyKey[T]) -> T:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return isinstance(key, ResiliencePropertyKey) and self.get(key, _MISSING) is not _MISSING

    def set(self, key: ResiliencePropertyKey[T], value: T) -> None:
        """Set `key` on this context's properties only (never on a parent's)."""
        if self._own is None:
            self._own = {}
        self._own[key] = value

    def child(self) -> ResilienceProperties:
        """A copy-on-write view: reads fall through to this object, writes stay in the child."""
        return _properties_over(self, None)

    def to_dict(self) -> dict[ResiliencePropertyKey[Any], Any]:
        """A flat snapshot of every visible property."""
        return {**({} if self._parent is None else self._parent.to_dict()), **(self._own or {})}

    def __iter__(self) -> Iterator[ResiliencePropertyKey[Any]]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())

    def __repr__(self) -> str:
        return f"ResilienceProperties({self.to_dict()!r})"


def _properties_over(
    parent: ResilienceProperties | None, own: dict[ResiliencePropertyKey[Any], Any] | None
) -> ResilienceProperties:
    """`ResilienceProperties` with `own` values over `parent`'s, without the constructor's argument handling."""
    props: ResilienceProperties = object.__new__(ResilienceProperties)
    props._own = own
    props._parent = parent
    return props


class ResilienceContext:
    """What an execution runs under: operation key, properties, abort signal and attempt number.

    Construct one to give executions a key, properties or a signal (`use_context`); the
    library derives children from it and never mutates it.
    """

    # Deliberately not slotted: the class-level defaults make a fresh root context one
    # allocation with nothing to assign, which is most of an empty pipeline's overhead.
    _operation_key: str | None = None
    _properties: ResilienceProperties | None = None
    _signal: Signal | None = None
    _attempt: int = 0
    # Set by `derive_scope`: the context whose signal this one's is a child of, made on the
    # first read of `signal` (most callables never read it; a child signal costs 0.9 us).
    _signal_source: ResilienceContext | None = None
    _scope_ended: bool = False
    # Given to `derive_scope` (the sync timeout): a deadline with no timer until the signal is
    # first read (most callables never read it), checked lazily by `abort_reason`.
    _deadline: LazyDeadline | None = None
    # Set by the pipeline when, as its execution started, no event at Information or below
    # could reach anything (no listener, logger off, no OpenTelemetry): see `quiet`.
    _quiet: bool = False
    # The execution's call (`[fn, args, kwargs, plan, enclosing ambient context]`, emptied when
    # the execution ends), set by the pipeline and handed on by `derive`/`derive_scope`: the
    # last step of the chain, composed once at build(), finds it here.
    _call: list[Any] | None = None
    # Set by `derive(substitute=...)`: what the last step calls instead of the execution's
    # callable, with the same arguments (hedging's `action_generator`).
    _substitute: Callable[..., Any] | None = None

    def __init__(
        self,
        *,
        operation_key: str | None = None,
        properties: Mapping[ResiliencePropertyKey[Any], Any] | ResilienceProperties | None = None,
        signal: Signal | None = None,
    ) -> None:
        self._operation_key = operation_key
        if isinstance(properties, ResilienceProperties):
            self._properties: ResilienceProperties | None = properties
        else:
            self._properties = ResilienceProperties(properties) if properties else None
        self._signal = signal

    @property
    def operation_key(self) -> str | None:
        """A caller-chosen key for the operation (also a telemetry tag on request)."""
        return self._operation_key

    @property
    def properties(self) -> ResilienceProperties:
        """The context's typed properties."""
        props = self._properties
        if props is None:
            props = self._properties = _properties_over(None, None)
        return props

    def get_property(self, key: ResiliencePropertyKey[T], default: D, /) -> T | D:
        """`properties.get(key, default)`, without making the properties of a context that has none.

        For a read on every execution (the lock strategy's re-entry check): no allocation.
        """
        props = self._properties
        return default if props is None else props.get(key, default)

    @property
    def signal(self) -> Signal:
        """The abort signal of this scope (created on first use)."""
        signal = self._signal
        if signal is None:
            if self._signal_source is None:
                signal = self._signal = Signal()
            else:
                signal = self._link_signal(self._signal_source)
        return signal

    @property
    def target(self) -> Callable[..., Any] | None:
        """The callable this execution runs (the user's), or None once the execution ended.

        A strategy that calls something else in its place (`derive(substitute=...)`) may
        hand it to user code, as hedging's `action_generator` receives it.
        """
        call = self._call
        return call[0] if call else None

    @property
    def attempt(self) -> int:
        """The 0-based attempt number, set by the retry strategy."""
        return self._attempt

    @property
    def quiet(self) -> bool:
        """True when nothing hears this execution's events at Information or below.

        The pipeline decides it once, as the execution starts: no telemetry listener, the
        `resilience` logger off for Information, no OpenTelemetry provider that records. A
        strategy may then skip measuring what only such an event would report (retry skips
        its attempt's duration on a success). Events of higher severity must still be emitted.
        """
        return self._quiet

    def _link_signal(self, source: ResilienceContext) -> Signal:
        parent = source.signal
        made = False
        with _MAKE_LOCK:  # two threads reading it at once must get the same signal
            signal = self._signal
            if signal is None:
                signal = self._signal = parent.child()
                made = True
                # Set before reading the flag, the reverse of `end_scope`: one of the two
                # sees the other's write, so a child made as the scope ends is detached (what
                # an eagerly made child would be by then).
                if self._scope_ended:
                    signal.detach()
        deadline = self._deadline
        if made and deadline is not None:
            deadline.arm(signal)  # someone can observe the signal now: the deadline must abort it
        return signal

    @property
    def abort_reason(self) -> BaseException | None:
        """The reason this context's signal aborted with, or None; never makes a signal not yet read.

        Reading `signal.reason` is the same answer, but makes a scope's signal (`derive_scope`)
        that nobody had read, which costs a registration in its parent.
        """
        context: ResilienceContext | None = self
        while context is not None:
            signal = context._signal
            if signal is not None:
                return signal._reason
            deadline = context._deadline
            if deadline is not None and deadline.passed():
                return context.signal._reason  # made now, and aborted by its deadline
            context = context._signal_source
        return None

    def raise_if_aborted(self) -> None:
        """Raise the reason if this context's signal aborted, without making a signal not yet read.

        A strategy calls it before it starts the inner part: nothing starts under an aborted
        signal (docs/concepts.md).
        """
        signal = self._signal  # the common cases first, without the walk's call
        if signal is not None:
            reason = signal._reason
        elif self._deadline is not None:
            reason = self.abort_reason
        elif (source := self._signal_source) is None:
            return
        elif source._signal is None and source._signal_source is None and source._deadline is None:
            return  # a scope over a root that has no signal yet (a retry's attempt)
        else:
            reason = self.abort_reason
        if reason is not None:
            raise reason

    def derive(
        self,
        *,
        signal: Signal | None = None,
        attempt: int | None = None,
        properties: Mapping[ResiliencePropertyKey[Any], Any] | None = None,
        substitute: Callable[..., Any] | None = None,
    ) -> ResilienceContext:
        """A child context: same key, copy-on-write properties, `signal`, and `attempt`.

        Strategies call this; pass the child signal they own (or None to share this one).
        `properties` are set on the child only (the lock strategy's fencing token).
        `substitute` is called, with the execution's arguments, in place of its callable by
        the inner part run under the child (hedging's `action_generator`).
        """
        child = new_context()
        child._operation_key = self._operation_key
        props = self._properties
        if properties:
            child._properties = _properties_over(props, dict(properties))
        else:
            child._properties = None if props is None else _properties_over(props, None)
        # A parent without a signal yet gets one now, so that an abort of the parent made
        # later still reaches the child (they must share one chain).
        child._signal = self.signal if signal is None else signal
        child._attempt = self._attempt if attempt is None else attempt
        child._quiet = self._quiet
        child._call = self._call
        child._substitute = self._substitute if substitute is None else substitute
        return child

    def derive_scope(self, *, attempt: int | None = None, deadline: LazyDeadline | None = None) -> ResilienceContext:
        """A child context for a scope the strategy owns, with its own child signal made when first read.

        What `derive(signal=self.signal.child())` gives, for less: most callables never read
        their signal, and then no child signal is made or registered in the parent. The child
        aborts with this context's signal exactly as an eagerly made one would (an abort that
        already happened is seen by `abort_reason` and copied when the signal is made).
        `deadline` (a `LazyDeadline`) aborts the scope's signal in time without a timer until
        the signal is made. The strategy ends the scope with `end_scope()`.
        """
        child = new_context()
        child._operation_key = self._operation_key
        props = self._properties
        child._properties = None if props is None else _properties_over(props, None)
        child._signal_source = self
        child._attempt = self._attempt if attempt is None else attempt
        child._quiet = self._quiet
        child._call = self._call
        child._substitute = self._substitute
        if deadline is not None:
            child._deadline = deadline
        return child

    def end_scope(self) -> None:
        """The scope of a `derive_scope` context ended: its signal stops following the parent."""
        self._scope_ended = True  # no lock: see _link_signal
        signal = self._signal
        if signal is not None:
            signal.detach()

    def __repr__(self) -> str:
        return (
            f"ResilienceContext(operation_key={self._operation_key!r}, attempt={self._attempt}, "
            f"properties={self._properties!r}, signal={self._signal!r})"
        )


# One C call, no frame: the class-level defaults make the new object a blank context.
new_context = functools.partial(object.__new__, ResilienceContext)
"""A fresh root context, without the constructor's argument handling."""


def execution_context(parent: ResilienceContext) -> ResilienceContext:
    """The root context of an execution started under `parent` (the pipeline then sets its `_call`).

    It shares the parent's signal (nothing aborts an execution on its own; the strategies
    that can abort derive child signals) and reads its properties through; a substitute the
    parent runs under is not inherited: the new execution runs its own callable.
    """
    context = new_context()
    context._operation_key = parent._operation_key
    props = parent._properties
    if props is not None:
        context._properties = _properties_over(props, None)
    context._signal = parent.signal
    context._attempt = parent._attempt
    return context


_CURRENT: Final[ContextVar[ResilienceContext | None]] = ContextVar("resilience_context", default=None)

# The one way in and out of the ambient context (the module's variable is never imported).
current_context = _CURRENT.get
"""The ambient context (the innermost running execution's, else `use_context`'s), or None."""
set_context = _CURRENT.set
"""Make a context the ambient one; returns the token that `reset_context` takes."""
reset_context = _CURRENT.reset
"""Restore the ambient context that `set_context` replaced."""


def get_context() -> ResilienceContext | None:
    """The innermost running execution's context, else the one set by `use_context`, else None.

    It follows `contextvars`: asyncio tasks and `asyncio.to_thread` inherit it, a bare
    `threading.Thread` does not (start it with `contextvars.copy_context().run`).
    """
    return _CURRENT.get()


@contextlib.contextmanager
def use_context(
    context: ResilienceContext | None = None,
    /,
    *,
    operation_key: str | None = None,
    properties: Mapping[ResiliencePropertyKey[Any], Any] | None = None,
    signal: Signal | None = None,
) -> Iterator[ResilienceContext]:
    """Make executions started inside the block derive their context from this one.

    Pass a `ResilienceContext`, or the keywords to build one. Keywords given with a context
    override its fields (the context itself is not changed).
    """
    if context is None:
        context = ResilienceContext(operation_key=operation_key, properties=properties, signal=signal)
    elif operation_key is not None or properties is not None or signal is not None:
        context = context.derive(signal=signal, properties=properties)
        if operation_key is not None:
            context._operation_key = operation_key
    token = _CURRENT.set(context)
    try:
        yield context
    finally:
        _CURRENT.reset(token)


def get_lock_token(context: ResilienceContext | None = None) -> int | None:
    """The fencing token of the innermost lock the code runs under, or None outside a lock."""
    if context is None:
        context = _CURRENT.get()
    return None if context is None else context.get_property(LOCK_TOKEN, None)
