/* limit.c: rate and concurrency limits' Functions (lua/fn/limit.lua, lua/lib/limits.lua;
 * docs/reference.md 5.7) against a real redis-server, without a daemon: <ns>_limit_set's
 * refusals and audit, <ns>_limit_remove, <ns>_limit_list's JSON; a claim over a limit
 * deferred without using an attempt (pending, limited_by, in the schedule, its entry
 * settled) and admitted when promoted; the slots given back on success, retry, failure,
 * cancel and hand-back; a stale slot healed; per-key buckets apart; a rate's deferrals spaced
 * by its interval; a queue without limits claims as before and writes no limit state. With
 * daemons and dtqctl: it_limits.c. Its own helpers (queues of its own, a POLICY without
 * per-type entries), so not lua_suite.h's. */
#include <cjson/cJSON.h>
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "finisher.h"
#include "harness.h"
#include "util.h"

TH_LIBRARY_FIXTURE();

#define POLICY "{\"d\":[5,30000],\"t\":{}}"

/* ----------------------------------------------------------------- helpers */

/* The command must be refused with an error starting with `prefix` and holding `needle`. */
static void expect_err(const char *prefix, const char *needle, const char *fmt, ...) {
    va_list ap;
    redisReply *r;
    va_start(ap, fmt);
    r = redisvCommand(C, fmt, ap);
    va_end(ap);
    ck_assert_msg(r != NULL, "%s: %s", fmt, C->errstr);
    ck_assert_msg(r->type == REDIS_REPLY_ERROR, "%s: not refused (type %d %s)", fmt, r->type,
                  r->str ? r->str : "");
    ck_assert_msg(!strncmp(r->str, prefix, strlen(prefix)) && strstr(r->str, needle),
                  "%s: %s, want %s ... %s", fmt, r->str, prefix, needle);
    freeReplyObject(r);
}

/* A ZSCORE (a number as a string): the score, or -1 when there is none. */
static long long score_of(const char *key, const char *member) {
    redisReply *r = th_cmd(C, "ZSCORE %s %s", key, member);
    long long v = r->type == REDIS_REPLY_STRING ? atoll(r->str) : -1;
    freeReplyObject(r);
    return v;
}

/* Fetches up to n tasks of `queue` as w1; returns the reply (the caller frees). */
static redisReply *fetch(const char *queue, int n) {
    th_queue_groups(C, queue);
    return th_fetch(C, "w1", n, queue, POLICY);
}

static size_t claimed_n(const redisReply *r) {
    return r->element[0]->elements;
}

static const char *claimed_id(const redisReply *r, size_t i) {
    return r->element[0]->element[i]->element[2]->str;
}

/* Finishes the claimed task i of r as w1 with `outcome`; returns the reply's word. */
static char *finish(const redisReply *r, size_t i, enum dtq_outcome_kind outcome) {
    dtq_finish_record rec = th_finish_record(r->element[0]->element[i]);
    redisReply *f;
    char *word;
    rec.outcome = outcome;
    rec.error = (char *)"boom";
    rec.error_class = "test";
    rec.delay_ms = 60000;
    f = th_finish(C, "w1", &rec, 1);
    word = strdup(f->element[0]->str);
    freeReplyObject(f);
    return word;
}

/* ----------------------------------------------------------------- Functions */

