/* it_lean.c: the lean lane (docs/reference.md 4.3) against a real redis-server. At the
 * Function level: a lean enqueue, fetch and batched success write no task hash and keep the
 * length counter right; a failure materialises the task, which then retries and
 * dead-letters like a full one; cancel (waiting and running), adoption, recovery and
 * hand-back of lean entries; QUEUE_FULL; a mode switch with entries of both kinds. At the
 * daemon level: a lean queue drains, and a SIGKILLed daemon's lean tasks are adopted. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calls.h"
#include "finish_record.h"
#include "harness.h"
#include "task.h"
#include "util.h"

TH_LIBRARY_FIXTURE();

#define POLICY "{\"d\":[5,30000],\"t\":{\"echo\":[3,1000]}}"

static redisReply *fetch(const char *worker, int count, const char *q) {
    return th_fetch(C, worker, count, q, POLICY);
}

static void lean_queue(const char *q) {
    th_expect_str(th_cmd(C, "FCALL dtq_queue_mode 0 tester %s lean", q), "lean");
    th_queue_groups(C, q);
}

/* The number of task hashes in the namespace. */
static long long task_keys(void) {
    redisReply *r = th_cmd(C, "KEYS dtq:task:*");
    long long n = (long long)r->elements;
    freeReplyObject(r);
    return n;
}

static long long qlen(const char *q) {
    redisReply *r = th_cmd(C, "GET dtq:queue:%s:length", q);
    long long n = r->type == REDIS_REPLY_STRING ? atoll(r->str) : -1;
    freeReplyObject(r);
    return n;
}

/* One finish call: the records recs (full ones, e.g. a lean task's failure) and the lean
 * successes `lean` (claimed-task replies), as the daemon's finisher sends them. */
static redisReply *finish_mixed(const char *worker, const dtq_finish_record *recs, int n,
                                redisReply *const *lean, int m) {
    dtq_argv a;
    redisReply *r;
    dtq_call_finish(&a, "dtq_finish", worker, n);
    for (int i = 0; i < n; i++) dtq_finish_record_encode(&a, &recs[i]);
    if (m > 0 || n > 0) {
        dtq_finish_lean_head(&a, POLICY, m);
        for (int i = 0; i < m; i++)
            dtq_finish_lean_encode(&a, lean[i]->element[0]->str, lean[i]->element[1]->str,
                                   lean[i]->element[4]->str, lean[i]->element[6]->integer);
    }
    r = redisCommandArgv(C, a.argc, (const char **)a.argv, a.lens);
    dtq_argv_deinit(&a);
    ck_assert_ptr_nonnull(r);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "finish: %s", r->str);
    return r;
}

/* The lean flag of a claimed task (0 for a full claim). */
static int is_lean(const redisReply *t) {
    return t->elements == 10 && t->element[9]->integer == 1;
}

/* ----------------------------------------------------------------- the happy path */

START_TEST(test_lean_enqueue_fetch_ack_write_no_hash) {
    redisReply *r, *claimed, *lean[5];
    char id[128];
    lean_queue("lq");
    r = th_cmd(C, "FCALL dtq_enqueue 0 lq echo {\"n\":0} priority 7");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    ck_assert_str_eq(r->element[1]->str, "created");
    snprintf(id, sizeof(id), "%s", r->element[0]->str);
    freeReplyObject(r);
    ck_assert_msg(!strncmp(id, "lq:p7:", 6), "lean id %s is not <queue>:p<band>:<entry-id>", id);
    ck_assert_int_eq(task_keys(), 0);
    r = th_cmd(C, "XRANGE dtq:stream:lq:p7 - +");
    ck_assert_int_eq(r->elements, 1);
    ck_assert_str_eq(r->element[0]->element[0]->str, id + 6); /* the id names the entry */
    ck_assert_str_eq(th_entry_field(r->element[0], "lean"), "1");
    ck_assert_str_eq(th_entry_field(r->element[0], "task_type"), "echo");
    ck_assert_str_eq(th_entry_field(r->element[0], "payload"), "{\"n\":0}");
    freeReplyObject(r);
    for (int i = 1; i < 5; i++)
        freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 lq echo {\"n\":%d}", i));
    ck_assert_int_eq(qlen("lq"), 5);
    /* the producer's options that name one task are refused; a delayed task is a full one */
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 lq echo 1 idempotency_key k"),
                      "INVALID_ARGUMENT idempotency_key is refused on lean queue lq");
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 lq echo 1 task_id t1"), "INVALID_ARGUMENT");
    claimed = fetch("w1", 10, "lq");
    ck_assert_int_eq(claimed->element[0]->elements, 5);
    for (int i = 0; i < 5; i++) {
        redisReply *t = claimed->element[0]->element[i];
        ck_assert(is_lean(t));
        ck_assert_int_eq(t->element[6]->integer, 1); /* attempt */
        ck_assert_int_eq(t->element[7]->integer, 3); /* echo's max_attempts */
        ck_assert_int_eq(t->element[8]->integer, 1000);
        ck_assert_str_eq(t->element[3]->str, "lq");
        lean[i] = t;
    }
    ck_assert_int_eq(task_keys(), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:lq:p5")), 4);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:lq:p7")), 1);
    /* the five successes: one call, one word (their count), the entries gone */
    r = finish_mixed("w1", NULL, 0, lean, 5);
    ck_assert_int_eq(r->elements, 1);
    ck_assert_int_eq(r->element[0]->integer, 5);
    freeReplyObject(r);
    freeReplyObject(claimed);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:lq:p5")), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:lq:p7")), 0);
    r = th_cmd(C, "XPENDING dtq:stream:lq:p5 workers");
    ck_assert_int_eq(r->element[0]->integer, 0);
    freeReplyObject(r);
    ck_assert_int_eq(qlen("lq"), 0);
    ck_assert_int_eq(task_keys(), 0);
    /* a delayed task waits in the schedule: a full task */
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 lq echo 1 delay_ms 60000"));
    ck_assert_int_eq(task_keys(), 1);
}
END_TEST

