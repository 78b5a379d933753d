/* it_scripts.c: the Functions library against a real redis-server, without a daemon:
 * enqueue and every refusal, fetch (raw entries, malformed entries, priority, duplicates),
 * claim races, finish (ACK last, XACK+XDEL, replay), the scheduler scripts, the lock, and
 * the admin Functions. */
#include <cjson/cJSON.h>
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calls.h"
#include "finisher.h"
#include "harness.h"
#include "keys.h"
#include "scripts.h"
#include "streams.h"
#include "util.h"

TH_LIBRARY_FIXTURE();

#define POLICY "{\"d\":[5,30000],\"t\":{\"echo\":[3,1000]}}"

static void fetch_argv(dtq_argv *a, const char *worker, int count, const char *q) {
    th_fetch_argv(a, worker, count, q, POLICY);
}

static redisReply *fetch(const char *worker, int count, const char *q) {
    return th_fetch(C, worker, count, q, POLICY);
}

static redisReply *enqueue(const char *type, const char *payload) {
    return th_cmd(C, "FCALL dtq_enqueue 0 default %s %s", type, payload);
}

static char *field(const char *id, const char *f) {
    return th_task_field(C, id, f);
}

/* ----------------------------------------------------------------- enqueue */

START_TEST(test_enqueue_created_and_stream_entry) {
    redisReply *r = enqueue("echo", "{\"a\":1}"), *x;
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    ck_assert_str_eq(r->element[1]->str, "created");
    char *id = strdup(r->element[0]->str);
    freeReplyObject(r);
    ck_assert_msg(strchr(id, '-') != NULL, "id %s is not <ms>-<n>", id);
    th_assert_field(C, id, "status", "queued");
    th_assert_field(C, id, "attempt", "1");
    th_assert_field(C, id, "priority", "5");
    th_assert_field(C, id, "payload", "{\"a\":1}");
    x = th_cmd(C, "XRANGE dtq:stream:default:p5 - +");
    ck_assert_int_eq(x->elements, 1);
    ck_assert_str_eq(x->element[0]->element[1]->element[0]->str, "task_id");
    ck_assert_str_eq(x->element[0]->element[1]->element[1]->str, id);
    ck_assert_str_eq(x->element[0]->element[1]->element[3]->str, "1");
    freeReplyObject(x);
    ck_assert_int_eq(th_int(th_cmd(C, "TTL dtq:task:%s", id)), -1); /* no TTL while live */
    free(id);
    /* any JSON value is a payload */
    r = th_cmd(C, "FCALL dtq_enqueue 0 default echo null priority 9 task_id scalar-1");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p9")), 1);
}
END_TEST

START_TEST(test_enqueue_refusals) {
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 %s echo {}", "bad queue"), "INVALID_ARGUMENT");
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 default %s {}", "bad/type"),
                      "INVALID_ARGUMENT");
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 default echo {bad"), "INVALID_ARGUMENT");
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 default echo {} priority 10"),
                      "INVALID_ARGUMENT");
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 default echo {} max_attempts 0"),
                      "INVALID_ARGUMENT");
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 default echo {} max_attempts 1001"),
                      "INVALID_ARGUMENT");
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 default echo {} delay_ms -1"),
                      "INVALID_ARGUMENT");
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 default echo {} colour red"),
                      "INVALID_ARGUMENT");
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 default echo {} priority"),
                      "INVALID_ARGUMENT");
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 default echo {} task_id %s", "a b"),
                      "INVALID_ARGUMENT");
    /* exactly max_payload_bytes is accepted, one more is refused */
    freeReplyObject(th_cmd(C, "HSET dtq:config max_payload_bytes 10"));
    redisReply *r = th_cmd(C, "FCALL dtq_enqueue 0 default echo %s", "\"12345678\"");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 default echo %s", "\"123456789\""),
                      "PAYLOAD_TOO_LARGE");
    /* ID_EXISTS */
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id dup-1"));
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 default echo 2 task_id dup-1"), "ID_EXISTS");
    /* QUEUE_FULL counts all ten bands */
    freeReplyObject(th_cmd(C, "HSET dtq:config max_queue_depth 3"));
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 priority 0"));
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 priority 9"), "QUEUE_FULL");
    r = th_cmd(C, "FCALL dtq_enqueue 0 other echo 1");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY); /* another queue is not full */
    freeReplyObject(r);
}
END_TEST

START_TEST(test_enqueue_idempotency_and_delay) {
    redisReply *r = th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 idempotency_key k1 task_id i1");
    ck_assert_str_eq(r->element[1]->str, "created");
    freeReplyObject(r);
    r = th_cmd(C, "GET dtq:idempotency:default:k1");
    ck_assert_ptr_nonnull(strstr(r->str, "\"state\":\"processing\""));
    freeReplyObject(r);
    ck_assert_int_gt(th_int(th_cmd(C, "TTL dtq:idempotency:default:k1")), 86000);
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 idempotency_key k1"),
                      "IDEMPOTENCY_IN_PROGRESS i1");
    /* once completed, the same key replays the existing id */
    freeReplyObject(th_cmd(C, "SET dtq:idempotency:default:k1 %s XX KEEPTTL",
                           "{\"task_id\":\"i1\",\"state\":\"completed\",\"updated_at\":1}"));
    r = th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 idempotency_key k1");
    ck_assert_str_eq(r->element[0]->str, "i1");
    ck_assert_str_eq(r->element[1]->str, "duplicate");
    freeReplyObject(r);
    /* the key is per queue */
    r = th_cmd(C, "FCALL dtq_enqueue 0 other echo 1 idempotency_key k1");
    ck_assert_str_eq(r->element[1]->str, "created");
    freeReplyObject(r);
    /* delay: pending in the schedule, no stream entry */
    r = th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 delay_ms 60000 task_id d1");
    freeReplyObject(r);
    th_assert_field(C, "d1", "status", "pending");
    r = th_cmd(C, "ZSCORE dtq:retry:schedule d1");
    ck_assert_ptr_nonnull(r->str);
    freeReplyObject(r);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p5")), 1); /* only i1 */
}
END_TEST

START_TEST(test_enqueue_bulk) {
    redisReply *r;
    r = th_cmd(C, "FCALL dtq_enqueue_bulk 0 bulkq echo 4 {\"a\":1} %s [2] {\"b\":3} priority 7",
               "{oops");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    ck_assert_int_eq(r->elements, 4);
    /* flat: the id of each task created, or the error of that payload alone */
    for (size_t i = 0; i < 4; i++)
        ck_assert_int_eq(r->element[i]->type, i == 1 ? REDIS_REPLY_ERROR : REDIS_REPLY_STRING);
    ck_assert_ptr_nonnull(strstr(r->element[1]->str, "INVALID_ARGUMENT payload is not valid JSON"));
    th_assert_field(C, r->element[3]->str, "payload", "{\"b\":3}");
    th_assert_field(C, r->element[0]->str, "priority", "7");
    th_assert_field(C, r->element[0]->str, "status", "queued");
    th_assert_field(C, r->element[2]->str, "id", r->element[2]->str);
    ck_assert_str_ne(r->element[0]->str, r->element[2]->str);
    freeReplyObject(r);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:bulkq:p7")), 3);
    ck_assert_int_eq(th_int(th_cmd(C, "SISMEMBER dtq:queues bulkq")), 1);
    /* the queue fills up part way: the rest are refused one by one */
    freeReplyObject(th_cmd(C, "HSET dtq:config max_queue_depth 4"));
    r = th_cmd(C, "FCALL dtq_enqueue_bulk 0 bulkq echo 3 1 2 3 priority 7");
    ck_assert_int_eq(r->element[0]->type, REDIS_REPLY_STRING);
    th_assert_field(C, r->element[0]->str, "status", "queued");
    ck_assert_int_eq(r->element[1]->type, REDIS_REPLY_ERROR);
    ck_assert_ptr_nonnull(strstr(r->element[1]->str, "QUEUE_FULL"));
    ck_assert_int_eq(r->element[2]->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:bulkq:p7")), 4);
    /* bad arguments refuse the whole call and write nothing */
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue_bulk 0 bulkq echo 5 1 2"), "INVALID_ARGUMENT");
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue_bulk 0 bulkq echo 1 1 task_id x"),
                      "INVALID_ARGUMENT unknown option task_id");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:bulkq:p7")), 4);
}
END_TEST

/* ----------------------------------------------------------------- fetch and claim */

START_TEST(test_fetch_claims_in_priority_order) {
    th_queue_groups(C, "default");
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 priority 1 task_id low"));
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 priority 8 task_id high"));
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default other 1 priority 5 task_id mid"));
    redisReply *r = fetch("w1", 1, "default");
    ck_assert_int_eq(r->element[0]->elements, 1);
    ck_assert_str_eq(r->element[0]->element[0]->element[2]->str, "high");
    /* resolved from the policy table: echo -> [3, 1000] */
    ck_assert_int_eq(r->element[0]->element[0]->element[7]->integer, 3);
    ck_assert_int_eq(r->element[0]->element[0]->element[8]->integer, 1000);
    freeReplyObject(r);
    th_assert_field(C, "high", "status", "running");
    th_assert_field(C, "high", "worker_id", "w1");
    th_assert_field(C, "high", "max_attempts", "3");
    r = fetch("w1", 10, "default");
    ck_assert_int_eq(r->element[0]->elements, 2);
    ck_assert_str_eq(r->element[0]->element[0]->element[2]->str, "mid");
    ck_assert_int_eq(r->element[0]->element[0]->element[7]->integer, 5); /* default */
    ck_assert_str_eq(r->element[0]->element[1]->element[2]->str, "low");
    freeReplyObject(r);
    r = fetch("w1", 10, "default");
    ck_assert_int_eq(r->element[0]->elements, 0);
    ck_assert_int_eq(r->element[2]->integer, 0);
    ck_assert_int_eq(r->element[1]->elements, 20); /* ten (stream, last-id) pairs to block on */
    freeReplyObject(r);
}
END_TEST

START_TEST(test_fetch_raw_entries) {
    redisReply *r, *x;
    char id[128];
    th_queue_groups(C, "default");
    x = th_cmd(C, "XADD dtq:stream:default:p3 * task_type echo payload %s max_attempts 7",
               "{\"r\":1}");
    snprintf(id, sizeof(id), "default:p3:%s", x->str);
    freeReplyObject(x);
    freeReplyObject(
        th_cmd(C, "XADD dtq:stream:default:p3 * task_type echo payload 1 task_id own-id"));
    r = fetch("w1", 10, "default");
    ck_assert_int_eq(r->element[0]->elements, 2);
    ck_assert_str_eq(r->element[0]->element[0]->element[2]->str, id);
    ck_assert_int_eq(r->element[0]->element[0]->element[7]->integer, 7); /* its own max_attempts */
    th_assert_field(C, id, "max_attempts", "7"); /* resolved once at claim, kept in the hash */
    ck_assert_str_eq(r->element[0]->element[1]->element[2]->str, "own-id");
    freeReplyObject(r);
    th_assert_field(C, id, "status", "running");
    th_assert_field(C, id, "priority", "3");
    th_assert_field(C, id, "queue", "default");
    /* a second raw entry with an id that exists is a duplicate, absorbed */
    freeReplyObject(
        th_cmd(C, "XADD dtq:stream:default:p3 * task_type echo payload 1 task_id own-id"));
    r = fetch("w1", 10, "default");
    ck_assert_int_eq(r->element[0]->elements, 0);
    ck_assert_int_eq(r->element[2]->integer, 1);
    freeReplyObject(r);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p3")), 2); /* absorbed one deleted */
}
END_TEST

/* The newest dead-letter entry has every field of SPEC 8 and the expected error. */
static void assert_dead_lettered_with(const char *err_frag) {
    redisReply *d = th_cmd(C, "XREVRANGE dtq:stream:dead-letter + - COUNT 1");
    ck_assert_int_eq(d->elements, 1);
    redisReply *f = d->element[0]->element[1];
    const char *want[] = {
        "task_id",        "queue",      "task_type",        "payload",         "attempt",
        "max_attempts",   "priority",   "timeout_ms",       "idempotency_key", "failed_at_ms",
        "attempts_made",  "last_error", "last_error_class", "retryable",       "worker_id",
        "original_queue", NULL};
    for (const char **w = want; *w; w++) {
        int found = 0;
        for (size_t i = 0; i + 1 < f->elements; i += 2)
            if (!strcmp(f->element[i]->str, *w)) found = 1;
        ck_assert_msg(found, "dead-letter entry lacks %s", *w);
    }
    for (size_t i = 0; i + 1 < f->elements; i += 2) {
        if (!strcmp(f->element[i]->str, "last_error"))
            ck_assert_msg(strstr(f->element[i + 1]->str, err_frag) != NULL,
                          "last_error '%s' lacks '%s'", f->element[i + 1]->str, err_frag);
        if (!strcmp(f->element[i]->str, "retryable")) ck_assert_str_eq(f->element[i + 1]->str, "0");
    }
    freeReplyObject(d);
}

