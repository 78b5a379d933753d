"""The process's side of the pool protocol, version 1 (``sdk/PROTOCOL.md``).

:func:`serve` writes ``hello`` on descriptor 4, reads ``task`` and ``cancel`` lines from
descriptor 3, runs each task's handler and answers it with ``ok`` or ``fail``, and returns
once descriptor 3 has ended and every task it held is answered.

Design: one asyncio event loop in the calling thread owns the tasks held. A reader thread
blocks on descriptor 3 and hands each parsed line to the loop; a writer thread owns
descriptor 4, so that neither a slow daemon nor a handler stalls the other side. At most
``inflight`` tasks run at once: ``async def`` handlers as asyncio tasks of the loop, plain
``def`` handlers in a pool of ``inflight`` threads (a blocking handler never stalls the
protocol). Descriptors 0-2 are never touched: what handlers print is the program's own.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import queue
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any, NoReturn

from . import errors
from .registry import Handler, handlers

__all__ = ["Context", "serve", "classify", "error_text", "ProtocolError", "VERSION", "PROTOCOL"]

VERSION = "0.1.0"
PROTOCOL = 1
MAX_LINE = 16 * 1024 * 1024
"""A line is at most 16 MiB (PROTOCOL.md, "The channel")."""
TRACEBACK_LINES = 20
ERROR_BYTES = 4096
PROGRESS_MESSAGE_BYTES = 200
EXIT_PROTOCOL = 70
_OWN = os.path.dirname(os.path.abspath(__file__)) + os.sep
"""EX_SOFTWARE: the status of a process that met a protocol error."""


class ProtocolError(Exception):
    """The daemon's side broke the protocol (a line that is not a JSON object, a task
    without an id, an id sent twice while held, ...)."""


# ------------------------------------------------------------------ failures


def _cut(text: str, limit: int) -> str:
    """text cut to at most limit UTF-8 bytes, never inside a character."""
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= limit:
        return text
    return raw[:limit].decode("utf-8", "ignore")


def _optional_classes(module: str, names: tuple[str, ...]) -> tuple[type[BaseException], ...]:
    """The named exception classes of a module already imported (never imports it: a
    handler that raised one imported it)."""
    mod = sys.modules.get(module)
    found = []
    for n in names:
        cls = getattr(mod, n, None) if mod is not None else None
        if isinstance(cls, type) and issubclass(cls, BaseException):
            found.append(cls)
    return tuple(found)


def _is_validation_error(exc: BaseException) -> bool:
    classes = _optional_classes("pydantic", ("ValidationError",)) + _optional_classes(
        "pydantic_core", ("ValidationError",)
    )
    return bool(classes) and isinstance(exc, classes)


def _is_retryable(exc: BaseException) -> bool:
    """The seed rule: RetryableError, timeouts and connection errors (also redis-py's)
    retry; PermanentError, validation errors and anything else do not. An exception
    raised ``from`` another is judged by the chain of causes when it is none of these."""
    seen = 0
    e: BaseException | None = exc
    while e is not None and seen < 8:
        if isinstance(e, errors.PermanentError) or _is_validation_error(e):
            return False
        if isinstance(e, (errors.RetryableError, TimeoutError, ConnectionError)):
            return True
        redis_transient = _optional_classes("redis.exceptions", ("ConnectionError", "TimeoutError"))
        if redis_transient and isinstance(e, redis_transient):
            return True
        e = e.__cause__
        seen += 1
    return False


def error_text(exc: BaseException) -> str:
    """The ``error`` text of a failure: ``ExceptionClass: message`` (as Python's own
    traceback ends), then the last lines of the traceback (at most 20, without this
    package's own frames), all in at most 4 KiB of UTF-8; the first line is always kept."""
    head = "".join(traceback.format_exception_only(type(exc), exc)).rstrip("\n")
    head = _cut(head, ERROR_BYTES)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(_OWN)]
    lines: list[str] = []
    for frame in traceback.format_list(frames):
        lines.extend(frame.rstrip("\n").split("\n"))
    tail = lines[-TRACEBACK_LINES:]
    budget = ERROR_BYTES - len(head.encode("utf-8", "surrogatepass"))
    kept: list[str] = []
    for line in reversed(tail):  # the innermost lines are the ones worth keeping
        size = len(line.encode("utf-8", "surrogatepass")) + 1
        if size > budget:
            break
        kept.append(line)
        budget -= size
    kept.reverse()
    return "\n".join([head, *kept])


def classify(exc: BaseException) -> dict[str, Any]:
    """The fields of the ``fail`` answer for exc: ``retryable``, ``error`` and, for a
    refused payload (:class:`dtq.InvalidPayloadError`, pydantic's ``ValidationError``),
    ``class: "invalid_payload"``."""
    out: dict[str, Any] = {"retryable": _is_retryable(exc)}
    if isinstance(exc, errors.InvalidPayloadError) or _is_validation_error(exc):
        out["class"] = "invalid_payload"
    out["error"] = error_text(exc)
    return out


# ------------------------------------------------------------------ the context


class Context:
    """What a handler learns of its task, given as its second argument.

    Attributes: ``task_id``, ``queue``, ``task_type``, ``attempt`` (from 1),
    ``max_attempts``, ``deadline`` (an aware UTC :class:`~datetime.datetime` at which this
    attempt times out, or ``None`` when the daemon sent none) and ``deadline_ms`` (the same
    as epoch milliseconds), ``cancelled`` (a :class:`threading.Event`, set on the daemon's
    ``cancel``; a plain handler polls :attr:`is_cancelled` or waits on it) and
    ``cancel_reason`` (``timeout``, ``cancelled`` or ``shutdown``, once cancelled), and
    ``parent_results`` (for a task enqueued ``after`` others: a dict of their task ids to
    their results, ``None`` for one without; an empty dict otherwise).
    """

    def __init__(self, server: _Server, held: _Held, msg: dict[str, Any]) -> None:
        self._server = server
        self._held = held
        self.task_id: str = msg["id"]
        self.queue: str = str(msg.get("queue", ""))
        self.task_type: str = msg["type"]
        self.attempt: int = _int(msg.get("attempt"), 1)
        self.max_attempts: int = _int(msg.get("max_attempts"), 0)
        dl = msg.get("deadline_ms")
        self.deadline_ms: int | None = (
            int(dl) if isinstance(dl, (int, float)) and not isinstance(dl, bool) else None
        )
        self.deadline: datetime | None = (
            datetime.fromtimestamp(self.deadline_ms / 1000, tz=timezone.utc)
            if self.deadline_ms is not None
            else None
        )
        self.cancelled = threading.Event()
        self.cancel_reason: str | None = None
        pr = msg.get("parent_results")
        self.parent_results: dict[str, Any] = pr if isinstance(pr, dict) else {}

    @property
    def is_cancelled(self) -> bool:
        """Whether the daemon cancelled the task (stop as soon as you can: the answer is
        ignored, and the process is killed after ``kill_grace_ms``)."""
        return self.cancelled.is_set()

    def remaining(self) -> float | None:
        """Seconds left before the deadline (negative once past), or ``None``."""
        if self.deadline_ms is None:
            return None
        return self.deadline_ms / 1000 - time.time()

    def progress(self, fraction: float | None = None, message: str | None = None) -> None:
        """Reports progress: ``fraction`` in [0, 1] (clamped), ``message`` cut to 200
        bytes. Safe from any thread; does nothing once the task is answered. While the
        daemon reads slowly only the latest report of a task waits to be written."""
        msg: dict[str, Any] = {"t": "progress", "id": self.task_id}
        if fraction is not None:
            f = float(fraction)
            if f == f:  # not NaN
                msg["fraction"] = min(1.0, max(0.0, f))
        if message is not None:
            msg["message"] = _cut(str(message), PROGRESS_MESSAGE_BYTES)
        self._server.writer.progress(self._held, msg)

    def __repr__(self) -> str:
        return (
            f"Context(task_id={self.task_id!r}, queue={self.queue!r}, "
            f"task_type={self.task_type!r}, attempt={self.attempt})"
        )


def _int(v: Any, default: int) -> int:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


class _Held:
    """A task sent to this process and not yet answered."""

    def __init__(self, server: _Server, msg: dict[str, Any]) -> None:
        self.id: str = msg["id"]
        self.msg = msg
        self.ctx = Context(server, self, msg)
        self.answered = False
        self.started = False
        self.atask: asyncio.Task[None] | None = None  # an async handler's task
        self.is_async = False


# ------------------------------------------------------------------ descriptor 4


def _fatal(message: str) -> NoReturn:
    """A protocol error: a line on stderr, then exit 70 at once (whatever threads run)."""
    try:
        sys.stdout.flush()
    except Exception:
        pass
    try:
        os.write(2, f"dtq: protocol error: {message}\n".encode("utf-8", "replace"))
    except OSError:
        pass
    os._exit(EXIT_PROTOCOL)


class _Writer:
    """The owner of descriptor 4: a thread writes the lines queued, in order. Answers
    are always queued; progress is coalesced (a task's latest report replaces an earlier
    one not yet written, in the earlier one's place, so before the task's answer), and a
    report made once its task is answered is dropped."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.lock = threading.Lock()
        self.items: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self.latest: dict[_Held, dict[str, Any]] = {}
        self.thread = threading.Thread(target=self._run, name="dtq-writer", daemon=True)
        self.thread.start()

    def send(self, msg: dict[str, Any]) -> None:
        self.items.put(("line", _dumps(msg)))

    def answer(self, held: _Held, msg: dict[str, Any]) -> bool:
        """Queues the answer of held; False when it was answered already."""
        with self.lock:
            if held.answered:
                return False
            held.answered = True
        self.items.put(("line", _dumps(msg)))
        return True

    def progress(self, held: _Held, msg: dict[str, Any]) -> None:
        with self.lock:
            if held.answered:
                return
            queued = held in self.latest
            self.latest[held] = msg
        if not queued:
            self.items.put(("progress", held))

    def close(self) -> None:
        """Writes what is queued, closes the descriptor and waits for the thread."""
        self.items.put(("end", None))
        self.thread.join()

    def _run(self) -> None:
        while True:
            kind, item = self.items.get()
            if kind == "end":
                try:
                    os.close(self.fd)
                except OSError:
                    pass
                return
            if kind == "progress":
                with self.lock:
                    msg = self.latest.pop(item, None)
                if msg is None:
                    continue
                data = _dumps(msg)
            else:
                data = item
            view = memoryview(data)
            try:
                while view:
                    n = os.write(self.fd, view)
                    view = view[n:]
            except OSError as e:
                _fatal(f"cannot write to descriptor {self.fd}: {e}")


def _dumps(msg: dict[str, Any]) -> bytes:
    return (json.dumps(msg, ensure_ascii=False, separators=(",", ":")) + "\n").encode(
        "utf-8", "surrogatepass"
    )


# ------------------------------------------------------------------ descriptor 3


def _reader(fd: int, deliver: Any) -> None:
    """Reads descriptor 3 to its end; hands each message (a dict) or None (end of file)
    to deliver; a line that breaks the protocol ends the process (status 70)."""
    buf = bytearray()
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except InterruptedError:
            continue
        except OSError as e:
            _fatal(f"cannot read descriptor {fd}: {e}")
        if not chunk:
            break
        start = len(buf)
        buf += chunk
        pos = 0
        while True:
            nl = buf.find(b"\n", max(pos, start))
            if nl < 0:
                break
            line = bytes(buf[pos:nl])
            pos = nl + 1
            start = pos
            deliver(_parse(line))
        del buf[:pos]
        if len(buf) > MAX_LINE:
            _fatal(f"a line of more than {MAX_LINE} bytes")
    if buf:
        _fatal("descriptor 3 ended inside a line")
    deliver(None)


def _parse(line: bytes) -> dict[str, Any]:
    if len(line) > MAX_LINE:
        _fatal(f"a line of {len(line)} bytes, over 16 MiB")
    try:
        msg = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        _fatal(f"a line is not JSON ({e}): {_cut(line.decode('utf-8', 'replace'), 200)}")
    if not isinstance(msg, dict):
        _fatal(f"a line is not a JSON object: {_cut(line.decode('utf-8', 'replace'), 200)}")
    return msg


# ------------------------------------------------------------------ the loop


class _Server:
    def __init__(self, inflight: int, tasks_fd: int, replies_fd: int) -> None:
        self.inflight = inflight
        self.tasks_fd = tasks_fd
        self.handlers: dict[str, Handler] = handlers()
        self.writer = _Writer(replies_fd)
        self.held: dict[str, _Held] = {}
        self.waiting: collections.deque[_Held] = collections.deque()
        self.running = 0
        self.ended = False
        self.done: asyncio.Future[None] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.pool: ThreadPoolExecutor | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.done = self.loop.create_future()
        if any(not h.is_async for h in self.handlers.values()):
            self.pool = ThreadPoolExecutor(self.inflight, thread_name_prefix="dtq-handler")
        self.writer.send(
            {
                "t": "hello",
                "protocol": PROTOCOL,
                "types": list(self.handlers),
                "inflight": self.inflight,
                "sdk": f"python dtq {VERSION}",
            }
        )
        loop = self.loop
        threading.Thread(
            target=_reader,
            args=(self.tasks_fd, lambda m: loop.call_soon_threadsafe(self.on_message, m)),
            name="dtq-reader",
            daemon=True,
        ).start()
        await self.done
        if self.pool is not None:
            self.pool.shutdown(wait=True)

    def on_message(self, msg: dict[str, Any] | None) -> None:
        if msg is None:
            self.ended = True
            self.pump()
            return
        t = msg.get("t")
        if t == "task":
            tid = msg.get("id")
            if not isinstance(tid, str) or not tid:
                _fatal("a task without an id")
            if not isinstance(msg.get("type"), str):
                _fatal(f"task {tid} without a type")
            if tid in self.held:
                _fatal(f"task {tid} sent while it is held")
            held = _Held(self, msg)
            self.held[tid] = held
            self.waiting.append(held)
            self.pump()
        elif t == "cancel":
            held = self.held.get(msg.get("id"))  # type: ignore[arg-type]
            if held is not None:  # an id answered already: nothing to do
                self.cancel(held, msg.get("reason"))
        # any other type: ignored (a newer daemon may send more)

    def cancel(self, held: _Held, reason: Any) -> None:
        ctx = held.ctx
        ctx.cancel_reason = reason if isinstance(reason, str) else "cancelled"
        ctx.cancelled.set()
        if not held.started:  # never ran: answered at once
            self.waiting.remove(held)
            self.answer(held, self.cancelled_fail(held))
            self.pump()
        elif held.atask is not None:
            held.atask.cancel()

    def cancelled_fail(self, held: _Held) -> dict[str, Any]:
        reason = held.ctx.cancel_reason
        return {
            "t": "fail",
            "id": held.id,
            "retryable": reason == "timeout",
            "error": f"CancelledError: the task was cancelled ({reason})",
        }

    def answer(self, held: _Held, msg: dict[str, Any]) -> None:
        if self.writer.answer(held, msg) and self.held.get(held.id) is held:
            del self.held[held.id]

    def pump(self) -> None:
        while self.running < self.inflight and self.waiting:
            held = self.waiting.popleft()
            held.started = True
            self.running += 1
            atask = asyncio.ensure_future(self.run_task(held))
            self.tasks.add(atask)
            atask.add_done_callback(self.tasks.discard)
        if self.ended and not self.held and self.done is not None and not self.done.done():
            self.done.set_result(None)

    async def run_task(self, held: _Held) -> None:
        msg = held.msg
        try:
            handler = self.handlers.get(msg["type"])
            if handler is None:
                served = ", ".join(self.handlers) or "none"
                raise errors.PermanentError(
                    f"no handler for task type {json.dumps(msg['type'])} "
                    f"(this process serves {served})"
                )
            args: tuple[Any, ...] = (msg.get("payload"),)
            if handler.takes_context:
                args += (held.ctx,)
            if handler.is_async:
                result = await self.run_async(held, handler, args)
            else:
                assert self.loop is not None and self.pool is not None
                result = await self.loop.run_in_executor(self.pool, _call, handler.fn, args)
                if isinstance(result, _Raised):
                    raise result.exc
                if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
                    result = await self.run_async(held, None, (result,))
            answer = self.ok(held.id, result)
        except asyncio.CancelledError as e:
            if held.ctx.cancel_reason is not None:
                answer = self.cancelled_fail(held)
            else:
                answer = {"t": "fail", "id": held.id, **classify(e)}
        except BaseException as e:  # a handler's SystemExit fails its task, no more
            answer = {"t": "fail", "id": held.id, **classify(e)}
        self.running -= 1
        self.answer(held, answer)
        self.pump()

    async def run_async(self, held: _Held, handler: Handler | None, args: tuple[Any, ...]) -> Any:
        """Runs an async handler (or awaits the awaitable args[0] when handler is None)
        as its own asyncio task, which a cancel cancels; past the deadline it raises
        TimeoutError (retryable)."""
        assert self.loop is not None

        async def call() -> Any:
            aw = handler.fn(*args) if handler is not None else args[0]
            dl = held.ctx.deadline_ms
            try:
                if dl is None:
                    return await aw
                when = self.loop.time() + (dl / 1000 - time.time())  # type: ignore[union-attr]
                async with asyncio.timeout_at(when):
                    return await aw
            except (SystemExit, KeyboardInterrupt) as e:
                # asyncio would let these stop the whole loop: they fail this task only
                return _Raised(e)

        inner = asyncio.ensure_future(call())
        held.atask = inner
        if held.ctx.is_cancelled:
            inner.cancel()
        try:
            result = await inner
        finally:
            held.atask = None
        if isinstance(result, _Raised):
            raise result.exc
        return result

    @staticmethod
    def ok(tid: str, result: Any) -> dict[str, Any]:
        try:
            text = json.dumps(result, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError, RecursionError) as e:
            try:
                raise TypeError(f"the result is not JSON-serialisable: {e}") from None
            except TypeError as wrapped:
                return {"t": "fail", "id": tid, "retryable": False, "error": error_text(wrapped)}
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > MAX_LINE - 1024:
            try:
                raise ValueError(f"the result is {size} bytes, over the protocol's 16 MiB line")
            except ValueError as e:
                return {"t": "fail", "id": tid, "retryable": False, "error": error_text(e)}
        return {"t": "ok", "id": tid, "result": json.loads(text)}


class _Raised:
    """An exception carried out of a handler as a value: out of a thread of the pool (so
    that asyncio does not rebuild it without its traceback, as it does a TimeoutError),
    or out of an asyncio task (so that a SystemExit does not stop the loop)."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _call(fn: Any, args: tuple[Any, ...]) -> Any:
    """Runs a plain handler in a thread of the pool."""
    try:
        return fn(*args)
    except BaseException as e:
        return _Raised(e)


def _env_int(name: str, default: int) -> int:
    v = os.environ.get(name, "")
    if v == "":
        return default
    try:
        n = int(v)
        if n < 0:
            raise ValueError
        return n
    except ValueError:
        print(f"dtq: {name}={v} is not a whole number; using {default}", file=sys.stderr)
        return default


def serve(
    *, inflight: int | None = None, tasks_fd: int | None = None, replies_fd: int | None = None
) -> None:
    """Serves the registered task types until descriptor 3 ends, then returns (every
    task answered, descriptor 4 closed). A protocol error writes a line on stderr and
    exits the process with status 70.

    Defaults: ``DTQ_INFLIGHT`` (else 1), ``DTQ_TASKS_FD`` (else 3), ``DTQ_REPLIES_FD``
    (else 4). Descriptors 3 and 4 are made non-inheritable, so that programs a handler
    starts do not hold the protocol's pipes open; stdout and stderr are made
    line-buffered.
    """
    n = inflight if inflight is not None else _env_int("DTQ_INFLIGHT", 1)
    n = max(1, n)
    tfd = tasks_fd if tasks_fd is not None else _env_int("DTQ_TASKS_FD", 3)
    rfd = replies_fd if replies_fd is not None else _env_int("DTQ_REPLIES_FD", 4)
    for fd in (tfd, rfd):
        try:
            os.set_inheritable(fd, False)
        except OSError as e:
            _fatal(f"descriptor {fd} is not open ({e.strerror}): run under dtq-worker's [pool:NAME]")
    for stream in (sys.stdout, sys.stderr):
        # A line at a time, so that the daemon's log gets what a handler prints while its
        # task runs, not at exit (a pipe is block-buffered otherwise).
        try:
            stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]
        except (AttributeError, ValueError):
            pass
    server = _Server(n, tfd, rfd)
    asyncio.run(server.run())
    server.writer.close()
