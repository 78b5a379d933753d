/* unique.c: unique jobs (lua/lib/unique.lua, the unique_for, unique_key and unique_mode
 * options of <ns>_enqueue): each mode's duplicate answer and its release point
 * (until_started at the claim, until_finished at every terminal end, debounce when the
 * schedule queues it), the debounce's payload replacement and pushed due time, a stale lock,
 * the default key, refusals. Against a real redis-server, without a daemon. Each scenario has
 * a queue of its own, so that a fetch of it claims its task and nothing else. */
#include <unistd.h>
#include "lua_suite.h"

#define CANCELLED_ DTQ_OUTCOME_CANCELLED

/* The reply of an enqueue must be {id, word} (id NULL: any); returns the id (caller frees). */
static char *expect_reply(redisReply *r, const char *id, const char *word) {
    char *out;
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "enqueue: %s", r->str ? r->str : "?");
    ck_assert_int_eq(r->elements, 2);
    ck_assert_str_eq(r->element[1]->str, word);
    if (id) ck_assert_str_eq(r->element[0]->str, id);
    out = strdup(r->element[0]->str);
    freeReplyObject(r);
    return out;
}

#define ENQ(id, word, ...) free(expect_reply(th_cmd(C, __VA_ARGS__), id, word))

/* The lock of `key` in `queue` must hold `want` (NULL: must not exist). */
static void lock_is(const char *queue, const char *key, const char *want) {
    redisReply *r = th_cmd(C, "GET dtq:unique:%s:%s", queue, key);
    if (!want) {
        ck_assert_msg(r->type == REDIS_REPLY_NIL, "lock %s:%s still holds %s", queue, key,
                      r->str ? r->str : "?");
    } else {
        ck_assert_msg(r->type == REDIS_REPLY_STRING, "no lock %s:%s", queue, key);
        ck_assert_str_eq(r->str, want);
    }
    freeReplyObject(r);
}

static long long lock_ttl(const char *queue, const char *key) {
    return th_int(th_cmd(C, "TTL dtq:unique:%s:%s", queue, key));
}

/* Claims the one task of queue `q` (by w1); it must be `id`. The fetch reply. */
static redisReply *claim(const char *q, const char *id) {
    redisReply *r = fetch("w1", 1, q);
    ck_assert_msg(r->element[0]->elements == 1, "nothing to claim in queue %s", q);
    ck_assert_str_eq(r->element[0]->element[0]->element[2]->str, id);
    return r;
}

/* Claims task `id` (alone in queue `q`) and ends its attempt with `outcome`; the verdict must
 * be `verdict`. */
static void end_with(const char *q, const char *id, enum dtq_outcome_kind outcome,
                     const char *verdict) {
    redisReply *r = claim(q, id);
    redisReply *f = finish_one("w1", r->element[0]->element[0], outcome, "", DTQ_RESULT_NONE);
    ck_assert_str_eq(f->element[0]->str, verdict);
    freeReplyObject(f);
    freeReplyObject(r);
}

/* How many keys match `pattern`. */
static size_t nkeys(const char *pattern) {
    redisReply *r = th_cmd(C, "KEYS %s", pattern);
    size_t n = r->elements;
    freeReplyObject(r);
    return n;
}

static long long sched_score(const char *id) {
    redisReply *r = th_cmd(C, "ZSCORE dtq:retry:schedule %s", id);
    long long v;
    ck_assert_msg(r->type == REDIS_REPLY_STRING, "%s is not in the schedule", id);
    v = strtoll(r->str, NULL, 10);
    freeReplyObject(r);
    return v;
}

/* until_finished, the default mode: the key holds from the enqueue through the attempt, and
 * every terminal end gives it back: a success, a dead letter, a cancel while queued. */
