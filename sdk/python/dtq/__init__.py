"""dtq's Python SDK.

Serving: a team's program registers handlers with :func:`task` and runs under a
``[pool:NAME]`` section of ``dtq-worker`` as ``python3 -m dtq serve MODULE...``, which
speaks the pool protocol, version 1 (``sdk/PROTOCOL.md``) on descriptors 3 and 4. Serving
needs the standard library only.

How a handler's exception fails its task: :class:`RetryableError`, ``TimeoutError``
(``asyncio.TimeoutError`` is the same class), ``ConnectionError`` and redis-py's
``ConnectionError``/``TimeoutError`` are retried; :class:`PermanentError`,
:class:`InvalidPayloadError` and pydantic's ``ValidationError`` (both class
``invalid_payload``), a result that is not JSON, and any other exception are permanent.

Producing: :class:`Client` enqueues tasks and waits for their results (needs redis-py,
imported only when a Client is made).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import errors as _errors
from .errors import (
    DtqError,
    FunctionsNotLoadedError,
    IdempotencyInProgressError,
    IdExistsError,
    InvalidArgumentError,
    InvalidPayloadError,
    NotEmptyError,
    NotFoundError,
    PayloadTooLargeError,
    PermanentError,
    QueueFullError,
    ResultTimeoutError,
    ResultTruncatedError,
    RetryableError,
    TaskCancelledError,
    TaskDeadLetteredError,
    TaskError,
    TaskExpiredError,
    TaskFailedError,
    WrongStateError,
)
from .registry import handlers, task, types
from .serve import PROTOCOL, VERSION, Context, classify, error_text, serve

if TYPE_CHECKING:
    from .client import Batch, Client

__version__ = VERSION

# The exceptions are errors.py's, as that module lists them.
__all__ = [
    "task",
    "types",
    "handlers",
    "serve",
    "Context",
    "classify",
    "error_text",
    "Client",
    "Batch",
    "VERSION",
    "PROTOCOL",
] + _errors.__all__


def __getattr__(name: str) -> Any:
    # The Client (and with it redis-py) is loaded only when asked for.
    if name in ("Client", "Batch"):
        from . import client

        return getattr(client, name)
    raise AttributeError(f"module 'dtq' has no attribute {name!r}")