START_TEST(test_limit_set_refusals) {
    expect_err("INVALID_ARGUMENT", "give rate", "FCALL dtq_limit_set 0 me q %s", "");
    expect_err("INVALID_ARGUMENT", "rate needs period_ms", "FCALL dtq_limit_set 0 me q %s rate 5",
               "");
    expect_err("INVALID_ARGUMENT", "period_ms needs rate",
               "FCALL dtq_limit_set 0 me q %s period_ms 5 concurrency 1", "");
    expect_err("INVALID_ARGUMENT", "burst needs rate",
               "FCALL dtq_limit_set 0 me q %s burst 2 concurrency 1", "");
    expect_err("INVALID_ARGUMENT", "unknown option speed", "FCALL dtq_limit_set 0 me q %s speed 2",
               "");
    expect_err("INVALID_ARGUMENT", "concurrency must be an integer",
               "FCALL dtq_limit_set 0 me q %s concurrency 0", "");
    expect_err("INVALID_ARGUMENT", "per_key must be an integer",
               "FCALL dtq_limit_set 0 me q %s concurrency 1 per_key 2", "");
    expect_err("INVALID_ARGUMENT", "rate must be an integer",
               "FCALL dtq_limit_set 0 me q %s rate 1.5 period_ms 1000", "");
    expect_err("INVALID_ARGUMENT", "at most 1000 per ms",
               "FCALL dtq_limit_set 0 me q %s rate 5000 period_ms 2", "");
    expect_err("INVALID_ARGUMENT", "name value pairs", "FCALL dtq_limit_set 0 me q %s concurrency",
               "");
    expect_err("INVALID_ARGUMENT", "queue name", "FCALL dtq_limit_set 0 me q/x %s concurrency 1",
               "");
    expect_err("INVALID_ARGUMENT", "task_type", "FCALL dtq_limit_set 0 me q a/b concurrency 1");
    ck_assert_int_eq(th_intf(C, "EXISTS dtq:limits:q dtq:limits"), 0); /* nothing written */
    expect_err("NOT_FOUND", "q:send", "FCALL dtq_limit_remove 0 me q send");

    th_expect_str(th_cmd(C, "FCALL dtq_limit_set 0 alice q send concurrency 3"), "set");
    th_expect_str(th_cmd(C, "FCALL dtq_limit_set 0 alice q send rate 10 period_ms 1000"),
                  "set"); /* replaces */
    {
        cJSON *l = th_limit_list(C);
        ck_assert_int_eq(cJSON_GetArraySize(l), 1);
        ck_assert(cJSON_IsNull(th_json_at(cJSON_GetArrayItem(l, 0), "concurrency")));
        ck_assert_int_eq((int)th_json_num(cJSON_GetArrayItem(l, 0), "rate"), 10);
        cJSON_Delete(l);
    }
    th_expect_str(th_cmd(C, "FCALL dtq_limit_remove 0 alice q send"), "removed");
    expect_err("NOT_FOUND", "q:send", "FCALL dtq_limit_remove 0 alice q send");
    ck_assert_int_eq(th_intf(C, "EXISTS dtq:limits:q dtq:limits"), 0); /* the index too */
    { /* audited: two sets and a remove, by alice, with the target */
        redisReply *a = th_cmd(C, "XRANGE dtq:stream:audit - +");
        int sets = 0, removes = 0;
        for (size_t i = 0; i < a->elements; i++) {
            const redisReply *f = a->element[i]->element[1];
            const char *action = "", *actor = "", *target = "";
            for (size_t j = 0; j + 1 < f->elements; j += 2) {
                if (!strcmp(f->element[j]->str, "action")) action = f->element[j + 1]->str;
                if (!strcmp(f->element[j]->str, "actor")) actor = f->element[j + 1]->str;
                if (!strcmp(f->element[j]->str, "target")) target = f->element[j + 1]->str;
            }
            ck_assert_str_eq(actor, "alice");
            ck_assert_str_eq(target, "q:send");
            sets += !strcmp(action, "limit_set");
            removes += !strcmp(action, "limit_remove");
        }
        ck_assert_int_eq(sets, 2);
        ck_assert_int_eq(removes, 1);
        freeReplyObject(a);
    }
}
END_TEST

