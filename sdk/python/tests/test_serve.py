"""The serving side, as real processes: python3 -m dtq serve, spoken to over pipes by a
stand-in for the daemon (standin.Pool)."""

from __future__ import annotations

import time
import unittest

from .standin import Pool


class ServeTestCase(unittest.TestCase):
    def pool(self, *modules: str, inflight: int = 1) -> Pool:
        p = Pool(*(modules or ("handlers",)), inflight=inflight)
        self.addCleanup(p.close)
        return p


class TestHello(ServeTestCase):
    def test_hello_announces_the_types(self) -> None:
        p = self.pool(inflight=3)
        h = p.hello()
        self.assertEqual(h["protocol"], 1)
        self.assertEqual(h["inflight"], 3)
        self.assertTrue(h["sdk"].startswith("python dtq "))
        for t in ("echo", "echo_ctx", "aecho", "named", "named_kw", "fail", "asleep", "ssleep"):
            self.assertIn(t, h["types"])
        self.assertNotIn("_named", h["types"])
        p.end()
        self.assertEqual(p.wait(), 0)
        self.assertIsNone(p.recv_raw())

    def test_import_failure_exits_1_without_hello(self) -> None:
        p = self.pool("broken")
        self.assertEqual(p.wait(), 1)
        self.assertIn(b"this module is broken", p.err)
        self.assertIsNone(p.recv_raw())

    def test_module_by_path(self) -> None:
        import os

        from .standin import FIXTURES

        p = self.pool(os.path.join(FIXTURES, "handlers.py"))
        self.assertIn("echo", p.hello()["types"])


class TestAnswers(ServeTestCase):
    def test_ok(self) -> None:
        p = self.pool()
        p.hello()
        p.task("1-1", "echo", {"to": "a@example.com", "n": [1, 2.5, None, "é"]})
        self.assertEqual(
            p.answer(),
            {"t": "ok", "id": "1-1", "result": {"to": "a@example.com", "n": [1, 2.5, None, "é"]}},
        )
        p.task("1-2", "none_result", 1)
        self.assertEqual(p.answer(), {"t": "ok", "id": "1-2", "result": None})
        p.task("1-3", "named")
        self.assertEqual(p.answer()["result"], "named")
        p.task("1-4", "named_kw")
        self.assertEqual(p.answer()["result"], "named_kw")
        p.task("1-5", "aecho", [1], unknown_field="ignored")
        a = p.answer()
        self.assertEqual(a["result"]["payload"], [1])
        self.assertEqual(a["result"]["thread"], "MainThread")

    def test_context(self) -> None:
        p = self.pool()
        p.hello()
        p.task("9-1", "echo_ctx", "x", queue="mail", attempt=2, max_attempts=7,
               deadline_ms=1796083651041)
        r = p.answer()["result"]
        self.assertEqual(r["task_id"], "9-1")
        self.assertEqual(r["queue"], "mail")
        self.assertEqual(r["task_type"], "echo_ctx")
        self.assertEqual(r["attempt"], 2)
        self.assertEqual(r["max_attempts"], 7)
        self.assertEqual(r["deadline_ms"], 1796083651041)
        self.assertEqual(r["deadline"], "2026-12-01T00:07:31.041000+00:00")
        self.assertTrue(r["thread"].startswith("dtq-handler"), r["thread"])

    def test_a_handler_that_sets_attributes_on_its_context(self) -> None:
        # the server's bookkeeping is private: the answer still goes to the task's id, and
        # the task counts as answered (the process exits at the end of descriptor 3)
        p = self.pool()
        p.hello()
        p.task("9-2", "scribble_ctx", None)
        self.assertEqual(p.answer(), {"t": "ok", "id": "9-2", "result": "noted"})
        p.end()
        self.assertEqual(p.wait(), 0)

    def test_unknown_message_type_is_ignored(self) -> None:
        p = self.pool()
        p.hello()
        p.send({"t": "gossip", "id": "x"})
        p.send({"t": "cancel", "id": "not-held", "reason": "cancelled"})
        p.task("2-1", "echo", 5)
        self.assertEqual(p.answer(), {"t": "ok", "id": "2-1", "result": 5})

    def test_unknown_task_type_fails_permanently(self) -> None:
        p = self.pool()
        p.hello()
        p.task("3-1", "no_such_type", {})
        a = p.answer()
        self.assertEqual(a["t"], "fail")
        self.assertFalse(a["retryable"])
        self.assertNotIn("class", a)
        first = a["error"].split("\n")[0]
        self.assertTrue(first.startswith('dtq.PermanentError: no handler for task type "no_such_type"'), first)
        self.assertIn("echo", first)


