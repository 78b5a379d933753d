/* check_web_auth.c: dtq-web's token files and the bearer check (src/web_auth.c). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "web_auth.h"

#define TOK1 "0123456789abcdef0123456789abcdef"
#define TOK2 "s3cret-token-for-alice"

START_TEST(test_parse_and_check) {
    char err[256];
    dtq_web_tokens *t = dtq_web_tokens_parse(
        "# dashboard tokens\n\n" TOK1 "\n  alice   " TOK2 "  \r\n", err, sizeof(err));
    ck_assert_msg(t != NULL, "%s", err);
    ck_assert_int_eq(dtq_web_tokens_count(t), 2);
    ck_assert_str_eq(dtq_web_tokens_check(t, "Bearer " TOK1), "dtq-web");
    ck_assert_str_eq(dtq_web_tokens_check(t, "bearer   " TOK2 " "), "dtq-web:alice");
    ck_assert_ptr_null(dtq_web_tokens_check(t, NULL));
    ck_assert_ptr_null(dtq_web_tokens_check(t, ""));
    ck_assert_ptr_null(dtq_web_tokens_check(t, "Bearer"));
    ck_assert_ptr_null(dtq_web_tokens_check(t, "Bearer "));
    ck_assert_ptr_null(dtq_web_tokens_check(t, TOK1));                      /* no scheme */
    ck_assert_ptr_null(dtq_web_tokens_check(t, "Basic " TOK1));             /* another scheme */
    ck_assert_ptr_null(dtq_web_tokens_check(t, "Bearer " TOK1 "x"));        /* longer */
    ck_assert_ptr_null(dtq_web_tokens_check(t, "Bearer 0123456789abcdef")); /* a prefix */
    ck_assert_ptr_null(dtq_web_tokens_check(t, "Bearer alice " TOK2));
    ck_assert_ptr_null(dtq_web_tokens_check(NULL, "Bearer " TOK1)); /* read-only */
    dtq_web_tokens_free(t);
}
END_TEST

static void expect_refused(const char *text, const char *want) {
    char err[256] = "";
    dtq_web_tokens *t = dtq_web_tokens_parse(text, err, sizeof(err));
    ck_assert_msg(t == NULL, "accepted: %s", text);
    ck_assert_msg(strstr(err, want) != NULL, "'%s': error '%s' lacks '%s'", text, err, want);
}

START_TEST(test_refused_files) {
    expect_refused("", "no token");
    expect_refused("# only a comment\n\n", "no token");
    expect_refused("short\n", "line 1: a token must be at least 16");
    expect_refused(TOK1 "\nbob short\n", "line 2: a token must be at least 16");
    expect_refused("a b c\n", "line 1: expected");
    expect_refused("bad/name " TOK1 "\n", "the name must match");
    expect_refused("tab\ttoken\x01xxxxxxxxxxxxxxxx\n", "printable");
}
END_TEST

START_TEST(test_load_file) {
    char path[] = "/tmp/dtq-test-token-XXXXXX", err[512];
    int fd = mkstemp(path);
    dtq_web_tokens *t;
    ck_assert(fd >= 0);
    ck_assert_int_eq(write(fd, TOK1 "\n", strlen(TOK1) + 1), (ssize_t)strlen(TOK1) + 1);
    close(fd);
    t = dtq_web_tokens_load(path, err, sizeof(err));
    ck_assert_msg(t != NULL, "%s", err);
    ck_assert_str_eq(dtq_web_tokens_check(t, "Bearer " TOK1), "dtq-web");
    dtq_web_tokens_free(t);
    unlink(path);
    ck_assert_ptr_null(dtq_web_tokens_load(path, err, sizeof(err)));
    ck_assert_msg(strstr(err, "cannot read") != NULL, "%s", err);
    ck_assert_ptr_null(dtq_web_tokens_load("/tmp", err, sizeof(err)));
    ck_assert_msg(strstr(err, "not a regular file") != NULL, "%s", err);
}
END_TEST

int main(void) {
    Suite *s = suite_create("web_auth");
    TCase *tc = tcase_create("tokens");
    tcase_add_test(tc, test_parse_and_check);
    tcase_add_test(tc, test_refused_files);
    tcase_add_test(tc, test_load_file);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