START_TEST(test_fetch_malformed_raw_entries) {
    static const struct {
        const char *fields;
        const char *err;
    } cases[] = {
        {"payload 1", "missing field task_type"},
        {"task_type echo", "missing field payload"},
        {"task_type echo payload {nope", "payload is not valid JSON"},
        {"task_type a/b payload 1", "task_type must match"},
        {"task_type echo payload 1 max_attempts zero", "max_attempts must be"},
        {"task_type echo payload 1 timeout_ms -5", "timeout_ms must be"},
        {"task_type echo payload 1 ttl_seconds 1.5", "ttl_seconds must be"},
        {"task_type echo payload 1 task_id a/b", "task_id must match"},
        {"task_type echo payload 123456789012", "exceeds max_payload_bytes 10"},
    };
    th_queue_groups(C, "default");
    freeReplyObject(th_cmd(C, "HSET dtq:config max_payload_bytes 10"));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char cmd[256];
        redisReply *x, *r;
        char id[128];
        snprintf(cmd, sizeof(cmd), "XADD dtq:stream:default:p5 * %s", cases[i].fields);
        x = th_cmd(C, cmd);
        ck_assert_int_eq(x->type, REDIS_REPLY_STRING);
        snprintf(id, sizeof(id), "default:p5:%s", x->str);
        freeReplyObject(x);
        r = fetch("w1", 10, "default");
        ck_assert_int_eq(r->element[0]->elements, 0); /* nothing runs */
        ck_assert_int_eq(r->element[2]->integer, 1);
        freeReplyObject(r);
        th_assert_field(C, id, "status", "dead_lettered");
        {
            char *e = field(id, "last_error");
            ck_assert_msg(e && strstr(e, cases[i].err), "%s: last_error %s", cases[i].fields, e);
            free(e);
        }
        th_assert_field(C, id, "last_error_class", "invalid_entry");
        assert_dead_lettered_with(cases[i].err);
        ck_assert_int_gt(th_int(th_cmd(C, "TTL dtq:task:%s", id)), 0);
    }
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 9);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p5")), 0); /* all acked + deleted */
}
END_TEST

START_TEST(test_duplicate_and_stale_entries_absorbed) {
    redisReply *r;
    th_queue_groups(C, "default");
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id t1"));
    /* a duplicate of the same entry (same task, same attempt) and a stale one */
    freeReplyObject(th_cmd(C, "XADD dtq:stream:default:p5 * task_id t1 attempt 1"));
    freeReplyObject(th_cmd(C, "XADD dtq:stream:default:p5 * task_id t1 attempt 0"));
    freeReplyObject(th_cmd(C, "XADD dtq:stream:default:p5 * task_id gone-task attempt 1"));
    r = fetch("w1", 10, "default");
    ck_assert_int_eq(r->element[0]->elements, 1); /* t1 runs exactly once */
    ck_assert_int_eq(r->element[2]->integer, 4);
    freeReplyObject(r);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p5")), 1); /* only the live one */
}
END_TEST

START_TEST(test_fetch_skips_paused_and_handles_cancel_and_ttl) {
    redisReply *r;
    th_queue_groups(C, "default");
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id c1"));
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id e1 ttl_seconds 1"));
    freeReplyObject(th_cmd(C, "SADD dtq:cancelled c1"));
    freeReplyObject(th_cmd(C, "FCALL dtq_pause 0 default"));
    r = fetch("w1", 10, "default");
    ck_assert_int_eq(r->element[2]->integer, 0);
    ck_assert_int_eq(r->element[1]->elements, 0); /* nothing to block on while paused */
    freeReplyObject(r);
    th_sleep_ms(1100); /* deliberate: e1's 1 s TTL passes */
    freeReplyObject(th_cmd(C, "FCALL dtq_resume 0 default"));
    r = fetch("w1", 10, "default");
    ck_assert_int_eq(r->element[0]->elements, 0);
    freeReplyObject(r);
    th_assert_field(C, "c1", "status", "cancelled");
    th_assert_field(C, "e1", "status", "expired");
    ck_assert_int_eq(th_int(th_cmd(C, "SCARD dtq:cancelled")), 0);
}
END_TEST

START_TEST(test_fetch_exactly_one_winner) {
    redisReply *a, *b, *r;
    dtq_argv args;
    th_queue_groups(C, "default");
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id race"));
    redisContext *c2 = th_connect(&R);
    /* Both workers' fetches are in flight at once; Redis runs one Function at a time. */
    fetch_argv(&args, "w1", 10, "default");
    redisAppendCommandArgv(C, args.argc, (const char **)args.argv, args.lens);
    dtq_argv_deinit(&args);
    fetch_argv(&args, "w2", 10, "default");
    redisAppendCommandArgv(c2, args.argc, (const char **)args.argv, args.lens);
    dtq_argv_deinit(&args);
    ck_assert_int_eq(redisGetReply(C, (void **)&a), REDIS_OK);
    ck_assert_int_eq(redisGetReply(c2, (void **)&b), REDIS_OK);
    th_fetch_claims(a);
    th_fetch_claims(b);
    ck_assert_int_eq(a->element[0]->elements + b->element[0]->elements, 1);
    th_assert_field(C, "race", "worker_id", a->element[0]->elements ? "w1" : "w2");
    freeReplyObject(a);
    freeReplyObject(b);
    redisFree(c2);
    /* a second entry for the same attempt is a duplicate: absorbed, the claim unchanged */
    freeReplyObject(th_cmd(C, "XADD dtq:stream:default:p5 * task_id race attempt 1"));
    r = fetch("w3", 10, "default");
    ck_assert_int_eq(r->element[0]->elements, 0);
    freeReplyObject(r);
    th_assert_field(C, "race", "status", "running");
    {
        char *owner = th_task_field(C, "race", "worker_id");
        ck_assert_str_ne(owner, "w3");
        free(owner);
    }
}
END_TEST

/* ----------------------------------------------------------------- finish */

/* Finishes one claimed task (th_finish: through the daemon's own encoder). */
static redisReply *finish_one(const char *worker, redisReply *claimed,
                              enum dtq_outcome_kind outcome, const char *result,
                              enum dtq_result_state state) {
    dtq_finish_record rec = th_finish_record(claimed);
    rec.outcome = outcome;
    rec.result_state = state;
    rec.result = (char *)result;
    rec.result_len = strlen(result);
    rec.error = (char *)"boom";
    rec.error_class = "retryable";
    rec.delay_ms = 1500;
    return th_finish(C, worker, &rec, 1);
}

#define OK_ DTQ_OUTCOME_SUCCEEDED
#define RETRY_ DTQ_OUTCOME_RETRY
#define DEAD_ DTQ_OUTCOME_DEAD_LETTER

START_TEST(test_finish_paths) {
    redisReply *r, *f;
    th_queue_groups(C, "default");
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id s1 idempotency_key ik"));
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id r1"));
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id d1 idempotency_key ik2"));
    r = fetch("w1", 10, "default");
    ck_assert_int_eq(r->element[0]->elements, 3);
    /* the guard: another worker cannot finish w1's attempt */
    f = finish_one("w2", r->element[0]->element[0], OK_, "{\"ok\":1}", DTQ_RESULT_FULL);
    ck_assert_str_eq(f->element[0]->str, "stale");
    freeReplyObject(f);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p5")), 3);

    f = finish_one("w1", r->element[0]->element[0], OK_, "{\"ok\":1}", DTQ_RESULT_TRUNCATED);
    ck_assert_str_eq(f->element[0]->str, "succeeded");
    freeReplyObject(f);
    th_assert_field(C, "s1", "status", "succeeded");
    th_assert_field(C, "s1", "result_truncated", "1");
    {
        redisReply *g = th_cmd(C, "GET dtq:result:s1");
        ck_assert_str_eq(g->str, "{\"ok\":1}");
        freeReplyObject(g);
        g = th_cmd(C, "GET dtq:idempotency:default:ik");
        ck_assert_ptr_nonnull(strstr(g->str, "completed"));
        freeReplyObject(g);
    }
    ck_assert_int_gt(th_int(th_cmd(C, "TTL dtq:task:s1")), 0);
    ck_assert_int_gt(th_int(th_cmd(C, "TTL dtq:result:s1")), 0);
    /* replaying the same finish is stale and acknowledges nothing twice */
    f = finish_one("w1", r->element[0]->element[0], OK_, "{\"ok\":1}", DTQ_RESULT_FULL);
    ck_assert_str_eq(f->element[0]->str, "stale");
    freeReplyObject(f);

    f = finish_one("w1", r->element[0]->element[1], RETRY_, "", DTQ_RESULT_NONE);
    ck_assert_str_eq(f->element[0]->str, "retrying");
    freeReplyObject(f);
    th_assert_field(C, "r1", "status", "retrying");
    th_assert_field(C, "r1", "last_error", "boom");
    {
        redisReply *z = th_cmd(C, "ZSCORE dtq:retry:schedule r1");
        ck_assert_ptr_nonnull(z->str);
        freeReplyObject(z);
    }
    ck_assert_int_eq(th_int(th_cmd(C, "TTL dtq:task:r1")), -1);

    f = finish_one("w1", r->element[0]->element[2], DEAD_, "", DTQ_RESULT_NONE);
    ck_assert_str_eq(f->element[0]->str, "dead_lettered");
    freeReplyObject(f);
    th_assert_field(C, "d1", "status", "dead_lettered");
    assert_dead_lettered_with("boom");
    {
        redisReply *g = th_cmd(C, "GET dtq:idempotency:default:ik2");
        ck_assert_ptr_nonnull(strstr(g->str, "failed"));
        freeReplyObject(g);
    }
    freeReplyObject(r);
    /* all three entries acknowledged and deleted: nothing pending, nothing left */
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p5")), 0);
    r = th_cmd(C, "XPENDING dtq:stream:default:p5 workers");
    ck_assert_int_eq(r->element[0]->integer, 0);
    freeReplyObject(r);
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:result:r1")), 0); /* null result: no key */
}
END_TEST

/* The entry ids left in a stream, space-separated. */
static void stream_ids(const char *stream, char *out, size_t n) {
    redisReply *r = th_cmd(C, "XRANGE %s - +", stream);
    out[0] = '\0';
    for (size_t i = 0; i < r->elements; i++) {
        size_t len = strlen(out);
        snprintf(out + len, n - len, "%s%s", i ? " " : "", r->element[i]->element[0]->str);
    }
    freeReplyObject(r);
}

/* Finish deletes exactly the entries it acknowledges, whether the prefix below the oldest
 * pending entry is trimmed or single entries above it are deleted: older pending entries
 * (another worker's) and entries not yet delivered stay. */
START_TEST(test_finish_deletes_exactly_the_acknowledged_entries) {
    const char *st = "dtq:stream:default:p5";
    char ids[5][64], want[512], got[512];
    redisReply *a1, *w1, *f;
    th_queue_groups(C, "default");
    for (int i = 0; i < 5; i++) {
        redisReply *e = th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id a%d", i + 1);
        freeReplyObject(e);
    }
    {
        redisReply *r = th_cmd(C, "XRANGE %s - +", st);
        ck_assert_int_eq(r->elements, 5);
        for (int i = 0; i < 5; i++)
            snprintf(ids[i], sizeof ids[i], "%s", r->element[i]->element[0]->str);
        freeReplyObject(r);
    }
    a1 = fetch("w2", 1, "default"); /* a1: the oldest pending entry, another worker's */
    w1 = fetch("w1", 3, "default"); /* a2 a3 a4; a5 stays undelivered */
    ck_assert_int_eq(w1->element[0]->elements, 3);

    f = finish_one("w1", w1->element[0]->element[1], OK_, "", DTQ_RESULT_NONE); /* a3 */
    ck_assert_str_eq(f->element[0]->str, "succeeded");
    freeReplyObject(f);
    snprintf(want, sizeof want, "%s %s %s %s", ids[0], ids[1], ids[3], ids[4]);
    stream_ids(st, got, sizeof got);
    ck_assert_str_eq(got, want);

    f = finish_one("w2", a1->element[0]->element[0], OK_, "", DTQ_RESULT_NONE); /* a1 */
    ck_assert_str_eq(f->element[0]->str, "succeeded");
    freeReplyObject(f);
    snprintf(want, sizeof want, "%s %s %s", ids[1], ids[3], ids[4]);
    stream_ids(st, got, sizeof got);
    ck_assert_str_eq(got, want);

    f = finish_one("w1", w1->element[0]->element[2], OK_, "", DTQ_RESULT_NONE); /* a4 */
    freeReplyObject(f);
    f = finish_one("w1", w1->element[0]->element[0], OK_, "", DTQ_RESULT_NONE); /* a2 */
    freeReplyObject(f);
    stream_ids(st, got, sizeof got);
    ck_assert_str_eq(got, ids[4]); /* nothing pending: only the undelivered a5 is left */
    th_assert_field(C, "a5", "status", "queued");
    freeReplyObject(a1);
    freeReplyObject(w1);
}
END_TEST