class TestFailures(ServeTestCase):
    CASES = {
        # kind: (retryable, class, first line starts with)
        "retryable": (True, None, "dtq.RetryableError: mail server busy"),
        "timeout": (True, None, "TimeoutError: the mail server took too long"),
        "asyncio_timeout": (True, None, "TimeoutError"),
        "connection": (True, None, "ConnectionRefusedError: [Errno 111] Connection refused"),
        "caused": (True, None, "RuntimeError: could not fetch the page"),
        "permanent": (False, None, "dtq.PermanentError: no such user"),
        "invalid": (False, "invalid_payload", "dtq.InvalidPayloadError: to: field required"),
        "validation": (False, "invalid_payload", "pydantic"),
        "other": (False, None, "ValueError: bad input"),
        "system_exit": (False, None, "SystemExit: 3"),
    }

    def check(self, type_: str) -> None:
        p = self.pool()
        p.hello()
        for i, (kind, (retryable, cls, head)) in enumerate(self.CASES.items()):
            with self.subTest(kind=kind, type=type_):
                p.task(f"f-{i}", type_, {"kind": kind})
                a = p.answer()
                self.assertEqual(a["t"], "fail")
                self.assertEqual(a["id"], f"f-{i}")
                self.assertIs(a["retryable"], retryable)
                self.assertEqual(a.get("class"), cls)
                lines = a["error"].split("\n")
                self.assertTrue(lines[0].startswith(head), lines[0])
                # then the traceback's tail, the innermost frame last
                self.assertTrue(any("handlers.py" in line for line in lines[1:]), a["error"])
                self.assertFalse(any("dtq/serve.py" in line for line in lines[1:]), a["error"])
                self.assertLessEqual(len(lines), 21)

    def test_sync(self) -> None:
        self.check("fail")

    def test_async(self) -> None:
        self.check("afail")

    def test_redis_connection_error_retries(self) -> None:
        try:
            import redis  # noqa: F401
        except ImportError:
            self.skipTest("no redis-py")
        p = self.pool()
        p.hello()
        p.task("r-1", "fail", {"kind": "redis_connection"})
        a = p.answer()
        self.assertTrue(a["retryable"])
        self.assertTrue(a["error"].startswith("redis.exceptions.ConnectionError: Error 111"), a["error"])

    def test_error_text_is_bounded(self) -> None:
        p = self.pool()
        p.hello()
        p.task("l-1", "fail", {"kind": "long"})
        a = p.answer()
        self.assertLessEqual(len(a["error"].encode()), 4096)
        self.assertTrue(a["error"].startswith("ValueError: xxxx"))

    def test_result_not_json(self) -> None:
        p = self.pool()
        p.hello()
        for tid, payload in (("j-1", "set"), ("j-2", "nan")):
            p.task(tid, "bad_result", payload)
            a = p.answer()
            self.assertEqual(a["t"], "fail")
            self.assertFalse(a["retryable"])
            self.assertTrue(a["error"].startswith("TypeError: the result is not JSON-serialisable"), a["error"])


class TestConcurrency(ServeTestCase):
    def test_async_tasks_run_concurrently(self) -> None:
        n = 8
        p = self.pool(inflight=n)
        p.hello()
        start = time.monotonic()
        for i in range(n):
            p.task(f"a-{i}", "asleep", {"s": 0.5})
        ids = {p.answer()["id"] for _ in range(n)}
        elapsed = time.monotonic() - start
        self.assertEqual(ids, {f"a-{i}" for i in range(n)})
        self.assertLess(elapsed, n * 0.5 / 2, elapsed)

    def test_inflight_bounds_concurrency(self) -> None:
        p = self.pool(inflight=2)
        p.hello()
        start = time.monotonic()
        for i in range(4):
            p.task(f"b-{i}", "asleep", {"s": 0.3})
        for _ in range(4):
            p.answer()
        self.assertGreaterEqual(time.monotonic() - start, 0.55)

    def test_sync_handlers_run_in_threads(self) -> None:
        n = 4
        p = self.pool(inflight=n + 1)
        p.hello()
        start = time.monotonic()
        for i in range(n):
            p.task(f"s-{i}", "ssleep", {"s": 0.5})
        # while they block, the protocol loop still answers an async task
        p.task("s-async", "aecho", 1)
        first = p.answer()
        self.assertEqual(first["id"], "s-async")  # before any of the blocking ones
        threads = {p.answer()["result"] for _ in range(n)}
        self.assertLess(time.monotonic() - start, n * 0.5 / 2)
        self.assertGreaterEqual(len(threads), n - 1)
        self.assertTrue(all(t.startswith("dtq-handler") for t in threads), threads)

    def test_async_deadline_is_a_retryable_timeout(self) -> None:
        p = self.pool()
        p.hello()
        p.task("d-1", "past_deadline", None, deadline_ms=int(time.time() * 1000) + 300)
        a = p.answer()
        self.assertTrue(a["retryable"])
        self.assertTrue(a["error"].startswith("TimeoutError"), a["error"])


