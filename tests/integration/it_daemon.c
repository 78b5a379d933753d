/* it_daemon.c: dtq-worker as a real process against a real redis-server: enqueue through
 * FCALL and raw XADD, priorities, dead letters, events, retries, delays, TTLs, timeouts,
 * cancellation, reload, drain on SIGTERM, recovery after SIGKILL and after a Redis restart. */
#include <cjson/cJSON.h>
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static th_redis R;
static redisContext *C;

#define HANDLERS                                                                                   \
    "[handler:echo]\nbuiltin = echo\n[handler:sleep]\nbuiltin = sleep\n"                           \
    "[handler:fail]\nbuiltin = fail\n[handler:flaky]\nbuiltin = flaky\n"                           \
    "[handler:noop]\nbuiltin = noop\n"
#define FAST_RETRY "[retry]\nbase_delay = 0.2\nmax_delay = 0.5\njitter = 0\n"
#define FAST_SCHED "[scheduler]\ninterval_ms = 100\nleader_lock_ms = 2000\n"

static void setup(void) {
    th_fixture_start(&R, &C, TH_PERSIST, NULL);
}

static void teardown(void) {
    th_fixture_stop(&R, &C);
}

static void start(th_daemon *d, const char *id, const char *extra) {
    char ini[8192];
    snprintf(ini, sizeof(ini),
             "[worker]\nworker_id = %s\nheartbeat_interval_s = 1\n"
             "visibility_timeout_s = 3\ndrain_timeout_s = 5\n%s\n%s",
             id, extra ? extra : "", HANDLERS);
    th_daemon_start(d, &R, ini);
    th_daemon_wait_ready(C, id, 10000);
}

/* Events of one task from the events stream, as "TYPE:attempt" joined by spaces. */
static char *event_trail(const char *id) {
    redisReply *r = th_cmd(C, "XRANGE dtq:stream:events - +");
    char *out = calloc(1, 8192);
    char needle[128];
    snprintf(needle, sizeof(needle), "\"task_id\":\"%s\"", id);
    for (size_t i = 0; i < r->elements; i++) {
        const char *ev = r->element[i]->element[1]->element[1]->str;
        const char *t, *a;
        if (!strstr(ev, needle)) continue;
        t = strstr(ev, "\"type\":\"") + 8;
        a = strstr(ev, "\"attempt\":") + 10;
        strncat(out, t, (size_t)(strchr(t, '"') - t));
        strcat(out, ":");
        strncat(out, a, strspn(a, "0123456789"));
        strcat(out, " ");
    }
    freeReplyObject(r);
    return out;
}

static int count_in(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

/* ----------------------------------------------------------------- basics */

START_TEST(test_fcall_and_raw_xadd_succeed) {
    th_daemon d;
    redisReply *r;
    char id[128];
    start(&d, "w-basic", NULL);
    th_enqueue(C, "default", "f1", "echo", "{\"hello\":\"world\"}", NULL);
    r = th_cmd(C, "XADD dtq:stream:default:p5 * task_type echo payload %s", "[1,2]");
    snprintf(id, sizeof(id), "default:p5:%s", r->str);
    freeReplyObject(r);
    th_expect_status(C, "f1", "succeeded", 5000);
    th_expect_status(C, id, "succeeded", 5000);
    r = th_cmd(C, "GET dtq:result:f1");
    ck_assert_str_eq(r->str, "{\"hello\":\"world\"}");
    freeReplyObject(r);
    r = th_cmd(C, "GET dtq:result:%s", id);
    ck_assert_str_eq(r->str, "[1,2]");
    freeReplyObject(r);
    th_assert_field(C, "f1", "attempt", "1");
    th_assert_field(C, "f1", "worker_id", "w-basic");
    th_assert_field(C, "f1", "max_attempts", "5");
    th_assert_field(C, "f1", "timeout_ms", "30000");
    /* entries acknowledged and deleted, nothing pending */
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p5")), 0);
    /* a null result writes no key */
    th_enqueue(C, "default", "n1", "noop", "{}", NULL);
    th_expect_status(C, "n1", "succeeded", 5000);
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:result:n1")), 0);
    /* the daemon published its limits for the Functions */
    r = th_cmd(C, "HGET dtq:config max_payload_bytes");
    ck_assert_str_eq(r->str, "262144");
    freeReplyObject(r);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
    th_assert_field(C, "f1", "status", "succeeded");
    r = th_cmd(C, "HGET dtq:worker:w-basic status");
    ck_assert_str_eq(r->str, "stopped");
    freeReplyObject(r);
}
END_TEST

START_TEST(test_priority_order) {
    th_daemon d;
    char *a, *b;
    /* the documented pause key; the Functions are not loaded before the first daemon */
    freeReplyObject(th_cmd(C, "SET dtq:queue:default:paused 1"));
    start(&d, "w-prio", "concurrency = 1\n");
    th_enqueue(C, "default", "low", "echo", "1", "priority 0");
    th_enqueue(C, "default", "mid", "echo", "1", "priority 5");
    th_enqueue(C, "default", "high", "echo", "1", "priority 9");
    th_sleep_ms(300); /* deliberate: time in which a paused queue must not be served */
    th_assert_field(C, "high", "status", "queued"); /* paused: nothing ran */
    freeReplyObject(th_cmd(C, "FCALL dtq_resume 0 default"));
    th_expect_status(C, "low", "succeeded", 5000);
    th_expect_status(C, "mid", "succeeded", 5000);
    th_expect_status(C, "high", "succeeded", 5000);
    a = th_task_field(C, "high", "started_at");
    b = th_task_field(C, "mid", "started_at");
    ck_assert_int_le(atoll(a), atoll(b));
    free(a);
    a = th_task_field(C, "low", "started_at");
    ck_assert_int_le(atoll(b), atoll(a));
    free(a);
    free(b);
    th_daemon_stop(&d, SIGTERM, 10000);
}
END_TEST

START_TEST(test_dead_letters_and_keeps_serving) {
    th_daemon d;
    redisReply *r;
    char bad[128];
    start(&d, "w-dlq", NULL);
    th_enqueue(C, "default", "u1", "nosuchtype", "{}", NULL);
    th_enqueue(C, "default", "p1", "fail", "{\"retryable\":false,\"message\":\"bad input\"}", NULL);
    th_enqueue(C, "default", "s1", "sleep", "\"not an object\"", NULL);
    r = th_cmd(C, "XADD dtq:stream:default:p2 * task_type echo payload {broken");
    snprintf(bad, sizeof(bad), "default:p2:%s", r->str);
    freeReplyObject(r);
    th_expect_status(C, "u1", "dead_lettered", 5000);
    th_expect_status(C, "p1", "dead_lettered", 5000);
    th_expect_status(C, "s1", "dead_lettered", 5000);
    th_expect_status(C, bad, "dead_lettered", 5000);
    th_assert_field(C, "u1", "last_error", "unknown_task_type:nosuchtype");
    th_assert_field(C, "u1", "last_error_class", "unknown_task_type");
    th_assert_field(C, "u1", "attempt", "1");
    th_assert_field(C, "p1", "last_error", "bad input");
    th_assert_field(C, "p1", "last_error_class", "permanent");
    th_assert_field(C, bad, "last_error", "invalid entry: payload is not valid JSON");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 4);
    r = th_cmd(C, "XRANGE dtq:stream:dead-letter - +");
    for (size_t i = 0; i < r->elements; i++) {
        redisReply *f = r->element[i]->element[1];
        ck_assert_int_eq(f->elements, 32); /* the sixteen fields of SPEC 8 */
        if (!strcmp(f->element[1]->str, "p1")) {
            ck_assert_str_eq(f->element[3]->str, "default");    /* queue */
            ck_assert_str_eq(f->element[5]->str, "fail");       /* task_type */
            ck_assert_str_eq(f->element[23]->str, "bad input"); /* last_error */
            ck_assert_str_eq(f->element[27]->str, "0");         /* retryable */
            ck_assert_str_eq(f->element[29]->str, "w-dlq");     /* worker_id */
        }
    }
    freeReplyObject(r);
    th_enqueue(C, "default", "after", "echo", "2", NULL);
    th_expect_status(C, "after", "succeeded", 5000);
    /* requeue from the DLQ with redis-cli's Function; it dead-letters again, attempt 1 */
    r = th_cmd(C, "FCALL dtq_requeue 0 p1");
    ck_assert_str_eq(r->str, "queued");
    freeReplyObject(r);
    th_expect_status(C, "p1", "dead_lettered", 5000);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

START_TEST(test_dlq_disabled_ends_failed) {
    th_daemon d;
    redisReply *r;
    char bad[128];
    char *buf;
    start(&d, "w-nodlq", "[limits]\ndlq_enabled = false\n");
    th_enqueue(C, "default", "nf", "fail", "{\"message\":\"no\"}", "idempotency_key nk");
    r = th_cmd(C, "XADD dtq:stream:default:p5 * task_type echo");
    snprintf(bad, sizeof(bad), "default:p5:%s", r->str);
    freeReplyObject(r);
    th_expect_status(C, "nf", "failed", 5000);
    th_expect_status(C, bad, "failed", 5000);
    th_assert_field(C, bad, "last_error", "invalid entry: missing field payload");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 0);
    r = th_cmd(C, "GET dtq:idempotency:default:nk");
    ck_assert_ptr_nonnull(strstr(r->str, "\"failed\""));
    freeReplyObject(r);
    /* an admin can still requeue a failed task */
    r = th_cmd(C, "FCALL dtq_requeue 0 nf");
    ck_assert_str_eq(r->str, "queued");
    freeReplyObject(r);
    th_expect_status(C, "nf", "failed", 5000);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
    buf = th_read_file(d.log);
    ck_assert_ptr_nonnull(strstr(buf, "dlq_enabled = false"));
    free(buf);
}
END_TEST