START_TEST(test_until_finished) {
    redisReply *r;
    char *v, *other;
    th_queue_groups(C, "uf");
    ENQ("f1", "created", "FCALL dtq_enqueue 0 uf echo {\"a\":1} unique_for 60 task_id f1");
    /* the default key: the task type and the SHA1 of the payload */
    r = th_cmd(C, "EVAL %s 0 %s", "return redis.sha1hex(ARGV[1])", "{\"a\":1}");
    ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
    {
        char key[64];
        snprintf(key, sizeof(key), "echo:%s", r->str);
        th_assert_field(C, "f1", "unique_key", key);
        th_assert_field(C, "f1", "unique_mode", "until_finished");
        lock_is("uf", key, "until_finished:f1");
        ck_assert_int_gt(lock_ttl("uf", key), 50);
        ck_assert_int_le(lock_ttl("uf", key), 60);
    }
    freeReplyObject(r);
    /* the same payload and type: the first task's id, nothing written */
    ENQ("f1", "duplicate", "FCALL dtq_enqueue 0 uf echo {\"a\":1} unique_for 60");
    ENQ("f1", "duplicate", "FCALL dtq_enqueue 0 uf echo {\"a\":1} unique_for 5 task_id f9");
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:task:f9")), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:uf:p5")), 1);
    /* another payload or another type is another key */
    other = expect_reply(th_cmd(C, "FCALL dtq_enqueue 0 other echo {\"a\":2} unique_for 60"), NULL,
                         "created");
    free(other);
    other = expect_reply(th_cmd(C, "FCALL dtq_enqueue 0 other mail {\"a\":1} unique_for 60"), NULL,
                         "created");
    free(other);

    /* held through the attempt, given back by its success */
    r = claim("uf", "f1");
    th_assert_field(C, "f1", "status", "running");
    ENQ("f1", "duplicate", "FCALL dtq_enqueue 0 uf echo {\"a\":1} unique_for 60");
    {
        redisReply *f = finish_one("w1", r->element[0]->element[0], OK_, "", DTQ_RESULT_NONE);
        ck_assert_str_eq(f->element[0]->str, "succeeded");
        freeReplyObject(f);
    }
    freeReplyObject(r);
    ck_assert_int_eq((long long)nkeys("dtq:unique:uf:*"), 0);
    v = expect_reply(th_cmd(C, "FCALL dtq_enqueue 0 uf echo {\"a\":1} unique_for 60 task_id f2"),
                     "f2", "created");
    free(v);

    /* a dead letter gives it back */
    th_queue_groups(C, "ud");
    ENQ("d1", "created", "FCALL dtq_enqueue 0 ud echo 1 unique_for 60 unique_key k task_id d1");
    lock_is("ud", "k", "until_finished:d1");
    end_with("ud", "d1", DEAD_, "dead_lettered");
    lock_is("ud", "k", NULL);
    ENQ("d2", "created", "FCALL dtq_enqueue 0 ud echo 1 unique_for 60 unique_key k task_id d2");
    lock_is("ud", "k", "until_finished:d2");

    /* a cancel of the queued task gives it back; a cancel by its finish too */
    th_expect_str(th_cmd(C, "FCALL dtq_cancel 0 d2"), "cancelled");
    lock_is("ud", "k", NULL);
    th_queue_groups(C, "uc");
    ENQ("d3", "created", "FCALL dtq_enqueue 0 uc echo 1 unique_for 60 unique_key k task_id d3");
    lock_is("uc", "k", "until_finished:d3");
    {
        redisReply *c = claim("uc", "d3");
        redisReply *f;
        th_expect_str(th_cmd(C, "FCALL dtq_cancel 0 d3"), "cancel_requested");
        lock_is("uc", "k", "until_finished:d3"); /* still running */
        f = finish_one("w1", c->element[0]->element[0], CANCELLED_, "", DTQ_RESULT_NONE);
        ck_assert_str_eq(f->element[0]->str, "cancelled");
        freeReplyObject(f);
        freeReplyObject(c);
    }
    lock_is("uc", "k", NULL);
    /* a retry keeps it */
    th_queue_groups(C, "ur");
    ENQ("d4", "created", "FCALL dtq_enqueue 0 ur echo 1 unique_for 60 unique_key k task_id d4");
    end_with("ur", "d4", RETRY_, "retrying");
    lock_is("ur", "k", "until_finished:d4");
    ENQ("d4", "duplicate", "FCALL dtq_enqueue 0 ur echo 1 unique_for 60 unique_key k");
}
END_TEST