START_TEST(test_limit_list_shape) {
    redisReply *r;
    cJSON *l, *q, *t, *u;
    th_expect_str(
        th_cmd(C, "FCALL dtq_limit_set 0 me mail %s rate 2 period_ms 1000 burst 1 concurrency 5",
               ""),
        "set");
    th_expect_str(th_cmd(C, "FCALL dtq_limit_set 0 me mail send concurrency 1 per_key 1"), "set");
    th_enqueue_with_id(C, "mail", "send", "a1", "limit_key cust1");
    th_enqueue_with_id(C, "mail", "send", "a2", "limit_key cust2");
    r = fetch("mail", 10);
    ck_assert_int_eq((int)claimed_n(r), 2);
    freeReplyObject(r);
    l = th_limit_list(C);
    ck_assert_int_eq(cJSON_GetArraySize(l), 2);
    q = cJSON_GetArrayItem(l, 0); /* the queue-wide limit first */
    ck_assert_str_eq(th_json_at(q, "queue")->valuestring, "mail");
    ck_assert(cJSON_IsNull(th_json_at(q, "task_type")));
    ck_assert_str_eq(th_json_at(q, "target")->valuestring, "mail");
    ck_assert_int_eq((int)th_json_num(q, "rate"), 2);
    ck_assert_int_eq((int)th_json_num(q, "period_ms"), 1000);
    ck_assert_int_eq((int)th_json_num(q, "burst"), 1);
    ck_assert_int_eq((int)th_json_num(q, "concurrency"), 5);
    ck_assert(cJSON_IsFalse(th_json_at(q, "per_key")));
    u = (cJSON *)th_json_at(q, "use");
    ck_assert_int_eq((int)th_json_num(u, "running"), 2);
    ck_assert_int_eq((int)th_json_num(u, "tokens_left"), 0); /* burst 1: both tokens taken */
    ck_assert(cJSON_IsNull(th_json_at(u, "keys")));
    ck_assert(cJSON_IsNull(th_json_at(u, "deferred_until_ms")));
    t = cJSON_GetArrayItem(l, 1);
    ck_assert_str_eq(th_json_at(t, "task_type")->valuestring, "send");
    ck_assert_str_eq(th_json_at(t, "target")->valuestring, "mail:send");
    ck_assert(cJSON_IsNull(th_json_at(t, "rate")) && cJSON_IsNull(th_json_at(t, "period_ms")) &&
              cJSON_IsNull(th_json_at(t, "burst")));
    ck_assert_int_eq((int)th_json_num(t, "concurrency"), 1);
    ck_assert(cJSON_IsTrue(th_json_at(t, "per_key")));
    u = (cJSON *)th_json_at(t, "use");
    ck_assert_int_eq((int)th_json_num(u, "running"), 2); /* one per key */
    ck_assert_int_eq((int)th_json_num(u, "keys"), 2);
    ck_assert(cJSON_IsNull(th_json_at(u, "tokens_left")));
    cJSON_Delete(l);
    /* the keys the limits touch all name the queue */
    r = th_cmd(C, "KEYS dtq:limit*");
    for (size_t i = 0; i < r->elements; i++)
        ck_assert_msg(!strcmp(r->element[i]->str, "dtq:limits") ||
                          !strncmp(r->element[i]->str, "dtq:limits:mail", 15) ||
                          !strncmp(r->element[i]->str, "dtq:limit:mail/", 15),
                      "key %s", r->element[i]->str);
    freeReplyObject(r);
}
END_TEST

/* Concurrency 1: the second task is deferred with no attempt used, its entry settled;
 * promoted after the first succeeded, it runs at attempt 1. */
