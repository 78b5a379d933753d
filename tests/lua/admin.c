/* admin.c: the admin Functions (lua/fn/admin.lua): requeue, the dead-letter stream,
 * cancel, pause, poisoned records, requeue_dlq in chunks. Against a real redis-server, without a
 * daemon. */
#include "lua_suite.h"

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

int main(void) {
    Suite *s = suite_create("lua_admin");
    TCase *tc = tcase_create("admin");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_admin_functions);
    tcase_add_test(tc, test_requeue_dlq_all);
    tcase_add_test(tc, test_requeue_isolates_poisoned_records);
    tcase_add_test(tc, test_requeue_dlq_in_chunks);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