/* until_started: the key holds while the task waits, and its claim gives it back. */
START_TEST(test_until_started) {
    th_queue_groups(C, "us");
    ENQ("s1", "created",
        "FCALL dtq_enqueue 0 us echo 1 unique_for 60 unique_key k unique_mode until_started "
        "task_id s1");
    th_assert_field(C, "s1", "unique_mode", "until_started");
    lock_is("us", "k", "until_started:s1");
    ENQ("s1", "duplicate",
        "FCALL dtq_enqueue 0 us echo 2 unique_for 60 unique_key k unique_mode until_started");
    /* a mode of another enqueue meets the same lock */
    ENQ("s1", "duplicate", "FCALL dtq_enqueue 0 us echo 2 unique_for 60 unique_key k");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:us:p5")), 1);
    {
        redisReply *r = claim("us", "s1");
        lock_is("us", "k", NULL);
        ENQ("s2", "created",
            "FCALL dtq_enqueue 0 us echo 1 unique_for 60 unique_key k unique_mode until_started "
            "task_id s2");
        lock_is("us", "k", "until_started:s2");
        /* the end of s1 leaves s2's lock alone */
        redisReply *f = finish_one("w1", r->element[0]->element[0], OK_, "", DTQ_RESULT_NONE);
        ck_assert_str_eq(f->element[0]->str, "succeeded");
        freeReplyObject(f);
        freeReplyObject(r);
    }
    lock_is("us", "k", "until_started:s2");
    ENQ("s2", "duplicate",
        "FCALL dtq_enqueue 0 us echo 1 unique_for 60 unique_key k unique_mode until_started");
    /* a delayed task holds it while pending, too */
    ENQ("s3", "created",
        "FCALL dtq_enqueue 0 us echo 1 unique_for 60 unique_key later unique_mode until_started "
        "delay_ms 60000 task_id s3");
    th_assert_field(C, "s3", "status", "pending");
    /* its window counts from its due time */
    ck_assert_int_gt(lock_ttl("us", "later"), 110);
    ck_assert_int_le(lock_ttl("us", "later"), 120);
    ENQ("s3", "duplicate",
        "FCALL dtq_enqueue 0 us echo 1 unique_for 60 unique_key later unique_mode until_started");
}
END_TEST

/* debounce: the task waits in the schedule for the window; a later enqueue of the key
 * replaces its payload, pushes its due time and renews the lock; once the schedule queues
 * it, the next enqueue makes a new task. */
