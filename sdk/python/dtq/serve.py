"""The process's side of the pool protocol, version 1 (``sdk/PROTOCOL.md``).

:func:`serve` writes ``hello`` on descriptor 4, reads ``task`` and ``cancel`` lines from
descriptor 3, runs each task's handler and answers it with ``ok`` or ``fail``, and returns
once descriptor 3 has ended and every task it held is answered.

Design, for the least work per task: a reader thread blocks on descriptor 3 and starts
each task itself, while fewer than ``inflight`` run: plain ``def`` handlers in threads of
their own (at most ``inflight``; a blocking handler never stalls the protocol), ``async
def`` handlers as asyncio tasks of one event loop in the calling thread (run concurrently).
Whoever finishes a task writes its answer on descriptor 4 at once, without handing it to
another thread (a plain task costs one thread hop; asyncio's executor cost three times
the whole task). Descriptors 0-2 are never touched: what handlers print is the program's
own.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import queue
import select
import sys
import threading
import time
import traceback
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

    def __init__(self, server: _Server, msg: dict[str, Any]) -> None:
        self._server = server
        self.task_id: str = msg["id"]
        self.queue: str = str(msg.get("queue", ""))
        self.task_type: str = msg["type"]
        self.attempt: int = _int(msg.get("attempt"), 1)
        self.max_attempts: int = _int(msg.get("max_attempts"), 0)
        dl = msg.get("deadline_ms")
        self.deadline_ms: int | None = (
            int(dl) if isinstance(dl, (int, float)) and not isinstance(dl, bool) else None
        )
        self._cancel_event: threading.Event | None = None  # made when first asked for
        self._is_cancelled = False
        self.cancel_reason: str | None = None
        pr = msg.get("parent_results")
        self.parent_results: dict[str, Any] = pr if isinstance(pr, dict) else {}

    @property
    def cancelled(self) -> threading.Event:
        """A :class:`threading.Event`, set on the daemon's ``cancel`` (made on first use:
        most handlers never wait on one)."""
        with _CANCEL_LOCK:
            if self._cancel_event is None:
                self._cancel_event = threading.Event()
                if self._is_cancelled:
                    self._cancel_event.set()
            return self._cancel_event

    def _cancel(self, reason: Any) -> None:
        with _CANCEL_LOCK:
            self.cancel_reason = reason if isinstance(reason, str) else "cancelled"
            self._is_cancelled = True
            if self._cancel_event is not None:
                self._cancel_event.set()

    @property
    def deadline(self) -> datetime | None:
        """The attempt's deadline as an aware UTC datetime (made when asked: most handlers
        never ask, and a datetime per task was a measurable part of the SDK's time)."""
        if self.deadline_ms is None:
            return None
        return datetime.fromtimestamp(self.deadline_ms / 1000, tz=timezone.utc)

    @property
    def is_cancelled(self) -> bool:
        """Whether the daemon cancelled the task (stop as soon as you can: the answer is
        ignored, and the process is killed after ``kill_grace_ms``)."""
        return self._is_cancelled

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
        self._server.writer.progress(self, msg)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return (
            f"Context(task_id={self.task_id!r}, queue={self.queue!r}, "
            f"task_type={self.task_type!r}, attempt={self.attempt})"
        )


def _int(v: Any, default: int) -> int:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


_CANCEL_LOCK = threading.Lock()


