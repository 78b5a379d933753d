/* enqueue.c: <ns>_enqueue and <ns>_enqueue_bulk (lua/fn/enqueue.lua): the task hash and its
 * stream entry, every refusal, idempotency and delays, bulk enqueues. Against a real redis-server,
 * without a daemon. */
#include "lua_suite.h"

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
    /* a counter a producer SET past the limit (it holds SET: its enqueues write the key) is
     * checked against the streams before anything is refused, and healed (issue 27.1) */
    freeReplyObject(th_cmd(C, "SET dtq:queue:other:length 99999999"));
    r = th_cmd(C, "FCALL dtq_enqueue 0 other echo 2");
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "%s", r->str ? r->str : "");
    freeReplyObject(r);
    r = th_cmd(C, "GET dtq:queue:other:length");
    ck_assert_str_eq(r->str, "2");
    freeReplyObject(r);
    freeReplyObject(th_cmd(C, "SET dtq:queue:other:length 99999999"));
    r = th_cmd(C, "FCALL dtq_enqueue_bulk 0 other echo 1 3");
    ck_assert_int_eq(r->element[0]->type, REDIS_REPLY_STRING); /* the bulk form too */
    freeReplyObject(r);
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 other echo 4"), "QUEUE_FULL"); /* really */
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

int main(void) {
    Suite *s = suite_create("lua_enqueue");
    TCase *tc = tcase_create("enqueue");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_enqueue_created_and_stream_entry);
    tcase_add_test(tc, test_enqueue_refusals);
    tcase_add_test(tc, test_enqueue_idempotency_and_delay);
    tcase_add_test(tc, test_enqueue_bulk);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
