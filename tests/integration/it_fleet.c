/* it_fleet.c: several daemons sharing one Redis: thousands of retries with no (task,
 * attempt) executed twice, leader failover after SIGKILL, and recovery from a scheduler
 * that died between XADD and removing its claim. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static th_redis R;
static redisContext *C;

static void setup(void) {
    th_fixture_start(&R, &C, 0, NULL);
}

static void teardown(void) {
    th_fixture_stop(&R, &C);
}

static void start(th_daemon *d, const char *id, const char *extra) {
    char ini[2048];
    snprintf(ini, sizeof(ini),
             "[worker]\nworker_id = %s\nconcurrency = 32\nheartbeat_interval_s = 1\n"
             "visibility_timeout_s = 5\n"
             "[retry]\nbase_delay = 0.05\nmax_delay = 0.2\n"
             "[scheduler]\ninterval_ms = 100\nleader_lock_ms = 2000\n"
             "[limits]\nevents_stream_maxlen = 1000000\n"
             "[handler:flaky]\nbuiltin = flaky\n[handler:echo]\nbuiltin = echo\n%s",
             id, extra ? extra : "");
    th_daemon_start(d, &R, ini);
    th_daemon_wait_ready(C, id, 10000);
}

static char *lock_holder(void) {
    redisReply *r = th_cmd(C, "GET dtq:lock:scheduler");
    char *v = r->type == REDIS_REPLY_STRING ? strdup(r->str) : NULL;
    freeReplyObject(r);
    return v;
}

/* Counts TASK_STARTED events per (task, attempt); fails on any pair seen twice. */
static int assert_no_double_execution(void) {
    redisReply *r = th_cmd(C, "XRANGE dtq:stream:events - +");
    int started = 0;
    size_t cap = r->elements + 1, n = 0;
    char **seen = calloc(cap, sizeof(char *));
    for (size_t i = 0; i < r->elements; i++) {
        const char *ev = r->element[i]->element[1]->element[1]->str;
        const char *tid, *att;
        char key[160];
        if (!strstr(ev, "\"type\":\"TASK_STARTED\"")) continue;
        tid = strstr(ev, "\"task_id\":\"") + 11;
        att = strstr(ev, "\"attempt\":") + 10;
        snprintf(key, sizeof(key), "%.*s/%.*s", (int)(strchr(tid, '"') - tid), tid,
                 (int)strspn(att, "0123456789"), att);
        for (size_t j = 0; j < n; j++)
            ck_assert_msg(strcmp(seen[j], key), "executed twice: %s", key);
        seen[n++] = strdup(key);
        started++;
    }
    for (size_t j = 0; j < n; j++) free(seen[j]);
    free(seen);
    freeReplyObject(r);
    return started;
}

START_TEST(test_three_daemons_thousands_of_retries) {
    th_daemon d[3];
    const int tasks = 1000;
    int64_t end;
    long long done = 0;
    start(&d[0], "w-a", NULL);
    start(&d[1], "w-b", NULL);
    start(&d[2], "w-c", NULL);
    /* pipelined enqueue: every task fails twice, then succeeds on attempt 3 */
    for (int i = 0; i < tasks; i++)
        redisAppendCommand(C, "FCALL dtq_enqueue 0 default flaky %s task_id t%d",
                           "{\"succeed_on\":3}", i);
    for (int i = 0; i < tasks; i++) {
        redisReply *r;
        ck_assert_int_eq(redisGetReply(C, (void **)&r), REDIS_OK);
        ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
        freeReplyObject(r);
    }
    end = th_now_ms() + 60000;
    while (th_now_ms() < end) {
        done = 0;
        for (int i = 0; i < tasks; i++) redisAppendCommand(C, "HGET dtq:task:t%d status", i);
        for (int i = 0; i < tasks; i++) {
            redisReply *r;
            ck_assert_int_eq(redisGetReply(C, (void **)&r), REDIS_OK);
            if (r->type == REDIS_REPLY_STRING && !strcmp(r->str, "succeeded")) done++;
            freeReplyObject(r);
        }
        if (done == tasks) break;
        th_sleep_ms(200);
    }
    ck_assert_int_eq(done, tasks);
    ck_assert_int_eq(assert_no_double_execution(), tasks * 3);
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD dtq:retry:claimed")), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD dtq:retry:schedule")), 0);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(th_daemon_stop(&d[i], SIGTERM, 15000), 0);
}
END_TEST

