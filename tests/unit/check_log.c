/* check_log.c: log.c: escaping of log messages, lines with fields in both formats; and
 * tasklog.c's rate gate. */
#include <cjson/cJSON.h>
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#include "log.h"
#include "tasklog.h"

START_TEST(test_log_escape) {
    char *e = dtq_log_escape("a\nb\x01\"c");
    ck_assert_str_eq(e, "a\\nb\\u0001\\\"c");
    free(e);
    /* valid UTF-8 stays; a stray byte and a cut sequence become U+FFFD */
    e = dtq_log_escape("caf\xc3\xa9 \xff x\xe2\x82");
    ck_assert_str_eq(e, "caf\xc3\xa9 \\ufffd x\\ufffd\\ufffd");
    free(e);
}
END_TEST

/* Runs one dtq_log_fields call with stderr sent to a temporary file; returns the output. */
static char *capture_fields(enum dtq_log_format fmt, enum dtq_log_level level, const char *msg,
                            const dtq_log_field *f, size_t n) {
    FILE *tmp = tmpfile();
    int saved = dup(2);
    long len;
    char *out;
    ck_assert_ptr_nonnull(tmp);
    dtq_log_setup(DTQ_LOG_INFO, fmt);
    fflush(stderr);
    dup2(fileno(tmp), 2);
    dtq_log_fields(level, msg, f, n);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    len = ftell(tmp);
    out = calloc(1, (size_t)len + 1);
    rewind(tmp);
    ck_assert_int_eq(fread(out, 1, (size_t)len, tmp), len);
    fclose(tmp);
    return out;
}

#define FIELDS                                                                                     \
    dtq_log_field fields[] = {                                                                     \
        DTQ_LOG_STR("task_id", "t1"),        DTQ_LOG_STR("queue", "default"),                      \
        DTQ_LOG_INT("attempt", 3),           DTQ_LOG_INT("duration_ms", -1),                       \
        DTQ_LOG_STR("error", "a \"b\"=c\\"), DTQ_LOG_STR("class", ""),                             \
        DTQ_LOG_STR("bad", "x\xffy\tz"),     DTQ_LOG_STR("none", NULL),                            \
    }
#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

static int count_char(const char *s, char c) {
    int n = 0;
    for (; *s; s++) n += *s == c;
    return n;
}

START_TEST(test_fields_json) {
    FIELDS;
    char *out = capture_fields(DTQ_LOG_JSON, DTQ_LOG_WARN, "task \"x\"", fields, NFIELDS);
    cJSON *j = cJSON_Parse(out);
    ck_assert_msg(j != NULL, "not JSON: %s", out);
    ck_assert_int_eq(out[strlen(out) - 1], '\n');
    ck_assert_int_eq(count_char(out, '\n'), 1); /* one line */
    ck_assert_str_eq(cJSON_GetObjectItem(j, "level")->valuestring, "warn");
    ck_assert_str_eq(cJSON_GetObjectItem(j, "msg")->valuestring, "task \"x\"");
    ck_assert_str_eq(cJSON_GetObjectItem(j, "task_id")->valuestring, "t1");
    ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(j, "attempt")));
    ck_assert_int_eq(cJSON_GetObjectItem(j, "attempt")->valueint, 3);
    ck_assert_int_eq(cJSON_GetObjectItem(j, "duration_ms")->valueint, -1);
    ck_assert_str_eq(cJSON_GetObjectItem(j, "error")->valuestring, "a \"b\"=c\\");
    ck_assert_str_eq(cJSON_GetObjectItem(j, "class")->valuestring, "");
    ck_assert_str_eq(cJSON_GetObjectItem(j, "bad")->valuestring, "x\xef\xbf\xbdy\tz");
    ck_assert_str_eq(cJSON_GetObjectItem(j, "none")->valuestring, "");
    ck_assert(cJSON_IsString(cJSON_GetObjectItem(j, "ts")));
    cJSON_Delete(j);
    free(out);
}
END_TEST

START_TEST(test_fields_text) {
    FIELDS;
    char *out = capture_fields(DTQ_LOG_TEXT, DTQ_LOG_INFO, "task x", fields, NFIELDS);
    const char *p = strstr(out, " info  task x ");
    ck_assert_msg(p != NULL, "%s", out);
    ck_assert_str_eq(p, " info  task x task_id=t1 queue=default attempt=3 duration_ms=-1 "
                        "error=\"a \\\"b\\\"=c\\\\\" class=\"\" bad=\"x\\ufffdy\\u0009z\" "
                        "none=\"\"\n");
    free(out);
    /* below the level: nothing */
    out = capture_fields(DTQ_LOG_TEXT, DTQ_LOG_DEBUG, "task x", fields, NFIELDS);
    ck_assert_str_eq(out, "");
    free(out);
}
END_TEST

