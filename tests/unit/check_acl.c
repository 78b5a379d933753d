/* check_acl.c: acl.c: the role tokens `dtqctl acl` prints (it_acl applies them to a real
 * Redis and runs every role). */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#include "acl.h"

static char *tokens(const char *role, const char *ns, const char *prefix) {
    const char *roles[1] = {role};
    char *t = dtq_acl_tokens(roles, 1, ns, prefix, 0, NULL);
    ck_assert_msg(t != NULL, "role %s", role);
    return t;
}

/* Whether the space-separated line holds the token. */
static int has(const char *line, const char *token) {
    size_t n = strlen(token);
    for (const char *p = strstr(line, token); p; p = strstr(p + 1, token))
        if ((p == line || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return 1;
    return 0;
}

START_TEST(test_roles_start_from_nothing) {
    for (const char *const *r = dtq_acl_roles; *r; r++) {
        char *t = tokens(*r, "dtq", "dtq");
        ck_assert_msg(!strncmp(t, "resetkeys resetchannels clearselectors -@all ", 45), "%s: %s",
                      *r, t);
        ck_assert_ptr_null(strchr(t, '\n'));
        ck_assert_msg(!has(t, "+@all") && !has(t, "allkeys") && !has(t, "~*") &&
                          !has(t, "allchannels") && !has(t, "+flushall") && !has(t, "+config"),
                      "%s: %s", *r, t);
        free(t);
    }
}
END_TEST

START_TEST(test_producer_tokens) {
    char *t = tokens("producer", "dtq", "dtq");
    ck_assert(has(t, "+fcall|dtq_enqueue"));
    ck_assert(has(t, "%W~dtq:task:*"));
    ck_assert(has(t, "%W~dtq:stream:*:p[0-9]"));
    ck_assert(has(t, "&dtq:events"));
    ck_assert(!has(t, "+function|load"));
    free(t);
    t = tokens("producer-raw", "dtq", "dtq");
    ck_assert_str_eq(t,
                     "resetkeys resetchannels clearselectors -@all +xadd %W~dtq:stream:*:p[0-9]");
    free(t);
}
END_TEST

/* cluster_hash_tag: key and channel patterns carry {ns}; Function names the bare ns. */
START_TEST(test_hash_tag_and_namespace) {
    char *t = tokens("worker", "jobs", "{jobs}");
    ck_assert(has(t, "~{jobs}:*"));
    ck_assert(has(t, "&{jobs}:events"));
    ck_assert(has(t, "+fcall|jobs_fetch"));
    ck_assert(has(t, "+fcall_ro|jobs_version"));
    ck_assert_ptr_null(strstr(t, "dtq"));
    free(t);
}
END_TEST

/* The internal Functions go to the worker role only; FUNCTION LOAD to admin only. */
START_TEST(test_internal_functions_worker_only) {
    static const char *internal[] = {"fetch",        "reap",         "recover",     "finish",
                                     "handback",     "worker_event", "sched_claim", "sched_promote",
                                     "lock_refresh", "lock_release", "progress"};
    for (const char *const *r = dtq_acl_roles; *r; r++) {
        char *t = tokens(*r, "dtq", "dtq");
        for (size_t i = 0; i < sizeof(internal) / sizeof(internal[0]); i++) {
            char tok[64];
            snprintf(tok, sizeof(tok), "+fcall|dtq_%s", internal[i]);
            ck_assert_msg(has(t, tok) == !strcmp(*r, "worker"), "%s and %s", *r, tok);
        }
        ck_assert_msg(has(t, "+function|load") == !strcmp(*r, "admin"), "%s", *r);
        free(t);
    }
}
END_TEST

START_TEST(test_union_and_unknown) {
    const char *two[2] = {"producer", "monitor"}, *bad_roles[2] = {"monitor", "root"};
    const char *bad = NULL;
    char *t = dtq_acl_tokens(two, 2, "dtq", "dtq", 0, NULL);
    ck_assert(has(t, "+fcall|dtq_enqueue") && has(t, "+fcall_ro|dtq_stats"));
    ck_assert_ptr_eq(strstr(t, "-@all"), strrchr(t, '@') - 1);   /* one reset, at the start */
    ck_assert_ptr_eq(strstr(t, "&dtq:events"), strrchr(t, '&')); /* each token once */
    free(t);
    ck_assert_ptr_null(dtq_acl_tokens(bad_roles, 2, "dtq", "dtq", 0, &bad));
    ck_assert_str_eq(bad, "root");
}
END_TEST

int main(void) {
    Suite *s = suite_create("acl");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_roles_start_from_nothing);
    tcase_add_test(tc, test_producer_tokens);
    tcase_add_test(tc, test_hash_tag_and_namespace);
    tcase_add_test(tc, test_internal_functions_worker_only);
    tcase_add_test(tc, test_union_and_unknown);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
