/* it_pool_protocol.c: the daemon's side of the pool protocol (sdk/PROTOCOL.md) against
 * processes that break it on purpose. Each pool process here is a small Python program
 * speaking the protocol by hand (no SDK): the rules are the daemon's to keep whatever a
 * process writes. A broken process costs its tasks one retryable attempt (handler_crashed)
 * or, when it never starts, nothing (the tasks wait in the schedule); the daemon never
 * stops serving. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "util.h"

static th_redis R;
static redisContext *C;

#define FAST                                                                                       \
    "[retry]\nbase_delay = 0.1\nmax_delay = 0.2\njitter = 0\n"                                     \
    "[scheduler]\ninterval_ms = 100\nleader_lock_ms = 2000\n"

/* The process: a hello (HELLO, a Python expression: the dict to send, or None for none),
 * then per task line ON_TASK (Python statements with `m`, the task, and `send(dict)`). */
static const char *const program = "import json, os, sys, time\n"
                                   "out = os.fdopen(4, 'w', buffering=1)\n"
                                   "def send(d):\n"
                                   "    out.write(json.dumps(d) + '\\n')\n"
                                   "    out.flush()\n"
                                   "hello = eval(os.environ['HELLO'])\n"
                                   "if hello is not None:\n"
                                   "    send(hello)\n"
                                   "else:\n"
                                   "    time.sleep(60)\n"
                                   "for line in os.fdopen(3):\n"
                                   "    m = json.loads(line)\n"
                                   "    if m['t'] != 'task':\n"
                                   "        continue\n"
                                   "    exec(os.environ['ON_TASK'])\n";

static void setup(void) {
    th_fixture_start(&R, &C, TH_LIBRARY, NULL);
}

static void teardown(void) {
    th_fixture_stop(&R, &C);
}

static const char *hello_ok = "{'t': 'hello', 'protocol': 1, 'types': ['t1'], 'inflight': 4}";

/* A daemon with one pool `p` running the program with HELLO and ON_TASK (in the section's
 * env, which splits on blanks: so they are given through files the program reads). */
static void start(th_daemon *d, const char *id, int port, const char *hello, const char *on_task,
                  const char *pool_extra) {
    char prog[512], hello_path[512], task_path[512], ini[4096], http[64] = "";
    FILE *f;
    th_path(&R, "proto.py", prog, sizeof(prog));
    f = fopen(prog, "w");
    ck_assert_ptr_nonnull(f);
    /* the env values come from files: a section's env cannot hold blanks */
    fprintf(f,
            "import os\n"
            "os.environ['HELLO'] = open(os.environ['HELLO_FILE']).read()\n"
            "os.environ['ON_TASK'] = open(os.environ['ON_TASK_FILE']).read()\n%s",
            program);
    fclose(f);
    th_path(&R, "hello.txt", hello_path, sizeof(hello_path));
    f = fopen(hello_path, "w");
    fputs(hello, f);
    fclose(f);
    th_path(&R, "on_task.txt", task_path, sizeof(task_path));
    f = fopen(task_path, "w");
    fputs(on_task, f);
    fclose(f);
    if (port > 0) snprintf(http, sizeof(http), "[http]\nlisten = 127.0.0.1:%d\n", port);
    snprintf(ini, sizeof(ini),
             "[worker]\nworker_id = %s\nheartbeat_interval_s = 1\nconcurrency = 4\n%s" FAST
             "[pool:p]\ncommand = /usr/bin/python3 %s\nprocesses = 1\ninflight = 4\n"
             "start_timeout_ms = 1000\nkill_grace_ms = 300\ntypes = t1\n"
             "env = HELLO_FILE=%s ON_TASK_FILE=%s\n%s",
             id, http, prog, hello_path, task_path, pool_extra ? pool_extra : "");
    th_daemon_start(d, &R, ini);
    th_daemon_wait_ready(C, id, 10000);
}