class _Held(Context):
    """A task sent to this process and not yet answered: its context (the handler gets
    this very object, so a task makes no reference cycle for the collector) and the
    server's bookkeeping, in private names (a handler that sets ``ctx.id`` must not
    change where its answer goes)."""

    def __init__(self, server: _Server, msg: dict[str, Any], handler: Handler | None) -> None:
        super().__init__(server, msg)
        self._id: str = self.task_id
        self._msg = msg
        self._handler = handler
        self._answered = False
        self._started = False
        self._atask: asyncio.Task[Any] | None = None  # an async handler's task, while it runs


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
    """The owner of descriptor 4. The thread that has a line writes it itself, at once,
    under a lock (a handler thread its answer, the event loop an async task's): no thread
    hop on the way out. Descriptor 4 is non-blocking, so a daemon that reads slowly
    never stalls the caller: what the pipe does not take waits in a queue that a flusher
    thread (started the first time it is needed) writes once the pipe has room, lines in
    order; while lines wait, a task's progress reports are coalesced (the latest replaces
    an earlier one not yet written, in its place, so before the task's answer), and a
    report made once its task is answered is dropped."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.set_blocking(fd, False)
        self.lock = threading.Lock()
        self.room = threading.Condition(self.lock)
        self.pending: collections.deque[tuple[str, Any]] = collections.deque()
        self.latest: dict[_Held, dict[str, Any]] = {}
        self.flusher: threading.Thread | None = None
        self.closing = False

    def send(self, msg: dict[str, Any]) -> None:
        with self.lock:
            self._emit(_dumps(msg))

    def answer(self, held: _Held, msg: dict[str, Any] | bytes) -> bool:
        """Writes the answer of held (a message, or its line already encoded); False when
        it was answered already."""
        data = msg if isinstance(msg, bytes) else _dumps(msg)
        with self.lock:
            if held._answered:
                return False
            held._answered = True
            self._emit(data)
        return True

    def progress(self, held: _Held, msg: dict[str, Any]) -> None:
        with self.lock:
            if held._answered:
                return
            if not self.pending:
                self._emit(_dumps(msg))
                return
            queued = held in self.latest
            self.latest[held] = msg
            if not queued:
                self.pending.append(("progress", held))

    def close(self) -> None:
        """Writes what waits, closes the descriptor and waits for the flusher."""
        with self.lock:
            self.closing = True
            self.room.notify()
            flusher = self.flusher
        if flusher is not None:
            flusher.join()
        else:
            _close(self.fd)

    def _emit(self, data: bytes) -> None:
        """Writes data now, or queues it (what the pipe did not take) behind what waits.
        The lock is held."""
        if not self.pending:
            n = self._write(data)
            if n == len(data):
                return
            data = data[n:]
        self.pending.append(("line", data))
        if self.flusher is None:
            self.flusher = threading.Thread(target=self._flush, name="dtq-writer", daemon=True)
            self.flusher.start()
        self.room.notify()

    def _write(self, data: bytes | memoryview) -> int:
        try:
            return os.write(self.fd, data)
        except BlockingIOError:
            return 0
        except OSError as e:
            _fatal(f"cannot write to descriptor {self.fd}: {e}")

    def _flush(self) -> None:
        room = select.poll()  # not select(): a descriptor may be above 1023
        room.register(self.fd, select.POLLOUT)
        while True:
            with self.lock:
                while not self.pending and not self.closing:
                    self.room.wait()
                if not self.pending:  # closing, and nothing waits
                    _close(self.fd)
                    return
            room.poll()  # room in the pipe (or the daemon gone: EPIPE)
            with self.lock:
                while self.pending:
                    kind, item = self.pending[0]
                    data = item if kind == "line" else _dumps(self.latest.pop(item))
                    n = self._write(data)
                    if n < len(data):
                        self.pending[0] = ("line", data[n:])
                        break
                    self.pending.popleft()


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


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
            msg = _parse(line)
            try:
                deliver(msg)
            except Exception as e:  # a message of the right shape with wrong values
                _fatal(f"cannot take a message ({type(e).__name__}: {e}): "
                       f"{_cut(line.decode('utf-8', 'replace'), 200)}")
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


# ------------------------------------------------------------------ the server


class _Server:
    """Who runs what. The reader thread takes each message as it is read and, under
    ``lock``, starts a task while fewer than ``inflight`` run (the rest wait, in order): a
    plain handler's task goes to the threads ``dtq-handler_N`` (at most ``inflight``,
    started when first needed), which run it and write its answer; an ``async def``
    handler's task goes to the event loop of the main thread. So a plain task costs one
    thread hop in and none out, the least a handler that may block can cost."""

    def __init__(self, inflight: int, tasks_fd: int, replies_fd: int) -> None:
        self.inflight = inflight
        self.tasks_fd = tasks_fd
        self.handlers: dict[str, Handler] = handlers()
        self.writer = _Writer(replies_fd)
        self.lock = threading.Lock()
        self.held: dict[str, _Held] = {}
        self.waiting: collections.deque[_Held] = collections.deque()
        self.running = 0
        self.ended = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.done: asyncio.Future[None] | None = None
        self.work: queue.SimpleQueue[_Held | None] = queue.SimpleQueue()
        self.threads: list[threading.Thread] = []
        self.tasks: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.done = self.loop.create_future()
        self.writer.send(
            {
                "t": "hello",
                "protocol": PROTOCOL,
                "types": list(self.handlers),
                "inflight": self.inflight,
                "sdk": f"python dtq {VERSION}",
            }
        )
        threading.Thread(
            target=_reader, args=(self.tasks_fd, self.on_message), name="dtq-reader", daemon=True
        ).start()
        await self.done
        for _ in self.threads:
            self.work.put(None)
        for t in self.threads:
            t.join()

    # --- the reader thread

    def on_message(self, msg: dict[str, Any] | None) -> None:
        if msg is None:
            with self.lock:
                self.ended = True
                self.pump()
            return
        t = msg.get("t")
        if t == "task":
            tid = msg.get("id")
            if not isinstance(tid, str) or not tid:
                _fatal("a task without an id")
            ttype = msg.get("type")
            if not isinstance(ttype, str):
                _fatal(f"task {tid} without a type")
            held = _Held(self, msg, self.handlers.get(ttype))  # outside the lock: its parse
            with self.lock:
                if tid in self.held:
                    _fatal(f"task {tid} sent while it is held")
                self.held[tid] = held
                self.waiting.append(held)
                self.pump()
        elif t == "cancel":
            with self.lock:
                held = self.held.get(msg.get("id"))  # type: ignore[arg-type]
                if held is None:  # an id answered already: nothing to do
                    return
                held._cancel(msg.get("reason"))
                if not held._started:  # never ran: answered at once
                    self.waiting.remove(held)
                    self.answer_locked(held, self.cancelled_fail(held))
                    self.pump()
                    return
            # a running task awaited on the loop (an async handler, or the awaitable a plain
            # one returned) is cancelled there; a plain handler sees the flag
            assert self.loop is not None
            self.loop.call_soon_threadsafe(self.cancel_async, held)
        # any other type: ignored (a newer daemon may send more)

    def pump(self) -> None:
        """Starts waiting tasks while slots are free; resolves done once the end of
        descriptor 3 was read and every task is answered. The lock is held."""
        while self.running < self.inflight and self.waiting:
            held = self.waiting.popleft()
            held._started = True
            self.running += 1
            if held._handler is not None and held._handler.is_async:
                assert self.loop is not None
                self.loop.call_soon_threadsafe(self.start_async, held)
            else:
                if len(self.threads) < self.running:  # running <= inflight: one thread a slot
                    th = threading.Thread(
                        target=self.handler_thread, name=f"dtq-handler_{len(self.threads)}", daemon=True
                    )
                    self.threads.append(th)
                    th.start()
                self.work.put(held)
        if self.ended and not self.held and self.loop is not None:
            self.loop.call_soon_threadsafe(self.finish)

    def finish(self) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    # --- answers, from any thread

    def answer(self, held: _Held, msg: dict[str, Any] | bytes) -> None:
        """Writes held's answer and frees its slot."""
        with self.lock:
            self.running -= 1
            self.answer_locked(held, msg)
            self.pump()

    def answer_locked(self, held: _Held, msg: dict[str, Any] | bytes) -> None:
        """Forgets held and writes its answer, both under the lock: the daemon may send
        the same id again as soon as it reads the answer, and the end is not resolved
        before the last answer is written."""
        if self.held.get(held._id) is held:
            del self.held[held._id]
        self.writer.answer(held, msg)

    def cancelled_fail(self, held: _Held) -> dict[str, Any]:
        reason = held.cancel_reason
        return {
            "t": "fail",
            "id": held._id,
            "retryable": reason == "timeout",
            "error": f"CancelledError: the task was cancelled ({reason})",
        }

    def unknown_type(self, held: _Held) -> BaseException:
        served = ", ".join(self.handlers) or "none"
        return errors.PermanentError(
            f"no handler for task type {json.dumps(held._msg['type'])} (this process serves {served})"
        )

    # --- plain handlers: a thread each task

    def handler_thread(self) -> None:
        while True:
            held = self.work.get()
            if held is None:
                return
            self.answer(held, self.run_plain(held))

    def run_plain(self, held: _Held) -> dict[str, Any] | bytes:
        try:
            if held._handler is None:
                raise self.unknown_type(held)
            result = self.invoke(held)
            if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
                # a plain function that returned an awaitable: awaited on the loop
                assert self.loop is not None
                return asyncio.run_coroutine_threadsafe(self.settle(held, result), self.loop).result()
            return self.ok(held._id, result)
        except BaseException as e:  # a handler's SystemExit fails its task, no more
            return self.failed(held, e)

    @staticmethod
    def invoke(held: _Held) -> Any:
        """Calls the task's handler with the payload, and the context if it takes one."""
        h = held._handler
        assert h is not None
        payload = held._msg.get("payload")
        return h.fn(payload, held) if h.takes_context else h.fn(payload)

    def failed(self, held: _Held, e: BaseException) -> dict[str, Any]:
        if isinstance(e, asyncio.CancelledError) and held.cancel_reason is not None:
            return self.cancelled_fail(held)
        return {"t": "fail", "id": held._id, **classify(e)}

    # --- async handlers: tasks of the loop

    def start_async(self, held: _Held) -> None:
        atask = asyncio.ensure_future(self.run_task(held))
        self.tasks.add(atask)
        atask.add_done_callback(self.tasks.discard)

    def cancel_async(self, held: _Held) -> None:
        if held._atask is not None:
            held._atask.cancel()

    async def run_task(self, held: _Held) -> None:
        try:
            aw = self.invoke(held)
        except BaseException as e:
            self.answer(held, self.failed(held, e))
            return
        self.answer(held, await self.settle(held, aw))

    async def settle(self, held: _Held, aw: Any) -> dict[str, Any] | bytes:
        """Awaits an async handler's coroutine, or the awaitable a plain one returned, in
        the current asyncio task, which a cancel cancels; past the deadline it raises
        TimeoutError (retryable). Returns the answer: the ok line, or the failure (a
        SystemExit fails this task only: caught here, it never reaches the loop, which
        asyncio would let it stop)."""
        held._atask = asyncio.current_task()
        try:
            if held.is_cancelled:  # cancelled before it started: it does not start
                if asyncio.iscoroutine(aw):
                    aw.close()
                raise asyncio.CancelledError
            dl = held.deadline_ms
            if dl is None:
                result = await aw
            else:
                assert self.loop is not None
                async with asyncio.timeout_at(self.loop.time() + (dl / 1000 - time.time())):
                    result = await aw
            return self.ok(held._id, result)
        except BaseException as e:
            return self.failed(held, e)
        finally:
            held._atask = None

    @staticmethod
    def ok(tid: str, result: Any) -> dict[str, Any] | bytes:
        """The ok line of a result (encoded once, straight into the line), or the fail
        message of a result that cannot be one."""
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
        return (
            '{"t":"ok","id":' + json.dumps(tid, ensure_ascii=False) + ',"result":' + text + "}\n"
        ).encode("utf-8", "surrogatepass")


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