START_TEST(test_deferral_uses_no_attempt) {
    redisReply *r;
    char *w;
    th_expect_str(th_cmd(C, "FCALL dtq_limit_set 0 me q %s concurrency 1", ""), "set");
    th_enqueue_with_id(C, "q", "echo", "t1", NULL);
    th_enqueue_with_id(C, "q", "echo", "t2", NULL);
    r = fetch("q", 10);
    ck_assert_int_eq((int)claimed_n(r), 1);
    ck_assert_str_eq(claimed_id(r, 0), "t1");
    th_assert_field(C, "t1", "limit_slots", "dtq:limit:q/*/run");
    th_assert_field(C, "t2", "status", "pending");
    th_assert_field(C, "t2", "attempt", "1");
    th_assert_field(C, "t2", "limited_by", "concurrency:q");
    ck_assert_int_eq(th_intf(C, "ZCARD dtq:limit:q/*/run"), 1);
    ck_assert_msg(score_of("dtq:retry:schedule", "t2") > 0, "t2 is not in the schedule");
    /* its entry acknowledged and deleted: only t1's (pending) is left */
    ck_assert_int_eq(th_intf(C, "XLEN dtq:stream:q:p5"), 1);
    w = finish(r, 0, DTQ_OUTCOME_SUCCEEDED);
    ck_assert_str_eq(w, "succeeded");
    free(w);
    freeReplyObject(r);
    ck_assert_int_eq(th_intf(C, "EXISTS dtq:limit:q/*/run"), 0); /* released, the set gone */
    r = th_cmd(C, "FCALL dtq_sched_run_now 0 me t2");
    freeReplyObject(r);
    r = fetch("q", 10);
    ck_assert_int_eq((int)claimed_n(r), 1);
    ck_assert_str_eq(claimed_id(r, 0), "t2");
    ck_assert_int_eq(r->element[0]->element[0]->element[6]->integer, 1); /* attempt 1 */
    th_assert_field(C, "t2", "attempt", "1");
    th_assert_no_field(C, "t2", "limited_by");
    freeReplyObject(r);
}
END_TEST

/* Every way an attempt ends gives its slot back: retry, failure (dead letter), cancel
 * (cancel_requested, then the finish), hand-back; each time the next task gets it. */
START_TEST(test_slots_released) {
    const enum dtq_outcome_kind ends[] = {DTQ_OUTCOME_RETRY, DTQ_OUTCOME_DEAD_LETTER,
                                          DTQ_OUTCOME_CANCELLED};
    const char *words[] = {"retrying", "dead_lettered", "cancelled"};
    redisReply *r;
    th_expect_str(th_cmd(C, "FCALL dtq_limit_set 0 me q work concurrency 1"), "set");
    for (int i = 0; i < 3; i++) {
        char id[16];
        char *w;
        snprintf(id, sizeof(id), "s%d", i);
        th_enqueue_with_id(C, "q", "work", id, NULL);
        r = fetch("q", 10);
        ck_assert_msg(claimed_n(r) == 1, "%s: not claimed", id);
        ck_assert_int_eq(th_intf(C, "ZCARD dtq:limit:q/t:work/run"), 1);
        if (ends[i] == DTQ_OUTCOME_CANCELLED)
            th_expect_str(th_cmd(C, "FCALL dtq_cancel 0 %s", id), "cancel_requested");
        w = finish(r, 0, ends[i]);
        ck_assert_str_eq(w, words[i]);
        free(w);
        ck_assert_msg(th_intf(C, "ZCARD dtq:limit:q/t:work/run") == 0, "%s: slot held after %s", id,
                      words[i]);
        freeReplyObject(r);
    }
    /* a hand-back (drain) */
    th_enqueue_with_id(C, "q", "work", "h1", NULL);
    r = fetch("q", 10);
    ck_assert_int_eq((int)claimed_n(r), 1);
    {
        const redisReply *t = r->element[0]->element[0];
        redisReply *h = th_cmd(C, "FCALL dtq_handback 0 w1 1 h1 1 %s %s draining",
                               t->element[0]->str, t->element[1]->str);
        ck_assert_str_eq(h->element[0]->str, "queued");
        freeReplyObject(h);
    }
    ck_assert_int_eq(th_intf(C, "ZCARD dtq:limit:q/t:work/run"), 0);
    freeReplyObject(r);
    r = fetch("q", 10); /* the handed-back attempt runs again, with the slot */
    ck_assert_int_eq((int)claimed_n(r), 1);
    ck_assert_int_eq(th_intf(C, "ZCARD dtq:limit:q/t:work/run"), 1);
    freeReplyObject(r);
}
END_TEST