START_TEST(test_events_on_channel) {
    th_daemon d;
    redisContext *sub = th_connect(&R);
    redisReply *r;
    const char *want[] = {"WORKER_STARTED", "TASK_QUEUED", "TASK_STARTED", "TASK_SUCCEEDED"};
    int got = 0;
    struct timeval tv = {5, 0};
    freeReplyObject(th_cmd(sub, "SUBSCRIBE dtq:events"));
    redisSetTimeout(sub, tv);
    start(&d, "w-events", NULL);
    th_enqueue(C, "default", "e1", "echo", "{}", NULL);
    while (got < 4 && redisGetReply(sub, (void **)&r) == REDIS_OK) {
        const char *msg = r->element[2]->str;
        if (strstr(msg, want[got])) {
            if (got > 0) ck_assert_ptr_nonnull(strstr(msg, "\"task_id\":\"e1\""));
            if (got >= 2) ck_assert_ptr_nonnull(strstr(msg, "\"worker_id\":\"w-events\""));
            ck_assert_ptr_nonnull(strstr(msg, "\"event_id\":"));
            ck_assert_ptr_nonnull(strstr(msg, "\"ts\":\"20"));
            got++;
        }
        freeReplyObject(r);
    }
    ck_assert_int_eq(got, 4);
    redisFree(sub);
    th_daemon_stop(&d, SIGTERM, 10000);
}
END_TEST

START_TEST(test_result_truncated_and_timeout) {
    th_daemon d;
    redisReply *r;
    start(&d, "w-limits",
          "[limits]\nresult_max_bytes = 8\nevents_stream_maxlen = 1000\n"
          "[handler:slow]\nbuiltin = sleep\ntimeout_ms = 200\nmax_attempts = 2\n" FAST_RETRY
              FAST_SCHED);
    th_enqueue(C, "default", "big", "echo", "\"0123456789abcdef\"", NULL);
    th_enqueue(C, "default", "slow1", "slow", "{\"ms\":5000}", NULL);
    th_expect_status(C, "big", "succeeded", 5000);
    th_assert_field(C, "big", "result_truncated", "1");
    r = th_cmd(C, "GET dtq:result:big");
    ck_assert_int_eq(r->len, 8);
    freeReplyObject(r);
    th_expect_status(C, "slow1", "dead_lettered", 10000);
    th_assert_field(C, "slow1", "last_error_class", "timeout");
    th_assert_field(C, "slow1", "attempt", "2");
    {
        char *trail = event_trail("slow1");
        ck_assert_int_eq(count_in(trail, "TASK_STARTED"), 2);
        ck_assert_ptr_nonnull(strstr(trail, "TASK_RETRY_SCHEDULED:1"));
        ck_assert_ptr_nonnull(strstr(trail, "TASK_RETRIED:2"));
        free(trail);
    }
    th_daemon_stop(&d, SIGTERM, 10000);
}
END_TEST

/* ----------------------------------------------------------------- retries, delays, TTLs */