START_TEST(test_finish_refuses_malformed_records) {
    redisReply *r, *f;
    th_queue_groups(C, "default");
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id m1"));
    r = fetch("w1", 10, "default");
    ck_assert_int_eq(r->element[0]->elements, 1);
    /* an unknown outcome word (the old one-letter code), a short record, a bad attempt */
    f = th_cmd(C, "FCALL dtq_finish 0 w1 1 m1 1 s dtq:stream:default:p5 %s {} full '' '' 0 0",
               r->element[0]->element[0]->element[1]->str);
    ck_assert_int_eq(f->type, REDIS_REPLY_ERROR);
    ck_assert_ptr_nonnull(strstr(f->str, "INVALID_ARGUMENT record 1: unknown outcome s"));
    freeReplyObject(f);
    f = th_cmd(C, "FCALL dtq_finish 0 w1 1 m1 1 succeeded");
    ck_assert_int_eq(f->type, REDIS_REPLY_ERROR);
    ck_assert_ptr_nonnull(strstr(f->str, "INVALID_ARGUMENT"));
    freeReplyObject(f);
    f = th_cmd(C,
               "FCALL dtq_finish 0 w1 1 m1 x succeeded dtq:stream:default:p5 %s {} full '' '' 0 0",
               r->element[0]->element[0]->element[1]->str);
    ck_assert_ptr_nonnull(strstr(f->str, "attempt is not a number"));
    freeReplyObject(f);
    /* nothing was written or acknowledged */
    th_assert_field(C, "m1", "status", "running");
    freeReplyObject(r);
    r = th_cmd(C, "XPENDING dtq:stream:default:p5 workers");
    ck_assert_int_eq(r->element[0]->integer, 1);
    freeReplyObject(r);
}
END_TEST

/* ----------------------------------------------------------------- scheduler scripts */

START_TEST(test_sched_claim_never_twice_and_stale_claims_return) {
    redisReply *a, *b;
    dtq_sched_claim_reply ca, cb;
    size_t n;
    for (int i = 0; i < 10; i++) freeReplyObject(th_cmd(C, "ZADD dtq:retry:schedule 1 m%d", i));
    freeReplyObject(th_cmd(C, "ZADD dtq:retry:schedule 99999999999999 future"));
    redisContext *c2 = th_connect(&R);
    redisAppendCommand(C, "FCALL dtq_sched_claim 2 dtq:retry:schedule dtq:retry:claimed 6 60000");
    redisAppendCommand(c2, "FCALL dtq_sched_claim 2 dtq:retry:schedule dtq:retry:claimed 6 60000");
    ck_assert_int_eq(redisGetReply(C, (void **)&a), REDIS_OK);
    ck_assert_int_eq(redisGetReply(c2, (void **)&b), REDIS_OK);
    ck_assert(dtq_sched_claim_reply_parse(a, &ca));
    ck_assert(dtq_sched_claim_reply_parse(b, &cb));
    ck_assert_int_eq(ca.nids + cb.nids, 10);
    for (size_t i = 0; i < ca.nids; i++)
        for (size_t j = 0; j < cb.nids; j++)
            ck_assert_str_ne(a->element[i]->str, b->element[j]->str);
    /* the sizes each call found: the second saw the first's moves */
    ck_assert_int_eq(ca.scheduled + cb.scheduled, 11 + (11 - 6));
    ck_assert_int_eq(ca.claimed + cb.claimed, 0 + 6);
    ck_assert(ca.has_next && cb.has_next);
    /* the first left 4 due members, the second only future */
    ck_assert_int_eq(ca.next_due_ms, ca.scheduled == 11 ? 1 : 99999999999999);
    ck_assert_int_eq(cb.next_due_ms, cb.scheduled == 11 ? 1 : 99999999999999);
    freeReplyObject(a);
    freeReplyObject(b);
    redisFree(c2);
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD dtq:retry:claimed")), 10);
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD dtq:retry:schedule")), 1);
    /* with claim_timeout 0 every claim is stale: back to the schedule, then claimed again */
    th_sleep_ms(5); /* deliberate: every claim becomes older than 0 ms */
    a = th_sched_claim(C, 100, 0, &n);
    ck_assert_int_eq(n, 10);
    ck_assert_int_eq(a->element[10]->integer, 1);              /* found: future, */
    ck_assert_int_eq(a->element[11]->integer, 10);             /* and the 10 stale claims */
    ck_assert_int_eq(a->element[12]->integer, 99999999999999); /* future is left */
    freeReplyObject(a);
    /* an empty schedule: no soonest due time (nil), nothing claimed */
    freeReplyObject(th_cmd(C, "ZREM dtq:retry:schedule future"));
    a = th_sched_claim(C, 100, 60000, &n);
    ck_assert_int_eq(n, 0);
    ck_assert_int_eq(a->elements, 4);
    ck_assert_int_eq(a->element[0]->integer, 0);
    ck_assert_int_eq(a->element[1]->integer, 10); /* the claims, none stale */
    ck_assert_int_eq(a->element[2]->type, REDIS_REPLY_NIL);
    freeReplyObject(a);
}
END_TEST

START_TEST(test_sched_promote_cases) {
    redisReply *r;
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id p1 delay_ms 1"));
    freeReplyObject(
        th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id q1")); /* already queued */
    freeReplyObject(
        th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id x1 delay_ms 1 ttl_seconds 1"));
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id c1 delay_ms 1"));
    freeReplyObject(th_cmd(C, "HSET dtq:task:r1 id r1 queue default task_type echo status retrying "
                              "attempt 2 priority 7 created_at 1"));
    freeReplyObject(th_cmd(C, "SADD dtq:cancelled c1"));
    freeReplyObject(th_cmd(C, "HSET dtq:task:x1 created_at 1"));
    for (const char *const *id = (const char *const[]){"p1", "q1", "x1", "c1", "r1", "gone", NULL};
         *id; id++)
        freeReplyObject(th_cmd(C, "ZADD dtq:retry:claimed 1 %s", *id));
    long long before = th_int(th_cmd(C, "XLEN dtq:stream:default:p5"));
    r = th_cmd(C, "FCALL dtq_sched_promote 1 dtq:retry:claimed w1 p1 q1 x1 c1 r1 gone");
    ck_assert_int_eq(r->integer, 2); /* p1 and r1 */
    freeReplyObject(r);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p5")),
                     before + 1); /* p1 only; q1 not again */
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p7")), 1);
    th_assert_field(C, "p1", "status", "queued");
    th_assert_field(C, "p1", "attempt", "1");
    th_assert_field(C, "r1", "status", "queued");
    th_assert_field(C, "r1", "attempt", "3");
    th_assert_field(C, "x1", "status", "expired");
    th_assert_field(C, "c1", "status", "cancelled");
    th_assert_field(C, "q1", "status", "queued");
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD dtq:retry:claimed")), 0);
}
END_TEST

START_TEST(test_lock_compare_semantics) {
    freeReplyObject(th_cmd(C, "SET dtq:lock:scheduler w1 PX 10000"));
    ck_assert_int_eq(th_int(th_cmd(C, "FCALL dtq_lock_refresh 1 dtq:lock:scheduler w2 50000")), 0);
    ck_assert_int_le(th_int(th_cmd(C, "PTTL dtq:lock:scheduler")), 10000);
    ck_assert_int_eq(th_int(th_cmd(C, "FCALL dtq_lock_refresh 1 dtq:lock:scheduler w1 50000")), 1);
    ck_assert_int_gt(th_int(th_cmd(C, "PTTL dtq:lock:scheduler")), 10000);
    ck_assert_int_eq(th_int(th_cmd(C, "FCALL dtq_lock_release 1 dtq:lock:scheduler w2")), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:lock:scheduler")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "FCALL dtq_lock_release 1 dtq:lock:scheduler w1")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:lock:scheduler")), 0);
}
END_TEST

/* ----------------------------------------------------------------- admin */

START_TEST(test_admin_functions) {
    redisReply *r, *f;
    th_queue_groups(C, "default");
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id a1 idempotency_key ka"));
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id a2"));
    r = fetch("w1", 10, "default");
    f = finish_one("w1", r->element[0]->element[0], DEAD_, "", DTQ_RESULT_NONE);
    freeReplyObject(f);
    f = finish_one("w1", r->element[0]->element[1], DEAD_, "", DTQ_RESULT_NONE);
    freeReplyObject(f);
    freeReplyObject(r);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 2);

    r = th_cmd(C, "FCALL dtq_requeue 0 a1");
    ck_assert_str_eq(r->str, "queued");
    freeReplyObject(r);
    th_assert_field(C, "a1", "status", "queued");
    th_assert_field(C, "a1", "attempt", "1");
    {
        char *m = field("a1", "metadata");
        ck_assert_ptr_nonnull(strstr(m, "\"previous_attempts\":1"));
        free(m);
        r = th_cmd(C, "GET dtq:idempotency:default:ka");
        ck_assert_ptr_nonnull(strstr(r->str, "processing"));
        freeReplyObject(r);
    }
    ck_assert_int_eq(th_int(th_cmd(C, "TTL dtq:task:a1")), -1);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 1);
    th_expect_refused(th_cmd(C, "FCALL dtq_requeue 0 a1"), "WRONG_STATE queued");
    th_expect_refused(th_cmd(C, "FCALL dtq_requeue 0 nope"), "NOT_FOUND");

    r = th_cmd(C, "FCALL dtq_discard 0 a2 tester");
    ck_assert_str_eq(r->str, "discarded");
    freeReplyObject(r);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 0);
    {
        char *m = field("a2", "metadata");
        ck_assert_ptr_nonnull(strstr(m, "\"discarded\":true"));
        free(m);
    }
    /* cancel: queued -> cancelled at once; running -> cancel_requested */
    r = th_cmd(C, "FCALL dtq_cancel 0 a1");
    ck_assert_str_eq(r->str, "cancelled");
    freeReplyObject(r);
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id a3"));
    freeReplyObject(fetch("w1", 10, "default"));
    r = th_cmd(C, "FCALL dtq_cancel 0 a3");
    ck_assert_str_eq(r->str, "cancel_requested");
    freeReplyObject(r);
    th_assert_field(C, "a3", "cancel_requested", "1");
    th_expect_refused(th_cmd(C, "FCALL dtq_cancel 0 a1"), "WRONG_STATE cancelled");

    r = th_cmd(C, "FCALL dtq_pause 0 default");
    ck_assert_str_eq(r->str, "paused");
    freeReplyObject(r);
    r = th_cmd(C, "FCALL dtq_pause 0 default");
    ck_assert_str_eq(r->str, "paused");
    freeReplyObject(r);
    r = th_cmd(C, "FCALL_RO dtq_stats 0");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    ck_assert_str_eq(r->element[0]->str, "queue:default:depth");
    ck_assert_str_eq(r->element[2]->str, "queue:default:pending");
    ck_assert_int_eq(r->element[3]->integer, 1); /* a3 is running */
    ck_assert_str_eq(r->element[4]->str, "queue:default:paused");
    ck_assert_int_eq(r->element[5]->integer, 1);
    ck_assert_str_eq(r->element[r->elements - 2]->str, "workers");
    freeReplyObject(r);
    r = th_cmd(C, "FCALL dtq_resume 0 default");
    ck_assert_str_eq(r->str, "resumed");
    freeReplyObject(r);

    /* every admin action is audited, with its actor */
    r = th_cmd(C, "XRANGE dtq:stream:audit - +");
    ck_assert_int_ge(r->elements, 7);
    ck_assert_str_eq(r->element[0]->element[1]->element[1]->str, "redis-cli");
    ck_assert_str_eq(r->element[0]->element[1]->element[3]->str, "requeue");
    ck_assert_str_eq(r->element[1]->element[1]->element[1]->str, "tester");
    freeReplyObject(r);
    ck_assert_int_eq(th_int(th_cmd(C, "FCALL dtq_purge_dlq 0")), 0);
}
END_TEST

START_TEST(test_requeue_dlq_all) {
    redisReply *r;
    th_queue_groups(C, "default");
    for (int i = 0; i < 3; i++)
        freeReplyObject(th_cmd(C, "XADD dtq:stream:default:p5 * task_type echo payload {bad"));
    freeReplyObject(fetch("w1", 10, "default"));
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 3);
    ck_assert_int_eq(th_int(th_cmd(C, "FCALL dtq_requeue_dlq 0 2")), 2);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "FCALL dtq_requeue_dlq 0")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p5")), 3);
    r = th_cmd(C, "FCALL dtq_requeue_dlq 0 zero");
    ck_assert_int_eq(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
}
END_TEST

