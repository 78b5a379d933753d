"""The task registry: :func:`task` registers a handler under its task type."""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable, TypeVar, overload

__all__ = ["Handler", "task", "handlers", "types"]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Handler:
    """A registered handler: its task type, the function, whether it is a coroutine
    function (run on the event loop) or a plain one (run in a thread), and whether it
    takes a :class:`dtq.Context` as its second argument."""

    name: str
    fn: Callable[..., Any]
    is_async: bool
    takes_context: bool


_registry: dict[str, Handler] = {}


def _takes_context(fn: Callable[..., Any]) -> bool:
    """Whether fn accepts a second positional argument."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins: give it the payload only
        return False
    positional = 0
    for p in sig.parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            return True
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            positional += 1
    return positional >= 2


def _is_async(fn: Callable[..., Any]) -> bool:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)
    )


def _register(name: str, fn: F) -> F:
    if not isinstance(name, str) or not name:
        raise TypeError("dtq.task: the task type must be a non-empty string")
    if not callable(fn):
        raise TypeError("dtq.task: the handler must be callable")
    if name in _registry and _registry[name].fn is not fn:
        raise ValueError(f"dtq.task: {name} is already registered")
    _registry[name] = Handler(name, fn, _is_async(fn), _takes_context(fn))
    return fn


@overload
def task(fn: F, /) -> F: ...
@overload
def task(name: str, /) -> Callable[[F], F]: ...
@overload
def task(*, name: str) -> Callable[[F], F]: ...


def task(arg: Any = None, /, *, name: str | None = None) -> Any:
    """Registers a handler of a task type; used as a decorator::

        @dtq.task                   # task type "send_email", the function's __name__
        def send_email(payload, ctx): ...

        @dtq.task("resize")         # or @dtq.task(name="resize")
        async def resize_image(payload): ...

    The handler is called with the task's payload (a JSON value) and, when it takes a
    second positional parameter, a :class:`dtq.Context`. A ``def`` runs in a thread of
    the process's pool (``DTQ_INFLIGHT`` threads), an ``async def`` on the process's
    event loop. What it returns is the task's result (a JSON value, ``None`` for none);
    what it raises fails the task (see :mod:`dtq`). The function is returned unchanged.
    """
    if callable(arg) and name is None:
        return _register(arg.__name__, arg)
    if arg is not None and name is not None:
        raise TypeError("dtq.task: give the name once")
    chosen = arg if arg is not None else name

    def decorate(fn: F) -> F:
        return _register(chosen if chosen is not None else fn.__name__, fn)

    return decorate


def handlers() -> dict[str, Handler]:
    """The registered handlers by task type (a copy)."""
    return dict(_registry)


def types() -> list[str]:
    """The registered task types, in registration order."""
    return list(_registry)
