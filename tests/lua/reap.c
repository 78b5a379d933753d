/* reap.c: <ns>_reap and <ns>_recover (lua/fn/reap.lua): lost workers' entries adopted or
 * settled, poisoned records, and the outage rule (<p>:reaper). Against a real redis-server, without
 * a daemon. */
#include "lua_suite.h"

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

int main(void) {
    Suite *s = suite_create("lua_reap");
    TCase *tc = tcase_create("reap");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_reap_isolates_poisoned_records);
    tcase_add_test(tc, test_reap_gap_judged_by_the_shortest_visibility_timeout);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
