/* check_util.c: URL parsing, names and ids, number parsing, time format, event JSON, the
 * namespaced Functions library and error-code mapping. */
#include <cjson/cJSON.h>
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#include "log.h"
#include "rconn.h"
#include "scripts.h"
#include "task.h"
#include "util.h"

START_TEST(test_url_tcp) {
    dtq_redis_url u;
    char err[128];
    ck_assert_int_eq(dtq_redis_url_parse("redis://127.0.0.1:6380/3", &u, err, sizeof(err)), 0);
    ck_assert(!u.is_unix);
    ck_assert_str_eq(u.host, "127.0.0.1");
    ck_assert_int_eq(u.port, 6380);
    ck_assert_int_eq(u.db, 3);
    ck_assert_ptr_null(u.password);
    dtq_redis_url_deinit(&u);

    ck_assert_int_eq(dtq_redis_url_parse("redis://alice:s3cr:et@h.example", &u, err, sizeof(err)),
                     0);
    ck_assert_str_eq(u.user, "alice");
    ck_assert_str_eq(u.password, "s3cr:et");
    ck_assert_str_eq(u.host, "h.example");
    ck_assert_int_eq(u.port, 6379);
    ck_assert_int_eq(u.db, 0);
    dtq_redis_url_deinit(&u);

    ck_assert_int_eq(dtq_redis_url_parse("redis://:pw@localhost:7000", &u, err, sizeof(err)), 0);
    ck_assert_ptr_null(u.user);
    ck_assert_str_eq(u.password, "pw");
    dtq_redis_url_deinit(&u);

    ck_assert_int_eq(dtq_redis_url_parse("redis://[::1]:6390/1", &u, err, sizeof(err)), 0);
    ck_assert_str_eq(u.host, "::1");
    ck_assert_int_eq(u.port, 6390);
    ck_assert_int_eq(u.db, 1);
    dtq_redis_url_deinit(&u);
}
END_TEST

START_TEST(test_url_unix) {
    dtq_redis_url u;
    char err[128];
    ck_assert_int_eq(dtq_redis_url_parse("unix:///run/redis.sock?db=2", &u, err, sizeof(err)), 0);
    ck_assert(u.is_unix);
    ck_assert_str_eq(u.path, "/run/redis.sock");
    ck_assert_int_eq(u.db, 2);
    dtq_redis_url_deinit(&u);
    ck_assert_int_eq(dtq_redis_url_parse("unix:///tmp/x.sock", &u, err, sizeof(err)), 0);
    ck_assert_int_eq(u.db, 0);
    dtq_redis_url_deinit(&u);
}
END_TEST

START_TEST(test_url_errors) {
    dtq_redis_url u;
    char err[128];
    const char *bad[] = {"http://x",
                         "redis://",
                         "redis://h:0",
                         "redis://h:99999",
                         "redis://h:p",
                         "redis://h/x",
                         "unix://relative.sock",
                         "unix:///s.sock?db=x",
                         "redis://[::1",
                         "",
                         NULL};
    for (const char **b = bad; *b; b++) {
        ck_assert_msg(dtq_redis_url_parse(*b, &u, err, sizeof(err)) != 0, "accepted %s", *b);
        ck_assert(strlen(err) > 0);
    }
}
END_TEST

START_TEST(test_names_and_ids) {
    ck_assert(dtq_valid_task_id("abc-123_x.y:z"));
    ck_assert(!dtq_valid_task_id(""));
    ck_assert(!dtq_valid_task_id("has space"));
    ck_assert(!dtq_valid_task_id("slash/no"));
    char long_id[70];
    memset(long_id, 'a', 65);
    long_id[65] = '\0';
    ck_assert(!dtq_valid_task_id(long_id));
    long_id[64] = '\0';
    ck_assert(dtq_valid_task_id(long_id));
    ck_assert(dtq_valid_queue_name("emails.high"));
    ck_assert(!dtq_valid_queue_name("emails{x}"));
    char uuid[37];
    dtq_uuid4(uuid);
    ck_assert_int_eq(strlen(uuid), 36);
    ck_assert(uuid[14] == '4');
    ck_assert(dtq_valid_task_id(uuid));
}
END_TEST