/* Events, the mode in stats and the audit of a mode change. */
START_TEST(test_lean_events_stats_audit) {
    redisReply *r, *claimed, *t;
    char id[128];
    freeReplyObject(th_cmd(C, "HSET dtq:config events_stream_maxlen 1000"));
    lean_queue("lq");
    th_expect_str(th_cmd(C, "FCALL dtq_queue_mode 0 tester lq lean"), "lean"); /* no change */
    r = th_cmd(C, "XRANGE dtq:stream:audit - +");
    ck_assert_int_eq(r->elements, 1);
    ck_assert_str_eq(th_entry_field(r->element[0], "action"), "queue_mode");
    ck_assert_str_eq(th_entry_field(r->element[0], "mode"), "lean");
    ck_assert_str_eq(th_entry_field(r->element[0], "queue"), "lq");
    freeReplyObject(r);
    th_expect_refused(th_cmd(C, "FCALL dtq_queue_mode 0 tester lq fast"), "INVALID_ARGUMENT");
    r = th_cmd(C, "FCALL_RO dtq_stats 0");
    ck_assert_str_eq(r->element[6]->str, "queue:lq:mode");
    ck_assert_str_eq(r->element[7]->str, "lean");
    freeReplyObject(r);

    r = th_cmd(C, "FCALL dtq_enqueue 0 lq echo 1");
    snprintf(id, sizeof(id), "%s", r->element[0]->str);
    freeReplyObject(r);
    claimed = fetch("w1", 10, "lq");
    t = claimed->element[0]->element[0];
    r = finish_mixed("w1", NULL, 0, &t, 1);
    freeReplyObject(r);
    freeReplyObject(claimed);
    r = th_cmd(C, "XRANGE dtq:stream:events - +");
    ck_assert_int_eq(r->elements, 3);
    ck_assert_ptr_nonnull(strstr(th_entry_field(r->element[0], "event"), "TASK_QUEUED"));
    ck_assert_ptr_nonnull(strstr(th_entry_field(r->element[1], "event"), "TASK_STARTED"));
    ck_assert_ptr_nonnull(strstr(th_entry_field(r->element[2], "event"), "TASK_SUCCEEDED"));
    for (int i = 0; i < 3; i++)
        ck_assert_ptr_nonnull(strstr(th_entry_field(r->element[i], "event"), id));
    freeReplyObject(r);
    ck_assert_int_eq(task_keys(), 0);
}
END_TEST

/* ----------------------------------------------------------------- failures */

/* A failed lean attempt materialises the task; it then retries and dead-letters with the
 * same fields as a full task that went the same way. */