START_TEST(test_flaky_succeeds_on_third_attempt) {
    th_daemon d;
    char *trail;
    redisReply *r;
    start(&d, "w-flaky", "[limits]\nevents_stream_maxlen = 1000\n" FAST_RETRY FAST_SCHED);
    th_enqueue(C, "default", "fl", "flaky", "{\"succeed_on\":3}", "idempotency_key fk");
    th_expect_status(C, "fl", "succeeded", 10000);
    th_assert_field(C, "fl", "attempt", "3");
    r = th_cmd(C, "GET dtq:result:fl");
    ck_assert_str_eq(r->str, "{\"succeeded_on\":3}");
    freeReplyObject(r);
    trail = event_trail("fl");
    ck_assert_msg(strstr(trail,
                         "TASK_QUEUED:1 TASK_STARTED:1 TASK_RETRY_SCHEDULED:1 TASK_RETRIED:2 "
                         "TASK_STARTED:2 TASK_RETRY_SCHEDULED:2 TASK_RETRIED:3 "
                         "TASK_STARTED:3 TASK_SUCCEEDED:3") != NULL,
                  "trail: %s", trail);
    free(trail);
    /* the gaps: each retry waited at least its backoff (0.2 s, then 0.4 s; jitter 0) */
    r = th_cmd(C, "XRANGE dtq:stream:events - +");
    {
        long long started[4] = {0};
        int n = 0;
        for (size_t i = 0; i < r->elements && n < 4; i++) {
            const char *ev = r->element[i]->element[1]->element[1]->str;
            if (strstr(ev, "TASK_STARTED") && strstr(ev, "\"fl\"")) {
                const char *id = r->element[i]->element[0]->str; /* stream id = server ms */
                started[n++] = atoll(id);
            }
        }
        ck_assert_int_eq(n, 3);
        ck_assert_int_ge(started[1] - started[0], 190);
        ck_assert_int_ge(started[2] - started[1], 390);
    }
    freeReplyObject(r);
    r = th_cmd(C, "GET dtq:idempotency:default:fk");
    ck_assert_ptr_nonnull(strstr(r->str, "completed"));
    freeReplyObject(r);
    th_daemon_stop(&d, SIGTERM, 10000);
}
END_TEST

START_TEST(test_always_failing_exhausts_attempts) {
    th_daemon d;
    char *trail;
    start(&d, "w-exhaust", "[limits]\nevents_stream_maxlen = 1000\n" FAST_RETRY FAST_SCHED);
    th_enqueue(C, "default", "af", "fail", "{\"retryable\":true,\"message\":\"try later\"}",
               "max_attempts 3");
    th_enqueue(C, "default", "pf", "fail", "{\"retryable\":false}", "max_attempts 3");
    th_expect_status(C, "af", "dead_lettered", 10000);
    th_expect_status(C, "pf", "dead_lettered", 10000);
    th_assert_field(C, "af", "attempt", "3");
    th_assert_field(C, "af", "last_error", "try later");
    th_assert_field(C, "pf", "attempt", "1");
    trail = event_trail("af");
    ck_assert_int_eq(count_in(trail, "TASK_STARTED"), 3);
    ck_assert_int_eq(count_in(trail, "TASK_RETRY_SCHEDULED"), 2);
    ck_assert_int_eq(count_in(trail, "TASK_DEAD_LETTERED"), 1);
    free(trail);
    trail = event_trail("pf");
    ck_assert_int_eq(count_in(trail, "TASK_STARTED"), 1);
    free(trail);
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD dtq:retry:claimed")), 0);
    th_daemon_stop(&d, SIGTERM, 10000);
}
END_TEST

START_TEST(test_delayed_task_and_ttl_expiry) {
    th_daemon d;
    int64_t t0;
    start(&d, "w-delay", FAST_SCHED);
    t0 = th_now_ms();
    th_enqueue(C, "default", "dl", "echo", "1", "delay_ms 1500");
    th_enqueue(C, "default", "ttl", "echo", "1", "delay_ms 2500 ttl_seconds 1");
    th_sleep_ms(900); /* deliberate: most of the 1500 ms delay passes, and the task waits */
    th_assert_field(C, "dl", "status", "pending");
    th_expect_status(C, "dl", "succeeded", 5000);
    ck_assert_int_ge(th_now_ms() - t0, 1400);
    th_assert_field(C, "dl", "attempt", "1");
    th_expect_status(C, "ttl", "expired", 6000);
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:result:ttl")), 0);
    th_daemon_stop(&d, SIGTERM, 10000);
}
END_TEST

/* ----------------------------------------------------------------- control */

START_TEST(test_cancel_running_task) {
    th_daemon d;
    redisReply *r;
    start(&d, "w-cancel", NULL);
    th_enqueue(C, "default", "long", "sleep", "{\"ms\":20000}", NULL);
    th_expect_status(C, "long", "running", 5000);
    r = th_cmd(C, "FCALL dtq_cancel 0 long");
    ck_assert_str_eq(r->str, "cancel_requested");
    freeReplyObject(r);
    th_expect_status(C, "long", "cancelled", 5000);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p5")), 0);
    th_enqueue(C, "default", "next", "echo", "1", NULL);
    th_expect_status(C, "next", "succeeded", 5000);
    th_daemon_stop(&d, SIGTERM, 10000);
}
END_TEST

/* Replaces a daemon's config file with base + extra (base: the file it started with). */
static void write_config(const th_daemon *d, const char *base, const char *extra) {
    FILE *f = fopen(d->cfg, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "%s\n%s", base, extra);
    fclose(f);
}

#define RELOADED "SIGHUP: configuration reloaded"
#define REFUSED "SIGHUP: new config refused, keeping the old one: "

/* Which config is in effect is seen through [handler:later]: unknown at start, added by a
 * valid reload, absent from the invalid file, and dropped again by a last valid reload. */