START_TEST(test_line_limit) {
    dtq_line_limit l = {0};
    uint64_t summary;
    int level = -1, written = 0;
    /* 3 a second: 3 of a burst of 10, the 7 others counted */
    for (int i = 0; i < 10; i++) {
        written += dtq_line_limit_admit(&l, 1000 + i, 3, DTQ_LOG_INFO + (i == 9), &summary, &level);
        ck_assert_uint_eq(summary, 0);
    }
    ck_assert_int_eq(written, 3);
    /* within the window no summary is due; after it, one with the count and the top level */
    ck_assert_uint_eq(dtq_line_limit_expire(&l, 1999, &level), 0);
    ck_assert_uint_eq(dtq_line_limit_expire(&l, 2000, &level), 7);
    ck_assert_int_eq(level, DTQ_LOG_WARN);
    ck_assert_uint_eq(dtq_line_limit_expire(&l, 5000, &level), 0);
    /* a new window: 3 more lines; the next window's first line brings the summary */
    for (int i = 0; i < 5; i++)
        dtq_line_limit_admit(&l, 6000 + i, 3, DTQ_LOG_INFO, &summary, &level);
    ck_assert(dtq_line_limit_admit(&l, 7000, 3, DTQ_LOG_INFO, &summary, &level));
    ck_assert_uint_eq(summary, 2);
    ck_assert_int_eq(level, DTQ_LOG_INFO);
    /* 0: no limit */
    for (int i = 0; i < 100; i++) ck_assert(dtq_line_limit_admit(&l, 8000, 0, 1, &summary, &level));
}
END_TEST

/* The hand-back lines of one (queue, type): the first bounce of an interval at once, the
 * rest counted and handed out once the interval is over; another type apart; a full table
 * evicts its oldest pair; flush hands out every count. */
START_TEST(test_bounce_gate) {
    dtq_bounce t[DTQ_TASKLOG_BOUNCE_TYPES] = {{0}};
    const char *q, *type;
    uint64_t n = 0;
    char name[32];
    ck_assert_int_eq(dtq_bounce_note(t, "q", "a", 1000), 1);
    for (int i = 1; i <= 50; i++) ck_assert_int_eq(dtq_bounce_note(t, "q", "a", 1000 + i), 0);
    ck_assert_int_eq(dtq_bounce_note(t, "q", "b", 1100), 1); /* another type: its own line */
    ck_assert_int_eq(dtq_bounce_due(t, 1000 + DTQ_TASKLOG_BOUNCE_INTERVAL_MS - 1, 0, &q, &type, &n),
                     0);
    ck_assert_int_eq(dtq_bounce_due(t, 1000 + DTQ_TASKLOG_BOUNCE_INTERVAL_MS, 0, &q, &type, &n), 1);
    ck_assert_str_eq(q, "q");
    ck_assert_str_eq(type, "a");
    ck_assert_uint_eq(n, 50);
    ck_assert_int_eq(dtq_bounce_due(t, 1000 + DTQ_TASKLOG_BOUNCE_INTERVAL_MS, 0, &q, &type, &n), 0);
    /* a bounce in the interval the summary started is counted; after a quiet one, at once */
    ck_assert_int_eq(dtq_bounce_note(t, "q", "a", 2000 + DTQ_TASKLOG_BOUNCE_INTERVAL_MS), 0);
    ck_assert_int_eq(dtq_bounce_due(t, 2000 + DTQ_TASKLOG_BOUNCE_INTERVAL_MS, 1, &q, &type, &n), 1);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(dtq_bounce_note(t, "q", "a", 1000 + 4 * DTQ_TASKLOG_BOUNCE_INTERVAL_MS), 1);
    for (int i = 0; i < DTQ_TASKLOG_BOUNCE_TYPES; i++) { /* fills the table: q/a is evicted */
        snprintf(name, sizeof(name), "t%d", i);
        ck_assert_int_eq(dtq_bounce_note(t, "q", name, 1000000 + i), 1);
    }
    ck_assert_int_eq(dtq_bounce_note(t, "q", "t5", 1000001), 0); /* still there */
    dtq_bounce_clear(t);
}
END_TEST

int main(void) {
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_log_escape);
    tcase_add_test(tc, test_fields_json);
    tcase_add_test(tc, test_fields_text);
    tcase_add_test(tc, test_line_limit);
    tcase_add_test(tc, test_bounce_gate);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