/* A slot whose task is gone (or no longer running) is taken back when the set is full. */
START_TEST(test_stale_slot_healed) {
    redisReply *r;
    th_expect_str(th_cmd(C, "FCALL dtq_limit_set 0 me q %s concurrency 1", ""), "set");
    th_enqueue_with_id(C, "q", "echo", "gone", NULL);
    r = fetch("q", 10);
    ck_assert_int_eq((int)claimed_n(r), 1);
    freeReplyObject(r);
    freeReplyObject(th_cmd(C, "DEL dtq:task:gone"));
    th_enqueue_with_id(C, "q", "echo", "next", NULL);
    r = fetch("q", 10);
    ck_assert_int_eq((int)claimed_n(r), 1);
    ck_assert_str_eq(claimed_id(r, 0), "next");
    ck_assert_int_eq(th_intf(C, "ZCARD dtq:limit:q/*/run"), 1);
    ck_assert_msg(score_of("dtq:limit:q/*/run", "next") > 0, "next holds no slot");
    freeReplyObject(r);
}
END_TEST

/* Claims task `id` of `queue` as w1 (the set full), then a raw producer's trim deletes every
 * entry of the queue's band, the running attempt's carrier among them. */
static void claim_then_trim(const char *queue, const char *id, const char *opts) {
    redisReply *r;
    th_enqueue_with_id(C, queue, "echo", id, opts);
    r = fetch(queue, 10);
    ck_assert_int_eq((int)claimed_n(r), 1);
    freeReplyObject(r);
    freeReplyObject(th_cmd(C, "XADD dtq:stream:%s:p5 MAXLEN 0 * task_type echo payload {}", queue));
    ck_assert_int_eq(th_intf(C, "XLEN dtq:stream:%s:p5", queue), 0);
}

/* A running attempt nothing can end any more (issue 27.4): its entry deleted by a producer's
 * trim and its worker gone (no worker key). While its worker lives it keeps its slot; once
 * the worker is gone a full set's next claim ends it: requeued at attempt 2 (history
 * worker_lost), its slot given to the next task; after its last attempt it is dead-lettered
 * worker_lost; and a cancel ends such an attempt at once, freeing its slot. */
START_TEST(test_lost_attempt_without_entry_frees_its_slot) {
    redisReply *r;
    char *hist;
    for (const char *const *q = (const char *const[]){"q", "q2", "q3", NULL}; *q; q++)
        th_expect_str(th_cmd(C, "FCALL dtq_limit_set 0 me %s %s concurrency 1", *q, ""), "set");
    freeReplyObject(th_cmd(C, "HSET dtq:worker:w1 pid 1")); /* w1 lives */
    claim_then_trim("q", "lost", NULL);
    th_enqueue_with_id(C, "q", "echo", "next", NULL);
    r = fetch("q", 10);
    ck_assert_int_eq((int)claimed_n(r), 0); /* deferred: the live worker's attempt holds */
    freeReplyObject(r);
    th_assert_field(C, "lost", "status", "running");
    freeReplyObject(th_cmd(C, "DEL dtq:worker:w1")); /* w1 is gone (SIGKILL, its key expired) */
    th_enqueue_with_id(C, "q", "echo", "next2", NULL);
    r = fetch("q", 10);
    ck_assert_int_eq((int)claimed_n(r), 1);
    ck_assert_str_eq(claimed_id(r, 0), "next2");
    freeReplyObject(r);
    th_assert_field(C, "lost", "status", "queued");
    th_assert_field(C, "lost", "attempt", "2");
    hist = th_task_field(C, "lost", "history");
    ck_assert_ptr_nonnull(strstr(hist, "\"class\":\"worker_lost\""));
    free(hist);
    ck_assert_msg(score_of("dtq:limit:q/*/run", "next2") > 0, "next2 holds no slot");
    ck_assert_int_eq(th_intf(C, "ZCARD dtq:limit:q/*/run"), 1);
    /* the last attempt: dead-lettered worker_lost */
    claim_then_trim("q2", "last", "max_attempts 1");
    th_enqueue_with_id(C, "q2", "echo", "after", NULL);
    r = fetch("q2", 10);
    ck_assert_int_eq((int)claimed_n(r), 1);
    ck_assert_str_eq(claimed_id(r, 0), "after");
    freeReplyObject(r);
    th_assert_field(C, "last", "status", "dead_lettered");
    th_assert_field(C, "last", "last_error_class", "worker_lost");
    /* a cancel ends it at once */
    claim_then_trim("q3", "ghost", NULL);
    th_expect_str(th_cmd(C, "FCALL dtq_cancel 0 ghost"), "cancelled");
    th_assert_field(C, "ghost", "status", "cancelled");
    ck_assert_int_eq(th_intf(C, "ZCARD dtq:limit:q3/*/run"), 0);
}
END_TEST

