"""A stand-in for dtq-worker's side of the pool protocol (sdk/PROTOCOL.md): starts
``python3 -m dtq serve MODULE...`` with descriptor 3 (tasks) and 4 (replies) on pipes."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(HERE)
FIXTURES = os.path.join(HERE, "fixtures")
PYTHON = os.environ.get("DTQ_TEST_PYTHON", sys.executable)


class Pool:
    """One handler process and the daemon's ends of its two pipes."""

    def __init__(
        self, *modules: str, inflight: int = 1, env: dict[str, str] | None = None, read: bool = True
    ) -> None:
        """read=False: descriptor 4 is not read until :meth:`start_reading` (a slow daemon)."""
        tasks_r, self.tasks_w = os.pipe()
        self.replies_r, replies_w = os.pipe()
        # Numbers above 4 in the child before they are moved onto 3 and 4.
        hi_r = os.dup(tasks_r) if tasks_r > 4 else _dup_high(tasks_r)
        hi_w = os.dup(replies_w) if replies_w > 4 else _dup_high(replies_w)
        os.close(tasks_r)
        os.close(replies_w)

        def wire() -> None:
            os.dup2(hi_r, 3)
            os.dup2(hi_w, 4)

        full_env = dict(os.environ)
        full_env.update(
            {
                "PYTHONPATH": os.pathsep.join([SDK, FIXTURES]),
                "DTQ_TASKS_FD": "3",
                "DTQ_REPLIES_FD": "4",
                "DTQ_PROTOCOL": "1",
                "DTQ_POOL": "test",
                "DTQ_INFLIGHT": str(inflight),
            }
        )
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "dtq", "serve", *modules],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=full_env,
            cwd=FIXTURES,
            close_fds=False,  # the pipes' ends are not inheritable; 3 and 4 are dup2'd
            preexec_fn=wire,
        )
        os.close(hi_r)
        os.close(hi_w)
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.out = b""
        self.err = b""
        self._reader = threading.Thread(target=self._read, daemon=True)
        if read:
            self._reader.start()
        self._stdio = [
            threading.Thread(target=self._drain, args=(self.proc.stdout, "out"), daemon=True),
            threading.Thread(target=self._drain, args=(self.proc.stderr, "err"), daemon=True),
        ]
        for t in self._stdio:
            t.start()

    def start_reading(self) -> None:
        self._reader.start()

    def _read(self) -> None:
        with os.fdopen(self.replies_r, "rb") as f:
            for line in f:
                self.lines.put(line)
        self.lines.put(None)

    def _drain(self, stream: Any, name: str) -> None:
        with stream:
            setattr(self, name, stream.read())

    def send(self, msg: dict[str, Any]) -> None:
        self.send_raw((json.dumps(msg) + "\n").encode())

    def send_raw(self, data: bytes) -> None:
        os.write(self.tasks_w, data)

    def task(self, tid: str, type_: str, payload: Any = None, **extra: Any) -> None:
        msg = {
            "t": "task",
            "id": tid,
            "type": type_,
            "queue": "q",
            "attempt": 1,
            "max_attempts": 5,
            "deadline_ms": int(time.time() * 1000) + 60000,
            "payload": payload,
        }
        msg.update(extra)
        self.send(msg)

    def recv_raw(self, timeout: float = 10) -> bytes | None:
        return self.lines.get(timeout=timeout)

    def recv(self, timeout: float = 10) -> dict[str, Any]:
        line = self.recv_raw(timeout)
        if line is None:
            raise EOFError(f"descriptor 4 ended; stderr: {self.err!r}")
        assert line.endswith(b"\n"), line
        return json.loads(line)

    def answer(self, timeout: float = 10) -> dict[str, Any]:
        """The next ok or fail, skipping progress."""
        while True:
            m = self.recv(timeout)
            if m["t"] in ("ok", "fail"):
                return m

    def hello(self) -> dict[str, Any]:
        m = self.recv()
        assert m["t"] == "hello", m
        return m

    def end(self) -> None:
        """Closes descriptor 3's other end (end of file for the process)."""
        if self.tasks_w >= 0:
            os.close(self.tasks_w)
            self.tasks_w = -1

    def wait(self, timeout: float = 15) -> int:
        rc = self.proc.wait(timeout)
        for t in self._stdio:
            t.join(5)
        return rc

    def close(self) -> None:
        self.end()
        if self.proc.poll() is None:
            self.proc.kill()
        self.wait()
        if self._reader.is_alive():  # never started with read=False and no start_reading()
            self._reader.join(5)


def _dup_high(fd: int) -> int:
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