START_TEST(test_numbers) {
    int64_t v;
    double d;
    int b;
    ck_assert_int_eq(dtq_parse_int64("42", 0, 100, &v), 0);
    ck_assert_int_eq(v, 42);
    ck_assert_int_ne(dtq_parse_int64("101", 0, 100, &v), 0);
    ck_assert_int_ne(dtq_parse_int64("4x", 0, 100, &v), 0);
    ck_assert_int_ne(dtq_parse_int64(" 4", 0, 100, &v), 0);
    ck_assert_int_ne(dtq_parse_int64("", 0, 100, &v), 0);
    ck_assert_int_ne(dtq_parse_int64("99999999999999999999", 0, INT64_MAX, &v), 0);
    ck_assert_int_eq(dtq_parse_double("0.25", 0, 1, &d), 0);
    ck_assert_int_ne(dtq_parse_double("nan", 0, 1, &d), 0);
    ck_assert_int_ne(dtq_parse_double("1.5", 0, 1, &d), 0);
    ck_assert_int_eq(dtq_parse_bool("yes", &b), 0);
    ck_assert_int_eq(b, 1);
    ck_assert_int_eq(dtq_parse_bool("false", &b), 0);
    ck_assert_int_eq(b, 0);
    ck_assert_int_ne(dtq_parse_bool("maybe", &b), 0);
}
END_TEST

START_TEST(test_iso8601) {
    char buf[32];
    dtq_format_iso8601(1764464523456LL, buf, sizeof(buf));
    ck_assert_str_eq(buf, "2025-11-30T01:02:03.456Z");
    dtq_format_iso8601(0, buf, sizeof(buf));
    ck_assert_str_eq(buf, "1970-01-01T00:00:00.000Z");
}
END_TEST

START_TEST(test_library_namespacing) {
    size_t len;
    char *lib = dtq_scripts_library("jobs", "{jobs}", &len);
    ck_assert_int_eq(strncmp(lib, "#!lua name=jobs\n", 16), 0);
    ck_assert_ptr_nonnull(strstr(lib, "local NS, PREFIX = 'jobs', '{jobs}'"));
    ck_assert_ptr_null(strstr(lib, "local NS, PREFIX = 'dtq'"));
    ck_assert_int_eq(len, strlen(lib));
    free(lib);
}
END_TEST

START_TEST(test_error_codes) {
    ck_assert_int_eq(dtq_scripts_error_code("QUEUE_FULL queue x"), DTQ_SCRIPT_ERR_QUEUE_FULL);
    ck_assert_int_eq(dtq_scripts_error_code("ID_EXISTS"), DTQ_SCRIPT_ERR_ID_EXISTS);
    ck_assert_int_eq(dtq_scripts_error_code("NOT_FOUNDX"), DTQ_SCRIPT_ERR_OTHER);
    ck_assert_int_eq(dtq_scripts_error_code("ERR Function not found"), DTQ_SCRIPT_ERR_NO_FUNCTION);
}
END_TEST

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

START_TEST(test_log_escape) {
    char *e = dtq_log_escape("a\nb\x01\"c");
    ck_assert_str_eq(e, "a\\nb\\u0001\\\"c");
    free(e);
}
END_TEST

int main(void) {
    Suite *s = suite_create("util");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_url_tcp);
    tcase_add_test(tc, test_url_unix);
    tcase_add_test(tc, test_url_errors);
    tcase_add_test(tc, test_names_and_ids);
    tcase_add_test(tc, test_numbers);
    tcase_add_test(tc, test_iso8601);
    tcase_add_test(tc, test_library_namespacing);
    tcase_add_test(tc, test_error_codes);
    tcase_add_test(tc, test_log_escape);
    tcase_add_test(tc, test_task_from_reply);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