/* Per key: one key at its cap does not hold back another; tasks without a key share the
 * bucket of the empty key; a raw entry's limit_key counts too. */
START_TEST(test_per_key) {
    redisReply *r;
    th_expect_str(th_cmd(C, "FCALL dtq_limit_set 0 me q t concurrency 1 per_key 1"), "set");
    th_enqueue_with_id(C, "q", "t", "a1", "limit_key A");
    th_enqueue_with_id(C, "q", "t", "a2", "limit_key A");
    th_enqueue_with_id(C, "q", "t", "b1", "limit_key B");
    th_enqueue_with_id(C, "q", "t", "n1", NULL);
    th_enqueue_with_id(C, "q", "t", "n2", NULL);
    freeReplyObject(
        th_cmd(C, "XADD dtq:stream:q:p5 * task_type t payload {} task_id r1 limit_key A"));
    freeReplyObject(
        th_cmd(C, "XADD dtq:stream:q:p5 * task_type t payload {} task_id r2 limit_key C"));
    expect_err("INVALID_ARGUMENT", "limit_key", "FCALL dtq_enqueue 0 q t {} limit_key a/b");
    r = fetch("q", 10);
    ck_assert_int_eq((int)claimed_n(r), 4); /* a1, b1, n1, r2 */
    freeReplyObject(r);
    th_assert_field(C, "a1", "status", "running");
    th_assert_field(C, "b1", "status", "running");
    th_assert_field(C, "n1", "status", "running");
    th_assert_field(C, "r2", "status", "running");
    th_assert_field(C, "a2", "limited_by", "concurrency:q:t/A");
    th_assert_field(C, "n2", "limited_by", "concurrency:q:t/");
    th_assert_field(C, "r1", "limited_by", "concurrency:q:t/A");
    th_assert_field(C, "r1", "status", "pending");
    th_assert_field(C, "r1", "payload", "{}"); /* the raw entry's task kept its payload */
    th_assert_field(C, "r1", "limit_key", "A");
    th_assert_field(C, "a1", "limit_slots", "dtq:limit:q/t:t/run/A");
    th_assert_field(C, "n1", "limit_slots", "dtq:limit:q/t:t/run/");
    ck_assert_int_eq(th_intf(C, "ZCARD dtq:limit:q/t:t/keys"), 4); /* A, B, C and %s */
}
END_TEST

/* A rate of 2/s with burst 1: two start at once, the others are deferred one interval
 * (500 ms) apart from the time a token comes, with no attempt used. */