START_TEST(test_lean_failure_materialises_retries_dead_letters) {
    redisReply *r, *claimed, *full_claimed;
    dtq_finish_record rec[2];
    char lid[128];
    lean_queue("lq");
    th_queue_groups(C, "fq");
    r = th_cmd(C, "FCALL dtq_enqueue 0 lq echo {\"x\":1} priority 3 max_attempts 2");
    snprintf(lid, sizeof(lid), "%s", r->element[0]->str);
    freeReplyObject(r);
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 fq echo {\"x\":1} priority 3 max_attempts 2 "
                              "task_id f1"));
    for (int attempt = 1; attempt <= 2; attempt++) {
        claimed = fetch("w1", 10, "lq");
        full_claimed = fetch("w1", 10, "fq");
        ck_assert_int_eq(claimed->element[0]->elements, 1);
        ck_assert_int_eq(is_lean(claimed->element[0]->element[0]), attempt == 1);
        ck_assert_int_eq(claimed->element[0]->element[0]->element[6]->integer, attempt);
        rec[0] = th_finish_record(claimed->element[0]->element[0]);
        rec[1] = th_finish_record(full_claimed->element[0]->element[0]);
        for (int i = 0; i < 2; i++) {
            rec[i].outcome = attempt == 1 ? DTQ_OUTCOME_RETRY : DTQ_OUTCOME_DEAD_LETTER;
            rec[i].error = (char *)"boom";
            rec[i].error_class = attempt == 1 ? "retryable" : "permanent";
            rec[i].delay_ms = 0;
        }
        r = finish_mixed("w1", rec, 2, NULL, 0);
        ck_assert_str_eq(r->element[0]->str, attempt == 1 ? "retrying" : "dead_lettered");
        ck_assert_str_eq(r->element[1]->str, attempt == 1 ? "retrying" : "dead_lettered");
        freeReplyObject(r);
        freeReplyObject(claimed);
        freeReplyObject(full_claimed);
        if (attempt == 1) {
            /* the hash of a full task: the entry's fields, its band, the resolved limits */
            th_assert_field(C, lid, "status", "retrying");
            th_assert_field(C, lid, "queue", "lq");
            th_assert_field(C, lid, "priority", "3");
            th_assert_field(C, lid, "max_attempts", "2");
            th_assert_field(C, lid, "timeout_ms", "1000");
            th_assert_field(C, lid, "payload", "{\"x\":1}");
            ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:lq:p3")), 0);
            ck_assert_int_eq(qlen("lq"), 0);
            freeReplyObject(th_cmd(C, "FCALL dtq_sched_claim 2 dtq:retry:schedule "
                                      "dtq:retry:claimed 10 60000"));
            r = th_cmd(C, "FCALL dtq_sched_promote 1 dtq:retry:claimed w1 %s f1", lid);
            ck_assert_int_eq(r->integer, 2);
            freeReplyObject(r);
            ck_assert_int_eq(qlen("lq"), 1);
        }
    }
    r = th_cmd(C, "XRANGE dtq:stream:dead-letter - +");
    ck_assert_int_eq(r->elements, 2);
    {
        const char *same[] = {
            "queue",    "task_type",  "payload",    "attempt",          "max_attempts",
            "priority", "timeout_ms", "last_error", "last_error_class", "attempts_made",
            NULL};
        for (int i = 0; same[i]; i++) {
            const char *a = th_entry_field(r->element[0], same[i]);
            const char *b = th_entry_field(r->element[1], same[i]);
            if (!strcmp(same[i], "queue")) {
                ck_assert_str_eq(a, "lq");
                ck_assert_str_eq(b, "fq");
                continue;
            }
            ck_assert_msg(!strcmp(a, b), "%s: lean %s, full %s", same[i], a, b);
        }
        ck_assert_str_eq(th_entry_field(r->element[0], "task_id"), lid);
        ck_assert_str_eq(th_entry_field(r->element[0], "attempt"), "2");
    }
    freeReplyObject(r);
    th_assert_field(C, lid, "status", "dead_lettered");
    /* requeue: a full task from now on */
    th_expect_str(th_cmd(C, "FCALL dtq_requeue 0 %s", lid), "queued");
    claimed = fetch("w1", 10, "lq");
    ck_assert_int_eq(claimed->element[0]->elements, 1);
    ck_assert(!is_lean(claimed->element[0]->element[0]));
    ck_assert_str_eq(claimed->element[0]->element[0]->element[2]->str, lid);
    freeReplyObject(claimed);
}
END_TEST

/* A finish record of another worker (or attempt) for a lean entry is stale: nothing
 * written, the entry stays pending. */
START_TEST(test_lean_stale_failure) {
    redisReply *r, *claimed;
    dtq_finish_record rec;
    lean_queue("lq");
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 lq echo 1"));
    claimed = fetch("w1", 10, "lq");
    rec = th_finish_record(claimed->element[0]->element[0]);
    rec.outcome = DTQ_OUTCOME_RETRY;
    rec.error = (char *)"boom";
    rec.error_class = "retryable";
    r = finish_mixed("w2", &rec, 1, NULL, 0);
    ck_assert_str_eq(r->element[0]->str, "stale");
    freeReplyObject(r);
    rec.attempt = 2;
    r = finish_mixed("w1", &rec, 1, NULL, 0);
    ck_assert_str_eq(r->element[0]->str, "stale");
    freeReplyObject(r);
    ck_assert_int_eq(task_keys(), 0);
    r = th_cmd(C, "XPENDING dtq:stream:lq:p5 workers");
    ck_assert_int_eq(r->element[0]->integer, 1);
    freeReplyObject(r);
    freeReplyObject(claimed);
}
END_TEST

/* ----------------------------------------------------------------- cancel */