START_TEST(test_debounce) {
    long long before, after, first, second;
    char *v, *n;
    redisReply *r;
    freeReplyObject(th_cmd(C, "HSET dtq:config events_stream_maxlen 100"));
    th_queue_groups(C, "db");
    before = th_redis_ms(C);
    ENQ("b1", "created",
        "FCALL dtq_enqueue 0 db echo {\"v\":1} unique_for 30 unique_key k unique_mode debounce "
        "task_id b1");
    after = th_redis_ms(C);
    th_assert_field(C, "b1", "status", "pending");
    th_assert_field(C, "b1", "unique_mode", "debounce");
    lock_is("db", "k", "debounce:b1");
    first = sched_score("b1");
    ck_assert_int_ge(first, before + 30000);
    ck_assert_int_le(first, after + 30000);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:db:p5")), 0);

    usleep(20000);
    before = th_redis_ms(C);
    ENQ("b1", "debounced",
        "FCALL dtq_enqueue 0 db echo {\"v\":2} unique_for 60 unique_key k unique_mode debounce "
        "task_id b9");
    after = th_redis_ms(C);
    th_assert_field(C, "b1", "payload", "{\"v\":2}");
    second = sched_score("b1");
    ck_assert_int_ge(second, before + 60000);
    ck_assert_int_le(second, after + 60000);
    ck_assert_int_gt(lock_ttl("db", "k"), 50); /* renewed to the new window */
    lock_is("db", "k", "debounce:b1");
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD dtq:retry:schedule")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:task:b9")), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:db:p5")), 0);
    /* the payload is checked as any */
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 db echo {nope unique_for 60 unique_key k "
                                "unique_mode debounce"),
                      "INVALID_ARGUMENT payload is not valid JSON");
    th_assert_field(C, "b1", "payload", "{\"v\":2}");
    /* TASK_DEBOUNCED, with the new due time */
    r = th_cmd(C, "XREVRANGE dtq:stream:events + - COUNT 1");
    ck_assert_int_eq(r->elements, 1);
    {
        cJSON *e = cJSON_Parse(th_entry_field(r->element[0], "event"));
        ck_assert_ptr_nonnull(e);
        ck_assert_str_eq(cJSON_GetObjectItem(e, "type")->valuestring, "TASK_DEBOUNCED");
        ck_assert_str_eq(cJSON_GetObjectItem(e, "task_id")->valuestring, "b1");
        ck_assert_int_eq(
            (long long)cJSON_GetObjectItem(cJSON_GetObjectItem(e, "metadata"), "due_ms")
                ->valuedouble,
            second);
        cJSON_Delete(e);
    }
    freeReplyObject(r);
    /* an enqueue of another mode meets the debounce task's key: a duplicate, nothing changed */
    ENQ("b1", "duplicate", "FCALL dtq_enqueue 0 db echo {\"v\":3} unique_for 60 unique_key k");
    th_assert_field(C, "b1", "payload", "{\"v\":2}");
    ck_assert_int_eq(sched_score("b1"), second);

    /* queued by the schedule: the window is over */
    r = th_cmd(C, "FCALL dtq_sched_run_now 0 tester b1");
    ck_assert_str_eq(r->element[0]->str, "done");
    freeReplyObject(r);
    th_assert_field(C, "b1", "status", "queued");
    lock_is("db", "k", NULL);
    v = expect_reply(th_cmd(C, "FCALL dtq_enqueue 0 db echo {\"v\":4} unique_for 30 unique_key k "
                               "unique_mode debounce"),
                     NULL, "created");
    ck_assert_str_ne(v, "b1");
    th_assert_field(C, v, "status", "pending");
    th_assert_field(C, "b1", "payload", "{\"v\":2}");
    /* and it is the new task that a debounce now pushes */
    n = expect_reply(th_cmd(C, "FCALL dtq_enqueue 0 db echo {\"v\":5} unique_for 30 unique_key k "
                               "unique_mode debounce"),
                     v, "debounced");
    th_assert_field(C, v, "payload", "{\"v\":5}");
    /* a cancel of the pending task gives the key back */
    r = th_cmd(C, "FCALL dtq_cancel 0 %s", v);
    ck_assert_str_eq(r->str, "cancelled");
    freeReplyObject(r);
    lock_is("db", "k", NULL);
    free(n);
    free(v);
}
END_TEST

/* A lock whose task is gone (or that names nothing) is taken over; the release of a task
 * leaves a lock that names another alone. */
