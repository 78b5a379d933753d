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

/* A reply read from RESP text by hiredis, as the daemon gets one. */
static redisReply *resp(const char *text) {
    redisReader *rd = redisReaderCreate();
    void *r = NULL;
    ck_assert_int_eq(redisReaderFeed(rd, text, strlen(text)), REDIS_OK);
    ck_assert_int_eq(redisReaderGetReply(rd, &r), REDIS_OK);
    ck_assert_ptr_nonnull(r);
    redisReaderFree(rd);
    return r;
}

#define CLAIM_HEAD "*9\r\n$1\r\ns\r\n$3\r\n1-0\r\n$2\r\nt1\r\n$1\r\nq\r\n$4\r\necho\r\n$2\r\n{}\r\n"

/* attempt, max_attempts and timeout_ms outside the Functions' bounds are refused, not run
 * with a negative timer or attempt 0 (found by tests/fuzz/fuzz_task). */
START_TEST(test_task_numbers_in_bounds) {
    static const char *const bad[] = {
        CLAIM_HEAD ":0\r\n:3\r\n:1000\r\n",                       /* attempt 0 */
        CLAIM_HEAD ":1\r\n:0\r\n:1000\r\n",                       /* max_attempts 0 */
        CLAIM_HEAD ":1\r\n:1001\r\n:1000\r\n",                    /* above DTQ_MAX_ATTEMPTS */
        CLAIM_HEAD ":1\r\n:3\r\n:-1\r\n",                         /* a negative timeout */
        CLAIM_HEAD ":1\r\n:3\r\n$20\r\n-9223372036854775808\r\n", /* ... as a string */
        CLAIM_HEAD ":1\r\n:3\r\n:9007199254740993\r\n",           /* above 2^53 */
    };
    char err[128];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        redisReply *r = resp(bad[i]);
        ck_assert_msg(dtq_task_from_reply(r, err, sizeof(err)) == NULL, "case %zu", i);
        ck_assert_ptr_nonnull(strstr(err, "out of range"));
        freeReplyObject(r);
    }
    {
        redisReply *r = resp(CLAIM_HEAD ":1\r\n:1000\r\n$16\r\n9007199254740992\r\n");
        dtq_task *t = dtq_task_from_reply(r, err, sizeof(err));
        ck_assert_ptr_nonnull(t);
        ck_assert_int_eq(t->max_attempts, 1000);
        ck_assert_int_eq(t->timeout_ms, DTQ_TASK_INT_MAX);
        dtq_task_free(t);
        freeReplyObject(r);
    }
}
END_TEST

/* The fetch reply's shape: consumer.c reads block as string pairs (XREAD's STREAMS
 * arguments) and read as an integer; a nested array there gave XREAD a NULL string (seen
 * while writing tests/fuzz/fuzz_task). */
START_TEST(test_fetch_and_reap_reply_shapes) {
    static const char *const fetch_ok[] = {
        "*3\r\n*0\r\n*0\r\n:0\r\n", "*3\r\n*0\r\n*2\r\n$1\r\ns\r\n$3\r\n0-0\r\n:-1\r\n",
        "*5\r\n*0\r\n*0\r\n:1\r\n*0\r\n*0\r\n", /* lean-claims and full-claims */
    };
    static const char *const fetch_bad[] = {
        "*3\r\n*0\r\n*1\r\n*0\r\n:0\r\n",            /* a pair holds an array */
        "*3\r\n*0\r\n*1\r\n$1\r\ns\r\n:0\r\n",       /* half a pair */
        "*3\r\n*0\r\n*2\r\n$1\r\ns\r\n:5\r\n:0\r\n", /* an id that is no string */
        "*3\r\n$1\r\nx\r\n*0\r\n:0\r\n",             /* claimed not an array */
        "*3\r\n*0\r\n*0\r\n$1\r\n0\r\n",             /* read not an integer */
        "*2\r\n*0\r\n*0\r\n",
        "*5\r\n*0\r\n*0\r\n:1\r\n*0\r\n:0\r\n",       /* full-claims not an array */
        "*6\r\n*0\r\n*0\r\n:1\r\n*0\r\n*0\r\n*0\r\n", /* an element too many */
        "-ERR x\r\n",
    };
    for (size_t i = 0; i < sizeof(fetch_ok) / sizeof(fetch_ok[0]); i++) {
        redisReply *r = resp(fetch_ok[i]);
        ck_assert_msg(dtq_fetch_reply_ok(r), "ok case %zu", i);
        freeReplyObject(r);
    }
    for (size_t i = 0; i < sizeof(fetch_bad) / sizeof(fetch_bad[0]); i++) {
        redisReply *r = resp(fetch_bad[i]);
        ck_assert_msg(!dtq_fetch_reply_ok(r), "bad case %zu", i);
        freeReplyObject(r);
    }
    ck_assert(!dtq_fetch_reply_ok(NULL));
    {
        redisReply *ok = resp("*2\r\n*0\r\n*1\r\n$3\r\n0-0\r\n");
        redisReply *bad = resp("*2\r\n:1\r\n*0\r\n");
        ck_assert(dtq_reap_reply_ok(ok));
        ck_assert(!dtq_reap_reply_ok(bad));
        freeReplyObject(ok);
        freeReplyObject(bad);
    }
}
END_TEST

/* A sink for dtq_full_claims_decode: the tasks, in order. */
typedef struct {
    dtq_task *t[4];
    int n;
} claims;