START_TEST(test_leader_failover_after_sigkill) {
    th_daemon a, b;
    char *holder;
    int64_t t0, end;
    start(&a, "w-first", NULL);
    end = th_now_ms() + 5000;
    while ((holder = lock_holder()) == NULL && th_now_ms() < end) th_sleep_ms(20);
    ck_assert_ptr_nonnull(holder);
    ck_assert_str_eq(holder, "w-first");
    free(holder);
    start(&b, "w-second", NULL);
    th_sleep_ms(500); /* deliberate: several passes (100 ms) in which w-second may try */
    holder = lock_holder();
    ck_assert_str_eq(holder, "w-first"); /* the leader keeps its lock */
    free(holder);
    th_daemon_stop(&a, SIGKILL, 5000);
    t0 = th_now_ms();
    /* lock TTL (2000 ms) plus one pass interval, with slack */
    end = t0 + 2000 + 100 + 1500;
    while (th_now_ms() < end) {
        holder = lock_holder();
        if (holder && !strcmp(holder, "w-second")) break;
        free(holder);
        holder = NULL;
        th_sleep_ms(20);
    }
    ck_assert_msg(holder != NULL, "no takeover within the lock TTL plus one pass");
    free(holder);
    /* and the new leader schedules: a delayed task runs */
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id late delay_ms 100"));
    ck_assert(th_wait_status(C, "late", "succeeded", 5000));
    ck_assert_int_eq(th_daemon_stop(&b, SIGTERM, 10000), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:lock:scheduler")), 0); /* released */
}
END_TEST

/* No claim, nothing scheduled, no entry left, and task cr succeeded. */
static int claim_settled(void *arg) {
    char *st;
    int ok;
    (void)arg;
    if (th_int(th_cmd(C, "ZCARD dtq:retry:claimed")) ||
        th_int(th_cmd(C, "ZCARD dtq:retry:schedule")) ||
        th_int(th_cmd(C, "XLEN dtq:stream:default:p5")))
        return 0;
    st = th_task_field(C, "cr", "status");
    ok = st && !strcmp(st, "succeeded");
    free(st);
    return ok;
}

START_TEST(test_crash_between_xadd_and_claim_removal) {
    th_daemon d;
    redisReply *r;
    /* The state a scheduler leaves when it dies after XADD and before ZREM: the task is
     * queued with its entry in the stream, and an old claim is still in the claimed set. */
    freeReplyObject(th_cmd(C, "HSET dtq:task:cr id cr queue default task_type echo payload 1 "
                              "status queued attempt 2 priority 5 created_at 1 metadata {}"));
    freeReplyObject(th_cmd(C, "XADD dtq:stream:default:p5 * task_id cr attempt 2"));
    freeReplyObject(th_cmd(C, "ZADD dtq:retry:claimed 1 cr"));
    start(&d, "w-crash", "[scheduler]\nclaim_timeout_ms = 100\n");
    ck_assert(th_wait_status(C, "cr", "succeeded", 5000));
    /* the stale claim returns to the schedule and is dropped; a wrong re-queue would have
     * added an entry (in the same Function call) and left the task not succeeded */
    ck_assert_msg(th_wait_until(claim_settled, NULL, 5000), "stale claim not dropped");
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD dtq:retry:claimed")), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD dtq:retry:schedule")), 0);
    ck_assert_int_eq(assert_no_double_execution(), 1);
    r = th_cmd(C, "HGET dtq:task:cr attempt");
    ck_assert_str_eq(r->str, "2");
    freeReplyObject(r);
    th_daemon_stop(&d, SIGTERM, 10000);
}
END_TEST

START_TEST(test_scheduler_disabled_never_takes_lock) {
    th_daemon d;
    start(&d, "w-nosched", "[scheduler]\nenabled = false\n");
    th_sleep_ms(600); /* deliberate: six pass intervals in which the lock must not be taken */
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:lock:scheduler")), 0);
    th_daemon_stop(&d, SIGTERM, 10000);
}
END_TEST

int main(void) {
    Suite *s = suite_create("fleet");
    TCase *tc = tcase_create("coordination");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_three_daemons_thousands_of_retries);
    tcase_add_test(tc, test_leader_failover_after_sigkill);
    tcase_add_test(tc, test_crash_between_xadd_and_claim_removal);
    tcase_add_test(tc, test_scheduler_disabled_never_takes_lock);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