START_TEST(test_events_from_functions) {
    redisContext *sub = th_connect(&R);
    redisReply *r;
    struct timeval tv = {2, 0};
    freeReplyObject(th_cmd(sub, "SUBSCRIBE dtq:events"));
    redisSetTimeout(sub, tv);
    freeReplyObject(th_cmd(C, "HSET dtq:config events_stream_maxlen 100"));
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id ev1"));
    ck_assert_int_eq(redisGetReply(sub, (void **)&r), REDIS_OK);
    ck_assert_ptr_nonnull(strstr(r->element[2]->str, "\"type\":\"TASK_QUEUED\""));
    ck_assert_ptr_nonnull(strstr(r->element[2]->str, "\"task_id\":\"ev1\""));
    ck_assert_ptr_nonnull(strstr(r->element[2]->str, "\"worker_id\":\"\""));
    ck_assert_ptr_nonnull(strstr(r->element[2]->str, "Z\""));
    freeReplyObject(r);
    redisFree(sub);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:events")), 1);
    /* terminal level: TASK_QUEUED is not published */
    freeReplyObject(th_cmd(C, "HSET dtq:config events terminal"));
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id ev2"));
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:events")), 1);
}
END_TEST

/* ----------------------------------------------------------------- event shapes */

typedef struct expected_event {
    const char *type, *task_id;
    int attempt;
    const char *worker_id, *meta_key; /* meta_key: the one metadata field, or NULL */
} expected_event;

/* Events are built as strings when every field is a plain name; a field that is not still
 * yields valid JSON with the value as it is, on the claim and the finish paths: a task type
 * written into the hash by hand (a quote and a backslash), then a worker id with a quote. */
START_TEST(test_events_escape_what_is_not_a_name) {
    static const struct {
        const char *id, *type, *worker;
    } rounds[] = {{"esc1", "we\"ird\\type", "w1"}, {"esc2", "echo", "w\"2"}};
    static const char *const types[] = {"TASK_STARTED", "TASK_SUCCEEDED"};
    redisReply *r, *f;
    th_queue_groups(C, "default");
    freeReplyObject(th_cmd(C, "HSET dtq:config events_stream_maxlen 100"));
    for (size_t k = 0; k < 2; k++) {
        freeReplyObject(th_cmd(C, "DEL dtq:stream:events"));
        freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id %s", rounds[k].id));
        freeReplyObject(th_cmd(C, "HSET dtq:task:%s task_type %s", rounds[k].id, rounds[k].type));
        r = fetch(rounds[k].worker, 10, "default");
        ck_assert_int_eq(r->element[0]->elements, 1);
        {
            dtq_finish_record rec = th_finish_record(r->element[0]->element[0]);
            f = th_finish(C, rounds[k].worker, &rec, 1);
        }
        ck_assert_str_eq(f->element[0]->str, "succeeded");
        freeReplyObject(f);
        freeReplyObject(r);
        r = th_cmd(C, "XRANGE dtq:stream:events - +");
        ck_assert_int_eq(r->elements, 3); /* TASK_QUEUED (before the edit), STARTED, SUCCEEDED */
        for (size_t i = 1; i < 3; i++) {
            const char *json = r->element[i]->element[1]->element[1]->str;
            cJSON *ev = cJSON_Parse(json);
            ck_assert_msg(ev != NULL, "event %zu is not JSON: %s", i, json);
            ck_assert_str_eq(cJSON_GetObjectItem(ev, "type")->valuestring, types[i - 1]);
            ck_assert_str_eq(cJSON_GetObjectItem(ev, "task_type")->valuestring, rounds[k].type);
            ck_assert_str_eq(cJSON_GetObjectItem(ev, "task_id")->valuestring, rounds[k].id);
            ck_assert_str_eq(cJSON_GetObjectItem(ev, "worker_id")->valuestring, rounds[k].worker);
            ck_assert_int_eq(cJSON_GetObjectItem(ev, "attempt")->valueint, 1);
            cJSON_Delete(ev);
        }
        freeReplyObject(r);
    }
}
END_TEST

static int all_digits(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return n > 0;
}

/* evt-<ms>-<n>-<i>, three runs of digits. */
static int event_id_well_formed(const char *id) {
    const char *p = id + 4;
    if (strncmp(id, "evt-", 4)) return 0;
    for (int part = 0; part < 3; part++) {
        size_t n = strcspn(p, "-");
        if (!all_digits(p, n)) return 0;
        p += n;
        if (part < 2 && *p++ != '-') return 0;
    }
    return *p == '\0';
}

/* 2026-11-30T01:02:03.456Z */
static int ts_well_formed(const char *ts) {
    static const char shape[] = "dddd-dd-ddTdd:dd:dd.dddZ";
    if (strlen(ts) != sizeof(shape) - 1) return 0;
    for (size_t i = 0; shape[i]; i++)
        if (shape[i] == 'd' ? !all_digits(ts + i, 1) : ts[i] != shape[i]) return 0;
    return 1;
}

static void assert_event(const char *json, const expected_event *want, int idx) {
    static const char *keys[] = {"event_id", "ts",        "type",    "task_id",
                                 "queue",    "task_type", "attempt", "worker_id"};
    cJSON *ev = cJSON_Parse(json);
    int nkeys = 0;
    ck_assert_msg(ev != NULL, "event %d is not JSON: %s", idx, json);
    for (cJSON *it = ev->child; it; it = it->next) nkeys++;
    ck_assert_msg(nkeys == 8 + (want->meta_key != NULL), "event %d has %d fields: %s", idx, nkeys,
                  json);
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        ck_assert_msg(cJSON_GetObjectItem(ev, keys[i]) != NULL, "event %d lacks %s: %s", idx,
                      keys[i], json);
    ck_assert_msg(event_id_well_formed(cJSON_GetObjectItem(ev, "event_id")->valuestring),
                  "event %d id: %s", idx, json);
    ck_assert_msg(ts_well_formed(cJSON_GetObjectItem(ev, "ts")->valuestring), "event %d ts: %s",
                  idx, json);
    ck_assert_str_eq(cJSON_GetObjectItem(ev, "type")->valuestring, want->type);
    ck_assert_str_eq(cJSON_GetObjectItem(ev, "task_id")->valuestring, want->task_id);
    ck_assert_str_eq(cJSON_GetObjectItem(ev, "queue")->valuestring,
                     *want->task_id ? "default" : "");
    ck_assert_str_eq(cJSON_GetObjectItem(ev, "task_type")->valuestring,
                     *want->task_id ? "echo" : "");
    ck_assert_msg(cJSON_IsNumber(cJSON_GetObjectItem(ev, "attempt")), "event %d attempt", idx);
    ck_assert_int_eq(cJSON_GetObjectItem(ev, "attempt")->valueint, want->attempt);
    ck_assert_str_eq(cJSON_GetObjectItem(ev, "worker_id")->valuestring, want->worker_id);
    if (want->meta_key) {
        cJSON *meta = cJSON_GetObjectItem(ev, "metadata");
        ck_assert_msg(cJSON_IsObject(meta) && cJSON_GetObjectItem(meta, want->meta_key),
                      "event %d metadata: %s", idx, json);
    }
    cJSON_Delete(ev);
}

/* The events of one call share the id's evt-<ms>-<seq>- part and number on from 1. */
START_TEST(test_event_ids_within_one_call) {
    redisReply *r;
    char prefix[64], want[8];
    th_queue_groups(C, "default");
    for (const char *const *t = (const char *const[]){"i1", "i2", "i3", NULL}; *t; t++)
        freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id %s", *t));
    freeReplyObject(th_cmd(C, "HSET dtq:config events_stream_maxlen 100"));
    r = fetch("w1", 10, "default");
    ck_assert_int_eq(r->element[0]->elements, 3);
    freeReplyObject(r);
    r = th_cmd(C, "XRANGE dtq:stream:events - +");
    ck_assert_int_eq(r->elements, 3); /* the three TASK_STARTED of the one fetch */
    for (size_t i = 0; i < 3; i++) {
        cJSON *ev = cJSON_Parse(r->element[i]->element[1]->element[1]->str);
        const char *id = cJSON_GetObjectItem(ev, "event_id")->valuestring;
        const char *last = strrchr(id, '-');
        ck_assert_msg(event_id_well_formed(id), "event id %s", id);
        if (i == 0) snprintf(prefix, sizeof(prefix), "%.*s", (int)(last - id + 1), id);
        ck_assert_msg(!strncmp(id, prefix, strlen(prefix)) && strlen(id) > strlen(prefix),
                      "event id %s does not start with %s", id, prefix);
        snprintf(want, sizeof(want), "%zu", i + 1);
        ck_assert_str_eq(last + 1, want);
        cJSON_Delete(ev);
    }
    freeReplyObject(r);
}
END_TEST

static redisReply *claimed_one(const char *worker) {
    redisReply *r = fetch(worker, 10, "default");
    ck_assert_int_eq(r->element[0]->elements, 1);
    return r;
}

/* Every event type, driven through the Functions, has exactly the published shape. */
START_TEST(test_event_shapes) {
    static const expected_event want[] = {
        {"TASK_QUEUED", "a", 1, "", NULL},
        {"TASK_STARTED", "a", 1, "w1", NULL},
        {"TASK_RETRY_SCHEDULED", "a", 1, "w1", "delay_ms"},
        {"TASK_RETRIED", "a", 2, "w1", NULL},
        {"TASK_STARTED", "a", 2, "w1", NULL},
        {"TASK_SUCCEEDED", "a", 2, "w1", NULL},
        {"TASK_QUEUED", "b", 1, "", NULL},
        {"TASK_STARTED", "b", 1, "w1", NULL},
        {"TASK_DEAD_LETTERED", "b", 1, "w1", "last_error"},
        {"TASK_QUEUED", "c", 1, "", NULL},
        {"TASK_STARTED", "c", 1, "w1", NULL},
        {"TASK_FAILED", "c", 1, "w1", NULL},
        {"TASK_CANCELLED", "d", 1, "", NULL},
        {"TASK_QUEUED", "e", 1, "", NULL},
        {"TASK_EXPIRED", "e", 1, "w1", NULL},
        {"TASK_QUEUED", "f", 1, "", NULL},
        {"TASK_STARTED", "f", 1, "w1", NULL},
        {"TASK_DUPLICATE_ABSORBED", "f", 1, "w2", "entry_attempt"},
        {"WORKER_STARTED", "", 0, "w1", NULL},
        {"WORKER_STOPPED", "", 0, "w1", NULL},
    };
    size_t n = sizeof(want) / sizeof(want[0]);
    redisReply *r, *f;
    th_queue_groups(C, "default");
    freeReplyObject(th_cmd(C, "HSET dtq:config events_stream_maxlen 1000"));
    /* a: retried once, then succeeds */
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id a"));
    r = claimed_one("w1");
    freeReplyObject(finish_one("w1", r->element[0]->element[0], RETRY_, "", DTQ_RESULT_NONE));
    freeReplyObject(r);
    freeReplyObject(th_cmd(C, "ZADD dtq:retry:schedule 0 a"));
    freeReplyObject(
        th_cmd(C, "FCALL dtq_sched_claim 2 dtq:retry:schedule dtq:retry:claimed 10 60000"));
    freeReplyObject(th_cmd(C, "FCALL dtq_sched_promote 1 dtq:retry:claimed w1 a"));
    r = claimed_one("w1");
    freeReplyObject(finish_one("w1", r->element[0]->element[0], OK_, "", DTQ_RESULT_NONE));
    freeReplyObject(r);
    /* b: dead-lettered; c: failed with the DLQ disabled */
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id b"));
    r = claimed_one("w1");
    f = finish_one("w1", r->element[0]->element[0], DEAD_, "", DTQ_RESULT_NONE);
    ck_assert_str_eq(f->element[0]->str, "dead_lettered");
    freeReplyObject(f);
    freeReplyObject(r);
    freeReplyObject(th_cmd(C, "HSET dtq:config dlq_enabled 0"));
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id c"));
    r = claimed_one("w1");
    f = finish_one("w1", r->element[0]->element[0], DEAD_, "", DTQ_RESULT_NONE);
    ck_assert_str_eq(f->element[0]->str, "failed");
    freeReplyObject(f);
    freeReplyObject(r);
    /* d: cancelled while pending (a delayed enqueue publishes nothing) */
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id d delay_ms 60000"));
    freeReplyObject(th_cmd(C, "FCALL dtq_cancel 0 d"));
    /* e: its TTL passed before it was read */
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id e ttl_seconds 1"));
    freeReplyObject(th_cmd(C, "HSET dtq:task:e created_at 0"));
    r = fetch("w1", 10, "default");
    ck_assert_int_eq(r->element[0]->elements, 0);
    freeReplyObject(r);
    /* f: a second entry for its running attempt is absorbed */
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id f"));
    freeReplyObject(claimed_one("w1"));
    freeReplyObject(th_cmd(C, "XADD dtq:stream:default:p5 * task_id f attempt 1"));
    r = fetch("w2", 10, "default");
    ck_assert_int_eq(r->element[0]->elements, 0);
    freeReplyObject(r);
    freeReplyObject(th_cmd(C, "FCALL dtq_worker_event 0 w1 WORKER_STARTED"));
    freeReplyObject(th_cmd(C, "FCALL dtq_worker_event 0 w1 WORKER_STOPPED"));
    th_expect_refused(th_cmd(C, "FCALL dtq_worker_event 0 w1 TASK_SUCCEEDED"), "INVALID_ARGUMENT");

    r = th_cmd(C, "XRANGE dtq:stream:events - +");
    ck_assert_int_eq(r->elements, n);
    for (size_t i = 0; i < n; i++) {
        const char *json = r->element[i]->element[1]->element[1]->str;
        assert_event(json, &want[i], (int)i);
        for (size_t j = 0; j < i; j++) { /* ids are unique, within a call and across calls */
            cJSON *a = cJSON_Parse(json),
                  *b = cJSON_Parse(r->element[j]->element[1]->element[1]->str);
            ck_assert_str_ne(cJSON_GetObjectItem(a, "event_id")->valuestring,
                             cJSON_GetObjectItem(b, "event_id")->valuestring);
            cJSON_Delete(a);
            cJSON_Delete(b);
        }
    }
    freeReplyObject(r);
}
END_TEST

