/* check_util.c: util.c: task ids and queue names, uuids, number parsing, time format,
 * command-line word splitting. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#include "util.h"

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

/* One case of dtq_split_hostport: want_host NULL means the string is refused. */
static void split(const char *s, const char *want_host, int want_port) {
    char *host = NULL;
    int port = 0;
    int rc = dtq_split_hostport(s, &host, &port);
    if (!want_host) {
        ck_assert_msg(rc != 0, "accepted '%s'", s);
        return;
    }
    ck_assert_msg(rc == 0, "refused '%s'", s);
    ck_assert_str_eq(host, want_host);
    ck_assert_int_eq(port, want_port);
    free(host);
}

START_TEST(test_hostport) {
    split("127.0.0.1:9100", "127.0.0.1", 9100);
    split(":9100", "", 9100);
    split("localhost:1", "localhost", 1);
    split("[::1]:65535", "::1", 65535);
    split("[::]:80", "::", 80);
    split("nowhere", NULL, 0);
    split("127.0.0.1:", NULL, 0);
    split("127.0.0.1:0", NULL, 0);
    split("127.0.0.1:65536", NULL, 0);
    split("127.0.0.1:80x", NULL, 0);
    split("::1:9100", NULL, 0); /* unbracketed IPv6 */
    split("[::1]", NULL, 0);
    split("[::1]9100", NULL, 0);
    split("[]:9100", NULL, 0);
    split("[::1]]:9100", NULL, 0);
    split("a[b:9100", NULL, 0);
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

/* One case of dtq_split_words: want lists the words joined by '|', or is NULL when the
 * line is refused with an error containing err_frag. */
static void check_words(const char *line, const char *want, const char *err_frag) {
    char err[128] = "", got[512] = "";
    char **v = dtq_split_words(line, err, sizeof(err));
    if (!want) {
        ck_assert_msg(v == NULL, "accepted: %s", line);
        ck_assert_msg(strstr(err, err_frag) != NULL, "'%s' not in: %s", err_frag, err);
        return;
    }
    ck_assert_msg(v != NULL, "refused: %s (%s)", line, err);
    for (char **w = v; *w; w++) {
        if (w != v) strcat(got, "|");
        strcat(got, *w);
        free(*w);
    }
    free(v);
    ck_assert_msg(!strcmp(got, want), "%s: got [%s], want [%s]", line, got, want);
}

START_TEST(test_split_words) {
    check_words("", "", NULL);
    check_words("  \t ", "", NULL);
    check_words("/bin/prog  a\tb ", "/bin/prog|a|b", NULL);
    check_words("/usr/bin/python3 -c \"print(1)\"", "/usr/bin/python3|-c|print(1)", NULL);
    check_words("/bin/sh -c 'echo \"{\\\"a\\\": 1}\"'", "/bin/sh|-c|echo \"{\\\"a\\\": 1}\"", NULL);
    /* single quotes: everything literal, backslash included */
    check_words("'a b\\n' c", "a b\\n|c", NULL);
    /* double quotes: \" \\ \$ \` escaped, any other backslash kept */
    check_words("\"x \\\" \\\\ \\$ \\` \\n $HOME `id` *\"", "x \" \\ $ ` \\n $HOME `id` *", NULL);
    /* outside quotes the backslash makes the next character literal, blank included */
    check_words("a\\ b \\'c \\\\", "a b|'c|\\", NULL);
    /* adjacent pieces make one word; empty quotes an empty word */
    check_words("pre'mid'\"post\" '' \"\"", "premidpost||", NULL);
    check_words("*.txt $HOME", "*.txt|$HOME", NULL);
    check_words("/bin/sh -c 'echo", NULL, "unterminated single quote (opened at column 12)");
    check_words("a \"b\\\"", NULL, "unterminated double quote (opened at column 3)");
    check_words("a b\\", NULL, "a backslash at the end escapes nothing");
}
END_TEST

int main(void) {
    Suite *s = suite_create("util");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_names_and_ids);
    tcase_add_test(tc, test_numbers);
    tcase_add_test(tc, test_hostport);
    tcase_add_test(tc, test_iso8601);
    tcase_add_test(tc, test_split_words);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