START_TEST(test_lean_cancel_waiting_and_running) {
    redisReply *r, *claimed, *t;
    dtq_finish_record rec;
    char w[128], run1[128], run2[128];
    lean_queue("lq");
    r = th_cmd(C, "FCALL dtq_enqueue 0 lq echo 1");
    snprintf(w, sizeof(w), "%s", r->element[0]->str);
    freeReplyObject(r);
    ck_assert_int_eq(qlen("lq"), 1);
    /* waiting: deleted at once */
    th_expect_str(th_cmd(C, "FCALL dtq_cancel 0 %s admin", w), "cancelled");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:lq:p5")), 0);
    ck_assert_int_eq(qlen("lq"), 0);
    th_expect_refused(th_cmd(C, "FCALL dtq_cancel 0 %s", w), "NOT_FOUND");
    th_expect_refused(th_cmd(C, "FCALL dtq_cancel 0 lq:p5:1-1"), "NOT_FOUND");

    /* running: materialised with cancel_requested (what the heartbeat's probe reads) */
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 lq echo 1"));
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 lq echo 2"));
    claimed = fetch("w1", 10, "lq");
    snprintf(run1, sizeof(run1), "%s", claimed->element[0]->element[0]->element[2]->str);
    snprintf(run2, sizeof(run2), "%s", claimed->element[0]->element[1]->element[2]->str);
    th_expect_str(th_cmd(C, "FCALL dtq_cancel 0 %s admin", run1), "cancel_requested");
    th_expect_str(th_cmd(C, "FCALL dtq_cancel 0 %s admin", run2), "cancel_requested");
    th_assert_field(C, run1, "cancel_requested", "1");
    th_assert_field(C, run1, "status", "running");
    th_assert_field(C, run1, "worker_id", "w1");
    /* run1's handler stops (cancelled); run2 succeeded before the probe saw the request */
    rec = th_finish_record(claimed->element[0]->element[0]);
    rec.outcome = DTQ_OUTCOME_CANCELLED;
    rec.error = (char *)"cancelled";
    rec.error_class = "cancelled";
    t = claimed->element[0]->element[1];
    r = finish_mixed("w1", &rec, 1, &t, 1);
    ck_assert_str_eq(r->element[0]->str, "cancelled");
    ck_assert_int_eq(r->element[1]->integer, 1);
    freeReplyObject(r);
    freeReplyObject(claimed);
    th_assert_field(C, run1, "status", "cancelled");
    th_assert_field(C, run2, "status", "succeeded");
    ck_assert_int_gt(th_int(th_cmd(C, "TTL dtq:task:%s", run2)), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "SCARD dtq:cancelled")), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:lq:p5")), 0);
    ck_assert_int_eq(qlen("lq"), 0);
}
END_TEST

/* ----------------------------------------------------------------- limits of the queue */

