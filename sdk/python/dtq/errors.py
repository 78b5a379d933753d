"""The exceptions of dtq: what a handler raises to choose how its task fails, and what
:class:`dtq.Client` raises for a refusal of the Functions or a task that did not succeed.
"""

from __future__ import annotations

__all__ = [
    "RetryableError",
    "PermanentError",
    "InvalidPayloadError",
    "DtqError",
    "FunctionsNotLoadedError",
    "InvalidArgumentError",
    "NotFoundError",
    "WrongStateError",
    "NotEmptyError",
    "PayloadTooLargeError",
    "QueueFullError",
    "IdempotencyInProgressError",
    "IdExistsError",
    "TaskError",
    "TaskFailedError",
    "TaskDeadLetteredError",
    "TaskCancelledError",
    "TaskExpiredError",
    "ResultTruncatedError",
    "ResultTimeoutError",
]


class RetryableError(Exception):
    """A failure worth another attempt (class ``retryable``): the task is retried with
    its queue's back-off while attempts remain."""


class PermanentError(Exception):
    """A failure no retry will mend (class ``permanent``): the task is dead-lettered."""


class InvalidPayloadError(PermanentError):
    """A payload the handler refuses: permanent, answered with class ``invalid_payload``."""


# ----------------------------------------------------------------- the producer's side


class DtqError(Exception):
    """A refusal of a dtq Function: ``code`` is the first word of Redis's error reply
    (``INVALID_ARGUMENT``, ``QUEUE_FULL``, ...; reference section 5.2), ``detail`` the rest."""

    code: str = ""

    def __init__(self, message: str, *, code: str | None = None, detail: str = "") -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.detail = detail


class FunctionsNotLoadedError(DtqError):
    """Redis has no dtq Functions library of this namespace (``dtqctl functions install``
    or a start of ``dtq-worker`` loads it)."""

    code = "FUNCTION_NOT_FOUND"


class InvalidArgumentError(DtqError, ValueError):
    """``INVALID_ARGUMENT``: a bad queue name, task type, option, value or id, or a payload
    that is not JSON."""

    code = "INVALID_ARGUMENT"


class NotFoundError(DtqError, LookupError):
    """``NOT_FOUND``: no such task (or queue); also raised by :meth:`dtq.Client.result`
    for a task whose hash does not exist (never created, or expired after
    ``task_retention_s``)."""

    code = "NOT_FOUND"


class WrongStateError(DtqError):
    """``WRONG_STATE``: the task is not in a status the call accepts."""

    code = "WRONG_STATE"


class NotEmptyError(DtqError):
    """``NOT_EMPTY``: the queue still holds tasks."""

    code = "NOT_EMPTY"


class PayloadTooLargeError(DtqError, ValueError):
    """``PAYLOAD_TOO_LARGE``: the payload is over ``max_payload_bytes``."""

    code = "PAYLOAD_TOO_LARGE"


class QueueFullError(DtqError, RetryableError):
    """``QUEUE_FULL``: the queue holds ``max_queue_depth`` entries. Retryable: raised
    from a handler (one that enqueues a follow-up task), its task is tried again later."""

    code = "QUEUE_FULL"


class IdempotencyInProgressError(DtqError, RetryableError):
    """``IDEMPOTENCY_IN_PROGRESS``: the idempotency key's task has not finished;
    ``task_id`` is that task. Retryable, as :class:`QueueFullError`."""

    code = "IDEMPOTENCY_IN_PROGRESS"

    @property
    def task_id(self) -> str:
        """The id of the task that holds the key."""
        return self.detail.split(" ", 1)[0]


class IdExistsError(DtqError):
    """``ID_EXISTS``: a task of the given ``task_id`` exists."""

    code = "ID_EXISTS"


class TaskError(Exception):
    """A task that ended otherwise than ``succeeded``, as :meth:`dtq.Client.result`
    found it: ``status``, and ``last_error`` / ``last_error_class`` from its hash."""

    def __init__(
        self, task_id: str, status: str, last_error: str = "", last_error_class: str = ""
    ) -> None:
        first = last_error.split("\n", 1)[0]
        text = f"task {task_id} ended {status}"
        if last_error_class:
            text += f" (class {last_error_class})"
        if first:
            text += f": {first}"
        super().__init__(text)
        self.task_id = task_id
        self.status = status
        self.last_error = last_error
        self.last_error_class = last_error_class


class TaskFailedError(TaskError):
    """The task ended ``failed`` (a permanent failure with the dead-letter queue off)."""


class TaskDeadLetteredError(TaskError):
    """The task ended ``dead_lettered``: a permanent failure, or its last attempt failed."""


class TaskCancelledError(TaskError):
    """The task ended ``cancelled``."""


class TaskExpiredError(TaskError):
    """The task ended ``expired``: its ``ttl_seconds`` passed before it ran."""


class ResultTruncatedError(Exception):
    """The task succeeded but its result was cut to ``result_max_bytes``, so it is no
    longer JSON; ``text`` holds what was kept."""

    def __init__(self, task_id: str, text: str) -> None:
        super().__init__(f"task {task_id}: the result was cut to result_max_bytes")
        self.task_id = task_id
        self.text = text


class ResultTimeoutError(TimeoutError):
    """:meth:`dtq.Client.result` waited ``timeout`` seconds and the task had not ended
    (it goes on; call again to wait more)."""

    def __init__(self, task_id: str, status: str | None, timeout: float) -> None:
        super().__init__(f"task {task_id} has not ended after {timeout:g} s (status {status})")
        self.task_id = task_id
        self.status = status


for _cls in list(map(globals().get, __all__)):
    _cls.__module__ = "dtq"