/* ----------------------------------------------------------------- poisoned records */

/* The stream entry id of the newest entry of `stream` whose `field` is `value`, into out. */
static void entry_id_of(const char *stream, const char *fld, const char *value, char *out,
                        size_t outlen) {
    redisReply *r = th_cmd(C, "XRANGE %s - +", stream);
    out[0] = '\0';
    for (size_t i = 0; i < r->elements; i++) {
        const char *v = th_entry_field(r->element[i], fld);
        if (v && !strcmp(v, value)) snprintf(out, outlen, "%s", r->element[i]->element[0]->str);
    }
    freeReplyObject(r);
    ck_assert_msg(out[0], "no entry with %s = %s in %s", fld, value, stream);
}

/* Fails unless quarantine entry `idx` (oldest first) is for `key`, from `source`, with a
 * reason naming the key's type. */
static void assert_quarantined(size_t idx, const char *key, const char *source, const char *type) {
    redisReply *q = th_cmd(C, "XRANGE dtq:stream:quarantine - +");
    char want[256];
    ck_assert_int_gt(q->elements, idx);
    snprintf(want, sizeof(want), "wrong type: %s is a %s, not a hash", key, type);
    ck_assert_str_eq(th_entry_field(q->element[idx], "reason"), want);
    ck_assert_str_eq(th_entry_field(q->element[idx], "key"), key);
    ck_assert_str_eq(th_entry_field(q->element[idx], "source"), source);
    ck_assert_int_gt(strtoll(th_entry_field(q->element[idx], "ts"), NULL, 10), 0);
    freeReplyObject(q);
}

/* Fails unless `id` is dead-lettered as poisoned because of `why`, with its dead-letter entry
 * and a retention TTL. */
static void assert_poisoned(const char *id, const char *why) {
    char err[160], entry[64];
    snprintf(err, sizeof(err), "poisoned record: %s", why);
    th_assert_field(C, id, "status", "dead_lettered");
    th_assert_field(C, id, "last_error", err);
    th_assert_field(C, id, "last_error_class", "poisoned");
    entry_id_of("dtq:stream:dead-letter", "task_id", id, entry, sizeof(entry));
    th_assert_field(C, id, "dlq_entry", entry);
    ck_assert_int_gt(th_int(th_cmd(C, "TTL dtq:task:%s", id)), 0);
}

static void assert_string_key(const char *key, const char *want) {
    redisReply *r = th_cmd(C, "GET %s", key);
    ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
    ck_assert_str_eq(r->str, want);
    freeReplyObject(r);
}

static long long pending_count(const char *stream) {
    redisReply *r = th_cmd(C, "XPENDING %s workers", stream);
    long long n = r->element[0]->integer;
    freeReplyObject(r);
    return n;
}

/* fetch: a poisoned hash is dead-lettered, a task key of another type quarantined (through
 * both the dtq-entry and the raw-entry path), <p>:cancelled of another type reads as empty;
 * the good entries around them are claimed as usual, and the call replies normally. */
START_TEST(test_fetch_isolates_poisoned_records) {
    redisReply *r;
    char src1[160], src2[160], id[64];
    th_queue_groups(C, "default");
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id g1"));
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id bad"));
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id g2"));
    freeReplyObject(th_cmd(C, "HSET dtq:task:bad attempt abc"));
    r = fetch("w1", 10, "default");
    ck_assert_int_eq(r->element[2]->integer, 3);
    ck_assert_int_eq(r->element[0]->elements, 2);
    ck_assert_str_eq(r->element[0]->element[0]->element[2]->str, "g1");
    ck_assert_str_eq(r->element[0]->element[1]->element[2]->str, "g2");
    freeReplyObject(r);
    for (const char *const *g = (const char *const[]){"g1", "g2", NULL}; *g; g++) {
        th_assert_field(C, *g, "status", "running");
        th_assert_field(C, *g, "attempt", "1");
        th_assert_field(C, *g, "worker_id", "w1");
    }
    assert_poisoned("bad", "attempt is not a number");
    th_assert_field(C, "bad", "attempt", "abc"); /* copied, never rewritten */
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 1);
    /* the poisoned entry is acknowledged and deleted; the two claimed ones stay pending */
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p5")), 2);
    ck_assert_int_eq(pending_count("dtq:stream:default:p5"), 2);
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:stream:quarantine")), 0);

    /* keys of another type: a dtq entry and a raw entry whose task keys are strings */
    freeReplyObject(th_cmd(C, "SET dtq:cancelled junk"));
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id g3"));
    freeReplyObject(th_cmd(C, "SET dtq:task:s1 junk1"));
    r = th_cmd(C, "XADD dtq:stream:default:p5 * task_id s1 attempt 1");
    snprintf(src1, sizeof(src1), "dtq:stream:default:p5/%s", r->str);
    freeReplyObject(r);
    freeReplyObject(th_cmd(C, "SET dtq:task:s2 junk2"));
    r = th_cmd(C, "XADD dtq:stream:default:p5 * task_type echo payload 1 task_id s2");
    snprintf(src2, sizeof(src2), "dtq:stream:default:p5/%s", r->str);
    freeReplyObject(r);
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id g4"));
    r = fetch("w1", 10, "default");
    ck_assert_int_eq(r->element[2]->integer, 4);
    ck_assert_int_eq(r->element[0]->elements, 2);
    ck_assert_str_eq(r->element[0]->element[0]->element[2]->str, "g3");
    ck_assert_str_eq(r->element[0]->element[1]->element[2]->str, "g4");
    freeReplyObject(r);
    th_assert_field(C, "g3", "status", "running");
    th_assert_field(C, "g4", "status", "running");
    assert_quarantined(0, "dtq:task:s1", src1, "string");
    assert_quarantined(1, "dtq:task:s2", src2, "string");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:quarantine")), 2);
    assert_string_key("dtq:task:s1", "junk1");
    assert_string_key("dtq:task:s2", "junk2");
    assert_string_key("dtq:cancelled", "junk");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p5")), 4); /* g1..g4 */
    ck_assert_int_eq(pending_count("dtq:stream:default:p5"), 4);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD dtq:retry:schedule")), 0);
    /* an entry with an attempt but neither task_id nor task_type is a malformed raw entry */
    r = th_cmd(C, "XADD dtq:stream:default:p5 * attempt 1");
    snprintf(id, sizeof(id), "default:p5:%s", r->str);
    freeReplyObject(r);
    r = fetch("w1", 10, "default");
    ck_assert_int_eq(r->element[2]->integer, 1);
    freeReplyObject(r);
    th_assert_field(C, id, "last_error_class", "invalid_entry");
    /* a stream key of another type is skipped: no re-fetch loop (-1), not blocked on */
    freeReplyObject(th_cmd(C, "DEL dtq:stream:default:p3"));
    freeReplyObject(th_cmd(C, "SET dtq:stream:default:p3 junk"));
    r = fetch("w1", 10, "default");
    ck_assert_int_eq(r->element[2]->integer, 0);
    ck_assert_int_eq(r->element[1]->elements, 18); /* nine streams to block on */
    freeReplyObject(r);
}
END_TEST

/* reap: the same per entry, for the entries of a lost worker. */
START_TEST(test_reap_isolates_poisoned_records) {
    redisReply *r;
    char src[160];
    th_queue_groups(C, "default");
    for (const char *const *t = (const char *const[]){"a1", "a2", "a3", "a4", NULL}; *t; t++)
        freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id %s", *t));
    r = fetch("w-lost", 10, "default");
    ck_assert_int_eq(r->element[0]->elements, 4);
    snprintf(src, sizeof(src), "dtq:stream:default:p5/%s",
             r->element[0]->element[3]->element[1]->str);
    freeReplyObject(r);
    freeReplyObject(th_cmd(C, "HSET dtq:task:a2 created_at yesterday"));
    freeReplyObject(th_cmd(C, "DEL dtq:task:a4"));
    freeReplyObject(th_cmd(C, "RPUSH dtq:task:a4 junk"));
    /* ARGV: worker, min_idle_ms, run_slots, min_count, policy, (queue band cursor) per stream */
    r = th_cmd(C, "FCALL dtq_reap 1 dtq:stream:default:p5 w2 0 10 16 %s default 5 0-0", POLICY);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "reap: %s", r->str);
    ck_assert_int_eq(r->elements, 2); /* claimed tasks, next cursors */
    ck_assert_int_eq(r->element[0]->elements, 2);
    ck_assert_str_eq(r->element[0]->element[0]->element[2]->str, "a1");
    ck_assert_str_eq(r->element[0]->element[1]->element[2]->str, "a3");
    ck_assert_int_eq(r->element[0]->element[0]->element[6]->integer, 2); /* attempt + 1 */
    ck_assert_str_eq(r->element[1]->element[0]->str, "0-0");             /* scan done */
    freeReplyObject(r);
    for (const char *const *g = (const char *const[]){"a1", "a3", NULL}; *g; g++) {
        th_assert_field(C, *g, "status", "running");
        th_assert_field(C, *g, "attempt", "2");
        th_assert_field(C, *g, "worker_id", "w2");
    }
    assert_poisoned("a2", "created_at is not a number");
    assert_quarantined(0, "dtq:task:a4", src, "list");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:quarantine")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "LLEN dtq:task:a4")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p5")), 2);
    r = th_cmd(C, "XPENDING dtq:stream:default:p5 workers - + 10 w2");
    ck_assert_int_eq(r->elements, 2);
    freeReplyObject(r);
    ck_assert_int_eq(pending_count("dtq:stream:default:p5"), 2);
}
END_TEST

/* `FCALL dtq_reap` of worker w with min_idle ms over the default queue's p5: the number of
 * tasks it claimed to run. */
static size_t reap_claims(const char *w, long long min_idle) {
    redisReply *r =
        th_cmd(C, "FCALL dtq_reap 1 dtq:stream:default:p5 %s %lld 10 16 %s default 5 0-0", w,
               min_idle, POLICY);
    size_t n;
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "reap: %s", r->str);
    n = r->element[0]->elements;
    freeReplyObject(r);
    return n;
}

/* A stall of Redis judged by the fleet's shortest visibility timeout (issue 27.3): daemons of
 * 10 s and 60 s share the namespace; the 10 s one last reaped 9 s ago (Redis was stopped),
 * and the 60 s one reaps first. By its own timeout 9 s is no gap (60 / 2 + 2 s); by the
 * fleet's it is (10 / 2 + 2 s), so up_since starts again and the 10 s daemon's next reap
 * adopts nothing of a live peer whose claim looks 20 s idle. Without the gap it adopts. */
START_TEST(test_reap_gap_judged_by_the_shortest_visibility_timeout) {
    redisReply *r;
    int64_t now;
    th_queue_groups(C, "default");
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id s1"));
    r = fetch("w-live", 10, "default");
    ck_assert_int_eq(r->element[0]->elements, 1);
    freeReplyObject(th_cmd(C, "XCLAIM dtq:stream:default:p5 workers w-live 0 %s IDLE 20000 JUSTID",
                           r->element[0]->element[0]->element[1]->str));
    freeReplyObject(r);
    ck_assert_uint_eq(reap_claims("w-short", 10000), 0); /* the first reap: no history */
    now = th_redis_ms(C);
    freeReplyObject(th_cmd(C,
                           "HSET dtq:reaper last_reap %lld up_since %lld short_idle 10000 "
                           "short_idle_at %lld",
                           (long long)(now - 9000), (long long)(now - 600000),
                           (long long)(now - 9000)));
    ck_assert_uint_eq(reap_claims("w-long", 60000), 0);
    r = th_cmd(C, "HGET dtq:reaper up_since");
    ck_assert_int_ge(atoll(r->str), now); /* up_since starts again */
    freeReplyObject(r);
    ck_assert_uint_eq(reap_claims("w-short", 10000), 0);
    th_assert_field(C, "s1", "worker_id", "w-live");
    th_assert_field(C, "s1", "attempt", "1");
    /* the same reaps without the gap: the 20 s idle claim is adopted (attempt 2) */
    now = th_redis_ms(C);
    freeReplyObject(th_cmd(C, "HSET dtq:reaper last_reap %lld up_since %lld short_idle_at %lld",
                           (long long)(now - 3000), (long long)(now - 600000),
                           (long long)(now - 3000)));
    ck_assert_uint_eq(reap_claims("w-long", 60000), 0); /* nothing idle for 60 s */
    ck_assert_uint_eq(reap_claims("w-short", 10000), 1);
    th_assert_field(C, "s1", "worker_id", "w-short");
    th_assert_field(C, "s1", "attempt", "2");
}
END_TEST