START_TEST(test_rate_deferrals_spaced) {
    redisReply *r;
    long long t0, due[4];
    th_expect_str(th_cmd(C, "FCALL dtq_limit_set 0 me q %s rate 2 period_ms 1000 burst 1", ""),
                  "set");
    for (int i = 0; i < 6; i++) {
        char id[8];
        snprintf(id, sizeof(id), "r%d", i);
        th_enqueue_with_id(C, "q", "echo", id, NULL);
    }
    t0 = th_redis_ms(C);
    r = fetch("q", 10);
    ck_assert_int_eq((int)claimed_n(r), 2);
    freeReplyObject(r);
    for (int i = 2; i < 6; i++) {
        char id[8];
        snprintf(id, sizeof(id), "r%d", i);
        th_assert_field(C, id, "status", "pending");
        th_assert_field(C, id, "attempt", "1");
        th_assert_field(C, id, "limited_by", "rate:q");
        due[i - 2] = score_of("dtq:retry:schedule", id);
    }
    /* the first token after the burst comes 500 ms after the first start: */
    ck_assert_msg(due[0] >= t0 + 400 && due[0] <= t0 + 1500, "due %lld, now %lld", due[0], t0);
    for (int i = 1; i < 4; i++)
        ck_assert_msg(due[i] - due[i - 1] >= 500 && due[i] - due[i - 1] <= 501, "dues %lld %lld",
                      due[i - 1], due[i]);
    /* promoted before its time, a task is deferred again, to the end of the line */
    freeReplyObject(th_cmd(C, "FCALL dtq_sched_run_now 0 me r5"));
    r = fetch("q", 10);
    ck_assert_int_eq((int)claimed_n(r), 0);
    freeReplyObject(r);
    ck_assert_int_eq(score_of("dtq:retry:schedule", "r5"), due[3] + 500);
    th_assert_field(C, "r5", "attempt", "1");
}
END_TEST

/* A queue without limits: claims as before, no limit field, no limit key; a limit on one
 * type leaves the queue's other types alone. */
START_TEST(test_unlimited_unchanged) {
    redisReply *r;
    for (int i = 0; i < 5; i++) {
        char id[8];
        snprintf(id, sizeof(id), "u%d", i);
        th_enqueue_with_id(C, "free", "echo", id, NULL);
    }
    r = fetch("free", 10);
    ck_assert_int_eq((int)claimed_n(r), 5);
    freeReplyObject(r);
    th_assert_no_field(C, "u0", "limit_slots");
    r = th_cmd(C, "KEYS dtq:limit*");
    ck_assert_int_eq((int)r->elements, 0);
    freeReplyObject(r);
    th_expect_str(th_cmd(C, "FCALL dtq_limit_set 0 me mixed slow concurrency 1"), "set");
    for (int i = 0; i < 4; i++) {
        char id[8];
        snprintf(id, sizeof(id), "m%d", i);
        th_enqueue_with_id(C, "mixed", i < 2 ? "slow" : "fast", id, NULL);
    }
    r = fetch("mixed", 10);
    ck_assert_int_eq((int)claimed_n(r), 3); /* m0, m2, m3: m1 waits */
    freeReplyObject(r);
    th_assert_field(C, "m1", "status", "pending");
    th_assert_no_field(C, "m2", "limit_slots");
    th_assert_no_field(C, "m2", "limited_by");
}
END_TEST

int main(void) {
    Suite *s = suite_create("lua_limit");
    TCase *set = tcase_create("set_and_list"), *claim = tcase_create("claims");
    tcase_add_checked_fixture(set, setup, teardown);
    tcase_add_test(set, test_limit_set_refusals);
    tcase_add_test(set, test_limit_list_shape);
    suite_add_tcase(s, set);
    tcase_add_checked_fixture(claim, setup, teardown);
    tcase_set_timeout(claim, 60);
    tcase_add_test(claim, test_deferral_uses_no_attempt);
    tcase_add_test(claim, test_slots_released);
    tcase_add_test(claim, test_stale_slot_healed);
    tcase_add_test(claim, test_lost_attempt_without_entry_frees_its_slot);
    tcase_add_test(claim, test_per_key);
    tcase_add_test(claim, test_rate_deferrals_spaced);
    tcase_add_test(claim, test_unlimited_unchanged);
    suite_add_tcase(s, claim);
    return th_run_suite(s);
}
