"""The producer's side: :class:`Client` enqueues tasks through the ``<ns>_enqueue``
Function and waits for their results. Needs redis-py (Debian: ``python3-redis``),
imported when a Client is made, so that serving needs the standard library only."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from . import errors

__all__ = ["Client", "Batch"]

_CODES: dict[str, type[errors.DtqError]] = {
    cls.code: cls
    for cls in (
        errors.InvalidArgumentError,
        errors.NotFoundError,
        errors.WrongStateError,
        errors.NotEmptyError,
        errors.PayloadTooLargeError,
        errors.QueueFullError,
        errors.IdempotencyInProgressError,
        errors.IdExistsError,
    )
}

_TERMINAL: dict[str, type[errors.TaskError] | None] = {
    "succeeded": None,
    "failed": errors.TaskFailedError,
    "dead_lettered": errors.TaskDeadLetteredError,
    "cancelled": errors.TaskCancelledError,
    "expired": errors.TaskExpiredError,
}

_OPTIONS = (
    "priority",
    "max_attempts",
    "timeout_ms",
    "delay_ms",
    "ttl_seconds",
    "idempotency_key",
    "task_id",
    "limit_key",
    "unique_for",
    "unique_key",
    "unique_mode",
    "after",
    "on_failure",
    "batch",
)

# The options every task of a group (batch, chain) takes (reference sections 4.5, 4.6).
_GROUP_OPTIONS = ("priority", "max_attempts", "timeout_ms", "delay_ms", "ttl_seconds", "limit_key")


@dataclass(frozen=True)
class Batch:
    """A batch made by :meth:`Client.batch`: its id and its members' task ids, in order."""

    id: str
    task_ids: list[str]


def _option_args(names: Sequence[str], values: Sequence[Any], what: str) -> list[str]:
    """name value pairs of the options given (not None), as the Functions take them."""
    args: list[str] = []
    for name, value in zip(names, values):
        if value is None:
            continue
        if isinstance(value, bool):
            raise TypeError(f"{what}: {name} must be a number or a string, not a bool")
        if isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        args += [name, str(value)]
    return args


