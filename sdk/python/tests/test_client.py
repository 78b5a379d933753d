"""dtq.Client against a real redis-server (a unix socket in a temporary directory) with
the dtq Functions installed by dtqctl.

Needs redis-py and: DTQCTL (the dtqctl binary; default: build/dtqctl of the source tree)
and REDIS_SERVER (default: redis-server on PATH). Skipped when either is missing, unless
DTQ_TEST_REQUIRE_REDIS=1 (as ctest sets), when that is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DTQCTL = os.environ.get("DTQCTL") or os.path.join(ROOT, "build", "dtqctl")
REDIS_SERVER = os.environ.get("REDIS_SERVER") or shutil.which("redis-server") or ""
REQUIRE = os.environ.get("DTQ_TEST_REQUIRE_REDIS") == "1"
POLICY = '{"d":[5,30000],"t":{}}'


def _missing() -> str | None:
    try:
        import redis  # noqa: F401
    except ImportError:
        return "redis-py is not installed (apt-get install python3-redis)"
    if not os.access(DTQCTL, os.X_OK):
        return f"no dtqctl at {DTQCTL} (set DTQCTL)"
    if not REDIS_SERVER or not os.access(REDIS_SERVER, os.X_OK):
        return "no redis-server (set REDIS_SERVER)"
    return None


class RedisTestCase(unittest.TestCase):
    """One redis-server for the class, flushed and given the Functions before each test."""

    tmp: tempfile.TemporaryDirectory[str]
    server: subprocess.Popen[bytes]
    sock: str

    @classmethod
    def setUpClass(cls) -> None:
        why = _missing()
        if why:
            if REQUIRE:
                raise RuntimeError(why)
            raise unittest.SkipTest(why)
        cls.tmp = tempfile.TemporaryDirectory(prefix="dtq-pysdk-")
        cls.sock = os.path.join(cls.tmp.name, "redis.sock")
        cls.server = subprocess.Popen(
            [REDIS_SERVER, "--port", "0", "--unixsocket", cls.sock, "--save", "",
             "--appendonly", "no", "--dir", cls.tmp.name],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        # Until it answers: the socket file exists from bind(), a moment before listen().
        deadline = time.monotonic() + 10
        while not cls._answers():
            if time.monotonic() > deadline or cls.server.poll() is not None:
                cls.tearDownClass()
                raise RuntimeError("redis-server did not start")
            time.sleep(0.02)

    @classmethod
    def _answers(cls) -> bool:
        import redis

        try:
            with redis.Redis(unix_socket_path=cls.sock) as r:
                return bool(r.ping())
        except redis.exceptions.ConnectionError:
            return False

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.terminate()
        cls.server.wait(10)
        cls.tmp.cleanup()

    def setUp(self) -> None:
        import dtq

        self.url = f"unix://{self.sock}"
        self.client = dtq.Client(self.url)
        self.addCleanup(self.client.close)
        self.r = self.client.redis
        self.r.flushall()
        out = subprocess.run([DTQCTL, "-u", self.url, "functions", "install"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)

    # ---- a worker's calls, as dtq-worker makes them (tests/support/harness.c)

    def fetch(self, queue: str, count: int = 10) -> list[tuple[str, int, str, str]]:
        """Claims up to count tasks of queue as worker w1: (task_id, attempt, stream,
        entry_id) each."""
        keys = [f"dtq:queue:{queue}:paused"] + [f"dtq:stream:{queue}:p{b}" for b in range(9, -1, -1)]
        out: list[tuple[str, int, str, str]] = []
        for _ in range(3):  # -1: a group was created, fetch again
            rep = self.r.execute_command("FCALL", "dtq_fetch", len(keys), *keys, "w1", count, POLICY, queue)
            for c in rep[0]:
                out.append((c[2].decode(), int(c[6]), c[0].decode(), c[1].decode()))
            full = rep[4]
            i = 0
            while i < len(full):
                stream, m = full[i].decode(), int(full[i + 2])
                i += 3
                for _ in range(m):
                    entry, tid, attempt = full[i].decode(), full[i + 1].decode(), int(full[i + 4])
                    out.append((tid, attempt, stream, entry))
                    i += 7
            if rep[2] != -1:
                break
        return out

    def finish(self, claim: tuple[str, int, str, str], outcome: str, result: Any = None,
               error: str = "", error_class: str = "", delay_ms: int = 0) -> str:
        tid, attempt, stream, entry = claim
        body = "" if result is None else json.dumps(result)
        state = "none" if result is None else "full"
        rep = self.r.execute_command("FCALL", "dtq_finish", 0, "w1", 1, tid, attempt, outcome,
                                     stream, entry, body, state, error, error_class, delay_ms, 0)
        return rep[0].decode()


class TestEnqueue(RedisTestCase):
    def test_enqueue_returns_the_id(self) -> None:
        tid = self.client.enqueue("mail", "send_email", {"to": "a@example.com"})
        self.assertRegex(tid, r"^\d+-\d+$")
        h = {k.decode(): v.decode() for k, v in self.r.hgetall(f"dtq:task:{tid}").items()}
        self.assertEqual(h["status"], "queued")
        self.assertEqual(h["queue"], "mail")
        self.assertEqual(h["task_type"], "send_email")
        self.assertEqual(json.loads(h["payload"]), {"to": "a@example.com"})
        self.assertEqual(self.r.xlen("dtq:stream:mail:p5"), 1)
        self.assertEqual(self.client.status(tid), "queued")
        self.assertIsNone(self.client.status("no-such-task"))

    def test_options_are_passed(self) -> None:
        tid = self.client.enqueue(
            "mail", "send_email", [1, "é"], priority=9, max_attempts=3, timeout_ms=1500,
            ttl_seconds=60, task_id="my-id.1", limit_key="customer-7",
        )
        self.assertEqual(tid, "my-id.1")
        h = {k.decode(): v.decode() for k, v in self.r.hgetall("dtq:task:my-id.1").items()}
        self.assertEqual(h["priority"], "9")
        self.assertEqual(h["own_max_attempts"], "3")
        self.assertEqual(h["own_timeout_ms"], "1500")
        self.assertEqual(h["ttl_seconds"], "60")
        self.assertEqual(h["limit_key"], "customer-7")
        self.assertEqual(json.loads(h["payload"]), [1, "é"])
        self.assertEqual(self.r.xlen("dtq:stream:mail:p9"), 1)
        delayed = self.client.enqueue("mail", "send_email", None, delay_ms=60000)
        self.assertEqual(self.client.status(delayed), "pending")
        self.assertIsNotNone(self.r.zscore("dtq:retry:schedule", delayed))

    def test_idempotency_key(self) -> None:
        import dtq

        tid = self.client.enqueue("mail", "send_email", 1, idempotency_key="k1")
        with self.assertRaises(dtq.IdempotencyInProgressError) as cm:
            self.client.enqueue("mail", "send_email", 1, idempotency_key="k1")
        self.assertEqual(cm.exception.task_id, tid)
        self.assertIsInstance(cm.exception, dtq.RetryableError)
        [claim] = self.fetch("mail")
        self.assertEqual(self.finish(claim, "succeeded", {"ok": 1}), "succeeded")
        self.assertEqual(self.client.enqueue("mail", "send_email", 1, idempotency_key="k1"), tid)

    def test_unique(self) -> None:
        tid = self.client.enqueue("mail", "send_email", 1, unique_for=60)
        self.assertEqual(self.client.enqueue("mail", "send_email", 1, unique_for=60), tid)
        first = self.client.enqueue(
            "mail", "digest", {"n": 1}, unique_for=30, unique_key="u7", unique_mode="debounce"
        )
        again = self.client.enqueue(
            "mail", "digest", {"n": 2}, unique_for=30, unique_key="u7", unique_mode="debounce"
        )
        self.assertEqual(again, first)
        self.assertEqual(self.client.status(first), "pending")
        self.assertEqual(json.loads(self.r.hget(f"dtq:task:{first}", "payload")), {"n": 2})
        self.assertEqual(self.r.get("dtq:unique:mail:u7").decode(), f"debounce:{first}")
        started = self.client.enqueue(
            "other", "t", 1, unique_for=60, unique_key="s", unique_mode="until_started"
        )
        [(claimed, _, _, _)] = self.fetch("other")
        self.assertEqual(claimed, started)  # its start gave the key back
        self.assertNotEqual(
            self.client.enqueue(
                "other", "t", 1, unique_for=60, unique_key="s", unique_mode="until_started"
            ),
            started,
        )

    def test_dependencies_batches_chains(self) -> None:
        import dtq

        parent = self.client.enqueue("flow", "step", {"n": 1})
        child = self.client.enqueue("flow", "step", {"n": 2}, after=[parent], on_failure="run")
        self.assertEqual(self.client.status(child), "waiting")
        self.assertEqual(self.r.hget(f"dtq:task:{child}", "on_failure"), b"run")
        b = self.client.batch("flow", [("page", {"p": 1}), ("page", {"p": 2})], batch_id="bk",
                              on_complete="bind", on_complete_payload={"book": 7}, open=True,
                              priority=9)
        self.assertIsInstance(b, dtq.Batch)
        self.assertEqual(b.id, "bk")
        self.assertEqual(len(b.task_ids), 2)
        self.assertEqual(self.r.hget(f"dtq:task:{b.task_ids[0]}", "priority"), b"9")
        more = self.client.batch_add("bk", "flow", [("page", {"p": 3})])
        joined = self.client.enqueue("flow", "page", {"p": 4}, batch="bk")
        self.assertEqual(self.r.hget(f"dtq:task:{joined}", "batch"), b"bk")
        self.assertEqual(self.client.batch_close("bk"), "closed")
        shown = self.client.batch_show("bk")
        self.assertEqual((shown["total"], shown["pending"], shown["state"]), (4, 4, "closed"))
        self.assertEqual(len(more), 1)
        links = self.client.chain("chained", [("a", 1), ("b", 2), ("c", 3)], max_attempts=2)
        self.assertEqual([self.client.status(t) for t in links], ["queued", "waiting", "waiting"])
        self.assertEqual(self.r.hget(f"dtq:task:{links[2]}", "after"), links[1].encode())
        with self.assertRaises(dtq.NotFoundError):
            self.client.batch_show("nosuch")
        one = self.client.batch("solo", [("x", 1)], batch_id="done1", on_success="after_all")
        [claim] = self.fetch("solo")
        self.assertEqual(claim[0], one.task_ids[0])
        self.assertEqual(self.finish(claim, "succeeded", {"ok": True}), "succeeded")
        shown = self.client.batch_show("done1")
        self.assertEqual((shown["succeeded"], shown["pending"]), (1, 0))
        callback = shown["on_success"]["task_id"]
        self.assertEqual(json.loads(self.r.hget(f"dtq:task:{callback}", "payload"))["batch"]["succeeded"], 1)
        with self.assertRaises(dtq.WrongStateError):
            self.client.batch_add("done1", "solo", [("x", 2)])
        with self.assertRaises(TypeError):
            self.client.chain("q", [("a", 1)], idempotency_key="k")

    def test_error_replies_become_exceptions(self) -> None:
        import dtq

        with self.assertRaises(dtq.InvalidArgumentError) as cm:
            self.client.enqueue("bad queue!", "t", 1)
        self.assertEqual(cm.exception.code, "INVALID_ARGUMENT")
        self.assertIn("queue name", str(cm.exception))
        with self.assertRaises(dtq.InvalidArgumentError):
            self.client.enqueue("q", "t", 1, priority=10)
        self.client.enqueue("q", "t", 1, task_id="dup")
        with self.assertRaises(dtq.IdExistsError):
            self.client.enqueue("q", "t", 1, task_id="dup")
        self.r.hset("dtq:config", mapping={"max_payload_bytes": 1024, "max_queue_depth": 2})
        with self.assertRaises(dtq.PayloadTooLargeError) as big:
            self.client.enqueue("q", "t", "x" * 2000)
        self.assertIn("max_payload_bytes is 1024", str(big.exception))
        self.client.enqueue("q", "t", 2)
        with self.assertRaises(dtq.QueueFullError) as full:
            self.client.enqueue("q", "t", 3)
        self.assertIsInstance(full.exception, dtq.DtqError)
        self.assertIsInstance(full.exception, dtq.RetryableError)
        with self.assertRaises(TypeError):
            self.client.enqueue("q", "t", {1, 2})
        other = dtq.Client(self.url, namespace="other")
        self.addCleanup(other.close)
        with self.assertRaises(dtq.FunctionsNotLoadedError) as nf:
            other.enqueue("q", "t", 1)
        self.assertIn("dtqctl -n other functions install", str(nf.exception))


class TestResult(RedisTestCase):
    def test_result_of_a_succeeded_task(self) -> None:
        tid = self.client.enqueue("q", "t", 1)
        got: list[Any] = []
        waiter = threading.Thread(target=lambda: got.append(self.client.result(tid, timeout=20)))
        waiter.start()
        time.sleep(0.3)
        self.assertTrue(waiter.is_alive())
        [claim] = self.fetch("q")
        self.assertEqual(self.finish(claim, "succeeded", {"sent": True, "n": [1, 2]}), "succeeded")
        waiter.join(10)
        self.assertEqual(got, [{"sent": True, "n": [1, 2]}])
        self.assertEqual(self.client.result(tid), {"sent": True, "n": [1, 2]})

    def test_null_result(self) -> None:
        tid = self.client.enqueue("q", "t", 1)
        [claim] = self.fetch("q")
        self.finish(claim, "succeeded", None)
        self.assertIsNone(self.client.result(tid, timeout=5))

    def test_dead_lettered(self) -> None:
        import dtq

        tid = self.client.enqueue("q", "t", 1)
        [claim] = self.fetch("q")
        self.assertEqual(
            self.finish(claim, "dead_letter", error="ValueError: bad input\n  File ...",
                        error_class="permanent"),
            "dead_lettered",
        )
        with self.assertRaises(dtq.TaskDeadLetteredError) as cm:
            self.client.result(tid, timeout=5)
        e = cm.exception
        self.assertEqual((e.task_id, e.status, e.last_error_class), (tid, "dead_lettered", "permanent"))
        self.assertTrue(e.last_error.startswith("ValueError: bad input"))
        self.assertIn("ValueError: bad input", str(e))
        self.assertNotIn("File", str(e))

    def test_failed_with_the_dead_letter_queue_off(self) -> None:
        import dtq

        self.r.hset("dtq:config", "dlq_enabled", 0)
        tid = self.client.enqueue("q", "t", 1)
        [claim] = self.fetch("q")
        self.assertEqual(self.finish(claim, "dead_letter", error="E: x", error_class="permanent"), "failed")
        with self.assertRaises(dtq.TaskFailedError):
            self.client.result(tid, timeout=5)

    def test_cancelled(self) -> None:
        import dtq

        tid = self.client.enqueue("q", "t", 1)
        self.assertEqual(self.r.execute_command("FCALL", "dtq_cancel", 0, tid), b"cancelled")
        with self.assertRaises(dtq.TaskCancelledError) as cm:
            self.client.result(tid, timeout=5)
        self.assertIsInstance(cm.exception, dtq.TaskError)

    def test_retry_then_success(self) -> None:
        tid = self.client.enqueue("q", "t", 1)
        [claim] = self.fetch("q")
        self.assertEqual(self.finish(claim, "retry", error="TimeoutError", error_class="retryable",
                                     delay_ms=1000), "retrying")
        self.assertEqual(self.client.status(tid), "retrying")

    def test_timeout(self) -> None:
        import dtq

        tid = self.client.enqueue("q", "t", 1)
        start = time.monotonic()
        with self.assertRaises(dtq.ResultTimeoutError) as cm:
            self.client.result(tid, timeout=0.3)
        self.assertLess(time.monotonic() - start, 2)
        self.assertIsInstance(cm.exception, TimeoutError)
        self.assertEqual(cm.exception.status, "queued")

    def test_unknown_task(self) -> None:
        import dtq

        with self.assertRaises(dtq.NotFoundError):
            self.client.result("no-such-task", timeout=1)


if __name__ == "__main__":
    unittest.main()