START_TEST(test_lean_queue_full) {
    redisReply *r, *claimed, *ts[2];
    freeReplyObject(th_cmd(C, "HSET dtq:config max_queue_depth 2"));
    lean_queue("lq");
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 lq echo 1"));
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 lq echo 2 priority 9"));
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 lq echo 3"), "QUEUE_FULL");
    r = th_cmd(C, "FCALL dtq_enqueue_bulk 0 lq echo 1 4");
    ck_assert_int_eq(r->element[0]->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    claimed = fetch("w1", 10, "lq");
    ck_assert_int_eq(claimed->element[0]->elements, 2);
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 lq echo 3"), "QUEUE_FULL"); /* running */
    ts[0] = claimed->element[0]->element[0];
    ts[1] = claimed->element[0]->element[1];
    freeReplyObject(finish_mixed("w1", NULL, 0, ts, 2));
    freeReplyObject(claimed);
    ck_assert_int_eq(qlen("lq"), 0);
    r = th_cmd(C, "FCALL dtq_enqueue_bulk 0 lq echo 3 5 6 7");
    ck_assert_int_eq(r->element[0]->type, REDIS_REPLY_STRING);
    ck_assert_int_eq(r->element[1]->type, REDIS_REPLY_STRING);
    ck_assert_int_eq(r->element[2]->type, REDIS_REPLY_ERROR);
    ck_assert_msg(!strncmp(r->element[0]->str, "lq:p5:", 6), "bulk id %s", r->element[0]->str);
    freeReplyObject(r);
    ck_assert_int_eq(qlen("lq"), 2);
    ck_assert_int_eq(task_keys(), 0);
}
END_TEST

/* Entries of both kinds wait while the mode changes: each runs as it was written; a
 * producer's raw entry takes the mode its queue has when it is read. */
START_TEST(test_lean_mode_switch) {
    redisReply *r, *claimed;
    th_queue_groups(C, "mq");
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 mq echo 1 task_id full1"));
    th_expect_str(th_cmd(C, "FCALL dtq_queue_mode 0 tester mq lean"), "lean");
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 mq echo 2"));
    freeReplyObject(th_cmd(C, "XADD dtq:stream:mq:p5 * task_type echo payload 3"));
    freeReplyObject(th_cmd(C, "XADD dtq:stream:mq:p5 * task_type echo payload 4 task_id raw4"));
    th_expect_str(th_cmd(C, "FCALL dtq_queue_mode 0 tester mq full"), "full");
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 mq echo 5 task_id full5"));
    r = th_cmd(C, "GET dtq:queue:mq:mode");
    ck_assert_int_eq(r->type, REDIS_REPLY_NIL);
    freeReplyObject(r);
    claimed = fetch("w1", 10, "mq");
    ck_assert_int_eq(claimed->element[0]->elements, 5);
    /* th_fetch lists the claims in serving order (entry ids), whichever part of the reply
     * carried them */
    ck_assert(!is_lean(claimed->element[0]->element[0])); /* full1: full-claims */
    ck_assert(is_lean(claimed->element[0]->element[1]));  /* lean, marked: lean-claims */
    ck_assert(!is_lean(claimed->element[0]->element[2])); /* raw, read full */
    ck_assert(!is_lean(claimed->element[0]->element[3])); /* raw with an id */
    ck_assert(!is_lean(claimed->element[0]->element[4])); /* full5 */
    ck_assert_str_eq(claimed->element[0]->element[1]->element[5]->str, "2");
    freeReplyObject(claimed);
    ck_assert_int_eq(task_keys(), 4);
    ck_assert_int_eq(qlen("mq"), 5);
    /* a raw entry read while the queue is lean runs lean (unless it carries a task_id) */
    th_expect_str(th_cmd(C, "FCALL dtq_queue_mode 0 tester mq lean"), "lean");
    freeReplyObject(th_cmd(C, "XADD dtq:stream:mq:p5 * task_type echo payload 6"));
    claimed = fetch("w1", 10, "mq");
    ck_assert_int_eq(claimed->element[0]->elements, 1);
    ck_assert(is_lean(claimed->element[0]->element[0]));
    freeReplyObject(claimed);
    ck_assert_int_eq(task_keys(), 4);
    ck_assert_int_eq(qlen("mq"), 6); /* the raw entry counts from its first read */
}
END_TEST

/* dtq_lean_claims_decode's sink for the test below: ts[0], then ts[1]. */
static void collect(dtq_task *t, void *arg) {
    dtq_task **ts = arg;
    if (!ts[0]) {
        ts[0] = t;
    } else if (!ts[1]) {
        ts[1] = t;
    } else {
        dtq_task_free(t);
    }
}

/* The reply's lean-claims as Redis sends them (reference 5.4): a group per stream (stream,
 * queue, band, m, then m times entry_id, task_type, payload, max_attempts, timeout_ms) for
 * the plain entries; an entry with options, a malformed plain-shaped one, one whose id a
 * cancel left in <p>:cancelled and the entries of a queue with a limit take the general
 * path. */
START_TEST(test_lean_claims_shape) {
    redisReply *r, *g;
    dtq_argv a;
    char p7[64], pa[64];
    lean_queue("lq");
    r = th_cmd(C, "FCALL dtq_enqueue 0 lq echo {\"a\":7} priority 7");
    snprintf(p7, sizeof(p7), "%s", r->element[0]->str + 6);
    freeReplyObject(r);
    r = th_cmd(C, "FCALL dtq_enqueue 0 lq other [1]");
    snprintf(pa, sizeof(pa), "%s", r->element[0]->str + 6);
    freeReplyObject(r);
    r = th_cmd(C, "FCALL dtq_enqueue 0 lq echo 2"); /* cancelled below */
    freeReplyObject(
        th_cmd(C, "SADD dtq:cancelled %s", r->element[0]->str)); /* as a cancel leaves it */
    freeReplyObject(r);
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 lq echo 3 max_attempts 2")); /* options */
    freeReplyObject(
        th_cmd(C, "XADD dtq:stream:lq:p5 * lean 1 task_type %s payload {}", "bad!type"));
    freeReplyObject(
        th_cmd(C, "XADD dtq:stream:lq:p5 * lean 1 task_type echo payload \"0123456789\""));
    freeReplyObject(th_cmd(C, "HSET dtq:config max_payload_bytes 8")); /* the last one is over */
    /* marked entries count as a Function's (from their XADD): counted here as one would */
    freeReplyObject(th_cmd(C, "INCRBY dtq:queue:lq:length 2"));
    ck_assert_int_eq(qlen("lq"), 6);
    th_fetch_argv(&a, "w1", 10, "lq", POLICY);
    r = redisCommandArgv(C, a.argc, (const char **)a.argv, a.lens);
    dtq_argv_deinit(&a);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY && r->elements == 5, "fetch: %s", r->str);
    ck_assert_int_eq(r->element[2]->integer, 6);
    /* the entry with an option: a 10-element lean claim */
    ck_assert_int_eq(r->element[0]->elements, 1);
    ck_assert(is_lean(r->element[0]->element[0]));
    ck_assert_int_eq(r->element[0]->element[0]->element[7]->integer, 2);
    g = r->element[3];
    ck_assert_int_eq(g->elements, 2 * 4 + 2 * 5);
    ck_assert_str_eq(g->element[0]->str, "dtq:stream:lq:p7");
    ck_assert_str_eq(g->element[1]->str, "lq");
    ck_assert_int_eq(g->element[2]->integer, 7);
    ck_assert_int_eq(g->element[3]->integer, 1);
    ck_assert_str_eq(g->element[4]->str, p7);
    ck_assert_str_eq(g->element[5]->str, "echo");
    ck_assert_str_eq(g->element[6]->str, "{\"a\":7}");
    ck_assert_int_eq(g->element[7]->integer, 3); /* echo's policy */
    ck_assert_int_eq(g->element[8]->integer, 1000);
    ck_assert_str_eq(g->element[9]->str, "dtq:stream:lq:p5");
    ck_assert_int_eq(g->element[11]->integer, 5);
    ck_assert_int_eq(g->element[12]->integer, 1);
    ck_assert_str_eq(g->element[13]->str, pa);
    ck_assert_str_eq(g->element[14]->str, "other");
    ck_assert_int_eq(g->element[16]->integer, 5); /* the policy's default */
    ck_assert_int_eq(g->element[17]->integer, 30000);
    /* the daemon's decoder makes the tasks the claims name */
    {
        dtq_task *ts[2] = {NULL, NULL};
        int n = 0;
        char err[128], id[96];
        ck_assert_int_eq(dtq_lean_claims_decode(g, collect, ts, err, sizeof(err)), 2);
        for (; n < 2 && ts[n]; n++) ck_assert(ts[n]->lean && ts[n]->attempt == 1);
        ck_assert_int_eq(n, 2);
        snprintf(id, sizeof(id), "lq:p7:%s", p7);
        ck_assert_str_eq(ts[0]->id, id);
        ck_assert_str_eq(ts[0]->stream, "dtq:stream:lq:p7");
        ck_assert_str_eq(ts[1]->task_type, "other");
        ck_assert_int_eq(ts[1]->max_attempts, 5);
        dtq_task_free(ts[0]);
        dtq_task_free(ts[1]);
        ts[0] = ts[1] = NULL;
        g->elements--; /* a group cut short is refused */
        ck_assert_int_eq(dtq_lean_claims_decode(g, collect, ts, err, sizeof(err)), -1);
        dtq_task_free(ts[0]); /* the first group's task was handed over */
        g->elements++;
    }
    freeReplyObject(r);
    /* cancelled: deleted, out of the set; the two malformed ones dead-lettered */
    ck_assert_int_eq(th_int(th_cmd(C, "SCARD dtq:cancelled")), 0);
    r = th_cmd(C, "XRANGE dtq:stream:dead-letter - +");
    ck_assert_int_eq(r->elements, 2);
    ck_assert_str_eq(th_entry_field(r->element[0], "last_error_class"), "invalid_entry");
    ck_assert_str_eq(th_entry_field(r->element[1], "last_error_class"), "invalid_entry");
    freeReplyObject(r);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:lq:p5")), 2); /* pending: a and the option */
    ck_assert_int_eq(qlen("lq"), 3);

    /* a queue with a limit: its plain entries run as full tasks, no lean-claims */
    lean_queue("lim");
    th_expect_str(th_cmd(C, "FCALL dtq_limit_set 0 me lim %s concurrency 100", ""), "set");
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 lim echo 1"));
    th_fetch_argv(&a, "w1", 10, "lim", POLICY);
    r = redisCommandArgv(C, a.argc, (const char **)a.argv, a.lens);
    dtq_argv_deinit(&a);
    ck_assert_int_eq(r->element[0]->elements, 1);
    ck_assert(!is_lean(r->element[0]->element[0]));
    ck_assert_int_eq(r->element[3]->elements, 0);
    freeReplyObject(r);
}
END_TEST