/* GET path on 127.0.0.1:port: "<status code> <body>" (caller frees). */
static char *http_get(int port, const char *path) {
    struct sockaddr_in sa = {0};
    char req[256], *buf = calloc(1, 1 << 20), *out, *body;
    size_t got = 0;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), code = 0;
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n", path);
    ck_assert_int_eq(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        ssize_t n;
        ck_assert_msg(poll(&p, 1, 5000) == 1, "no answer from %s", path);
        n = recv(fd, buf + got, (1 << 20) - 1 - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fd);
    sscanf(buf, "HTTP/1.1 %d", &code);
    body = strstr(buf, "\r\n\r\n");
    out = dtq_xasprintf("%d %s", code, body ? body + 4 : "");
    free(buf);
    return out;
}

/* The task's last_error_class, caller-owned ("" when absent). */
static char *class_of(const char *id) {
    char *v = th_task_field(C, id, "last_error_class");
    return v ? v : strdup("");
}

/* Every protocol error costs the tasks the process held one retryable attempt
 * (handler_crashed), the process is replaced, and the next process's answers count. The
 * program answers its first task with `bad` and every later one properly. */
static void expect_protocol_error(const char *id, const char *bad, const char *log_says) {
    th_daemon d;
    char on_task[1024], *cls;
    snprintf(on_task, sizeof(on_task),
             "marker = os.environ['HELLO_FILE'] + '.done'\n"
             "if not os.path.exists(marker):\n"
             "    open(marker, 'w').close()\n"
             "    %s\n"
             "else:\n"
             "    send({'t': 'ok', 'id': m['id'], 'result': {'pid': os.getpid()}})\n",
             bad);
    start(&d, id, 0, hello_ok, on_task, NULL);
    th_enqueue(C, "default", "pe1", "t1", "{}", NULL);
    th_expect_status(C, "pe1", "succeeded", 15000);
    th_assert_field(C, "pe1", "attempt", "2");
    cls = class_of("pe1");
    ck_assert_str_eq(cls, "handler_crashed");
    free(cls);
    ck_assert_msg(th_wait_log(d.log, log_says, 1, 5000), "the log does not say '%s'", log_says);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}

START_TEST(test_not_json) {
    expect_protocol_error("w-nj", "out.write('this is not json\\n'); out.flush()",
                          "is not a JSON object");
}
END_TEST

START_TEST(test_answer_for_a_task_not_held) {
    expect_protocol_error("w-nh", "send({'t': 'ok', 'id': 'no-such-task', 'result': 1})",
                          "answered a task it does not hold (no-such-task)");
}
END_TEST

START_TEST(test_second_hello) {
    expect_protocol_error("w-h2", "send({'t': 'hello', 'protocol': 1, 'types': []})",
                          "sent a second hello");
}
END_TEST

START_TEST(test_line_past_16_mib) {
    expect_protocol_error("w-big", "out.write('x' * (17 * 1024 * 1024)); out.flush()",
                          "longer than 16 MiB");
}
END_TEST

START_TEST(test_exit_mid_task) {
    expect_protocol_error("w-exit", "os._exit(7)", "exited with status 7");
}
END_TEST

/* A hello of another protocol, or none within start_timeout_ms: the process never takes a
 * task; the pool's tasks wait in the schedule at attempt 1 (class pool_unavailable), never
 * dead-lettered; /readyz says why and the restarts back off. */
static void expect_never_starts(const char *id, const char *hello, const char *why) {
    th_daemon d;
    int port = th_free_port();
    char *r, *cls, *attempt;
    start(&d, id, port, hello, "pass", NULL);
    th_enqueue(C, "default", "ns1", "t1", "{}", "max_attempts 1");
    ck_assert(
        th_wait_until_cmd_str(C, "HGET dtq:task:ns1 last_error_class", "pool_unavailable", 15000));
    sleep(2); /* deferred again and again: still attempt 1, never dead-lettered */
    attempt = th_task_field(C, "ns1", "attempt");
    ck_assert_str_eq(attempt, "1");
    free(attempt);
    cls = th_task_field(C, "ns1", "status");
    ck_assert_msg(!strcmp(cls, "pending") || !strcmp(cls, "queued") || !strcmp(cls, "running"),
                  "status %s", cls);
    free(cls);
    r = http_get(port, "/readyz");
    ck_assert_msg(!strncmp(r, "503 not ready: pool p has no ready process", 42), "%s", r);
    ck_assert_msg(strstr(r, why) != NULL, "'%s' not in %s", why, r);
    free(r);
    r = http_get(port, "/metrics");
    {
        /* back-off: 0, 250, 500, 1000, 2000 ms... far fewer starts than a tight loop's */
        const char *s = strstr(r, "dtq_pool_restarts_total{pool=\"p\",reason=\"start_failed\"} ");
        long n;
        ck_assert_ptr_nonnull(s);
        n = strtol(s + strlen("dtq_pool_restarts_total{pool=\"p\",reason=\"start_failed\"} "), NULL,
                   10);
        ck_assert_msg(n >= 2 && n <= 12, "start_failed %ld", n);
    }
    free(r);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}