static void keep(dtq_task *t, void *arg) {
    claims *c = arg;
    ck_assert_int_lt(c->n, 4);
    c->t[c->n++] = t;
}

/* The full-claims of a fetch reply (FULL.first's groups): stream, queue, m, then m times
 * entry_id, task_id, task_type, payload, attempt, max_attempts, timeout_ms. */
START_TEST(test_full_claims_decode) {
    char err[128];
    claims c = {0};
    redisReply *ok = resp("*17\r\n$4\r\ns:p5\r\n$1\r\nq\r\n:2\r\n"
                          "$3\r\n1-1\r\n$2\r\nt1\r\n$1\r\nx\r\n$2\r\n{}\r\n:1\r\n:3\r\n:"
                          "500\r\n"
                          "$3\r\n1-2\r\n$2\r\nt2\r\n$1\r\ny\r\n$3\r\n[1]\r\n:2\r\n$1\r\n5\r\n:"
                          "9\r\n");
    ck_assert_int_eq(dtq_full_claims_decode(ok, keep, &c, err, sizeof(err)), 2);
    ck_assert_int_eq(c.n, 2);
    ck_assert_str_eq(c.t[0]->stream, "s:p5");
    ck_assert_str_eq(c.t[0]->queue, "q");
    ck_assert_str_eq(c.t[0]->entry_id, "1-1");
    ck_assert_str_eq(c.t[0]->id, "t1");
    ck_assert_str_eq(c.t[0]->task_type, "x");
    ck_assert_str_eq(c.t[0]->payload, "{}");
    ck_assert_int_eq(c.t[0]->attempt, 1);
    ck_assert_int_eq(c.t[0]->max_attempts, 3);
    ck_assert_int_eq(c.t[0]->timeout_ms, 500);
    ck_assert_int_eq(c.t[0]->lean, 0);
    ck_assert_str_eq(c.t[1]->id, "t2");
    ck_assert_str_eq(c.t[1]->payload, "[1]");
    ck_assert_int_eq(c.t[1]->attempt, 2);
    ck_assert_int_eq(c.t[1]->max_attempts, 5);
    for (int i = 0; i < c.n; i++) dtq_task_free(c.t[i]);
    freeReplyObject(ok);
    ck_assert_int_eq(dtq_full_claims_decode(NULL, keep, &c, err, sizeof(err)), 0);
    {
        static const char *const bad[] = {
            ":1\r\n",                             /* not an array */
            "*3\r\n$1\r\ns\r\n$1\r\nq\r\n:1\r\n", /* m claims, none there */
            "*10\r\n$1\r\ns\r\n$1\r\nq\r\n:1\r\n$1\r\ne\r\n$1\r\ni\r\n$1\r\nt\r\n$1\r\np\r\n:"
            "0\r\n:1\r\n:1\r\n", /* attempt 0 */
            "*10\r\n$1\r\ns\r\n$1\r\nq\r\n:1\r\n$1\r\ne\r\n$1\r\ni\r\n$1\r\nt\r\n$1\r\np\r\n:"
            "1\r\n:1001\r\n:1\r\n", /* max_attempts over the cap */
            "*10\r\n$1\r\ns\r\n$1\r\nq\r\n:1\r\n$1\r\ne\r\n:7\r\n$1\r\nt\r\n$1\r\np\r\n:"
            "1\r\n:1\r\n:1\r\n", /* a task id that is no string */
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            redisReply *r = resp(bad[i]);
            claims none = {0};
            err[0] = '\0';
            ck_assert_msg(dtq_full_claims_decode(r, keep, &none, err, sizeof(err)) == -1,
                          "bad case %zu", i);
            ck_assert_int_eq(none.n, 0);
            ck_assert_msg(err[0] != '\0', "bad case %zu has no message", i);
            freeReplyObject(r);
        }
    }
}
END_TEST

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
    /* a released waiter's claim: 0 (not lean) and its parents' results */
    r = resp("*11\r\n$1\r\ns\r\n$3\r\n1-1\r\n$2\r\nc1\r\n$1\r\nq\r\n$1\r\nx\r\n"
             "$2\r\n{}\r\n:1\r\n:3\r\n:500\r\n:0\r\n$12\r\n{\"p1\":[1,2]}\r\n");
    t = dtq_task_from_reply(r, err, sizeof(err));
    ck_assert_msg(t != NULL, "%s", err);
    ck_assert_int_eq(t->lean, 0);
    ck_assert_str_eq(t->parent_results, "{\"p1\":[1,2]}");
    ck_assert_int_eq(t->parent_results_len, 12);
    dtq_task_free(t);
    freeReplyObject(r);
    r = resp("*11\r\n$1\r\ns\r\n$3\r\n1-1\r\n$2\r\nc1\r\n$1\r\nq\r\n$1\r\nx\r\n"
             "$2\r\n{}\r\n:1\r\n:3\r\n:500\r\n:0\r\n:7\r\n"); /* not a string */
    ck_assert_ptr_null(dtq_task_from_reply(r, err, sizeof(err)));
    ck_assert_ptr_nonnull(strstr(err, "parent_results"));
    freeReplyObject(r);
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
    tcase_add_test(tc, test_full_claims_decode);
    tcase_add_test(tc, test_task_numbers_in_bounds);
    tcase_add_test(tc, test_fetch_and_reap_reply_shapes);
    tcase_add_test(tc, test_terminal_statuses_match_lua);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