START_TEST(test_sighup_reload) {
    th_daemon d;
    char *base, *log, want[600];
    start(&d, "w-reload", NULL);
    base = th_read_file(d.cfg); /* HANDLERS, without [handler:later] */
    th_enqueue(C, "default", "before", "later", "1", NULL);
    th_expect_status(C, "before", "dead_lettered", 5000);
    th_assert_field(C, "before", "last_error", "unknown_task_type:later");

    /* a valid reload takes effect: the new handler runs */
    write_config(&d, base, "[handler:later]\nbuiltin = echo\n");
    kill(d.pid, SIGHUP);
    ck_assert_msg(th_wait_log(d.log, RELOADED " (6 handler(s))", 1, 5000), "no reload logged");
    th_enqueue(C, "default", "after", "later", "1", NULL);
    th_expect_status(C, "after", "succeeded", 5000);

    /* an invalid file (which also lacks [handler:later]) is refused and the old config
     * stays: 'later' still runs, which it could not under the new file */
    write_config(&d, base, "[worker]\nconcurrency = lots\n");
    kill(d.pid, SIGHUP);
    ck_assert_msg(th_wait_log(d.log, REFUSED, 1, 5000), "no refusal logged");
    log = th_read_file(d.log);
    snprintf(want, sizeof(want), REFUSED "%s: [worker] concurrency: 'lots'", d.cfg);
    ck_assert_msg(strstr(log, want) != NULL, "want '%s' in log: %s", want, log);
    free(log);
    th_enqueue(C, "default", "still", "later", "1", NULL);
    th_expect_status(C, "still", "succeeded", 5000);
    ck_assert_int_eq(th_count_in_file(d.log, RELOADED), 1);

    /* the converse once more: a valid file without [handler:later] takes it away */
    write_config(&d, base, "");
    kill(d.pid, SIGHUP);
    ck_assert_msg(th_wait_log(d.log, RELOADED " (5 handler(s))", 1, 5000), "no reload logged");
    th_enqueue(C, "default", "gone", "later", "1", NULL);
    th_expect_status(C, "gone", "dead_lettered", 5000);
    th_assert_field(C, "gone", "last_error", "unknown_task_type:later");
    free(base);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* Reloads with [handler:slow] (a sleep that times out, which is retryable) at `max`
 * attempts; `nth` is the number of reloads logged afterwards. */
static void reload_slow_max_attempts(const th_daemon *d, const char *base, int max, int nth) {
    char extra[256];
    snprintf(extra, sizeof(extra),
             "[handler:slow]\nbuiltin = sleep\ntimeout_ms = 1500\nmax_attempts = %d\n", max);
    write_config(d, base, extra);
    kill(d->pid, SIGHUP);
    ck_assert_msg(th_wait_log(d->log, RELOADED, nth, 5000), "reload %d not logged", nth);
}

/* max_attempts is resolved once, at claim, and carried in the hash: a reload that changes
 * it while an attempt runs reaches the next claim, never the decision about that attempt,
 * so finish, hand-back and the reaper (which read the hash) always agree. */
START_TEST(test_sighup_max_attempts_applies_from_the_next_claim) {
    th_daemon d;
    char *base;
    start(&d, "w-maxatt", FAST_RETRY FAST_SCHED);
    base = th_read_file(d.cfg);
    reload_slow_max_attempts(&d, base, 1, 1);

    /* claimed under max_attempts = 1, raised to 5 while it runs: it is dead-lettered */
    th_enqueue(C, "default", "down", "slow", "{\"ms\":10000}", NULL);
    th_expect_status(C, "down", "running", 5000);
    th_assert_field(C, "down", "max_attempts", "1");
    reload_slow_max_attempts(&d, base, 5, 2);
    th_expect_status(C, "down", "dead_lettered", 10000);
    th_assert_field(C, "down", "attempt", "1");
    th_assert_field(C, "down", "max_attempts", "1");

    /* claimed under 5, lowered to 1 while it runs: attempt 1 is retried (the hash says 5),
     * and attempt 2, claimed after the reload, runs under 1 and is the last */
    th_enqueue(C, "default", "up", "slow", "{\"ms\":10000}", NULL);
    th_expect_status(C, "up", "running", 5000);
    th_assert_field(C, "up", "max_attempts", "5");
    reload_slow_max_attempts(&d, base, 1, 3);
    th_expect_status(C, "up", "dead_lettered", 15000);
    th_assert_field(C, "up", "attempt", "2");
    th_assert_field(C, "up", "max_attempts", "1");
    free(base);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

START_TEST(test_sigterm_drains_running_tasks) {
    th_daemon d;
    start(&d, "w-drain", NULL);
    th_enqueue(C, "default", "d1", "sleep", "{\"ms\":800}", NULL);
    th_enqueue(C, "default", "d2", "sleep", "{\"ms\":800}", NULL);
    th_expect_status(C, "d1", "running", 5000);
    th_expect_status(C, "d2", "running", 5000);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
    th_assert_field(C, "d1", "status", "succeeded");
    th_assert_field(C, "d2", "status", "succeeded");
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:lock:scheduler")), 0);
}
END_TEST

START_TEST(test_drain_timeout_hands_tasks_back) {
    th_daemon a, b;
    int64_t t0;
    start(&a, "w-handback", "drain_timeout_s = 1\n");
    th_enqueue(C, "default", "hb", "sleep", "{\"ms\":30000}", NULL);
    th_enqueue(C, "default", "last", "sleep", "{\"ms\":30000}", "max_attempts 1");
    th_expect_status(C, "hb", "running", 5000);
    th_expect_status(C, "last", "running", 5000);
    t0 = th_now_ms();
    ck_assert_int_eq(th_daemon_stop(&a, SIGTERM, 10000), 0);
    ck_assert_int_lt(th_now_ms() - t0, 4000);
    th_assert_field(C, "hb", "status", "queued");
    th_assert_field(C, "hb", "attempt", "2"); /* a new attempt number: none runs twice */
    th_assert_field(C, "hb", "last_error_class", "interrupted");
    /* a stop never ends a task, even on its last attempt */
    th_assert_field(C, "last", "status", "queued");
    th_assert_field(C, "last", "attempt", "2");
    /* another worker picks them up at once */
    freeReplyObject(th_cmd(C, "HSET dtq:task:hb payload %s", "{\"ms\":10}"));
    freeReplyObject(th_cmd(C, "HSET dtq:task:last payload %s", "{\"ms\":10}"));
    start(&b, "w-handback-2", NULL);
    th_expect_status(C, "hb", "succeeded", 5000);
    th_expect_status(C, "last", "succeeded", 5000);
    th_assert_field(C, "hb", "worker_id", "w-handback-2");
    th_daemon_stop(&b, SIGTERM, 10000);
}
END_TEST

START_TEST(test_sigkill_recovered_by_reaper) {
    th_daemon a, b;
    char raw[128];
    start(&a, "w-victim", NULL);
    th_enqueue(C, "default", "k1", "sleep", "{\"ms\":1500}", NULL);
    th_enqueue(C, "default", "k2", "sleep", "{\"ms\":1500}", "max_attempts 1");
    {
        redisReply *x =
            th_cmd(C, "XADD dtq:stream:default:p5 * task_type sleep payload %s", "{\"ms\":1500}");
        snprintf(raw, sizeof(raw), "default:p5:%s", x->str);
        freeReplyObject(x);
    }
    th_expect_status(C, "k1", "running", 5000);
    th_expect_status(C, "k2", "running", 5000);
    th_expect_status(C, raw, "running", 5000);
    th_daemon_stop(&a, SIGKILL, 5000);
    start(&b, "w-rescuer", NULL);
    /* visibility_timeout_s = 3: the reaper adopts after the entries have been idle that long */
    th_expect_status(C, "k1", "succeeded", 15000);
    th_assert_field(C, "k1", "attempt", "2");
    th_assert_field(C, "k1", "worker_id", "w-rescuer");
    /* the lost attempt was the last one: dead-lettered without running */
    th_expect_status(C, "k2", "dead_lettered", 15000);
    th_assert_field(C, "k2", "last_error", "worker_lost");
    /* the raw entry, redelivered, maps to the same task (its id comes from the entry) */
    th_expect_status(C, raw, "succeeded", 15000);
    th_assert_field(C, raw, "attempt", "2");
    {
        redisReply *k = th_cmd(C, "KEYS dtq:task:*");
        ck_assert_int_eq(k->elements, 3); /* k1, k2 and the raw task: nothing minted twice */
        freeReplyObject(k);
    }
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p5")), 0);
    th_daemon_stop(&b, SIGTERM, 10000);
}
END_TEST

START_TEST(test_survives_redis_restart) {
    th_daemon d;
    start(&d, "w-restart", NULL);
    th_enqueue(C, "default", "r1", "sleep", "{\"ms\":1500}", NULL);
    th_enqueue(C, "default", "r2", "sleep", "{\"ms\":1500}", NULL);
    th_expect_status(C, "r1", "running", 5000);
    th_expect_status(C, "r2", "running", 5000);
    th_redis_stop(&R);
    /* Redis comes back only once the daemon has seen it go (both connections) */
    ck_assert_msg(th_wait_log(d.log, "; reconnecting", 2, 5000), "loss of Redis not logged");
    th_redis_restart(&R); /* same socket and data dir (appendonly) */
    redisFree(C);
    C = th_connect(&R);
    th_expect_status(C, "r1", "succeeded", 15000);
    th_expect_status(C, "r2", "succeeded", 15000);
    th_assert_field(C, "r1", "attempt", "1"); /* the completion waited for Redis, no re-run */
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p5")), 0);
    th_enqueue(C, "default", "r3", "echo", "1", NULL);
    th_expect_status(C, "r3", "succeeded", 10000);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* ----------------------------------------------------------------- exec handlers */

/* True when the pgrep command line in arg finds nothing. */
static int no_process_matches(void *arg) {
    return system((const char *)arg) != 0;
}

static void write_script(const char *path, const char *body) {
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "#!/bin/sh\n%s\n", body);
    fclose(f);
    ck_assert_int_eq(chmod(path, 0755), 0);
}

START_TEST(test_exec_handlers) {
    th_daemon d;
    char ok[400], temp[400], perm[400], sig[400], slow[400], junk[400], ini[4096], marker[400];
    redisReply *r;
    th_path(&R, "ok.sh", ok, sizeof(ok));
    th_path(&R, "temp.sh", temp, sizeof(temp));
    th_path(&R, "perm.sh", perm, sizeof(perm));
    th_path(&R, "sig.sh", sig, sizeof(sig));
    th_path(&R, "slow.sh", slow, sizeof(slow));
    th_path(&R, "junk.sh", junk, sizeof(junk));
    th_path(&R, "pwned", marker, sizeof(marker));
    write_script(ok, "in=$(cat); printf '{\"in\":%s,\"id\":\"%s\",\"attempt\":%s,\"max\":%s,"
                     "\"q\":\"%s\",\"t\":\"%s\",\"extra\":\"%s\",\"arg\":\"%s\"}' \"$in\" "
                     "\"$DTQ_TASK_ID\" \"$DTQ_ATTEMPT\" \"$DTQ_MAX_ATTEMPTS\" \"$DTQ_QUEUE\" "
                     "\"$DTQ_TASK_TYPE\" \"$EXTRA\" \"$1\"");
    write_script(temp, "echo 'upstream busy' >&2; exit 75");
    write_script(perm, "echo 'noise' >&2; echo 'fatal: bad record' >&2; exit 3");
    write_script(sig, "kill -9 $$");
    write_script(slow, "trap '' TERM; sleep 30");
    write_script(junk, "echo 'this is not json'");
    snprintf(
        ini, sizeof(ini),
        "[limits]\nevents_stream_maxlen = 1000\n" FAST_RETRY FAST_SCHED
        "[handler:x-ok]\nexec = %s first-arg\nenv = EXTRA=hello\n"
        "[handler:x-temp]\nexec = %s\nmax_attempts = 2\n"
        "[handler:x-perm]\nexec = %s\n"
        "[handler:x-sig]\nexec = %s\n"
        "[handler:x-slow]\nexec = %s\ntimeout_ms = 300\nkill_grace_ms = 300\nmax_attempts = 1\n"
        "[handler:x-junk]\nexec = %s\n",
        ok, temp, perm, sig, slow, junk);
    start(&d, "w-exec", ini);
    th_enqueue(C, "default", "xo", "x-ok", "{\"cmd\":\"$(touch PWNED); `touch PWNED`\"}", NULL);
    th_enqueue(C, "default", "xt", "x-temp", "{}", NULL);
    th_enqueue(C, "default", "xp", "x-perm", "{}", NULL);
    th_enqueue(C, "default", "xs", "x-sig", "{}", NULL);
    th_enqueue(C, "default", "xw", "x-slow", "{}", NULL);
    th_enqueue(C, "default", "xj", "x-junk", "{}", NULL);
    th_expect_status(C, "xo", "succeeded", 10000);
    r = th_cmd(C, "GET dtq:result:xo");
    ck_assert_str_eq(r->str, "{\"in\":{\"cmd\":\"$(touch PWNED); `touch PWNED`\"},\"id\":\"xo\","
                             "\"attempt\":1,\"max\":5,\"q\":\"default\",\"t\":\"x-ok\","
                             "\"extra\":\"hello\",\"arg\":\"first-arg\"}");
    freeReplyObject(r);
    ck_assert_int_ne(access("PWNED", F_OK), 0);
    th_expect_status(C, "xt", "dead_lettered", 10000);
    th_assert_field(C, "xt", "attempt", "2"); /* exit 75 was retried */
    th_assert_field(C, "xt", "last_error", "upstream busy");
    th_assert_field(C, "xt", "last_error_class", "retryable");
    th_expect_status(C, "xp", "dead_lettered", 10000);
    th_assert_field(C, "xp", "attempt", "1");
    th_assert_field(C, "xp", "last_error", "noise\nfatal: bad record");
    th_expect_status(C, "xs", "dead_lettered", 10000);
    th_assert_field(C, "xs", "last_error", "signal:9");
    th_assert_field(C, "xs", "last_error_class", "signal");
    th_expect_status(C, "xw", "dead_lettered", 10000);
    th_assert_field(C, "xw", "last_error_class", "timeout");
    th_expect_status(C, "xj", "dead_lettered", 10000);
    th_assert_field(C, "xj", "last_error_class", "bad_result");
    /* the slow program ignored SIGTERM: SIGKILL after the grace, nothing left running */
    {
        char cmd[600];
        /* "slo[w].sh" matches the script but not this pgrep's own command line */
        snprintf(cmd, sizeof(cmd), "pgrep -f '%.*s[w].sh' >/dev/null", (int)(strlen(slow) - 4),
                 slow);
        ck_assert_msg(th_wait_until(no_process_matches, cmd, 5000), "%s still running", slow);
    }
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* A payload larger than a pipe holds reaches the program whole: what the first write
 * leaves goes in as the program reads. */
START_TEST(test_exec_payload_larger_than_a_pipe) {
    th_daemon d;
    char count[400], ini[1024];
    size_t n = 200000; /* a pipe holds 65,536 bytes by default */
    char *payload = malloc(n + 3);
    redisReply *r;
    th_path(&R, "count.sh", count, sizeof(count));
    write_script(count, "wc -c");
    snprintf(ini, sizeof(ini), "[handler:count]\nexec = %s\n", count);
    start(&d, "w-exec-big", ini);
    payload[0] = '"';
    memset(payload + 1, 'a', n);
    payload[n + 1] = '"';
    payload[n + 2] = '\0';
    th_enqueue(C, "default", "big", "count", payload, NULL);
    free(payload);
    th_expect_status(C, "big", "succeeded", 10000);
    r = th_cmd(C, "GET dtq:result:big");
    ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
    ck_assert_int_eq(strtoll(r->str, NULL, 10), (long long)(n + 2));
    freeReplyObject(r);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* Many short children at once: exits, signals and pipe EOFs arrive in every order. */
START_TEST(test_exec_many_children) {
    th_daemon d;
    char ok[400], sig[400], ini[2048];
    th_path(&R, "ok.sh", ok, sizeof(ok));
    th_path(&R, "sig.sh", sig, sizeof(sig));
    write_script(ok, "cat; echo");
    write_script(sig, "echo dying >&2; kill -9 $$");
    /* one attempt: a signal death is retryable, and this test is about ordering */
    snprintf(ini, sizeof(ini),
             "concurrency = 24\n[handler:ok]\nexec = %s\n[handler:sig]\nexec = %s\n"
             "max_attempts = 1\n",
             ok, sig);
    start(&d, "w-exec-many", ini);
    for (int i = 0; i < 40; i++) {
        char id[16];
        snprintf(id, sizeof(id), "m%d", i);
        th_enqueue(C, "default", id, i % 2 ? "sig" : "ok", "{\"n\":1}", NULL);
    }
    for (int i = 0; i < 40; i++) {
        char id[16];
        snprintf(id, sizeof(id), "m%d", i);
        th_expect_status(C, id, i % 2 ? "dead_lettered" : "succeeded", 15000);
    }
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* ----------------------------------------------------------------- plugins, HTTP, systemd */

START_TEST(test_plugin_handlers) {
    th_daemon d;
    redisReply *r;
    start(&d, "w-plugin",
          FAST_RETRY FAST_SCHED "[handler:up]\nplugin = " DTQ_PLUGIN_EXAMPLE
                                "\nsymbol = dtq_example_upper\nmax_attempts = 2\n"
                                "[handler:later]\nplugin = " DTQ_PLUGIN_EXAMPLE
                                "\nsymbol = dtq_example_later\n");
    th_enqueue(C, "default", "pl1", "up", "[1,2,3]", NULL);
    th_enqueue(C, "default", "pl2", "later", "{}", NULL);
    th_enqueue(C, "default", "pl3", "up", "\"please retry\"", NULL);
    th_expect_status(C, "pl1", "succeeded", 5000);
    th_expect_status(C, "pl2", "succeeded", 5000);
    th_expect_status(C, "pl3", "dead_lettered", 10000);
    r = th_cmd(C, "GET dtq:result:pl1");
    ck_assert_str_eq(r->str, "{\"len\":7,\"attempt\":1}");
    freeReplyObject(r);
    r = th_cmd(C, "GET dtq:result:pl2");
    ck_assert_str_eq(r->str, "\"later\"");
    freeReplyObject(r);
    th_assert_field(C, "pl3", "attempt", "2");
    th_assert_field(C, "pl3", "last_error", "plugin asked for a retry");
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* One HTTP GET to 127.0.0.1:port; returns the status code and the body in *body. */
static int http_get(int port, const char *path, char **body) {
    char cmd[1024], out[400];
    int code = 0;
    th_path(&R, "http.out", out, sizeof(out));
    snprintf(
        cmd, sizeof(cmd),
        "exec 3<>/dev/tcp/127.0.0.1/%d && printf 'GET %s HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3 >%s",
        port, path, out);
    {
        char full[1200];
        snprintf(full, sizeof(full), "bash -c \"%s\"", cmd);
        ck_assert_int_eq(system(full), 0);
    }
    *body = th_read_file(out);
    sscanf(*body, "HTTP/1.%*d %d", &code);
    return code;
}

typedef struct http_probe {
    int port;
    const char *path;
    int want;
} http_probe;

static int http_is(void *arg) {
    const http_probe *p = arg;
    char *body;
    int code = http_get(p->port, p->path, &body);
    free(body);
    return code == p->want;
}

/* Polls GET path until it answers `want`; 1 on success. */
static int http_wait(int port, const char *path, int want, int timeout_ms) {
    http_probe p = {port, path, want};
    return th_wait_until(http_is, &p, timeout_ms);
}

START_TEST(test_http_endpoints) {
    th_daemon d;
    char *body;
    int port = 20000 + (int)(getpid() % 20000);
    char ini[128];
    snprintf(ini, sizeof(ini), "[http]\nlisten = 127.0.0.1:%d\n", port);
    start(&d, "w-http", ini);
    th_enqueue(C, "default", "h1", "echo", "1", NULL);
    th_expect_status(C, "h1", "succeeded", 5000);
    ck_assert_int_eq(http_get(port, "/healthz", &body), 200);
    free(body);
    ck_assert_int_eq(http_get(port, "/readyz", &body), 200);
    free(body);
    ck_assert_int_eq(http_get(port, "/metrics", &body), 200);
    ck_assert_ptr_nonnull(strstr(body, "dtq_tasks_succeeded_total 1"));
    ck_assert_ptr_nonnull(strstr(body, "dtq_redis_connected 1"));
    ck_assert_ptr_nonnull(strstr(body, "# TYPE dtq_active_tasks gauge"));
    free(body);
    ck_assert_int_eq(http_get(port, "/nope", &body), 404);
    free(body);
    th_redis_stop(&R);
    ck_assert_msg(http_wait(port, "/readyz", 503, 5000), "/readyz not 503 without Redis");
    ck_assert_int_eq(http_get(port, "/healthz", &body), 200); /* but alive */
    free(body);
    th_redis_restart(&R);
    redisFree(C);
    C = th_connect(&R);
    ck_assert_msg(http_wait(port, "/readyz", 200, 15000), "/readyz not 200 after Redis is back");
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

START_TEST(test_systemd_notify) {
    th_daemon d;
    char sock[400], buf[512], got[2048] = "";
    int fd;
    fd = th_notify_socket(&R, sock, sizeof(sock), 5);
    setenv("NOTIFY_SOCKET", sock, 1);
    setenv("WATCHDOG_USEC", "400000", 1); /* pings every 200 ms */
    start(&d, "w-notify", NULL);
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    while (!strstr(got, "WATCHDOG=1")) {
        ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
        ck_assert_msg(n > 0, "no notify datagram; got so far: %s", got);
        buf[n] = '\0';
        strncat(got, buf, sizeof(got) - strlen(got) - 2);
        strcat(got, "|");
    }
    ck_assert_ptr_nonnull(strstr(got, "READY=1"));
    kill(d.pid, SIGTERM);
    while (!strstr(got, "STOPPING=1")) {
        ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
        ck_assert_msg(n > 0, "no STOPPING=1; got: %s", got);
        buf[n] = '\0';
        strncat(got, buf, sizeof(got) - strlen(got) - 2);
    }
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
    close(fd);
}
END_TEST

/* ----------------------------------------------------------------- connection, naming, logs */

/* A Redis that stops answering (SIGSTOP: the socket stays open) is detected by the
 * liveness PING, the link is dropped and re-made, and the work completes afterwards. */
START_TEST(test_hung_redis_detected) {
    th_daemon d;
    char *buf;
    const char *p;
    long silent_ms;
    start(&d, "w-hung", "[redis]\nconnect_timeout_ms = 300\nliveness_timeout_ms = 1500\n");
    th_enqueue(C, "default", "hg", "sleep", "{\"ms\":500}", NULL);
    th_expect_status(C, "hg", "running", 5000);
    kill(R.pid, SIGSTOP);
    /* Redis stays hung until the liveness PING has gone unanswered for liveness_timeout_ms:
     * its own setting, not a multiple of connect_timeout_ms */
    ck_assert_msg(th_wait_log(d.log, "dropping the connection", 1, 10000), "hang not detected");
    buf = th_read_file(d.log);
    p = strstr(buf, "no reply for ");
    ck_assert_ptr_nonnull(p);
    silent_ms = atol(p + 13);
    ck_assert_msg(silent_ms >= 1500 && silent_ms < 4000, "dropped after %ld ms", silent_ms);
    free(buf);
    kill(R.pid, SIGCONT);
    th_expect_status(C, "hg", "succeeded", 10000);
    th_enqueue(C, "default", "hg2", "echo", "1", NULL);
    th_expect_status(C, "hg2", "succeeded", 10000);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
    buf = th_read_file(d.log);
    ck_assert_msg(strstr(buf, "dropping the connection") != NULL, "log: %s", buf);
    free(buf);
}
END_TEST

static void wait_key_field(const char *key, const char *field, const char *want, int ms) {
    int64_t end = th_now_ms() + ms;
    while (th_now_ms() < end) {
        redisReply *r = th_cmd(C, "HGET %s %s", key, field);
        int ok = r->type == REDIS_REPLY_STRING && !strcmp(r->str, want);
        freeReplyObject(r);
        if (ok) return;
        th_sleep_ms(20);
    }
    ck_abort_msg("%s %s did not become %s within %d ms", key, field, want, ms);
}

START_TEST(test_namespace_and_cluster_hash_tag) {
    th_daemon d;
    redisReply *r;
    th_daemon_start(&d, &R,
                    "[redis]\nnamespace = jobs\ncluster_hash_tag = true\n"
                    "[worker]\nworker_id = w-ns\n[handler:echo]\nbuiltin = echo\n");
    wait_key_field("{jobs}:worker:w-ns", "status", "running", 10000);
    r = th_cmd(C, "FCALL jobs_enqueue 0 default echo 7 task_id ns1");
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "jobs_enqueue: %s", r->str);
    freeReplyObject(r);
    wait_key_field("{jobs}:task:ns1", "status", "succeeded", 5000);
    r = th_cmd(C, "GET {jobs}:result:ns1");
    ck_assert_str_eq(r->str, "7");
    freeReplyObject(r);
    r = th_cmd(C, "FCALL dtq_enqueue 0 default echo 7"); /* no dtq_* Functions in this Redis */
    ck_assert_int_eq(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    r = th_cmd(C, "FCALL_RO jobs_stats 0");
    ck_assert_str_eq(r->element[0]->str, "queue:default:depth");
    freeReplyObject(r);
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:task:ns1")), 0);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* A string member of a log object, or a failed test. */
static const char *log_str(const cJSON *j, const char *name, const char *line) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);
    ck_assert_msg(cJSON_IsString(v), "no string '%s' in: %s", name, line);
    return v->valuestring;
}

/* Every line is one JSON object {ts, level, msg, then a task line's fields (strings or
 * numbers)}; known lines decode to their exact text, quotes included; the error field holds
 * the error's first line; the payload appears nowhere. */
START_TEST(test_json_logs) {
    th_daemon d;
    FILE *f;
    char line[8192];
    int lines = 0, failed = 0, ready = 0, shutdown = 0, debug = 0;
    start(&d, "w-json", "[log]\nformat = json\nlevel = debug\n");
    /* the error text has quotes and a second line; "secret" is payload only */
    th_enqueue(C, "default", "j1", "fail",
               "{\"message\":\"line1 \\\"q\\\"\\nline2\",\"secret\":\"pay-load-only\"}", NULL);
    th_enqueue(C, "default", "j0", "noop", "{}", NULL); /* a success: logged at debug */
    th_expect_status(C, "j1", "dead_lettered", 5000);
    th_expect_status(C, "j0", "succeeded", 5000);
    ck_assert(th_wait_log(d.log, "\"task_id\":\"j0\"", 1, 5000));
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
    f = fopen(d.log, "r");
    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof(line), f)) {
        cJSON *j;
        const char *ts, *level, *msg;
        size_t n = strlen(line);
        ck_assert_msg(n > 0 && line[n - 1] == '\n', "unterminated or overlong line: %s", line);
        j = cJSON_Parse(line);
        ck_assert_msg(cJSON_IsObject(j), "not a JSON object: %s", line);
        {
            const cJSON *m;
            int i = 0;
            cJSON_ArrayForEach(m, j) {
                static const char *const first[] = {"ts", "level", "msg"};
                if (i < 3)
                    ck_assert_msg(!strcmp(m->string, first[i]), "not ts, level, msg first: %s",
                                  line);
                ck_assert_msg(cJSON_IsString(m) || cJSON_IsNumber(m),
                              "%s is not a string or number: %s", m->string, line);
                i++;
            }
        }
        ts = log_str(j, "ts", line);
        level = log_str(j, "level", line);
        msg = log_str(j, "msg", line);
        ck_assert_msg(strlen(ts) == 24 && !strncmp(ts, "20", 2) && ts[10] == 'T' && ts[19] == '.' &&
                          ts[23] == 'Z',
                      "ts not ISO 8601 UTC with ms: %s", ts);
        ck_assert_msg(!strcmp(level, "debug") || !strcmp(level, "info") || !strcmp(level, "warn") ||
                          !strcmp(level, "error"),
                      "bad level: %s", line);
        ck_assert_msg(!strstr(line, "pay-load-only") && !strstr(msg, "pay-load-only"),
                      "payload logged: %s", line);
        debug += !strcmp(level, "debug");
        if (!strcmp(msg, "task succeeded")) ck_assert_str_eq(level, "debug");
        if (!strcmp(msg, "task dead-lettered")) {
            ck_assert_str_eq(level, "warn");
            ck_assert_str_eq(log_str(j, "task_id", line), "j1");
            ck_assert_str_eq(log_str(j, "class", line), "permanent");
            ck_assert_str_eq(log_str(j, "error", line), "line1 \"q\"");
            failed++;
        }
        if (!strncmp(msg, "worker w-json ready: ", 21)) {
            ck_assert_str_eq(level, "info");
            ready++;
        }
        if (!strcmp(msg, "signal 15: shutting down")) {
            ck_assert_str_eq(level, "info");
            shutdown++;
        }
        cJSON_Delete(j);
        lines++;
    }
    fclose(f);
    ck_assert_int_ge(lines, 4);
    ck_assert_int_ge(debug, 1);
    ck_assert_msg(failed == 1, "the dead-letter line appeared %d times", failed);
    ck_assert_int_eq(ready, 1);
    ck_assert_int_eq(shutdown, 1);
}
END_TEST

/* A server that accepts connections but never answers: the daemon times the handshake
 * out, keeps retrying, stays alive, and serves as soon as a real Redis is there. */
START_TEST(test_silent_server_handshake_timeout) {
    th_daemon d;
    struct sockaddr_in sa;
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1, status, port = 0;
    socklen_t len = sizeof(sa);
    char ini[256], *buf;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    ck_assert_int_eq(bind(ls, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(ls, 16), 0); /* the kernel completes handshakes; nobody reads */
    ck_assert_int_eq(getsockname(ls, (struct sockaddr *)&sa, &len), 0);
    port = ntohs(sa.sin_port);
    th_redis_start(&R, 0); /* only for the harness's temp dir */
    snprintf(ini, sizeof(ini), "[redis]\nurl = redis://127.0.0.1:%d\nconnect_timeout_ms = 200\n",
             port);
    th_daemon_start(&d, &R, ini);
    /* two connections, each timed out at least twice: it keeps retrying */
    ck_assert_msg(th_wait_log(d.log, "no answer to the handshake within 200 ms", 4, 10000),
                  "handshake timeouts not logged (and retried)");
    ck_assert_int_eq(waitpid(d.pid, &status, WNOHANG), 0); /* still running */
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
    buf = th_read_file(d.log);
    ck_assert_msg(strstr(buf, "no answer to the handshake within 200 ms") != NULL, "log: %s", buf);
    free(buf);
    close(ls);
    th_redis_stop(&R);
}
END_TEST

/* Runs without the unix-socket fixture: Redis on TCP with an ACL user and a password. */
START_TEST(test_acl_user_password_and_db) {
    th_daemon good, bad;
    char ini[512];
    int status;
    th_redis_start_tcp(&R, "--requirepass adminpw --user alice on >wonderland ~* &* +@all",
                       "adminpw");
    C = th_connect(&R);
    freeReplyObject(th_cmd(C, "SELECT 3"));
    snprintf(ini, sizeof(ini),
             "[redis]\nurl = redis://alice:wonderland@127.0.0.1:%d/3\n"
             "[worker]\nworker_id = w-acl\n[handler:echo]\nbuiltin = echo\n",
             R.port);
    th_daemon_start(&good, &R, ini);
    th_daemon_wait_ready(C, "w-acl", 10000);
    th_enqueue(C, "default", "acl1", "echo", "1", NULL);
    th_expect_status(C, "acl1", "succeeded", 5000);
    /* a wrong password is logged and retried; the daemon does not exit */
    snprintf(ini, sizeof(ini),
             "[redis]\nurl = redis://alice:wrong@127.0.0.1:%d/3\n"
             "[worker]\nworker_id = w-acl-bad\n",
             R.port);
    th_daemon_start(&bad, &R, ini);
    /* two connections, each refused at least twice: it keeps retrying */
    ck_assert_msg(th_wait_log(bad.log, "handshake refused", 4, 10000),
                  "refused handshakes not logged (and retried)");
    ck_assert_int_eq(waitpid(bad.pid, &status, WNOHANG), 0);
    {
        char *buf = th_read_file(bad.log);
        ck_assert_msg(strstr(buf, "handshake refused") != NULL, "log: %s", buf);
        ck_assert_ptr_null(strstr(buf, "wrong")); /* the password is not logged */
        free(buf);
    }
    ck_assert_int_eq(th_daemon_stop(&bad, SIGTERM, 10000), 0);
    ck_assert_int_eq(th_daemon_stop(&good, SIGTERM, 10000), 0);
    redisFree(C);
    th_redis_stop(&R);
}
END_TEST

/* A TCase of the suite with the usual fixture (one redis-server). */
static TCase *themed_case(Suite *s, const char *name) {
    TCase *tc = tcase_create(name);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 90);
    suite_add_tcase(s, tc);
    return tc;
}

int main(void) {
    Suite *s = suite_create("daemon");
    TCase *tc;
    tc = themed_case(s, "tasks"); /* tasks through their outcomes */
    tcase_add_test(tc, test_fcall_and_raw_xadd_succeed);
    tcase_add_test(tc, test_priority_order);
    tcase_add_test(tc, test_dead_letters_and_keeps_serving);
    tcase_add_test(tc, test_dlq_disabled_ends_failed);
    tcase_add_test(tc, test_events_on_channel);
    tcase_add_test(tc, test_result_truncated_and_timeout);
    tcase_add_test(tc, test_flaky_succeeds_on_third_attempt);
    tcase_add_test(tc, test_always_failing_exhausts_attempts);
    tcase_add_test(tc, test_delayed_task_and_ttl_expiry);
    tcase_add_test(tc, test_cancel_running_task);
    tc = themed_case(s, "lifecycle"); /* signals, drains, crashes and a Redis that goes away */
    tcase_add_test(tc, test_sighup_reload);
    tcase_add_test(tc, test_sighup_max_attempts_applies_from_the_next_claim);
    tcase_add_test(tc, test_sigterm_drains_running_tasks);
    tcase_add_test(tc, test_drain_timeout_hands_tasks_back);
    tcase_add_test(tc, test_sigkill_recovered_by_reaper);
    tcase_add_test(tc, test_survives_redis_restart);
    tcase_add_test(tc, test_hung_redis_detected);
    tc = themed_case(s, "handlers"); /* exec programs and plugins */
    tcase_add_test(tc, test_exec_handlers);
    tcase_add_test(tc, test_exec_payload_larger_than_a_pipe);
    tcase_add_test(tc, test_exec_many_children);
    tcase_add_test(tc, test_plugin_handlers);
    tc =
        themed_case(s, "process"); /* what the process shows: endpoints, systemd, namespace, logs */
    tcase_add_test(tc, test_http_endpoints);
    tcase_add_test(tc, test_systemd_notify);
    tcase_add_test(tc, test_namespace_and_cluster_hash_tag);
    tcase_add_test(tc, test_json_logs);
    tc = tcase_create("auth");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_acl_user_password_and_db);
    tcase_add_test(tc, test_silent_server_handshake_timeout);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