START_TEST(test_hello_of_another_protocol) {
    expect_never_starts("w-p2", "{'t': 'hello', 'protocol': 2, 'types': ['t1']}",
                        "speaks protocol another, not 1");
}
END_TEST

START_TEST(test_no_hello_in_time) {
    expect_never_starts("w-nohello", "None", "sent no hello within 1000 ms");
}
END_TEST

/* What reaches the process: a pretty-printed payload on one line, the task's fields, the
 * environment (the pool's variables, no Redis URL), descriptors 0-4 only, no more tasks at
 * once than the hello's inflight; fail.class invalid_payload is permanent. */
START_TEST(test_what_the_process_gets) {
    th_daemon d;
    char *res, *cls;
    const char *on_task =
        "import fcntl\n"
        "fl = fcntl.fcntl(3, fcntl.F_GETFL)\n"
        "if m['type'] == 'inv':\n"
        "    send({'t': 'fail', 'id': m['id'], 'retryable': True, 'class': 'invalid_payload',\n"
        "          'error': 'ValidationError: to: field required'})\n"
        "else:\n"
        "    send({'t': 'progress', 'id': m['id'], 'fraction': 0.5, 'message': 'half way'})\n"
        "    time.sleep(0.3)\n"
        "    send({'t': 'ok', 'id': m['id'], 'result': {\n"
        "        'payload': m['payload'], 'queue': m['queue'], 'attempt': m['attempt'],\n"
        "        'max_attempts': m['max_attempts'], 'late': m['deadline_ms'] > time.time() * "
        "1000,\n"
        "        'pool': os.environ.get('DTQ_POOL'), 'inflight': os.environ.get('DTQ_INFLIGHT'),\n"
        "        'proto': os.environ.get('DTQ_PROTOCOL'),\n"
        "        'dtq_vars': sorted(k for k in os.environ if k.startswith('DTQ_')),\n"
        "        'fds': sorted(int(x) for x in os.listdir('/proc/self/fd'))}})\n";
    start(&d, "w-gets", 0, "{'t': 'hello', 'protocol': 1, 'types': ['t1', 'inv'], 'inflight': 1}",
          on_task, NULL);
    th_enqueue(C, "default", "g1", "t1", "{\n  \"a\": [1,\n 2]\n}", "max_attempts 3");
    th_enqueue(C, "default", "g2", "t1", "{}", NULL);
    th_enqueue(C, "default", "g3", "inv", "{}", NULL);
    th_expect_status(C, "g1", "succeeded", 10000);
    th_expect_status(C, "g2", "succeeded", 10000);
    th_expect_status(C, "g3", "dead_lettered", 10000);
    cls = class_of("g3");
    ck_assert_str_eq(cls, "invalid_payload");
    free(cls);
    res = th_task_field(C, "g1", "payload"); /* stored as given */
    ck_assert_ptr_nonnull(strchr(res, '\n'));
    free(res);
    {
        redisReply *r = th_cmd(C, "GET dtq:result:g1");
        cJSON *o = cJSON_Parse(r->str), *fds;
        char *payload;
        ck_assert_ptr_nonnull(o);
        payload = cJSON_PrintUnformatted(cJSON_GetObjectItem(o, "payload"));
        ck_assert_str_eq(payload, "{\"a\":[1,2]}");
        free(payload);
        ck_assert_str_eq(cJSON_GetObjectItem(o, "queue")->valuestring, "default");
        ck_assert_int_eq(cJSON_GetObjectItem(o, "attempt")->valueint, 1);
        ck_assert_int_eq(cJSON_GetObjectItem(o, "max_attempts")->valueint, 3);
        ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(o, "late")));
        ck_assert_str_eq(cJSON_GetObjectItem(o, "pool")->valuestring, "p");
        ck_assert_str_eq(cJSON_GetObjectItem(o, "inflight")->valuestring, "4");
        ck_assert_str_eq(cJSON_GetObjectItem(o, "proto")->valuestring, "1");
        /* the daemon's own DTQ_ settings (a Redis URL, a password) never reach it */
        payload = cJSON_PrintUnformatted(cJSON_GetObjectItem(o, "dtq_vars"));
        ck_assert_str_eq(payload, "[\"DTQ_INFLIGHT\",\"DTQ_POOL\",\"DTQ_PROTOCOL\","
                                  "\"DTQ_REPLIES_FD\",\"DTQ_TASKS_FD\"]");
        free(payload);
        fds = cJSON_GetObjectItem(o, "fds");
        /* 0-4 and the one os.listdir opens */
        ck_assert_int_eq(cJSON_GetArraySize(fds), 6);
        for (int i = 0; i < 5; i++) ck_assert_int_eq(cJSON_GetArrayItem(fds, i)->valueint, i);
        cJSON_Delete(o);
        freeReplyObject(r);
    }
    /* the progress report: kept in the task hash; a report for an attempt that is not
     * running is refused (stale) */
    {
        char *prog = th_task_field(C, "g1", "progress");
        redisReply *r;
        ck_assert_ptr_nonnull(prog);
        ck_assert_msg(strstr(prog, "\"fraction\":0.5") && strstr(prog, "\"message\":\"half way\""),
                      "%s", prog);
        free(prog);
        r = th_cmd(C, "FCALL dtq_progress 0 w-gets g1 1 0.9 late");
        ck_assert_str_eq(r->str, "stale");
        freeReplyObject(r);
        r = th_cmd(C, "FCALL dtq_progress 0 w-gets g1 1 2 bad");
        ck_assert_int_eq(r->type, REDIS_REPLY_ERROR);
        freeReplyObject(r);
    }
    /* inflight 1 from the hello: g1 and g2 ran one after the other, never together */
    {
        char *s1 = th_task_field(C, "g1", "started_at"),
             *f1 = th_task_field(C, "g1", "finished_at");
        char *s2 = th_task_field(C, "g2", "started_at"),
             *f2 = th_task_field(C, "g2", "finished_at");
        long long a0 = atoll(s1), a1 = atoll(f1), b0 = atoll(s2), b1 = atoll(f2);
        /* started_at is the claim; the second waited in the pool's backlog */
        ck_assert_msg(b1 >= a1 + 250 || a1 >= b1 + 250, "g1 %lld-%lld g2 %lld-%lld", a0, a1, b0,
                      b1);
        free(s1);
        free(f1);
        free(s2);
        free(f2);
    }
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* A timed-out attempt whose process does not answer the cancel keeps its slot until the
 * kill; the retry (sooner than kill_grace_ms) never goes to a process still holding that
 * task id: it waits, and the process that runs it has not seen the id. */
