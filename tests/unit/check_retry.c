/* check_retry.c: the backoff formula and the retry gate (SPEC 7). */
#include <check.h>
#include <stdlib.h>

#include "harness.h"

#include "retry.h"

static const dtq_retry_policy defaults = {1.0, 60.0, 0.2, DTQ_JITTER_SPREAD};

/* The seed's table for 1.0/60/0.2: capped delay per failed attempt, and the range. */
START_TEST(test_table_bounds) {
    static const double capped[] = {1, 2, 4, 8, 16, 32, 60, 60, 60};
    for (int attempt = 1; attempt <= 9; attempt++) {
        double c = capped[attempt - 1] * 1000;
        ck_assert_int_eq(dtq_retry_delay_ms(&defaults, attempt, 0.0), (int64_t)(c * 0.8));
        ck_assert_int_eq(dtq_retry_delay_ms(&defaults, attempt, 0.5), (int64_t)c);
        /* u -> 1 approaches the top of the range without reaching it */
        ck_assert_int_le(dtq_retry_delay_ms(&defaults, attempt, 0.999999), (int64_t)(c * 1.2));
        ck_assert_int_ge(dtq_retry_delay_ms(&defaults, attempt, 0.999999), (int64_t)(c * 1.19));
    }
}
END_TEST

START_TEST(test_cap_and_huge_attempts) {
    dtq_retry_policy none = defaults;
    none.jitter_mode = DTQ_JITTER_NONE;
    ck_assert_int_eq(dtq_retry_delay_ms(&none, 7, 0.3), 60000);
    ck_assert_int_eq(dtq_retry_delay_ms(&none, 5000, 0.3), 60000);
    ck_assert_int_eq(dtq_retry_delay_ms(&none, INT64_MAX, 0.3), 60000);
    ck_assert_int_eq(dtq_retry_delay_ms(&none, 0, 0.3), 1000); /* clamped to attempt 1 */
    ck_assert_int_eq(dtq_retry_delay_ms(&defaults, 5000, 0.5), 60000);
}
END_TEST

START_TEST(test_modes_over_many_draws) {
    dtq_retry_policy full = defaults, none = defaults;
    full.jitter_mode = DTQ_JITTER_FULL;
    none.jitter_mode = DTQ_JITTER_NONE;
    int64_t lo = INT64_MAX, hi = 0;
    for (int i = 0; i < 20000; i++) {
        double u = dtq_retry_uniform();
        int64_t s = dtq_retry_delay_ms(&defaults, 3, u);
        int64_t f = dtq_retry_delay_ms(&full, 3, u);
        ck_assert(u >= 0.0 && u < 1.0);
        ck_assert_int_ge(s, 3200);
        ck_assert_int_le(s, 4800);
        ck_assert_int_ge(f, 0);
        ck_assert_int_lt(f, 4000);
        ck_assert_int_eq(dtq_retry_delay_ms(&none, 3, u), 4000);
        if (s < lo) lo = s;
        if (s > hi) hi = s;
    }
    /* The draws really spread over the range, not a constant. */
    ck_assert_int_lt(lo, 3300);
    ck_assert_int_gt(hi, 4700);
}
END_TEST

START_TEST(test_zero_and_fractional) {
    dtq_retry_policy p = {0.0, 0.0, 0.2, DTQ_JITTER_SPREAD};
    ck_assert_int_eq(dtq_retry_delay_ms(&p, 3, 0.7), 0);
    p.base_delay_s = 0.0015;
    p.max_delay_s = 1;
    p.jitter_mode = DTQ_JITTER_NONE;
    ck_assert_int_eq(dtq_retry_delay_ms(&p, 1, 0.1), 1); /* floor(1.5) */
}
END_TEST

START_TEST(test_classification) {
    ck_assert(dtq_retry_is_retryable(DTQ_FAIL_HANDLER_RETRY));
    ck_assert(dtq_retry_is_retryable(DTQ_FAIL_TIMEOUT));
    ck_assert(!dtq_retry_is_retryable(DTQ_FAIL_HANDLER));
    ck_assert(dtq_retry_is_retryable(DTQ_FAIL_SIGNAL)); /* a signal the daemon did not send */
    ck_assert(!dtq_retry_is_retryable(DTQ_FAIL_BAD_RESULT));
    ck_assert(!dtq_retry_is_retryable(DTQ_FAIL_UNKNOWN_TYPE));
    ck_assert(!dtq_retry_is_retryable(DTQ_FAIL_INVALID_PAYLOAD));
    ck_assert(dtq_retry_should_retry(DTQ_FAIL_TIMEOUT, 4, 5));
    ck_assert(!dtq_retry_should_retry(DTQ_FAIL_TIMEOUT, 5, 5));
    ck_assert(!dtq_retry_should_retry(DTQ_FAIL_HANDLER, 1, 5));
    ck_assert(!dtq_retry_should_retry(DTQ_FAIL_HANDLER_RETRY, 1, 1));
    ck_assert(dtq_retry_should_retry(DTQ_FAIL_SIGNAL, 1, 2));
    ck_assert(!dtq_retry_should_retry(DTQ_FAIL_SIGNAL, 2, 2)); /* killed every time: it ends */
    ck_assert_str_eq(dtq_retry_class_to_string(DTQ_FAIL_UNKNOWN_TYPE), "unknown_task_type");
}
END_TEST

START_TEST(test_jitter_mode_names) {
    enum dtq_jitter_mode m;
    ck_assert_int_eq(dtq_retry_jitter_mode_from_string("full", &m), 0);
    ck_assert_int_eq(m, DTQ_JITTER_FULL);
    ck_assert_int_eq(dtq_retry_jitter_mode_from_string("none", &m), 0);
    ck_assert_int_eq(m, DTQ_JITTER_NONE);
    ck_assert_int_eq(dtq_retry_jitter_mode_from_string("spread", &m), 0);
    ck_assert_int_eq(m, DTQ_JITTER_SPREAD);
    ck_assert_int_ne(dtq_retry_jitter_mode_from_string("equal", &m), 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("retry");
    TCase *tc = tcase_create("backoff");
    tcase_add_test(tc, test_table_bounds);
    tcase_add_test(tc, test_cap_and_huge_attempts);
    tcase_add_test(tc, test_modes_over_many_draws);
    tcase_add_test(tc, test_zero_and_fractional);
    tcase_add_test(tc, test_classification);
    tcase_add_test(tc, test_jitter_mode_names);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
