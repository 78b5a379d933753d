/* check_task.c: task.c: decoding of claimed tasks, and the terminal statuses (the same
 * set as the library's TERMINAL). */
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
    return r;
}

START_TEST(test_task_from_reply) {
    char err[128];
    redisReply *r = claim_reply(9);
    dtq_task *t = dtq_task_from_reply(r, err, sizeof(err));
    ck_assert_ptr_nonnull(t);
    ck_assert_str_eq(t->stream, "dtq:stream:q:p5");
    ck_assert_str_eq(t->id, "t1");
    ck_assert_str_eq(t->task_type, "echo");
    ck_assert_int_eq(t->payload_len, strlen("{\"a\":\"b\\u0000c\"}"));
    ck_assert_int_eq(t->attempt, 2);
    ck_assert_int_eq(t->max_attempts, 5);
    ck_assert_int_eq(t->timeout_ms, 30000);
    dtq_task_free(t);
    freeReplyObject(r);
    r = claim_reply(8); /* one field short */
    ck_assert_ptr_null(dtq_task_from_reply(r, err, sizeof(err)));
    ck_assert_ptr_nonnull(strstr(err, "array of 9"));
    freeReplyObject(r);
    r = claim_reply(9);
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

/* The C list dtq_task_terminal_statuses and the library's `local TERMINAL = {...}` (a set:
 * status = true, which scripts.c generates from it) name the same statuses, as many of
 * them, none twice. */
START_TEST(test_terminal_statuses_match_lua) {
    th_lua_item lua[32];
    int nlua = th_lua_table("TERMINAL", lua, 32), nc = 0;
    const char *names[32];
    for (int i = 0; i < nlua; i++) {
        if (lua[i].name[0]) { /* status = true */
            ck_assert_msg(!strcmp(lua[i].value, "true"), "TERMINAL.%s = %s, not true", lua[i].name,
                          lua[i].value);
            names[i] = lua[i].name;
        } else { /* 'status' */
            size_t n = strlen(lua[i].value);
            ck_assert_msg(n >= 2 && (lua[i].value[0] == '\'' || lua[i].value[0] == '"'),
                          "TERMINAL item %s is not a string", lua[i].value);
            lua[i].value[n - 1] = '\0';
            names[i] = lua[i].value + 1;
        }
        for (int j = 0; j < i; j++)
            ck_assert_msg(strcmp(names[i], names[j]), "TERMINAL lists %s twice", names[i]);
    }
    for (const char *const *c = dtq_task_terminal_statuses; *c; c++, nc++) {
        int found = 0;
        for (const char *const *d = dtq_task_terminal_statuses; d < c; d++)
            ck_assert_msg(strcmp(*c, *d), "dtq_task_terminal_statuses lists %s twice", *c);
        for (int i = 0; i < nlua; i++) found |= !strcmp(names[i], *c);
        ck_assert_msg(found, "%s is terminal in C but not in the library's TERMINAL", *c);
        ck_assert(dtq_task_status_is_terminal(*c));
    }
    for (int i = 0; i < nlua; i++) {
        int found = 0;
        for (const char *const *c = dtq_task_terminal_statuses; *c; c++)
            found |= !strcmp(names[i], *c);
        ck_assert_msg(found, "%s is terminal in the library but not in C", names[i]);
    }
    ck_assert_int_eq(nc, nlua);
    ck_assert_int_ge(nc, 1);
}
END_TEST

int main(void) {
    Suite *s = suite_create("task");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_task_from_reply);
    tcase_add_test(tc, test_terminal_statuses_match_lua);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
