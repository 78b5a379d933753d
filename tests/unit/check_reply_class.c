/* check_reply_class.c: reply_class.c, the one reader of an error reply's text: each word
 * whole and first, the two ERR-led phrases, the detail after the word. */
#include <check.h>

#include "harness.h"

#include "reply_class.h"

START_TEST(test_words) {
    static const struct {
        const char *err;
        dtq_reply_class cls;
    } cases[] = {
        {"INVALID_ARGUMENT priority must be an integer", DTQ_REPLY_INVALID_ARGUMENT},
        {"NOT_FOUND queue q (pass create)", DTQ_REPLY_NOT_FOUND},
        {"NOT_FOUND", DTQ_REPLY_NOT_FOUND},
        {"WRONG_STATE task t is running", DTQ_REPLY_WRONG_STATE},
        {"PAYLOAD_TOO_LARGE 2048 > 1024", DTQ_REPLY_PAYLOAD_TOO_LARGE},
        {"QUEUE_FULL queue x", DTQ_REPLY_QUEUE_FULL},
        {"IDEMPOTENCY_IN_PROGRESS key k", DTQ_REPLY_IDEMPOTENCY_IN_PROGRESS},
        {"ID_EXISTS", DTQ_REPLY_ID_EXISTS},
        {"NOT_EMPTY queue q holds 1 waiting, 0 pending, 0 scheduled", DTQ_REPLY_NOT_EMPTY},
        {"WRONG_LAYOUT namespace dtq is laid out for cluster", DTQ_REPLY_WRONG_LAYOUT},
        {"TRYAGAIN Multiple keys request during rehashing of slot", DTQ_REPLY_TRYAGAIN},
        {"ERR Function not found", DTQ_REPLY_NO_FUNCTION},
        {"NOSCRIPT No matching script. Please use EVAL.", DTQ_REPLY_NOSCRIPT},
        {"NOPERM this user has no permissions to run the 'fcall' command", DTQ_REPLY_NOPERM},
        {"ERR The user executing the script can't run this command or subcommand script: x",
         DTQ_REPLY_NOPERM_IN_SCRIPT},
        {"NOAUTH Authentication required.", DTQ_REPLY_NOAUTH},
        {"WRONGPASS invalid username-password pair or user is disabled.", DTQ_REPLY_WRONGPASS},
        {"BUSYGROUP Consumer Group name already exists", DTQ_REPLY_BUSYGROUP},
        {"READONLY You can't write against a read only replica.", DTQ_REPLY_READONLY},
        {"LOADING Redis is loading the dataset in memory", DTQ_REPLY_LOADING},
        {"MASTERDOWN Link with MASTER is down", DTQ_REPLY_MASTERDOWN},
        {"MOVED 3999 127.0.0.1:6381", DTQ_REPLY_MOVED},
        {"ASK 3999 127.0.0.1:6381", DTQ_REPLY_ASK},
        {"CLUSTERDOWN The cluster is down", DTQ_REPLY_CLUSTERDOWN},
        /* whole words only, first word only */
        {"NOT_FOUNDX", DTQ_REPLY_OTHER},
        {"ASKING", DTQ_REPLY_OTHER},
        {"MOVEDX 1 a:1", DTQ_REPLY_OTHER},
        {"ERR unknown command 'NOPERM'", DTQ_REPLY_OTHER},
        {"ERR Function", DTQ_REPLY_OTHER},
        {"ERR", DTQ_REPLY_OTHER},
        {"WRONGTYPE Operation against a key", DTQ_REPLY_OTHER},
        {"OTHER", DTQ_REPLY_OTHER},
        {"", DTQ_REPLY_OTHER},
        {NULL, DTQ_REPLY_OTHER},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        ck_assert_msg(dtq_reply_class_of(cases[i].err) == cases[i].cls, "%s: got %s, want %s",
                      cases[i].err ? cases[i].err : "(null)",
                      dtq_reply_class_name(dtq_reply_class_of(cases[i].err)),
                      dtq_reply_class_name(cases[i].cls));
}
END_TEST

START_TEST(test_detail) {
    ck_assert_str_eq(dtq_reply_detail("NOT_FOUND queue q"), "queue q");
    ck_assert_str_eq(dtq_reply_detail("MOVED 12 h:1"), "12 h:1");
    ck_assert_str_eq(dtq_reply_detail("MOVED"), "");
    ck_assert_str_eq(dtq_reply_detail(NULL), "");
}
END_TEST

START_TEST(test_unavailable_and_names) {
    ck_assert(dtq_reply_class_unavailable(DTQ_REPLY_READONLY));
    ck_assert(dtq_reply_class_unavailable(DTQ_REPLY_LOADING));
    ck_assert(dtq_reply_class_unavailable(DTQ_REPLY_MASTERDOWN));
    ck_assert(!dtq_reply_class_unavailable(DTQ_REPLY_NOPERM));
    ck_assert(!dtq_reply_class_unavailable(DTQ_REPLY_OTHER));
    /* a name round-trips through the classifier: each class has one spelling */
    for (int c = DTQ_REPLY_INVALID_ARGUMENT; c <= DTQ_REPLY_CLUSTERDOWN; c++)
        ck_assert_int_eq(dtq_reply_class_of(dtq_reply_class_name((dtq_reply_class)c)), c);
}
END_TEST

int main(void) {
    Suite *s = suite_create("reply_class");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_words);
    tcase_add_test(tc, test_detail);
    tcase_add_test(tc, test_unavailable_and_names);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