/* finish: one call, four records: a poisoned hash is dead-lettered whatever the outcome, a
 * task key of another type is quarantined, every entry is acknowledged. */
START_TEST(test_finish_isolates_poisoned_records) {
    redisReply *r, *f;
    char src[160];
    th_queue_groups(C, "default");
    for (const char *const *t = (const char *const[]){"f1", "f2", "f3", "f4", NULL}; *t; t++)
        freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id %s", *t));
    r = fetch("w1", 10, "default");
    ck_assert_int_eq(r->element[0]->elements, 4);
    /* f2: a field finish reads is damaged; f3: one it does not read (its outcome stands) */
    freeReplyObject(th_cmd(C, "HSET dtq:task:f2 attempt two"));
    freeReplyObject(th_cmd(C, "HSET dtq:task:f3 priority high"));
    freeReplyObject(th_cmd(C, "DEL dtq:task:f4"));
    freeReplyObject(th_cmd(C, "SET dtq:task:f4 junk"));
    snprintf(src, sizeof(src), "dtq:stream:default:p5/%s",
             r->element[0]->element[3]->element[1]->str);
    {
        dtq_finish_record recs[4];
        for (size_t i = 0; i < 4; i++) {
            recs[i] = th_finish_record(r->element[0]->element[i]);
            recs[i].result_state = DTQ_RESULT_FULL;
            recs[i].result = (char *)"{\"ok\":1}";
            recs[i].result_len = strlen(recs[i].result);
        }
        f = th_finish(C, "w1", recs, 4);
    }
    freeReplyObject(r);
    ck_assert_int_eq(f->elements, 4);
    ck_assert_str_eq(f->element[0]->str, "succeeded");
    ck_assert_str_eq(f->element[1]->str, "stale"); /* nothing written, entry kept */
    ck_assert_str_eq(f->element[2]->str, "succeeded");
    ck_assert_str_eq(f->element[3]->str, "quarantined");
    freeReplyObject(f);
    for (const char *const *g = (const char *const[]){"f1", "f3", NULL}; *g; g++) {
        char key[64];
        th_assert_field(C, *g, "status", "succeeded");
        snprintf(key, sizeof(key), "dtq:result:%s", *g);
        assert_string_key(key, "{\"ok\":1}");
    }
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:result:f2")), 0);
    assert_quarantined(0, "dtq:task:f4", src, "string");
    assert_string_key("dtq:task:f4", "junk");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:quarantine")), 1);
    /* three entries acknowledged and deleted; f2's stays pending, and the reaper settles it */
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p5")), 1);
    ck_assert_int_eq(pending_count("dtq:stream:default:p5"), 1);
    r = th_cmd(C, "FCALL dtq_reap 1 dtq:stream:default:p5 w2 0 10 16 %s default 5 0-0", POLICY);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "reap: %s", r->str);
    ck_assert_int_eq(r->element[0]->elements, 0);
    freeReplyObject(r);
    assert_poisoned("f2", "attempt is not a number");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p5")), 0);
    ck_assert_int_eq(pending_count("dtq:stream:default:p5"), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD dtq:retry:schedule")), 0);
}
END_TEST

/* handback and recover 'lost' read each task on their own: a task key of another type is
 * quarantined and its entry acknowledged, and the other records of the call go on (a raised
 * error would leave every record of the call where it was). */
START_TEST(test_handback_and_recover_isolate_a_task_key_of_another_type) {
    redisReply *r;
    char src[2][160], entry[2][32];
    th_queue_groups(C, "default");
    for (const char *const *t = (const char *const[]){"h1", "h2", NULL}; *t; t++)
        freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id %s", *t));
    r = fetch("w1", 10, "default");
    ck_assert_int_eq(r->element[0]->elements, 2);
    for (size_t i = 0; i < 2; i++) {
        snprintf(entry[i], sizeof(entry[i]), "%s", r->element[0]->element[i]->element[1]->str);
        snprintf(src[i], sizeof(src[i]), "dtq:stream:default:p5/%s", entry[i]);
    }
    freeReplyObject(r);
    freeReplyObject(th_cmd(C, "DEL dtq:task:h1"));
    freeReplyObject(th_cmd(C, "SET dtq:task:h1 junk"));

    r = th_cmd(C,
               "FCALL dtq_handback 0 w1 2 h1 1 dtq:stream:default:p5 %s stop "
               "h2 1 dtq:stream:default:p5 %s stop",
               entry[0], entry[1]);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "handback: %s", r->str);
    ck_assert_int_eq(r->elements, 2);
    ck_assert_str_eq(r->element[0]->str, "quarantined");
    ck_assert_str_eq(r->element[1]->str, "queued");
    freeReplyObject(r);
    assert_quarantined(0, "dtq:task:h1", src[0], "string");
    assert_string_key("dtq:task:h1", "junk");
    th_assert_field(C, "h2", "status", "queued");
    th_assert_field(C, "h2", "attempt", "2");
    ck_assert_int_eq(pending_count("dtq:stream:default:p5"), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p5")), 1); /* h2's new entry */

    /* recover 'lost': h2 claimed again by w1, its reply "lost"; h3's key replaced */
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id h3"));
    r = fetch("w1", 10, "default");
    ck_assert_int_eq(r->element[0]->elements, 2);
    freeReplyObject(r);
    freeReplyObject(th_cmd(C, "DEL dtq:task:h3"));
    freeReplyObject(th_cmd(C, "SET dtq:task:h3 junk"));
    r = th_cmd(C, "FCALL dtq_recover 1 dtq:stream:default:p5 w1 lost %s 0 default 5", POLICY);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "recover: %s", r->str);
    ck_assert_int_eq(r->elements, 1);
    ck_assert_str_eq(r->element[0]->element[2]->str, "h2");
    ck_assert_int_eq(r->element[0]->element[6]->integer, 2); /* the same attempt, handed over */
    freeReplyObject(r);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:quarantine")), 2);
    r = th_cmd(C, "XREVRANGE dtq:stream:quarantine + - COUNT 1");
    ck_assert_str_eq(th_entry_field(r->element[0], "key"), "dtq:task:h3");
    freeReplyObject(r);
    assert_string_key("dtq:task:h3", "junk");
    th_assert_field(C, "h2", "status", "running");
    ck_assert_int_eq(pending_count("dtq:stream:default:p5"), 1); /* h2's; h3's acknowledged */
}
END_TEST

/* sched_promote: per id; <p>:cancelled of another type cancels nothing and stays as is. */
START_TEST(test_sched_promote_isolates_poisoned_records) {
    redisReply *r;
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id p1 delay_ms 1"));
    freeReplyObject(th_cmd(C, "HSET dtq:task:r1 id r1 queue default task_type echo status retrying "
                              "attempt 2 priority 7 created_at 1"));
    freeReplyObject(th_cmd(C, "HSET dtq:task:bad id bad queue default task_type echo status "
                              "retrying attempt two priority 5 created_at 1"));
    freeReplyObject(th_cmd(C, "SET dtq:task:s1 junk"));
    freeReplyObject(th_cmd(C, "SET dtq:cancelled junk"));
    for (const char *const *id = (const char *const[]){"p1", "bad", "r1", "s1", NULL}; *id; id++)
        freeReplyObject(th_cmd(C, "ZADD dtq:retry:claimed 1 %s", *id));
    r = th_cmd(C, "FCALL dtq_sched_promote 1 dtq:retry:claimed w1 p1 bad r1 s1");
    ck_assert_msg(r->type == REDIS_REPLY_INTEGER, "promote: %s", r->str);
    ck_assert_int_eq(r->integer, 2); /* p1 and r1 */
    freeReplyObject(r);
    th_assert_field(C, "p1", "status", "queued");
    th_assert_field(C, "p1", "attempt", "1");
    th_assert_field(C, "r1", "status", "queued");
    th_assert_field(C, "r1", "attempt", "3");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p5")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p7")), 1);
    assert_poisoned("bad", "attempt is not a number");
    assert_quarantined(0, "dtq:task:s1", "dtq_sched_promote", "string");
    assert_string_key("dtq:task:s1", "junk");
    assert_string_key("dtq:cancelled", "junk");
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD dtq:retry:claimed")), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:quarantine")), 1);
}
END_TEST

/* requeue_dlq and requeue: a poisoned task is dead-lettered again (a new entry), an entry
 * whose task key holds another type is dropped and quarantined; the others are requeued. */
START_TEST(test_requeue_isolates_poisoned_records) {
    redisReply *r;
    char old_entry[64], entry[64];
    th_queue_groups(C, "default");
    for (const char *const *t = (const char *const[]){"d1", "d2", "d3", NULL}; *t; t++)
        freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id %s", *t));
    r = fetch("w1", 10, "default");
    ck_assert_int_eq(r->element[0]->elements, 3);
    for (size_t i = 0; i < 3; i++)
        freeReplyObject(finish_one("w1", r->element[0]->element[i], DEAD_, "", DTQ_RESULT_NONE));
    freeReplyObject(r);
    freeReplyObject(th_cmd(C, "SET dtq:task:s1 junk"));
    freeReplyObject(th_cmd(C, "XADD dtq:stream:dead-letter * task_id s1"));
    freeReplyObject(th_cmd(C, "HSET dtq:task:d2 priority 12"));
    entry_id_of("dtq:stream:dead-letter", "task_id", "d2", old_entry, sizeof(old_entry));
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 4);
    ck_assert_int_eq(th_int(th_cmd(C, "FCALL dtq_requeue_dlq 0")), 2);
    for (const char *const *g = (const char *const[]){"d1", "d3", NULL}; *g; g++) {
        th_assert_field(C, *g, "status", "queued");
        th_assert_field(C, *g, "attempt", "1");
    }
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p5")), 2);
    assert_poisoned("d2", "priority is not an integer in [0, 9]");
    entry_id_of("dtq:stream:dead-letter", "task_id", "d2", entry, sizeof(entry));
    ck_assert_str_ne(entry, old_entry);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 1); /* d2's new entry */
    assert_quarantined(0, "dtq:task:s1", "dtq_requeue_dlq", "string");
    assert_string_key("dtq:task:s1", "junk");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:audit")), 2); /* one per requeued task */
    /* requeue of one task: poisoned -> dead-lettered again; another type -> refused */
    r = th_cmd(C, "FCALL dtq_requeue 0 d2");
    ck_assert_msg(r->type == REDIS_REPLY_STRING, "requeue: %s", r->str);
    ck_assert_str_eq(r->str, "dead_lettered");
    freeReplyObject(r);
    assert_poisoned("d2", "priority is not an integer in [0, 9]");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 1);
    th_expect_refused(th_cmd(C, "FCALL dtq_requeue 0 s1"),
                      "NOT_FOUND task s1: wrong type: dtq:task:s1 is a string, not a hash");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:quarantine")), 1);
}
END_TEST

/* Garbage in <p>:config is not trusted: each bad field falls back to its default. */
/* A JSON string payload of exactly `len` bytes (caller frees). */
static char *json_string_of(size_t len) {
    char *p = malloc(len + 1);
    ck_assert_ptr_nonnull(p);
    memset(p, 'x', len);
    p[0] = p[len - 1] = '"';
    p[len] = '\0';
    return p;
}

START_TEST(test_config_garbage_ignored) {
    char *fits = json_string_of(262144), *over = json_string_of(262145); /* the default max */
    redisReply *r;
    char id[128];
    for (const char *const *v = (const char *const[]){"abc", "-5", "0", "1e3", NULL}; *v; v++) {
        freeReplyObject(th_cmd(C, "HSET dtq:config max_payload_bytes %s", *v));
        r = th_cmd(C, "FCALL dtq_enqueue 0 default echo %s", fits);
        ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "%s: %s", *v, r->str);
        freeReplyObject(r);
        th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 default echo %s", over),
                          "PAYLOAD_TOO_LARGE payload is 262145 bytes, max_payload_bytes is 262144");
    }
    free(fits);
    free(over);
    /* out of range or unknown: retention, DLQ length and flag, event level */
    freeReplyObject(th_cmd(C, "DEL dtq:config"));
    freeReplyObject(th_cmd(C, "HSET dtq:config task_retention_s -1 dlq_maxlen 0 dlq_enabled 7 "
                              "events loud events_stream_maxlen 100 default_priority 12"));
    th_queue_groups(C, "default");
    r = th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id c1");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    th_assert_field(C, "c1", "priority", "5");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:events")), 1); /* events: all */
    r = th_cmd(C, "XADD dtq:stream:default:p5 * task_type echo payload {bad");
    snprintf(id, sizeof(id), "default:p5:%s", r->str);
    freeReplyObject(r);
    freeReplyObject(fetch("w1", 10, "default"));
    th_assert_field(C, id, "status", "dead_lettered"); /* dlq_enabled: 1 */
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 1);
    ck_assert_int_gt(th_int(th_cmd(C, "TTL dtq:task:%s", id)), 600000); /* 604800 s */
    /* a config key of another type: every field takes its default */
    freeReplyObject(th_cmd(C, "DEL dtq:config"));
    freeReplyObject(th_cmd(C, "SET dtq:config junk"));
    r = th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id c2");
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "enqueue: %s", r->str);
    freeReplyObject(r);
    th_assert_field(C, "c2", "priority", "5");
}
END_TEST