/* ----------------------------------------------------------------- lost workers */

START_TEST(test_lean_adopted_recovered_handed_back) {
    redisReply *r, *claimed, *t;
    char id[128];
    lean_queue("lq");
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 lq echo 1"));
    freeReplyObject(fetch("w1", 10, "lq"));
    /* w1 died: w2's reap adopts the entry, an attempt counted, still lean */
    r = th_cmd(C, "FCALL dtq_reap 1 dtq:stream:lq:p5 w2 0 10 16 %s lq 5 0-0", POLICY);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "reap: %s", r->str);
    ck_assert_int_eq(r->element[0]->elements, 1);
    t = r->element[0]->element[0];
    ck_assert(is_lean(t));
    ck_assert_int_eq(t->element[6]->integer, 2);
    snprintf(id, sizeof(id), "%s", t->element[2]->str);
    freeReplyObject(r);
    ck_assert_int_eq(task_keys(), 0);
    /* w2's reply was lost: recover hands it over again at the same attempt */
    r = th_cmd(C, "FCALL dtq_recover 1 dtq:stream:lq:p5 w2 lost %s 0 lq 5", POLICY);
    ck_assert_int_eq(r->elements, 1);
    ck_assert(is_lean(r->element[0]));
    ck_assert_int_eq(r->element[0]->element[6]->integer, 2);
    freeReplyObject(r);
    /* w2 drains: handed back, materialised at the next attempt with a full entry */
    r = th_cmd(C, "FCALL dtq_handback 0 w2 1 %s 2 dtq:stream:lq:p5 %s stop", id, id + 6);
    ck_assert_int_eq(r->elements, 1);
    ck_assert_str_eq(r->element[0]->str, "queued");
    freeReplyObject(r);
    th_assert_field(C, id, "status", "queued");
    th_assert_field(C, id, "attempt", "3");
    th_assert_field(C, id, "last_error_class", "interrupted");
    claimed = fetch("w3", 10, "lq");
    ck_assert_int_eq(claimed->element[0]->elements, 1);
    ck_assert(!is_lean(claimed->element[0]->element[0]));
    ck_assert_int_eq(claimed->element[0]->element[0]->element[6]->integer, 3);
    freeReplyObject(claimed);
    ck_assert_int_eq(qlen("lq"), 1);
}
END_TEST

