/* check_rconn.c: rconn.c's pure part: which error replies mean the server cannot serve
 * (the connection is dropped and made again) rather than an error of the command; rconn
 * asks reply_class.c, so this holds the words rconn relies on. */
#include <check.h>

#include "harness.h"

#include "reply_class.h"

START_TEST(test_unavailable) {
    const char *yes[] = {"READONLY You can't write against a read only replica.",
                         "LOADING Redis is loading the dataset in memory",
                         "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set "
                         "to 'no'.",
                         "READONLY", NULL};
    const char *no[] = {"ERR unknown command",
                        "NOPERM this user has no permissions",
                        "READONLYX not a word",
                        "LOADINGS",
                        "WRONGTYPE Operation against a key",
                        "",
                        NULL};
    for (const char **e = yes; *e; e++)
        ck_assert_msg(dtq_reply_class_unavailable(dtq_reply_class_of(*e)), "not unavailable: %s",
                      *e);
    for (const char **e = no; *e; e++)
        ck_assert_msg(!dtq_reply_class_unavailable(dtq_reply_class_of(*e)), "unavailable: %s", *e);
}
END_TEST

int main(void) {
    Suite *s = suite_create("rconn");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_unavailable);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
