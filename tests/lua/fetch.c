/* fetch.c: <ns>_fetch (lua/fn/fetch.lua, lua/lib/claim.lua, lua/lib/raw.lua): claims in
 * priority order, raw and malformed entries, duplicates and stale entries, paused queues,
 * cancel and TTL, one winner per entry, poisoned records, the caps, and what a claim writes.
 * Against a real redis-server, without a daemon. */
#include "lua_suite.h"

static void fetch_argv(dtq_argv *a, const char *worker, int count, const char *q) {
    th_fetch_argv(a, worker, count, q, POLICY);
}

/* A claim writes only what no reader can derive (docs/reference.md 3.2): no updated_at (the
 * read model resolves it as the latest time the hash holds), and max_attempts/timeout_ms
 * only when the hash does not hold those values already. */
static const char *task_view_updated_at(const char *id, char **text, cJSON **o) {
    *o = th_read_json(C, text, "dtq_task_view 0 %s", id);
    return th_json_str(*o, "fields.updated_at");
}

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
    Suite *s = suite_create("lua_fetch");
    TCase *tc = tcase_create("fetch");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_fetch_claims_in_priority_order);
    tcase_add_test(tc, test_fetch_raw_entries);
    tcase_add_test(tc, test_fetch_malformed_raw_entries);
    tcase_add_test(tc, test_duplicate_and_stale_entries_absorbed);
    tcase_add_test(tc, test_fetch_skips_paused_and_handles_cancel_and_ttl);
    tcase_add_test(tc, test_fetch_exactly_one_winner);
    tcase_add_test(tc, test_fetch_isolates_poisoned_records);
    tcase_add_test(tc, test_fetch_and_sched_claim_caps);
    tcase_add_test(tc, test_claim_writes_only_what_readers_cannot_derive);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