/* A lost attempt that was the last: materialised and dead-lettered as worker_lost. */
START_TEST(test_lean_lost_last_attempt) {
    redisReply *r;
    char id[128];
    lean_queue("lq");
    r = th_cmd(C, "FCALL dtq_enqueue 0 lq echo 1 max_attempts 1");
    snprintf(id, sizeof(id), "%s", r->element[0]->str);
    freeReplyObject(r);
    freeReplyObject(fetch("w1", 10, "lq"));
    r = th_cmd(C, "FCALL dtq_reap 1 dtq:stream:lq:p5 w2 0 10 16 %s lq 5 0-0", POLICY);
    ck_assert_int_eq(r->element[0]->elements, 0);
    freeReplyObject(r);
    th_assert_field(C, id, "status", "dead_lettered");
    th_assert_field(C, id, "last_error_class", "worker_lost");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:lq:p5")), 0);
    ck_assert_int_eq(qlen("lq"), 0);
    /* and the TTL of a lean entry is checked at its fetch */
    freeReplyObject(th_cmd(C, "XADD dtq:stream:lq:p5 1-1 lean 1 task_type echo payload 1 "
                              "ttl_seconds 1"));
    freeReplyObject(th_cmd(C, "INCR dtq:queue:lq:length"));
    r = fetch("w1", 10, "lq");
    ck_assert_int_eq(r->element[0]->elements, 0);
    freeReplyObject(r);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:lq:p5")), 0);
    ck_assert_int_eq(qlen("lq"), 0);
}
END_TEST

/* ----------------------------------------------------------------- the daemon */

#define LEAN_INI                                                                                   \
    "[worker]\nworker_id = %s\nqueues = lq\nconcurrency = 8\nheartbeat_interval_s = 1\n"           \
    "visibility_timeout_s = 3\ndrain_timeout_s = 5\n[queue:lq]\nmode = lean\n"                     \
    "[limits]\nevents_stream_maxlen = 100000\n"                                                    \
    "[retry]\nbase_delay = 0.2\nmax_delay = 0.5\njitter = 0\n"                                     \
    "[scheduler]\ninterval_ms = 100\nleader_lock_ms = 2000\n"                                      \
    "[handler:noop]\nbuiltin = noop\n[handler:fail]\nbuiltin = fail\n"                             \
    "[handler:sleep]\nbuiltin = sleep\n"

static void start_lean(th_daemon *d, const char *id) {
    char ini[4096];
    snprintf(ini, sizeof(ini), LEAN_INI, id);
    th_daemon_start(d, &R, ini);
    th_daemon_wait_ready(C, id, 10000);
    ck_assert(th_wait_until_cmd_str(C, "GET dtq:queue:lq:mode", "lean", 5000));
}

/* Nothing left in lq's streams, waiting or pending. */
static int lq_drained(void *arg) {
    long long n = 0;
    DTQ_UNUSED(arg);
    for (int b = 0; b < 10; b++) n += th_int(th_cmd(C, "XLEN dtq:stream:lq:p%d", b));
    return n == 0;
}

/* How many events of `type` (at `attempt`, 0: any) the events stream holds for task `id`
 * (NULL: any task). */
static int events_of(const char *type, const char *id, int attempt) {
    redisReply *r = th_cmd(C, "XRANGE dtq:stream:events - +");
    char t[64], a[32], tid[160];
    int n = 0;
    snprintf(t, sizeof(t), "\"type\":\"%s\"", type);
    snprintf(a, sizeof(a), "\"attempt\":%d,", attempt);
    snprintf(tid, sizeof(tid), "\"task_id\":\"%s\"", id ? id : "");
    for (size_t i = 0; i < r->elements; i++) {
        const char *ev = r->element[i]->element[1]->element[1]->str;
        if (strstr(ev, t) && (!attempt || strstr(ev, a)) && (!id || strstr(ev, tid))) n++;
    }
    freeReplyObject(r);
    return n;
}