/* ----------------------------------------------------------------- names and constants */

/* The assembled text alone (lua/dtq.lua and its modules, as the build embeds it) is a
 * template: its constants are written in by scripts.c, so a FUNCTION LOAD of the bare
 * file is refused, naming the way to install it (in the name of the global its
 * placeholder reads: Redis allows no error() while it loads a library). */
START_TEST(test_source_text_refuses_to_load) {
    char *src = th_read_file(DTQ_LUA_LIBRARY);
    redisReply *r = th_cmd(C, "FUNCTION LOAD REPLACE %s", src);
    ck_assert_int_eq(r->type, REDIS_REPLY_ERROR);
    ck_assert_msg(strstr(r->str, "load_with_dtqctl_functions_install") != NULL, "%s", r->str);
    freeReplyObject(r);
    free(src);
    r = th_cmd(C, "FCALL_RO dtq_version 0"); /* the loaded library stays */
    ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
    ck_assert_str_eq(r->str, dtq_scripts_version());
    freeReplyObject(r);
}
END_TEST

/* `cmd key [a1 [a2]]`, an integer reply; frees the key. */
static long long key_cmd(const char *cmd, char *key, const char *a1, const char *a2) {
    long long n = a2   ? th_int(th_cmd(C, "%s %s %s %s", cmd, key, a1, a2))
                  : a1 ? th_int(th_cmd(C, "%s %s %s", cmd, key, a1))
                       : th_int(th_cmd(C, "%s %s", cmd, key));
    free(key);
    return n;
}

/* The C side's key constructors (keys.h) and DTQ_GROUP name what the Functions write and
 * read: a task's hash and stream entry, the queue set, the schedule, the result, the paused
 * key, the events stream (turned on through the config hash), the worker set and hash. */
START_TEST(test_c_key_names_are_the_functions_keys) {
    redisReply *r, *info;
    dtq_finish_record rec;
    int grouped = 0;
    long long live = -1;
    ck_assert_int_eq(key_cmd("HSET", dtq_key_config("dtq"), "events_stream_maxlen", "100"), 1);
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 kq echo {} priority 7 task_id kt1"));
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 kq echo {} delay_ms 600000 task_id kt2"));
    ck_assert_int_eq(key_cmd("EXISTS", dtq_key_task("dtq", "kt1"), NULL, NULL), 1);
    ck_assert_int_eq(key_cmd("XLEN", dtq_key_stream("dtq", "kq", 7), NULL, NULL), 1);
    ck_assert_int_eq(key_cmd("SISMEMBER", dtq_key_queues("dtq"), "kq", NULL), 1);
    ck_assert_int_eq(key_cmd("ZCARD", dtq_key_retry_schedule("dtq"), NULL, NULL), 1);
    ck_assert_int_ge(key_cmd("XLEN", dtq_key_events_stream("dtq"), NULL, NULL), 1);
    /* the fetch creates the group and claims kt1; its result goes to the result key */
    r = fetch("w1", 10, "kq");
    if (r->element[0]->elements == 0) { /* the group was made: read again */
        freeReplyObject(r);
        r = fetch("w1", 10, "kq");
    }
    ck_assert_int_eq(r->element[0]->elements, 1);
    rec = th_finish_record(r->element[0]->element[0]);
    rec.result_state = DTQ_RESULT_FULL;
    rec.result = (char *)"42";
    rec.result_len = 2;
    freeReplyObject(th_finish(C, "w1", &rec, 1));
    freeReplyObject(r);
    ck_assert_int_eq(key_cmd("EXISTS", dtq_key_result("dtq", "kt1"), NULL, NULL), 1);
    info = th_cmd(C, "XINFO GROUPS dtq:stream:kq:p7");
    for (size_t i = 0; i < info->elements; i++)
        grouped |= !strcmp(info->element[i]->element[1]->str, DTQ_GROUP);
    freeReplyObject(info);
    ck_assert(grouped);
    freeReplyObject(th_cmd(C, "FCALL dtq_pause 0 kq tester"));
    ck_assert_int_eq(key_cmd("EXISTS", dtq_key_paused("dtq", "kq"), NULL, NULL), 1);
    /* stats counts the members of the worker set whose worker hash exists */
    ck_assert_int_eq(key_cmd("SADD", dtq_key_workers("dtq"), "w1", NULL), 1);
    ck_assert_int_eq(key_cmd("HSET", dtq_key_worker("dtq", "w1"), "status", "running"), 1);
    r = th_cmd(C, "FCALL_RO dtq_stats 0");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (!strcmp(r->element[i]->str, "workers")) live = r->element[i + 1]->integer;
    freeReplyObject(r);
    ck_assert_int_eq(live, 1);
}
END_TEST

/* ----------------------------------------------------------------- bounded calls */

/* stats reports the queues of <p>:queues (enqueue, raw-entry fetch), without a SCAN: a
 * queue that only a producer's XADD created is not listed until a fetch reads it. */
START_TEST(test_stats_lists_known_queues) {
    redisReply *r;
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 fresh echo 1"));
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 later echo 1 delay_ms 60000"));
    th_queue_groups(C, "rawq");
    freeReplyObject(th_cmd(C, "XADD dtq:stream:rawq:p5 * task_type echo payload 1"));
    ck_assert_int_eq(th_int(th_cmd(C, "SISMEMBER dtq:queues fresh")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "SISMEMBER dtq:queues later")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "SISMEMBER dtq:queues rawq")), 0);
    r = th_cmd(C, "FCALL_RO dtq_stats 0");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    ck_assert_int_eq(r->elements, 2 * 4 * 2 + 8); /* fresh, later; four totals */
    ck_assert_str_eq(r->element[0]->str, "queue:fresh:depth");
    ck_assert_int_eq(r->element[1]->integer, 1);
    ck_assert_str_eq(r->element[6]->str, "queue:fresh:mode");
    ck_assert_str_eq(r->element[7]->str, "full");
    ck_assert_str_eq(r->element[8]->str, "queue:later:depth");
    ck_assert_int_eq(r->element[9]->integer, 0);
    freeReplyObject(r);
    freeReplyObject(fetch("w1", 10, "rawq"));
    ck_assert_int_eq(th_int(th_cmd(C, "SISMEMBER dtq:queues rawq")), 1);
    /* a listed queue whose stream key holds another type counts 0, and stats still answers */
    freeReplyObject(th_cmd(C, "SADD dtq:queues weird"));
    freeReplyObject(th_cmd(C, "SET dtq:stream:weird:p5 junk"));
    r = th_cmd(C, "FCALL_RO dtq_stats 0");
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "stats: %s", r->str);
    ck_assert_int_eq(r->elements, 4 * 4 * 2 + 8);
    ck_assert_str_eq(r->element[16]->str, "queue:rawq:depth");
    ck_assert_int_eq(r->element[17]->integer, 0);
    ck_assert_str_eq(r->element[18]->str, "queue:rawq:pending");
    ck_assert_int_eq(r->element[19]->integer, 1);
    ck_assert_str_eq(r->element[24]->str, "queue:weird:depth");
    ck_assert_int_eq(r->element[25]->integer, 0);
    freeReplyObject(r);
}
END_TEST

/* Writes n dead-lettered tasks dl<i> of queue q with their dead-letter entries (pipelined). */
static void make_dead_letters(int n, const char *q) {
    redisReply *r;
    for (int i = 1; i <= n; i++) {
        redisAppendCommand(C,
                           "HSET dtq:task:dl%d id dl%d queue %s task_type echo payload 1 status "
                           "dead_lettered attempt 1 priority 5 created_at 1 dlq_entry 1-%d",
                           i, i, q, i);
        redisAppendCommand(C, "XADD dtq:stream:dead-letter 1-%d task_id dl%d", i, i);
    }
    for (int i = 0; i < 2 * n; i++) {
        ck_assert_int_eq(redisGetReply(C, (void **)&r), REDIS_OK);
        ck_assert_int_ne(r->type, REDIS_REPLY_ERROR);
        freeReplyObject(r);
    }
}

/* requeue_dlq works in chunks of 1000, whatever count says; callers loop until 0. */
START_TEST(test_requeue_dlq_in_chunks) {
    make_dead_letters(2500, "default");
    ck_assert_int_eq(th_int(th_cmd(C, "FCALL dtq_requeue_dlq 0 5000")), 1000);
    ck_assert_int_eq(th_int(th_cmd(C, "FCALL dtq_requeue_dlq 0")), 1000);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 500);
    ck_assert_int_eq(th_int(th_cmd(C, "FCALL dtq_requeue_dlq 0")), 500);
    ck_assert_int_eq(th_int(th_cmd(C, "FCALL dtq_requeue_dlq 0")), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p5")), 2500);
    th_assert_field(C, "dl1", "status", "queued");
    th_assert_field(C, "dl2500", "status", "queued");
}
END_TEST

/* fetch reads at most 1000 entries per call and sched_claim moves at most 10000. */
START_TEST(test_fetch_and_sched_claim_caps) {
    redisReply *r;
    th_queue_groups(C, "default");
    freeReplyObject(th_cmd(C, "EVAL %s 1 dtq:stream:default:p5",
                           "for i = 1, 1200 do redis.call('XADD', KEYS[1], '*', 'task_type', "
                           "'echo', 'payload', '1') end"));
    r = fetch("w1", 5000, "default");
    ck_assert_int_eq(r->element[2]->integer, 1000);
    ck_assert_int_eq(r->element[0]->elements, 1000);
    freeReplyObject(r);
    r = fetch("w1", 5000, "default");
    ck_assert_int_eq(r->element[0]->elements, 200);
    freeReplyObject(r);
    freeReplyObject(th_cmd(C, "EVAL %s 1 dtq:retry:schedule",
                           "for i = 1, 10005 do redis.call('ZADD', KEYS[1], 1, 'm' .. i) end"));
    {
        size_t n;
        r = th_sched_claim(C, 20000, 60000, &n);
        ck_assert_int_eq(n, 10000);
        ck_assert_int_eq(r->element[n]->integer, 10005);
        ck_assert_int_eq(r->element[n + 1]->integer, 0);
        ck_assert_int_eq(r->element[n + 2]->integer, 1); /* the 5 left are due */
        freeReplyObject(r);
    }
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD dtq:retry:schedule")), 5);
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD dtq:retry:claimed")), 10000);
}
END_TEST

/* Outcome defer: within grace_ms of created_at the task goes back to the schedule as
 * pending at the same attempt (a promotion queues that attempt again); past it, the task is
 * dead-lettered with the record's error. A defer record needs a numeric grace_ms. */
START_TEST(test_finish_defer) {
    redisReply *r, *f;
    dtq_finish_record rec;
    th_queue_groups(C, "default");
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default newtype 1 task_id df1 max_attempts 1"));
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default newtype 1 task_id df2"));
    r = fetch("w1", 10, "default");
    ck_assert_int_eq(r->element[0]->elements, 2);
    rec = th_finish_record(r->element[0]->element[0]);
    rec.outcome = DTQ_OUTCOME_DEFER;
    rec.error = (char *)"unknown_task_type:newtype";
    rec.error_class = "unknown_task_type";
    rec.delay_ms = 60000;
    rec.grace_ms = 600000;
    f = th_finish(C, "w1", &rec, 1);
    ck_assert_str_eq(f->element[0]->str, "pending");
    freeReplyObject(f);
    th_assert_field(C, "df1", "status", "pending");
    th_assert_field(C, "df1", "attempt", "1");
    th_assert_field(C, "df1", "last_error_class", "unknown_task_type");
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD dtq:retry:schedule")), 1);
    {
        redisReply *p = th_cmd(C, "XPENDING dtq:stream:default:p5 workers");
        ck_assert_int_eq(p->element[0]->integer, 1); /* df1's entry acknowledged, df2's not */
        freeReplyObject(p);
    }
    /* promoted: queued at attempt 1 again, claimable at attempt 1 (max_attempts 1) */
    freeReplyObject(th_cmd(C, "ZADD dtq:retry:schedule 0 df1"));
    freeReplyObject(
        th_cmd(C, "FCALL dtq_sched_claim 2 dtq:retry:schedule dtq:retry:claimed 10 60000"));
    freeReplyObject(th_cmd(C, "FCALL dtq_sched_promote 1 dtq:retry:claimed w1 df1"));
    th_assert_field(C, "df1", "status", "queued");
    th_assert_field(C, "df1", "attempt", "1");
    {
        redisReply *again = fetch("w2", 10, "default");
        ck_assert_int_eq(again->element[0]->elements, 1);
        ck_assert_str_eq(again->element[0]->element[0]->element[2]->str, "df1");
        ck_assert_int_eq(again->element[0]->element[0]->element[6]->integer, 1);
        freeReplyObject(again);
    }
    /* past the grace (0 ms after created_at): dead-lettered with the record's error */
    rec = th_finish_record(r->element[0]->element[1]);
    rec.outcome = DTQ_OUTCOME_DEFER;
    rec.error = (char *)"unknown_task_type:newtype";
    rec.error_class = "unknown_task_type";
    rec.delay_ms = 1000;
    rec.grace_ms = 0;
    f = th_finish(C, "w1", &rec, 1);
    ck_assert_str_eq(f->element[0]->str, "dead_lettered");
    freeReplyObject(f);
    th_assert_field(C, "df2", "attempt", "1");
    th_assert_field(C, "df2", "last_error", "unknown_task_type:newtype");
    th_assert_field(C, "df2", "last_error_class", "unknown_task_type");
    /* grace_ms must be a number for defer */
    f = th_cmd(C, "FCALL dtq_finish 0 w2 1 df1 1 defer dtq:stream:default:p5 0-1 '' none e c 5 x");
    ck_assert_int_eq(f->type, REDIS_REPLY_ERROR);
    ck_assert_ptr_nonnull(strstr(f->str, "INVALID_ARGUMENT record 1: grace_ms is not a number"));
    freeReplyObject(f);
    freeReplyObject(r);
}
END_TEST