START_TEST(test_no_id_twice_to_one_process) {
    th_daemon d;
    redisReply *r;
    const char *on_task = "seen = globals().setdefault('seen', set())\n"
                          "dup = m['id'] in seen\n"
                          "seen.add(m['id'])\n"
                          "if m['attempt'] > 1:\n"
                          "    send({'t': 'ok', 'id': m['id'], 'result': {'dup': dup}})\n";
    start(&d, "w-dup", 0, hello_ok, on_task, "kill_grace_ms = 1500\n");
    /* attempts enough to outlast the kill and a slow start of the replacement */
    th_enqueue(C, "default", "d1", "t1", "{}", "timeout_ms 300 max_attempts 20");
    th_expect_status(C, "d1", "succeeded", 15000);
    {
        /* the retries that came before the kill timed out waiting: none reached it */
        char *attempt = th_task_field(C, "d1", "attempt");
        ck_assert_int_ge(atoi(attempt), 2);
        free(attempt);
    }
    r = th_cmd(C, "GET dtq:result:d1");
    ck_assert_str_eq(r->str, "{\"dup\":false}");
    freeReplyObject(r);
    ck_assert(th_wait_log(d.log, "did not answer a cancelled task within 1500 ms", 1, 1000));
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* A task enqueued after others gets their results: a pool process in the task message's
 * parent_results, an exec program in DTQ_PARENT_RESULTS. */
START_TEST(test_parent_results_reach_handlers) {
    th_daemon d;
    redisReply *r;
    char script_path[512], extra[1024];
    FILE *f;
    const char *on_task = "send({'t': 'ok', 'id': m['id'],\n"
                          "      'result': {'n': m['payload'].get('n'),\n"
                          "                 'parents': m.get('parent_results')}})\n";
    th_path(&R, "env_results.sh", script_path, sizeof(script_path));
    f = fopen(script_path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("#!/bin/sh\nprintf '%s' \"${DTQ_PARENT_RESULTS:-null}\"\n", f);
    fclose(f);
    ck_assert_int_eq(chmod(script_path, 0755), 0);
    snprintf(extra, sizeof(extra), "[handler:envres]\nexec = %s\n", script_path);
    start(&d, "w-pr", 0, hello_ok, on_task, extra);
    th_enqueue(C, "default", "pa", "t1", "{\"n\":1}", NULL);
    th_enqueue(C, "default", "pb", "t1", "{\"n\":2}", NULL);
    th_enqueue(C, "default", "pc", "t1", "{\"n\":3}", "after pa,pb");
    th_enqueue(C, "default", "pd", "envres", "{}", "after pa");
    th_enqueue(C, "default", "pe", "envres", "{}", NULL); /* waited for nothing */
    th_expect_status(C, "pc", "succeeded", 10000);
    th_expect_status(C, "pd", "succeeded", 10000);
    th_expect_status(C, "pe", "succeeded", 10000);
    r = th_cmd(C, "GET dtq:result:pc");
    {
        cJSON *o = cJSON_Parse(r->str);
        char *p;
        ck_assert_ptr_nonnull(o);
        p = cJSON_PrintUnformatted(cJSON_GetObjectItem(o, "parents"));
        ck_assert_msg(
            !strcmp(p, "{\"pa\":{\"n\":1,\"parents\":null},\"pb\":{\"n\":2,\"parents\":null}}") ||
                !strcmp(p, "{\"pb\":{\"n\":2,\"parents\":null},\"pa\":{\"n\":1,\"parents\":null}}"),
            "%s", p);
        free(p);
        cJSON_Delete(o);
    }
    freeReplyObject(r);
    r = th_cmd(C, "GET dtq:result:pd");
    ck_assert_str_eq(r->str, "{\"pa\":{\"n\":1,\"parents\":null}}");
    freeReplyObject(r);
    r = th_cmd(C, "GET dtq:result:pe");
    ck_assert_int_eq(r->type, REDIS_REPLY_NIL); /* null: no variable, no result */
    freeReplyObject(r);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

static Suite *pool_protocol_suite(void) {
    Suite *s = suite_create("pool protocol");
    TCase *tc = tcase_create("protocol");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_not_json);
    tcase_add_test(tc, test_answer_for_a_task_not_held);
    tcase_add_test(tc, test_second_hello);
    tcase_add_test(tc, test_line_past_16_mib);
    tcase_add_test(tc, test_exit_mid_task);
    tcase_add_test(tc, test_hello_of_another_protocol);
    tcase_add_test(tc, test_no_hello_in_time);
    tcase_add_test(tc, test_what_the_process_gets);
    tcase_add_test(tc, test_no_id_twice_to_one_process);
    tcase_add_test(tc, test_parent_results_reach_handlers);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return th_run_suite(pool_protocol_suite());
}