START_TEST(test_daemon_drains_a_lean_queue) {
    th_daemon d;
    redisReply *r;
    char failed[128];
    start_lean(&d, "w-lean");
    for (int i = 0; i < 300; i++) redisAppendCommand(C, "FCALL dtq_enqueue 0 lq noop {}");
    for (int i = 0; i < 300; i++) {
        ck_assert_int_eq(redisGetReply(C, (void **)&r), REDIS_OK);
        ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
        freeReplyObject(r);
    }
    r = th_cmd(C, "FCALL dtq_enqueue 0 lq fail {} max_attempts 2");
    snprintf(failed, sizeof(failed), "%s", r->element[0]->str);
    freeReplyObject(r);
    ck_assert(th_wait_until(lq_drained, NULL, 20000));
    th_expect_status(C, failed, "dead_lettered", 10000); /* a permanent failure */
    ck_assert_int_eq(task_keys(), 1);                    /* the failed one alone */
    th_assert_field(C, failed, "attempt", "1");
    th_assert_field(C, failed, "last_error_class", "permanent");
    ck_assert_int_eq(events_of("TASK_SUCCEEDED", NULL, 1), 300);
    ck_assert_int_eq(events_of("TASK_DEAD_LETTERED", failed, 1), 1);
    ck_assert_int_eq(qlen("lq"), 0);
    th_daemon_stop(&d, SIGTERM, 10000);
}
END_TEST

/* A SIGKILLed daemon's lean tasks: adopted by another daemon (attempt 2, still lean), the
 * one whose lost attempt was its last dead-lettered; a running lean task is cancelled
 * through the heartbeat's probe. */
START_TEST(test_daemon_sigkill_adoption_and_cancel) {
    th_daemon a, b;
    redisReply *r;
    char id[3][128];
    start_lean(&a, "w-victim");
    for (int i = 0; i < 3; i++) {
        r = th_cmd(C, "FCALL dtq_enqueue 0 lq sleep {\"ms\":1500} max_attempts %d", i == 2 ? 1 : 3);
        snprintf(id[i], sizeof(id[i]), "%s", r->element[0]->str);
        freeReplyObject(r);
    }
    for (int i = 0; i < 50 && events_of("TASK_STARTED", NULL, 1) < 3; i++) th_sleep_ms(100);
    ck_assert_int_eq(events_of("TASK_STARTED", NULL, 1), 3);
    th_daemon_stop(&a, SIGKILL, 5000);
    start_lean(&b, "w-rescuer");
    ck_assert(th_wait_until(lq_drained, NULL, 20000));
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(events_of("TASK_SUCCEEDED", id[i], 2), 1);
        ck_assert_int_eq(events_of("TASK_STARTED", id[i], 0), 2); /* never started twice */
    }
    th_expect_status(C, id[2], "dead_lettered", 5000);
    th_assert_field(C, id[2], "last_error", "worker_lost");
    ck_assert_int_eq(task_keys(), 1);

    /* cancel of a running lean task: the probe stops its handler */
    r = th_cmd(C, "FCALL dtq_enqueue 0 lq sleep {\"ms\":20000}");
    snprintf(id[0], sizeof(id[0]), "%s", r->element[0]->str);
    freeReplyObject(r);
    for (int i = 0; i < 50 && events_of("TASK_STARTED", id[0], 1) < 1; i++) th_sleep_ms(100);
    th_expect_str(th_cmd(C, "FCALL dtq_cancel 0 %s", id[0]), "cancel_requested");
    th_expect_status(C, id[0], "cancelled", 5000);
    ck_assert(th_wait_until(lq_drained, NULL, 5000));
    ck_assert_int_eq(th_int(th_cmd(C, "SCARD dtq:cancelled")), 0);
    th_daemon_stop(&b, SIGTERM, 10000);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("lean");
    TCase *tc = tcase_create("functions");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_lean_enqueue_fetch_ack_write_no_hash);
    tcase_add_test(tc, test_lean_events_stats_audit);
    tcase_add_test(tc, test_lean_failure_materialises_retries_dead_letters);
    tcase_add_test(tc, test_lean_stale_failure);
    tcase_add_test(tc, test_lean_cancel_waiting_and_running);
    tcase_add_test(tc, test_lean_queue_full);
    tcase_add_test(tc, test_lean_mode_switch);
    tcase_add_test(tc, test_lean_claims_shape);
    tcase_add_test(tc, test_lean_adopted_recovered_handed_back);
    tcase_add_test(tc, test_lean_lost_last_attempt);
    suite_add_tcase(s, tc);
    tc = tcase_create("daemon");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_daemon_drains_a_lean_queue);
    tcase_add_test(tc, test_daemon_sigkill_adoption_and_cancel);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return th_run_suite(suite());
}
