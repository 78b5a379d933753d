/* check_log.c: log.c: escaping of log messages. */
#include <check.h>
#include <stdlib.h>

#include "harness.h"

#include "log.h"

START_TEST(test_log_escape) {
    char *e = dtq_log_escape("a\nb\x01\"c");
    ck_assert_str_eq(e, "a\\nb\\u0001\\\"c");
    free(e);
}
END_TEST

int main(void) {
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_log_escape);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