def _json(payload: Any) -> str:
    return json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _group_args(tasks: Iterable[tuple[str, Any]]) -> list[Any]:
    """n, then task_type payload for each (type, payload) of tasks."""
    flat: list[Any] = []
    for task_type, payload in tasks:
        flat += [task_type, _json(payload)]
    return [len(flat) // 2, *flat]

POLL_FIRST = 0.005
"""The first wait of :meth:`Client.result` between two looks at the task (seconds)."""
POLL_MAX = 0.5
"""The longest wait between two looks: the back-off doubles up to it."""


def map_error(exc: Exception, namespace: str = "dtq") -> Exception:
    """The dtq exception of a Redis error reply (its first word the code of reference
    section 5.2); exc itself when it is not a reply of the Functions."""
    text = str(exc)
    code, _, detail = text.partition(" ")
    cls = _CODES.get(code)
    if cls is not None:
        return cls(text, detail=detail)
    if "Function not found" in text or "function not found" in text.lower():
        return errors.FunctionsNotLoadedError(
            f"the dtq Functions of namespace {namespace} are not loaded in this Redis "
            f"(run: dtqctl -n {namespace} functions install): {text}",
            detail=text,
        )
    return exc


class Client:
    """A producer's connection to dtq.

    ``url``: a redis-py URL (``redis://[user:password@]host:port/db``, ``rediss://``,
    ``unix:///path.sock?db=N``). ``namespace``: ``[redis] namespace`` of the daemons
    (the Functions are ``<namespace>_enqueue``, ...). ``cluster_hash_tag``: as the
    daemons' ``[redis] cluster_hash_tag`` (keys ``{<namespace>}:...``). ``redis``: an
    existing redis-py client to use instead of ``url``. Thread-safe as redis-py is.
    """

    def __init__(
        self,
        url: str = "redis://localhost:6379/0",
        namespace: str = "dtq",
        *,
        cluster_hash_tag: bool = False,
        redis: Any = None,
    ) -> None:
        if redis is None:
            import redis as redis_py  # lazily: serving must not need it

            redis = redis_py.Redis.from_url(url)
        self.redis = redis
        self.namespace = namespace
        self.prefix = "{" + namespace + "}" if cluster_hash_tag else namespace
        self._response_error: type[Exception] = _response_error_class()

    def close(self) -> None:
        """Closes the connections."""
        self.redis.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _fcall(self, function: str, *args: Any) -> Any:
        try:
            return self.redis.execute_command("FCALL", f"{self.namespace}_{function}", 0, *args)
        except self._response_error as e:
            mapped = map_error(e, self.namespace)
            if mapped is e:
                raise
            raise mapped from None

    def enqueue(
        self,
        queue: str,
        task_type: str,
        payload: Any = None,
        *,
        priority: int | None = None,
        max_attempts: int | None = None,
        timeout_ms: int | None = None,
        delay_ms: int | None = None,
        ttl_seconds: int | None = None,
        idempotency_key: str | None = None,
        task_id: str | None = None,
        limit_key: str | None = None,
        unique_for: int | None = None,
        unique_key: str | None = None,
        unique_mode: str | None = None,
        after: Sequence[str] | str | None = None,
        on_failure: str | None = None,
        batch: str | None = None,
    ) -> str:
        """Enqueues a task and returns its id: ``FCALL <ns>_enqueue 0 queue task_type
        payload [option value]...`` (reference section 4.1). ``payload`` is any JSON value
        (serialised here); options left ``None`` are not sent. With an
        ``idempotency_key`` already used by a finished task, the id returned is that
        task's (the Function answers ``duplicate``). With ``unique_for`` (seconds; with
        ``unique_key`` and ``unique_mode`` ``until_started``, ``until_finished`` or
        ``debounce``, reference section 4.7), a key another task holds returns that task's
        id (``duplicate``, or ``debounced`` when a debounce replaced its payload).
        ``after`` (task ids) makes the task wait until they have succeeded, with
        ``on_failure`` ``cancel``, ``run`` or ``dead_letter`` for when one of them ends
        otherwise (section 4.4); ``batch`` joins an existing batch (section 4.5).

        Raises :class:`InvalidArgumentError`, :class:`PayloadTooLargeError`,
        :class:`QueueFullError`, :class:`IdempotencyInProgressError`,
        :class:`IdExistsError` (each a :class:`DtqError`),
        :class:`FunctionsNotLoadedError`; ``TypeError``/``ValueError`` for a payload that
        is not JSON.
        """
        args: list[Any] = [queue, task_type, _json(payload)]
        values = (
            priority,
            max_attempts,
            timeout_ms,
            delay_ms,
            ttl_seconds,
            idempotency_key,
            task_id,
            limit_key,
            unique_for,
            unique_key,
            unique_mode,
            after,
            on_failure,
            batch,
        )
        reply = self._fcall("enqueue", *args, *_option_args(_OPTIONS, values, "enqueue"))
        return _text(reply[0])

    def batch(
        self,
        queue: str,
        tasks: Iterable[tuple[str, Any]],
        *,
        batch_id: str | None = None,
        on_success: str | None = None,
        on_success_payload: dict[str, Any] | None = None,
        on_complete: str | None = None,
        on_complete_payload: dict[str, Any] | None = None,
        open: bool = False,
        description: str | None = None,
        **task_options: Any,
    ) -> Batch:
        """Makes a batch of ``tasks`` ((task_type, payload) pairs, at most 10,000) in one
        atomic call: ``FCALL <ns>_batch 0 create`` (reference section 4.5). ``on_success``
        names a task type enqueued into ``queue`` once when every member succeeded,
        ``on_complete`` one enqueued once when every member ended; their payloads are the
        given objects with a ``batch`` field (the counts and the failed members' ids).
        ``open=True`` lets :meth:`batch_add` add members until :meth:`batch_close`.
        ``task_options``: ``priority``, ``max_attempts``, ``timeout_ms``, ``delay_ms``,
        ``ttl_seconds``, ``limit_key`` for every member."""
        own = _option_args(
            ("batch_id", "on_success", "on_success_payload", "on_complete", "on_complete_payload",
             "open", "description"),
            (batch_id, on_success, None if on_success_payload is None else _json(on_success_payload),
             on_complete, None if on_complete_payload is None else _json(on_complete_payload),
             "1" if open else None, description),
            "batch",
        )
        reply = self._fcall("batch", "create", queue, *_group_args(tasks), *own,
                            *self._task_options("batch", task_options))
        ids = [_text(x) for x in reply]
        return Batch(ids[0], ids[1:])

    def batch_add(self, batch_id: str, queue: str, tasks: Iterable[tuple[str, Any]],
                  **task_options: Any) -> list[str]:
        """Adds members to a batch that is not complete (open, or closed with members
        still pending: a member's handler may add more). Returns their ids."""
        reply = self._fcall("batch", "add", batch_id, queue, *_group_args(tasks),
                            *self._task_options("batch_add", task_options))
        return [_text(x) for x in reply]

    def batch_close(self, batch_id: str) -> str:
        """Closes a batch: ``closed``, or ``complete`` when nothing was pending (its
        callbacks are then enqueued)."""
        return _text(self._fcall("batch", "close", batch_id))

    def batch_show(self, batch_id: str) -> dict[str, Any]:
        """The batch: ``FCALL_RO <ns>_batch_show`` as a dict (``total``, ``pending``,
        ``succeeded``, ``failed``, ``dead_lettered``, ``completed_at``, ``on_success``,
        ``on_complete``, ``failed_ids``...)."""
        try:
            text = self.redis.execute_command("FCALL_RO", f"{self.namespace}_batch_show", 0, batch_id)
        except self._response_error as e:
            mapped = map_error(e, self.namespace)
            if mapped is e:
                raise
            raise mapped from None
        return json.loads(_text(text))

    def chain(
        self,
        queue: str,
        tasks: Iterable[tuple[str, Any]],
        *,
        after: Sequence[str] | str | None = None,
        on_failure: str | None = None,
        **task_options: Any,
    ) -> list[str]:
        """Enqueues ``tasks`` ((task_type, payload) pairs) each waiting for the one before,
        which hands it its result (``ctx.parent_results``): ``FCALL <ns>_chain`` (reference
        section 4.6). ``after``: what the first waits for; ``on_failure``: every link's
        (default ``cancel``: a link that fails ends the rest). Returns the ids in order."""
        own = _option_args(("after", "on_failure"), (after, on_failure), "chain")
        reply = self._fcall("chain", queue, *_group_args(tasks), *own,
                            *self._task_options("chain", task_options))
        return [_text(x) for x in reply]

    @staticmethod
    def _task_options(what: str, options: dict[str, Any]) -> list[str]:
        unknown = sorted(set(options) - set(_GROUP_OPTIONS))
        if unknown:
            raise TypeError(f"{what}: unknown option(s) {', '.join(unknown)}; "
                            f"a group's tasks take {', '.join(_GROUP_OPTIONS)}")
        return _option_args(_GROUP_OPTIONS, [options.get(n) for n in _GROUP_OPTIONS], what)

    def status(self, task_id: str) -> str | None:
        """The task's status (``queued``, ``running``, ``succeeded``, ...), or ``None``
        when its hash does not exist."""
        s = self.redis.hget(f"{self.prefix}:task:{task_id}", "status")
        return None if s is None else _text(s)

    def result(self, task_id: str, timeout: float | None = None) -> Any:
        """Waits until the task ends and returns its result (a JSON value; ``None`` for
        none).

        How: reads the task hash's ``status`` and ``<p>:result:<id>`` in one
        transaction (the Function that ends a task writes both at once), looking again
        after 5 ms, then twice as long each time up to 0.5 s: no subscription, so it
        works whatever ``[limits] events`` says, and costs at most two commands a second
        per waiting call.

        Raises :class:`TaskDeadLetteredError`, :class:`TaskFailedError`,
        :class:`TaskCancelledError`, :class:`TaskExpiredError` (each a
        :class:`TaskError`, with ``last_error`` and ``last_error_class``) when the task
        ended otherwise; :class:`NotFoundError` when no such task exists (never created,
        or its hash expired after ``task_retention_s``); :class:`ResultTruncatedError`
        when the result was cut to ``result_max_bytes``; :class:`ResultTimeoutError` (a
        ``TimeoutError``) when ``timeout`` seconds pass first.
        """
        key = f"{self.prefix}:task:{task_id}"
        rkey = f"{self.prefix}:result:{task_id}"
        start = time.monotonic()
        wait = POLL_FIRST
        while True:
            pipe = self.redis.pipeline(transaction=True)
            pipe.hmget(key, "status", "last_error", "last_error_class", "result_truncated")
            pipe.get(rkey)
            (status, last_error, error_class, truncated), result = pipe.execute()
            if status is None:
                raise errors.NotFoundError(f"NOT_FOUND task {task_id}", detail=f"task {task_id}")
            st = _text(status)
            if st in _TERMINAL:
                cls = _TERMINAL[st]
                if cls is not None:
                    raise cls(task_id, st, _text(last_error or b""), _text(error_class or b""))
                if result is None:
                    return None
                text = _text(result)
                if truncated is not None and _text(truncated) == "1":
                    raise errors.ResultTruncatedError(task_id, text)
                return json.loads(text)
            if timeout is not None:
                left = timeout - (time.monotonic() - start)
                if left <= 0:
                    raise errors.ResultTimeoutError(task_id, st, timeout)
                time.sleep(min(wait, left))
            else:
                time.sleep(wait)
            wait = min(wait * 2, POLL_MAX)


def _text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else str(v)


def _response_error_class() -> type[Exception]:
    from redis.exceptions import ResponseError

    return ResponseError