class TestOutput(ServeTestCase):
    def test_prints_do_not_disturb_the_protocol(self) -> None:
        p = self.pool()
        p.hello()
        p.task("o-1", "noisy")
        self.assertEqual(p.answer(), {"t": "ok", "id": "o-1", "result": "quiet"})
        p.end()
        self.assertEqual(p.wait(), 0)
        self.assertIn(b'{"t":"ok","id":"not-a-task","result":1}\n', p.out)
        self.assertIn(b"raw bytes on fd 1", p.out)
        self.assertIn(b"raw bytes on fd 2", p.err)
        self.assertIsNone(p.recv_raw())

    def test_progress(self) -> None:
        p = self.pool()
        p.hello()
        p.task("p-1", "progress")
        msgs = []
        while True:
            m = p.recv()
            msgs.append(m)
            if m["t"] != "progress":
                break
        self.assertEqual(msgs[-1], {"t": "ok", "id": "p-1", "result": "done"})
        prog = msgs[:-1]
        self.assertTrue(all(m["id"] == "p-1" for m in prog))
        # coalescing may drop reports that a later one replaced; the last one always comes,
        # before the answer
        self.assertEqual(prog[-1], {"t": "progress", "id": "p-1"})
        for m in prog:
            if "fraction" in m:
                self.assertTrue(0 <= m["fraction"] <= 1)
            if "message" in m:
                self.assertLessEqual(len(m["message"].encode()), 200)
        if prog[0].get("message") == "half way":
            self.assertEqual(prog[0]["fraction"], 0.5)

    def test_progress_while_the_daemon_reads_slowly_is_coalesced(self) -> None:
        # 3,000 reports of ~200 bytes (~600 KB) while descriptor 4 is not read: the pipe
        # fills, the handler never blocks, only each task's latest report waits, and the
        # answers come after their reports, in order.
        p = Pool("handlers", inflight=2, read=False)
        self.addCleanup(p.close)
        p.task("f-1", "flood", {"n": 3000})
        p.task("f-2", "echo", "after")
        time.sleep(1.0)  # both answered by now, into a full pipe
        p.start_reading()
        self.assertEqual(p.hello()["t"], "hello")
        msgs = []
        while len([m for m in msgs if m["t"] != "progress"]) < 2:
            msgs.append(p.recv())
        prog = [m for m in msgs if m["t"] == "progress"]
        self.assertLess(len(prog), 3000)  # coalesced
        self.assertTrue(all(m["id"] == "f-1" for m in prog))
        self.assertEqual(prog[-1]["fraction"], 1.0)
        self.assertTrue(prog[-1]["message"].startswith("step 3000 "))
        ok = next(i for i, m in enumerate(msgs) if m.get("id") == "f-1" and m["t"] == "ok")
        self.assertGreater(ok, max(i for i, m in enumerate(msgs) if m["t"] == "progress"))
        self.assertEqual(msgs[ok]["result"], "flooded")
        self.assertIn({"t": "ok", "id": "f-2", "result": "after"}, msgs)
        p.end()
        self.assertEqual(p.wait(), 0)


