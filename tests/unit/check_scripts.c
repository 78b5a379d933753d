/* check_scripts.c: scripts.c: the namespaced Functions library with its generated
 * constants, its version marker, and error-code mapping. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#include "config.h"
#include "keys.h"
#include "scripts.h"
#include "streams.h"

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

/* The version marker: DTQ_VERSION and a hash of the library text, written into the
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

/* The block scripts.c writes in place of the source's placeholder line: the C side's
 * values, each table once, and no placeholder left (it would refuse the load). */
START_TEST(test_library_constants) {
    size_t len;
    char *lib = dtq_scripts_library("jobs", "jobs", &len), want[128];
    const char *t;
    ck_assert_ptr_nonnull(strstr(lib, "\nlocal CONST = {GROUP = "));
    snprintf(want, sizeof(want), "{GROUP = '%s', ", DTQ_GROUP);
    ck_assert_ptr_nonnull(strstr(lib, want));
    snprintf(want, sizeof(want), ", BANDS = %d, ", DTQ_BANDS);
    ck_assert_ptr_nonnull(strstr(lib, want));
    snprintf(want, sizeof(want), ", BAND_NAMES = {[0] = 'p0', 'p1', ");
    ck_assert_ptr_nonnull(strstr(lib, want));
    snprintf(want, sizeof(want), ", 'p%d'}, ", DTQ_BANDS - 1);
    ck_assert_ptr_nonnull(strstr(lib, want));
    snprintf(want, sizeof(want), ", MAX_ATTEMPTS = %d, ", DTQ_MAX_ATTEMPTS);
    ck_assert_ptr_nonnull(strstr(lib, want));
    snprintf(want, sizeof(want), ", NAME_MAX = %d, ", DTQ_NAME_MAX);
    ck_assert_ptr_nonnull(strstr(lib, want));
    snprintf(want, sizeof(want), ", ID_MAX = %d, ", DTQ_ID_MAX);
    ck_assert_ptr_nonnull(strstr(lib, want));
    snprintf(want, sizeof(want), ", GROUP_MAX = %d, BATCH_LIST_MAX = %d, ", DTQ_GROUP_MAX,
             DTQ_BATCH_LIST_MAX);
    ck_assert_ptr_nonnull(strstr(lib, want));
    snprintf(want, sizeof(want), "default_max_attempts = {1, %d}", DTQ_MAX_ATTEMPTS);
    ck_assert_ptr_nonnull(strstr(lib, want));
    snprintf(want, sizeof(want), "default_priority = {0, %d}", DTQ_BANDS - 1);
    ck_assert_ptr_nonnull(strstr(lib, want));
    snprintf(want, sizeof(want), "default_priority = %d,", DTQ_DEFAULT_PRIORITY);
    ck_assert_ptr_nonnull(strstr(lib, want));
    snprintf(want, sizeof(want), "default_timeout_ms = %d", DTQ_DEFAULT_TIMEOUT_MS);
    ck_assert_ptr_nonnull(strstr(lib, want));
    for (const char *const *name =
             (const char *const[]){" TERMINAL = {", " DEFAULTS = {", " CONFIG_BOUNDS = {",
                                   " CONFIG_NAMES = {", NULL};
         *name; name++) {
        t = strstr(lib, *name);
        ck_assert_msg(t != NULL, "no%s", *name);
        ck_assert_msg(strstr(t + 1, *name) == NULL, "twice:%s", *name);
    }
    ck_assert_ptr_null(strstr(lib, "load_with_dtqctl_functions_install"));
    t = strstr(lib, "\nlocal CONST = {");
    ck_assert_ptr_nonnull(strstr(t, " -- generated at load time")); /* one line */
    ck_assert_ptr_eq(strchr(t + 1, '\n'),
                     strstr(t, " -- generated at load time") +
                         strcspn(strstr(t, " -- generated at load time"), "\n"));
    free(lib);
}
END_TEST

/* The version hashes the library as generated (so a changed C bound changes it too): the
 * FNV-1a of the text loaded for namespace dtq, with VERSION as the source has it. */
START_TEST(test_version_covers_the_generated_text) {
    size_t len;
    char *lib = dtq_scripts_library("dtq", "dtq", &len), *v, *end, want[64];
    uint64_t h = 14695981039346656037ULL;
    const char *unversioned = "unversioned";
    v = strstr(lib, "local VERSION = '");
    ck_assert_ptr_nonnull(v);
    v += strlen("local VERSION = '");
    end = strchr(v, '\'');
    for (const char *p = lib; p < v; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    for (const char *p = unversioned; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    for (const char *p = end; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    snprintf(want, sizeof(want), "%s-%016llx", DTQ_VERSION, (unsigned long long)h);
    ck_assert_str_eq(dtq_scripts_version(), want);
    free(lib);
}
END_TEST

int main(void) {
    Suite *s = suite_create("scripts");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_library_namespacing);
    tcase_add_test(tc, test_library_version);
    tcase_add_test(tc, test_library_constants);
    tcase_add_test(tc, test_version_covers_the_generated_text);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