START_TEST(test_stale_lock) {
    ENQ("g1", "created", "FCALL dtq_enqueue 0 st echo 1 unique_for 60 unique_key k task_id g1");
    freeReplyObject(th_cmd(C, "DEL dtq:task:g1"));
    ENQ("g2", "created", "FCALL dtq_enqueue 0 st echo 1 unique_for 60 unique_key k task_id g2");
    lock_is("st", "k", "until_finished:g2");
    freeReplyObject(th_cmd(C, "SET dtq:unique:st:j junk"));
    ENQ("g3", "created", "FCALL dtq_enqueue 0 st echo 1 unique_for 60 unique_key j task_id g3");
    lock_is("st", "j", "until_finished:g3");
    freeReplyObject(th_cmd(C, "HSET dtq:unique:st:h a b")); /* another type */
    ENQ("g4", "created", "FCALL dtq_enqueue 0 st echo 1 unique_for 60 unique_key h task_id g4");
    lock_is("st", "h", "until_finished:g4");
    /* a lock of a stale debounce task: a new task, not a debounce of the gone one */
    ENQ("g5", "created",
        "FCALL dtq_enqueue 0 st echo 1 unique_for 60 unique_key d unique_mode debounce task_id g5");
    freeReplyObject(th_cmd(C, "DEL dtq:task:g5"));
    ENQ("g6", "created",
        "FCALL dtq_enqueue 0 st echo 1 unique_for 60 unique_key d unique_mode debounce task_id g6");
    lock_is("st", "d", "debounce:g6");
    /* the cluster layout: the lock is in the queue's slot */
    ENQ("c1", "created",
        "FCALL dtq_enqueue 1 {dtq:q1} q1 echo 1 unique_for 60 unique_key k "
        "task_id c1");
    th_expect_str(th_cmd(C, "GET {dtq:q1}:unique:q1:k"), "until_finished:c1");
    ENQ("c1", "duplicate", "FCALL dtq_enqueue 1 {dtq:q1} q1 echo 1 unique_for 60 unique_key k");
    /* g2's cancel after its lock was taken over by hand leaves the new holder alone */
    freeReplyObject(th_cmd(C, "SET dtq:unique:st:k until_finished:other"));
    th_expect_str(th_cmd(C, "FCALL dtq_cancel 0 g2"), "cancelled");
    lock_is("st", "k", "until_finished:other");
}
END_TEST

START_TEST(test_refusals) {
    char big[300];
    memset(big, 'x', 257);
    big[257] = '\0';
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 rq echo 1 unique_key k"),
                      "INVALID_ARGUMENT unique_key needs unique_for");
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 rq echo 1 unique_mode debounce"),
                      "INVALID_ARGUMENT unique_mode needs unique_for");
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 rq echo 1 unique_for 0"),
                      "INVALID_ARGUMENT unique_for must be an integer in [1, 2592000]");
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 rq echo 1 unique_for 2592001"),
                      "INVALID_ARGUMENT unique_for must be an integer");
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 rq echo 1 unique_for 1.5"),
                      "INVALID_ARGUMENT unique_for must be an integer");
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 rq echo 1 unique_for 9 unique_mode later"),
                      "INVALID_ARGUMENT unique_mode must be until_started, until_finished or "
                      "debounce");
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 rq echo 1 unique_for 9 unique_key %s", big),
                      "INVALID_ARGUMENT unique_key must be 1-256 bytes");
    th_expect_refused(
        th_cmd(C, "FCALL dtq_enqueue 0 rq echo 1 unique_for 9 unique_mode debounce delay_ms 5"),
        "INVALID_ARGUMENT delay_ms is refused with unique_mode debounce");
    ENQ("p", "created", "FCALL dtq_enqueue 0 rq echo 1 task_id p");
    th_expect_refused(
        th_cmd(C, "FCALL dtq_enqueue 0 rq echo 1 unique_for 9 unique_mode debounce after p"),
        "INVALID_ARGUMENT unique_mode debounce is refused with after");
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue_bulk 0 rq echo 1 {} unique_for 9"),
                      "INVALID_ARGUMENT unique_for is refused for a group of tasks");
    freeReplyObject(th_cmd(C, "FCALL dtq_queue_mode 0 tester lq lean"));
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 lq echo 1 unique_for 9"),
                      "INVALID_ARGUMENT unique_for is refused on lean queue lq");
    /* nothing was written by the refusals */
    ck_assert_int_eq((long long)nkeys("dtq:unique:*"), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD dtq:retry:schedule")), 0);
    /* a debounce task on a lean queue is a delayed one: a full task */
    ENQ("l1", "created",
        "FCALL dtq_enqueue 0 lq echo 1 unique_for 9 unique_mode debounce task_id l1");
    th_assert_field(C, "l1", "status", "pending");
}
END_TEST

int main(void) {
    Suite *s = suite_create("lua_unique");
    TCase *tc = tcase_create("unique");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_until_finished);
    tcase_add_test(tc, test_until_started);
    tcase_add_test(tc, test_debounce);
    tcase_add_test(tc, test_stale_lock);
    tcase_add_test(tc, test_refusals);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
