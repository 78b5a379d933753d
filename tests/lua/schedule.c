/* schedule.c: the scheduler's Functions (lua/fn/schedule.lua, lua/lib/schedule.lua):
 * <ns>_sched_claim, <ns>_sched_promote, the leader's lock, poisoned records. Against a real
 * redis-server, without a daemon. */
#include "lua_suite.h"

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

int main(void) {
    Suite *s = suite_create("lua_schedule");
    TCase *tc = tcase_create("schedule");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_sched_claim_never_twice_and_stale_claims_return);
    tcase_add_test(tc, test_sched_promote_cases);
    tcase_add_test(tc, test_lock_compare_semantics);
    tcase_add_test(tc, test_sched_promote_isolates_poisoned_records);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
