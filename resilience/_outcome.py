"""`Outcome`: the result of a call as a value, `Ok(value)` or `Err(error)`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, Never, NoReturn, TypeVar, final

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["Err", "Ok", "Outcome"]

T_co = TypeVar("T_co", covariant=True)
V = TypeVar("V")
R = TypeVar("R")


class Outcome(Generic[T_co]):
    """The result of a call: either `Ok` (`.value`) or `Err` (`.error`).

    Use `match(ok=..., err=...)`, `unwrap()`, `value_or(default)`, `map(fn)`, or a `match`
    statement with `case Ok(value)` / `case Err(error)`.
    """

    __slots__ = ()

    @property
    def value(self) -> T_co | None:
        """The value of an `Ok`; None on an `Err`."""
        raise NotImplementedError  # pragma: no cover - overridden by both subclasses

    @property
    def error(self) -> Exception | None:
        """The exception of an `Err`; None on an `Ok`."""
        raise NotImplementedError  # pragma: no cover - overridden by both subclasses

    @property
    def is_ok(self) -> bool:
        """True for an `Ok`."""
        return isinstance(self, Ok)

    @property
    def is_error(self) -> bool:
        """True for an `Err`."""
        return isinstance(self, Err)

    def unwrap(self) -> T_co:
        """The value of an `Ok`, or re-raise the error of an `Err` (with its traceback)."""
        raise NotImplementedError  # pragma: no cover - overridden by both subclasses

    def match(self, *, ok: Callable[[T_co], R], err: Callable[[Exception], R]) -> R:
        """Call `ok(value)` or `err(error)` and return what it returns."""
        raise NotImplementedError  # pragma: no cover - overridden by both subclasses

    def value_or(self, default: V, /) -> T_co | V:
        """The value of an `Ok`, or `default` for an `Err` (the error is dropped)."""
        raise NotImplementedError  # pragma: no cover - overridden by both subclasses

    def map(self, fn: Callable[[T_co], R], /) -> Ok[R] | Err:
        """`Ok(fn(value))` for an `Ok`; an `Err` is returned as it is (`fn` is not called)."""
        raise NotImplementedError  # pragma: no cover - overridden by both subclasses

    def __setattr__(self, name: str, value: object) -> None:
        msg = f"{type(self).__name__} is immutable"
        raise AttributeError(msg)

    @staticmethod
    def ok(value: V) -> Ok[V]:
        """A successful outcome."""
        return Ok(value)

    @staticmethod
    def failure(error: Exception) -> Err:
        """A failed outcome."""
        return Err(error)


@final
class Ok(Outcome[T_co]):
    """A successful outcome holding `value`."""

    __slots__ = ("_value",)
    __match_args__ = ("value",)
    _value: T_co

    def __init__(self, value: T_co) -> None:
        object.__setattr__(self, "_value", value)

    @property
    def value(self) -> T_co:
        """The value."""
        return self._value

    @property
    def error(self) -> None:
        """Always None."""
        return None

    def unwrap(self) -> T_co:
        """The value."""
        return self._value

    def match(self, *, ok: Callable[[T_co], R], err: Callable[[Exception], R]) -> R:  # noqa: ARG002
        """`ok(value)`."""
        return ok(self._value)

    def value_or(self, default: object, /) -> T_co:  # noqa: ARG002
        """The value."""
        return self._value

    def map(self, fn: Callable[[T_co], R], /) -> Ok[R]:
        """`Ok(fn(value))`."""
        return Ok(fn(self._value))

    def __init_subclass__(cls, **kwargs: object) -> None:
        msg = "Ok is final: an outcome is either Ok or Err"
        raise TypeError(msg)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Ok):
            return bool(self._value == other._value)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((Ok, self._value))

    def __repr__(self) -> str:
        return f"Ok({self._value!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Ok, (self._value,))


@final
class Err(Outcome[Never]):
    """A failed outcome holding the exception `error`."""

    __slots__ = ("_error",)
    __match_args__ = ("error",)
    _error: Exception

    def __init__(self, error: Exception) -> None:
        object.__setattr__(self, "_error", error)

    @property
    def value(self) -> None:
        """Always None."""
        return None

    @property
    def error(self) -> Exception:
        """The exception."""
        return self._error

    def unwrap(self) -> NoReturn:
        """Re-raise the error."""
        raise self._error

    def match(self, *, ok: Callable[[Never], R], err: Callable[[Exception], R]) -> R:  # noqa: ARG002
        """`err(error)`."""
        return err(self._error)

    def value_or(self, default: V, /) -> V:
        """`default`."""
        return default

    def map(self, fn: Callable[[Never], object], /) -> Err:  # noqa: ARG002
        """This `Err` itself."""
        return self

    def __init_subclass__(cls, **kwargs: object) -> None:
        msg = "Err is final: an outcome is either Ok or Err"
        raise TypeError(msg)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Err):
            return self._error is other._error
        return NotImplemented

    def __hash__(self) -> int:
        return hash((Err, id(self._error)))

    def __repr__(self) -> str:
        return f"Err({self._error!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Err, (self._error,))
