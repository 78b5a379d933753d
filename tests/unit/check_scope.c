/* check_scope.c: the scopes of a Function call (scope.c): the tags of each layout, the
 * FCALL shape with and without a tag, a tag put into a built call, and the queue index's
 * names (only valid queue names, sorted). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "harness.h"
#include "scope.h"

static void assert_argv(const dtq_argv *a, const char *const *want) {
    int n = 0;
    for (; want[n]; n++) {
        ck_assert_int_gt(a->argc, n);
        ck_assert_str_eq(a->argv[n], want[n]);
    }
    ck_assert_int_eq(a->argc, n);
}

START_TEST(test_tags_of_each_layout) {
    char *t;
    ck_assert_ptr_null(dtq_scope_tag("dtq", 0, "emails"));
    ck_assert_ptr_null(dtq_scope_tag("dtq", 0, NULL));
    t = dtq_scope_tag("dtq", 1, "emails");
    ck_assert_str_eq(t, "{dtq:emails}");
    free(t);
    t = dtq_scope_tag("dtq", 1, NULL);
    ck_assert_str_eq(t, "{dtq}");
    free(t);
}
END_TEST

START_TEST(test_fcall_shape) {
    static const char *const single[] = {"FCALL_RO", "dtq_stats", "0", "x", NULL};
    static const char *const cluster[] = {"FCALL", "dtq_pause", "1", "{dtq:q}", "x", NULL};
    dtq_argv a;
    dtq_scope_fcall(&a, 1, "dtq_stats", NULL);
    dtq_argv_adds(&a, "x");
    assert_argv(&a, single);
    dtq_argv_deinit(&a);
    dtq_scope_fcall(&a, 0, "dtq_pause", "{dtq:q}");
    dtq_argv_adds(&a, "x");
    assert_argv(&a, cluster);
    dtq_argv_deinit(&a);
}
END_TEST

START_TEST(test_tag_goes_first_among_the_keys) {
    static const char *const want[] = {"FCALL", "f", "3", "{dtq:q}", "k1", "k2", "arg", NULL};
    static const char *const untouched[] = {"FCALL", "f", "2", "k1", "k2", "arg", NULL};
    dtq_argv a;
    dtq_argv_init(&a);
    dtq_argv_adds(&a, "FCALL");
    dtq_argv_adds(&a, "f");
    dtq_argv_adds(&a, "2");
    dtq_argv_adds(&a, "k1");
    dtq_argv_adds(&a, "k2");
    dtq_argv_adds(&a, "arg");
    dtq_scope_tag_call(&a, NULL);
    assert_argv(&a, untouched);
    dtq_scope_tag_call(&a, "{dtq:q}");
    assert_argv(&a, want);
    dtq_argv_deinit(&a);
}
END_TEST

START_TEST(test_index_read) {
    static const char *const want[] = {"SMEMBERS", "{dtq}:queues", NULL};
    dtq_argv a;
    dtq_scope_index_read(&a, "dtq");
    assert_argv(&a, want);
    dtq_argv_deinit(&a);
}
END_TEST

static redisReply *str(const char *s) {
    redisReply *r = calloc(1, sizeof(*r));
    r->type = REDIS_REPLY_STRING;
    r->str = strdup(s);
    r->len = strlen(s);
    return r;
}

START_TEST(test_index_names_valid_and_sorted) {
    redisReply *r = calloc(1, sizeof(*r)), *num = calloc(1, sizeof(*num)), e = {0};
    char **q, *error = NULL, noperm[] = "NOPERM no";
    int n = -1;
    r->type = REDIS_REPLY_ARRAY;
    r->elements = 5;
    r->element = calloc(5, sizeof(redisReply *));
    r->element[0] = str("zeta");
    r->element[1] = str("bad name");
    r->element[2] = str("alpha");
    num->type = REDIS_REPLY_INTEGER;
    r->element[3] = num;
    r->element[4] = str("");
    q = dtq_scope_index_names(r, &n, &error);
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(q[0], "alpha");
    ck_assert_str_eq(q[1], "zeta");
    ck_assert_ptr_null(q[2]);
    ck_assert_ptr_null(error);
    dtq_scope_names_free(q, n);
    freeReplyObject(r);

    e.type = REDIS_REPLY_ERROR;
    e.str = noperm;
    e.len = 9;
    ck_assert_ptr_null(dtq_scope_index_names(&e, &n, &error));
    ck_assert_int_eq(n, 0);
    ck_assert_str_eq(error, "NOPERM no");
    free(error);
}
END_TEST

/* The one layout policy, for the three programs. */
static dtq_scope_layout verdict(int type, const char *text, int cluster) {
    char buf[128];
    redisReply r = {0};
    snprintf(buf, sizeof(buf), "%s", text);
    r.type = type;
    r.str = buf;
    r.len = strlen(buf);
    return dtq_scope_layout_verdict(&r, cluster);
}

START_TEST(test_layout_verdict) {
    static const char *const call[] = {"FCALL", "dtq_layout", "1", "{dtq}", "cluster", NULL};
    static const char *const single[] = {"FCALL", "dtq_layout", "0", "single", NULL};
    const char *nofn = "ERR Function not found";
    dtq_argv a;
    for (int cluster = 0; cluster < 2; cluster++) {
        ck_assert_int_eq(verdict(REDIS_REPLY_STRING, "cluster", cluster), DTQ_SCOPE_LAYOUT_OK);
        ck_assert_int_eq(verdict(REDIS_REPLY_ERROR, "WRONG_LAYOUT laid out for x", cluster),
                         DTQ_SCOPE_LAYOUT_WRONG);
        /* the monitor role (no <ns>_layout) reads on, unchecked, in both layouts */
        ck_assert_int_eq(verdict(REDIS_REPLY_ERROR, "NOPERM User mon has no permissions", cluster),
                         DTQ_SCOPE_LAYOUT_UNCHECKED);
        ck_assert_int_eq(verdict(REDIS_REPLY_ERROR, "ERR something else", cluster),
                         DTQ_SCOPE_LAYOUT_FAILED);
    }
    ck_assert_int_eq(verdict(REDIS_REPLY_ERROR, nofn, 0), DTQ_SCOPE_LAYOUT_UNCHECKED);
    ck_assert_int_eq(verdict(REDIS_REPLY_ERROR, nofn, 1), DTQ_SCOPE_LAYOUT_NOT_LOADED);
    dtq_scope_layout_call(&a, "dtq", 1);
    assert_argv(&a, call);
    dtq_argv_deinit(&a);
    dtq_scope_layout_call(&a, "dtq", 0);
    assert_argv(&a, single);
    dtq_argv_deinit(&a);
}
END_TEST

int main(void) {
    Suite *s = suite_create("scope");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_tags_of_each_layout);
    tcase_add_test(tc, test_fcall_shape);
    tcase_add_test(tc, test_tag_goes_first_among_the_keys);
    tcase_add_test(tc, test_index_read);
    tcase_add_test(tc, test_index_names_valid_and_sorted);
    tcase_add_test(tc, test_layout_verdict);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
