/* check_scripts.c: scripts.c: the namespaced Functions library and error-code mapping. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#include "scripts.h"

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

/* The version marker: DTQ_VERSION and a hash of the embedded text, written into the
 * library's VERSION line (what <ns>_version answers), the same for every namespace. */
START_TEST(test_library_version) {
    size_t len;
    const char *v = dtq_scripts_version();
    char *lib = dtq_scripts_library("jobs", "jobs", &len), line[128];
    ck_assert_int_eq(strncmp(v, DTQ_VERSION "-", strlen(DTQ_VERSION) + 1), 0);
    ck_assert_int_eq(strlen(v), strlen(DTQ_VERSION) + 1 + 16);
    ck_assert_str_eq(v, dtq_scripts_version());
    snprintf(line, sizeof(line), "local VERSION = '%s'", v);
    ck_assert_ptr_nonnull(strstr(lib, line));
    ck_assert_ptr_null(strstr(lib, "'unversioned'"));
    ck_assert_ptr_nonnull(strstr(lib, "local NS, PREFIX = 'jobs', 'jobs'"));
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

int main(void) {
    Suite *s = suite_create("scripts");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_library_namespacing);
    tcase_add_test(tc, test_library_version);
    tcase_add_test(tc, test_error_codes);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