/* The queue's length counter behind QUEUE_FULL (<p>:queue:<q>:length): every path that adds
 * or deletes an entry keeps it equal to the streams' length, so a queue filled to the limit,
 * drained, fills to the limit again; damage to it heals. */
static long long qlen(void) {
    redisReply *r = th_cmd(C, "GET dtq:queue:default:length");
    long long n = r->type == REDIS_REPLY_STRING ? atoll(r->str) : -1;
    freeReplyObject(r);
    return n;
}

static long long xlen_all(void) {
    long long n = 0;
    for (int b = 0; b <= 9; b++) n += th_int(th_cmd(C, "XLEN dtq:stream:default:p%d", b));
    return n;
}

/* Fetches everything there is and finishes it as `outcome`; returns how many. */
static size_t drain(enum dtq_outcome_kind outcome) {
    redisReply *r = fetch("w1", 100, "default");
    size_t n = r->element[0]->elements;
    for (size_t i = 0; i < n; i++) {
        redisReply *f = finish_one("w1", r->element[0]->element[i], outcome, "", DTQ_RESULT_NONE);
        freeReplyObject(f);
    }
    freeReplyObject(r);
    return n;
}

START_TEST(test_queue_length_counter) {
    redisReply *r;
    th_queue_groups(C, "default");
    freeReplyObject(th_cmd(C, "HSET dtq:config max_queue_depth 5"));
    for (int round = 0; round < 3; round++) {
        r = th_cmd(C, "FCALL dtq_enqueue_bulk 0 default echo 3 1 2 3 priority %d", round);
        ck_assert_int_eq(r->elements, 3);
        freeReplyObject(r);
        for (int i = 0; i < 2; i++) freeReplyObject(enqueue("echo", "1"));
        th_expect_refused(enqueue("echo", "1"), "QUEUE_FULL queue default holds 5 entries");
        /* a delayed task takes no entry, but a full queue refuses it all the same */
        th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 delay_ms 9"), "QUEUE_FULL");
        ck_assert_int_eq(qlen(), 5);
        ck_assert_int_eq(drain(OK_), 5); /* acknowledged and deleted at finish */
        ck_assert_int_eq(qlen(), 0);
        ck_assert_int_eq(xlen_all(), 0);
    }
    /* a retry leaves the stream and comes back with its promotion */
    freeReplyObject(enqueue("echo", "1"));
    freeReplyObject(enqueue("echo", "1"));
    ck_assert_int_eq(drain(RETRY_), 2);
    ck_assert_int_eq(qlen(), 0);
    r = th_cmd(C, "ZRANGE dtq:retry:schedule 0 -1");
    ck_assert_int_eq(r->elements, 2);
    freeReplyObject(
        th_cmd(C, "FCALL dtq_sched_run_now 0 t %s %s", r->element[0]->str, r->element[1]->str));
    freeReplyObject(r);
    ck_assert_int_eq(qlen(), 2);
    /* a raw producer entry counts from its first delivery; settled entries leave it */
    freeReplyObject(th_cmd(C, "XADD dtq:stream:default:p5 * task_type echo payload 1"));
    freeReplyObject(th_cmd(C, "XADD dtq:stream:default:p5 * task_type echo payload {bad"));
    ck_assert_int_eq(qlen(), 2);
    r = fetch("w1", 100, "default");
    ck_assert_int_eq(r->element[0]->elements, 3); /* the bad one is dead-lettered at once */
    freeReplyObject(r);
    ck_assert_int_eq(qlen(), 3);
    ck_assert_int_eq(xlen_all(), 3);
    /* queue_clear deletes the waiting entries, the running ones stay */
    freeReplyObject(enqueue("echo", "1"));
    freeReplyObject(th_cmd(C, "XADD dtq:stream:default:p5 * task_type echo payload 2"));
    r = th_cmd(C, "FCALL dtq_queue_clear 0 t default");
    ck_assert_int_eq(r->element[0]->integer, 2);
    freeReplyObject(r);
    ck_assert_int_eq(qlen(), 3);
    ck_assert_int_eq(xlen_all(), 3);
    /* damage heals from the streams: below zero, not a number, missing */
    const char *damage[] = {"SET dtq:queue:default:length -4", "SET dtq:queue:default:length x",
                            "DEL dtq:queue:default:length", "LPUSH dtq:queue:default:length x"};
    for (size_t i = 0; i < sizeof damage / sizeof *damage; i++) {
        freeReplyObject(th_cmd(C, "DEL dtq:queue:default:length"));
        freeReplyObject(th_cmd(C, damage[i]));
        freeReplyObject(enqueue("echo", "1"));
        ck_assert_int_eq(qlen(), xlen_all());
        ck_assert_int_eq(drain(OK_), 1);
        ck_assert_int_eq(qlen(), 3);
    }
    /* a fetch that finds nothing new sets it to the streams' length */
    freeReplyObject(th_cmd(C, "SET dtq:queue:default:length 99"));
    freeReplyObject(fetch("w1", 10, "default"));
    ck_assert_int_eq(qlen(), 3);
    /* entries trimmed by a raw XTRIM: the next idle fetch heals; the queue takes five again */
    freeReplyObject(th_cmd(C, "XTRIM dtq:stream:default:p5 MAXLEN 0"));
    freeReplyObject(fetch("w1", 10, "default"));
    ck_assert_int_eq(qlen(), 0);
    for (int i = 0; i < 5; i++) freeReplyObject(enqueue("echo", "1"));
    th_expect_refused(enqueue("echo", "1"), "QUEUE_FULL");
}
END_TEST

/* A claim writes only what no reader can derive (docs/reference.md 3.2): no updated_at (the
 * read model resolves it as the latest time the hash holds), and max_attempts/timeout_ms
 * only when the hash does not hold those values already. */
static const char *task_view_updated_at(const char *id, char **text, cJSON **o) {
    *o = th_read_json(C, text, "dtq_task_view 0 %s", id);
    return th_json_str(*o, "fields.updated_at");
}

START_TEST(test_claim_writes_only_what_readers_cannot_derive) {
    static const char *const claimed[] = {
        "id",        "queue",      "task_type",    "payload",    "status",
        "attempt",   "priority",   "created_at",   "metadata",   "cancel_requested",
        "worker_id", "started_at", "max_attempts", "timeout_ms", "carrier"};
    redisReply *r;
    char *text, *t;
    cJSON *o;
    th_queue_groups(C, "default");
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id c1"));
    ck_assert_int_eq(th_int(th_cmd(C, "HEXISTS dtq:task:c1 updated_at")), 0);
    r = fetch("w1", 1, "default");
    ck_assert_int_eq(th_int(th_cmd(C, "HLEN dtq:task:c1")),
                     (long long)(sizeof claimed / sizeof *claimed));
    for (size_t i = 0; i < sizeof claimed / sizeof *claimed; i++)
        ck_assert_msg(th_int(th_cmd(C, "HEXISTS dtq:task:c1 %s", claimed[i])) == 1, "no %s",
                      claimed[i]);
    t = field("c1", "started_at");
    ck_assert_str_eq(task_view_updated_at("c1", &text, &o), t);
    free(t);
    cJSON_Delete(o);
    free(text);
    /* a retry has no time of its own: it writes updated_at */
    freeReplyObject(finish_one("w1", r->element[0]->element[0], RETRY_, "", DTQ_RESULT_NONE));
    freeReplyObject(r);
    ck_assert_int_eq(th_int(th_cmd(C, "HEXISTS dtq:task:c1 updated_at")), 1);
    freeReplyObject(th_cmd(C, "FCALL dtq_sched_run_now 0 t c1"));
    /* attempt 2 under another policy: the resolution changed, so it is written again */
    r = th_fetch(C, "w1", 1, "default", "{\"d\":[5,30000],\"t\":{\"echo\":[4,2000]}}");
    ck_assert_int_eq(r->element[0]->elements, 1);
    ck_assert_int_eq(r->element[0]->element[0]->element[6]->integer, 2);
    th_assert_field(C, "c1", "max_attempts", "4");
    th_assert_field(C, "c1", "timeout_ms", "2000");
    t = field("c1", "started_at");
    ck_assert_str_eq(task_view_updated_at("c1", &text, &o), t);
    free(t);
    cJSON_Delete(o);
    free(text);
    /* the end writes finished_at alone, which the read model shows as updated_at */
    freeReplyObject(finish_one("w1", r->element[0]->element[0], OK_, "", DTQ_RESULT_NONE));
    freeReplyObject(r);
    th_assert_field(C, "c1", "status", "succeeded");
    t = field("c1", "finished_at");
    ck_assert_str_eq(task_view_updated_at("c1", &text, &o), t);
    free(t);
    cJSON_Delete(o);
    free(text);
}
END_TEST

int main(void) {
    Suite *s = suite_create("scripts");
    TCase *tc = tcase_create("functions");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_enqueue_created_and_stream_entry);
    tcase_add_test(tc, test_enqueue_refusals);
    tcase_add_test(tc, test_enqueue_idempotency_and_delay);
    tcase_add_test(tc, test_enqueue_bulk);
    tcase_add_test(tc, test_fetch_claims_in_priority_order);
    tcase_add_test(tc, test_fetch_raw_entries);
    tcase_add_test(tc, test_fetch_malformed_raw_entries);
    tcase_add_test(tc, test_duplicate_and_stale_entries_absorbed);
    tcase_add_test(tc, test_fetch_skips_paused_and_handles_cancel_and_ttl);
    tcase_add_test(tc, test_fetch_exactly_one_winner);
    tcase_add_test(tc, test_finish_paths);
    tcase_add_test(tc, test_finish_deletes_exactly_the_acknowledged_entries);
    tcase_add_test(tc, test_finish_refuses_malformed_records);
    tcase_add_test(tc, test_sched_claim_never_twice_and_stale_claims_return);
    tcase_add_test(tc, test_sched_promote_cases);
    tcase_add_test(tc, test_lock_compare_semantics);
    tcase_add_test(tc, test_admin_functions);
    tcase_add_test(tc, test_requeue_dlq_all);
    tcase_add_test(tc, test_events_from_functions);
    tcase_add_test(tc, test_event_shapes);
    tcase_add_test(tc, test_events_escape_what_is_not_a_name);
    tcase_add_test(tc, test_event_ids_within_one_call);
    tcase_add_test(tc, test_fetch_isolates_poisoned_records);
    tcase_add_test(tc, test_reap_isolates_poisoned_records);
    tcase_add_test(tc, test_reap_gap_judged_by_the_shortest_visibility_timeout);
    tcase_add_test(tc, test_finish_isolates_poisoned_records);
    tcase_add_test(tc, test_handback_and_recover_isolate_a_task_key_of_another_type);
    tcase_add_test(tc, test_sched_promote_isolates_poisoned_records);
    tcase_add_test(tc, test_requeue_isolates_poisoned_records);
    tcase_add_test(tc, test_config_garbage_ignored);
    tcase_add_test(tc, test_stats_lists_known_queues);
    tcase_add_test(tc, test_source_text_refuses_to_load);
    tcase_add_test(tc, test_c_key_names_are_the_functions_keys);
    tcase_add_test(tc, test_requeue_dlq_in_chunks);
    tcase_add_test(tc, test_fetch_and_sched_claim_caps);
    tcase_add_test(tc, test_finish_defer);
    tcase_add_test(tc, test_queue_length_counter);
    tcase_add_test(tc, test_claim_writes_only_what_readers_cannot_derive);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
