/* events.c: lifecycle events (lua/lib/events.lua) as the Functions publish them: every
 * type's shape, names that need escaping, the ids within one call. Against a real redis-server,
 * without a daemon. */
#include "lua_suite.h"

typedef struct expected_event {
    const char *type, *task_id;
    int attempt;
    const char *worker_id, *meta_key; /* meta_key: the one metadata field, or NULL */
} expected_event;

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

static redisReply *claimed_one(const char *worker) {
    redisReply *r = fetch(worker, 10, "default");
    ck_assert_int_eq(r->element[0]->elements, 1);
    return r;
}

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

int main(void) {
    Suite *s = suite_create("lua_events");
    TCase *tc = tcase_create("events");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_events_from_functions);
    tcase_add_test(tc, test_event_shapes);
    tcase_add_test(tc, test_events_escape_what_is_not_a_name);
    tcase_add_test(tc, test_event_ids_within_one_call);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
