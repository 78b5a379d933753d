/* check_task.c: task.c: decoding of claimed tasks and terminal statuses. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#include "task.h"

static redisReply *str_reply(const char *s) {
    redisReply *r = calloc(1, sizeof(*r));
    r->type = REDIS_REPLY_STRING;
    r->str = strdup(s);
    r->len = strlen(s);
    return r;
}

static redisReply *int_reply_of(long long v) {
    redisReply *r = calloc(1, sizeof(*r));
    r->type = REDIS_REPLY_INTEGER;
    r->integer = v;
    return r;
}

/* A claimed-task array as the fetch Function returns it. */
static redisReply *claim_reply(int nfields) {
    redisReply *r = calloc(1, sizeof(*r));
    r->type = REDIS_REPLY_ARRAY;
    r->elements = (size_t)nfields;
    r->element = calloc((size_t)nfields, sizeof(redisReply *));
    const char *strs[] = {"dtq:stream:q:p5", "1-0", "t1", "q", "echo", "{\"a\":\"b\\u0000c\"}"};
    for (int i = 0; i < nfields && i < 6; i++) r->element[i] = str_reply(strs[i]);
    if (nfields > 6) r->element[6] = int_reply_of(2);
    if (nfields > 7) r->element[7] = int_reply_of(5);
    if (nfields > 8) r->element[8] = str_reply("30000"); /* strings with numbers are accepted */
    if (nfields > 9) r->element[9] = int_reply_of(1);
    return r;
}

START_TEST(test_task_from_reply) {
    char err[128];
    redisReply *r = claim_reply(10);
    dtq_task *t = dtq_task_from_reply(r, err, sizeof(err));
    ck_assert_ptr_nonnull(t);
    ck_assert_str_eq(t->stream, "dtq:stream:q:p5");
    ck_assert_str_eq(t->id, "t1");
    ck_assert_str_eq(t->task_type, "echo");
    ck_assert_int_eq(t->payload_len, strlen("{\"a\":\"b\\u0000c\"}"));
    ck_assert_int_eq(t->attempt, 2);
    ck_assert_int_eq(t->max_attempts, 5);
    ck_assert_int_eq(t->timeout_ms, 30000);
    ck_assert(t->own_max_attempts);
    dtq_task_free(t);
    freeReplyObject(r);
    r = claim_reply(9); /* one field short */
    ck_assert_ptr_null(dtq_task_from_reply(r, err, sizeof(err)));
    ck_assert_ptr_nonnull(strstr(err, "array of 10"));
    freeReplyObject(r);
    r = claim_reply(10);
    free(r->element[6]->str);
    r->element[6]->type = REDIS_REPLY_STRING;
    r->element[6]->str = strdup("two");
    ck_assert_ptr_null(dtq_task_from_reply(r, err, sizeof(err)));
    ck_assert_ptr_nonnull(strstr(err, "wrong type"));
    freeReplyObject(r);
    ck_assert_ptr_null(dtq_task_from_reply(NULL, err, sizeof(err)));
    ck_assert(dtq_task_status_is_terminal("dead_lettered"));
    ck_assert(!dtq_task_status_is_terminal("retrying"));
}
END_TEST

int main(void) {
    Suite *s = suite_create("task");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_task_from_reply);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