class TestCancel(ServeTestCase):
    def test_cancel_sets_the_flag(self) -> None:
        p = self.pool()
        p.hello()
        p.task("c-1", "wait_cancel")
        time.sleep(0.2)
        p.send({"t": "cancel", "id": "c-1", "reason": "cancelled"})
        a = p.answer()
        self.assertEqual(
            a, {"t": "ok", "id": "c-1", "result": {"cancelled": True, "is_cancelled": True, "reason": "cancelled"}}
        )

    def test_cancel_stops_an_async_handler(self) -> None:
        p = self.pool()
        p.hello()
        p.task("c-2", "await_cancel")
        time.sleep(0.2)
        start = time.monotonic()
        p.send({"t": "cancel", "id": "c-2", "reason": "timeout"})
        a = p.answer()
        self.assertLess(time.monotonic() - start, 2)
        self.assertEqual(a["t"], "fail")
        self.assertTrue(a["retryable"])  # reason timeout
        self.assertTrue(a["error"].startswith("CancelledError: the task was cancelled (timeout)"), a["error"])

    def test_cancel_stops_the_awaitable_a_plain_handler_returned(self) -> None:
        p = self.pool()
        p.hello()
        p.task("c-5", "returns_awaitable")
        time.sleep(0.3)
        start = time.monotonic()
        p.send({"t": "cancel", "id": "c-5", "reason": "cancelled"})
        a = p.answer()
        self.assertLess(time.monotonic() - start, 2)
        self.assertEqual((a["t"], a["retryable"]), ("fail", False))
        self.assertTrue(a["error"].startswith("CancelledError: the task was cancelled (cancelled)"), a["error"])

    def test_a_cancel_with_a_bad_id_is_a_protocol_error(self) -> None:
        p = self.pool()
        p.hello()
        p.send({"t": "cancel", "id": ["not", "a", "string"]})
        self.assertEqual(p.wait(), 70)
        self.assertIn(b"cannot take a message", p.err)

    def test_cancel_of_a_waiting_task(self) -> None:
        p = self.pool(inflight=1)
        p.hello()
        p.task("c-3", "ssleep", {"s": 0.5})
        p.task("c-4", "echo", 1)
        p.send({"t": "cancel", "id": "c-4", "reason": "cancelled"})
        a = p.answer()
        self.assertEqual((a["id"], a["t"], a["retryable"]), ("c-4", "fail", False))
        self.assertEqual(p.answer()["id"], "c-3")
        # the id may come again once answered
        p.task("c-4", "echo", 2)
        self.assertEqual(p.answer(), {"t": "ok", "id": "c-4", "result": 2})


class TestEnd(ServeTestCase):
    def test_end_of_file_drains_then_exits_0(self) -> None:
        p = self.pool(inflight=3)
        p.hello()
        p.task("e-1", "asleep", {"s": 0.4})
        p.task("e-2", "ssleep", {"s": 0.4})
        p.task("e-3", "ssleep", {"s": 0.2})
        p.end()
        ids = {p.answer()["id"] for _ in range(3)}
        self.assertEqual(ids, {"e-1", "e-2", "e-3"})
        self.assertEqual(p.wait(), 0)
        self.assertIsNone(p.recv_raw())  # descriptor 4 closed, nothing more

    def test_children_of_handlers_do_not_hold_the_pipes(self) -> None:
        p = self.pool()
        p.hello()
        p.task("k-1", "spawn")
        self.assertEqual(p.answer()["t"], "ok")
        start = time.monotonic()
        p.end()
        self.assertIsNone(p.recv_raw(timeout=4))  # descriptor 4 ends with the process
        self.assertLess(time.monotonic() - start, 3)
        self.assertEqual(p.wait(), 0)

    def protocol_error(self, data: bytes, words: bytes) -> None:
        p = self.pool()
        p.hello()
        p.send_raw(data)
        self.assertEqual(p.wait(), 70)
        self.assertIn(b"dtq: protocol error", p.err)
        self.assertIn(words, p.err)

    def test_malformed_line_exits_70(self) -> None:
        self.protocol_error(b"{not json\n", b"not JSON")

    def test_not_an_object_exits_70(self) -> None:
        self.protocol_error(b"[1,2]\n", b"not a JSON object")

    def test_task_without_id_exits_70(self) -> None:
        self.protocol_error(b'{"t":"task","type":"echo"}\n', b"without an id")

    def test_id_sent_twice_exits_70(self) -> None:
        line = b'{"t":"task","id":"x","type":"ssleep","payload":{"s":1}}\n'
        self.protocol_error(line + line, b"task x sent while it is held")

    def test_end_inside_a_line_exits_70(self) -> None:
        p = self.pool()
        p.hello()
        p.send_raw(b'{"t":"task"')
        p.end()
        self.assertEqual(p.wait(), 70)
        self.assertIn(b"ended inside a line", p.err)


if __name__ == "__main__":
    unittest.main()
