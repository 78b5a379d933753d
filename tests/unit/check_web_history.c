/* check_web_history.c: the samples behind dtq-web's rates (src/web_history.c): workers'
 * cumulative per-queue counters into per-interval outcomes, across restarts, workers that
 * come and go, and the ring. */
#include <check.h>
#include <stdlib.h>

#include "harness.h"
#include "web_history.h"

static void worker(dtq_web_history *h, const char *id, int64_t started, const char *q, int64_t s,
                   int64_t f, int64_t r) {
    dtq_web_counts c = {s, f, r};
    dtq_web_history_worker(h, id, started, NULL, NULL);
    if (q) dtq_web_history_worker(h, id, started, q, &c);
}

static dtq_web_counts point(dtq_web_history *h, int i, const char *q, int64_t *depth) {
    int64_t ts, pending;
    dtq_web_counts d;
    ck_assert_int_eq(dtq_web_history_point(h, i, q, &ts, depth, &pending, &d), 0);
    return d;
}

START_TEST(test_baseline_then_deltas) {
    dtq_web_history *h = dtq_web_history_new(10);
    int64_t depth;
    dtq_web_counts d, t;
    double s, f, r;
    /* the first sample is the baseline: 100 done before dtq-web started count for nothing */
    dtq_web_history_begin(h, 10000);
    dtq_web_history_gauge(h, "mail", 7, 1);
    worker(h, "w1", 1000, "mail", 100, 5, 2);
    dtq_web_history_end(h);
    ck_assert_int_eq(dtq_web_history_rate(h, "mail", 60000, &s, &f, &r, NULL), -1);
    d = point(h, 0, "mail", &depth);
    ck_assert_int_eq(depth, 7);
    ck_assert_int_eq(d.succeeded, 0);
    /* 5 s later: 30 more succeeded, 1 failed */
    dtq_web_history_begin(h, 15000);
    dtq_web_history_gauge(h, "mail", 3, 0);
    worker(h, "w1", 1000, "mail", 130, 6, 2);
    dtq_web_history_end(h);
    d = point(h, 1, "mail", &depth);
    ck_assert_int_eq(d.succeeded, 30);
    ck_assert_int_eq(d.failed, 1);
    ck_assert_int_eq(d.retried, 0);
    ck_assert_int_eq(dtq_web_history_rate(h, "mail", 60000, &s, &f, &r, NULL), 0);
    ck_assert_double_eq_tol(s, 360.0, 1e-9); /* 30 in 5 s */
    ck_assert_double_eq_tol(f, 12.0, 1e-9);
    dtq_web_history_total(h, NULL, &t);
    ck_assert_int_eq(t.succeeded, 30);
    ck_assert(dtq_web_history_knows(h, "mail"));
    ck_assert(!dtq_web_history_knows(h, "other"));
    dtq_web_history_free(h);
}
END_TEST

START_TEST(test_workers_come_restart_and_go) {
    dtq_web_history *h = dtq_web_history_new(10);
    int64_t depth;
    dtq_web_counts d;
    dtq_web_history_begin(h, 10000);
    worker(h, "w1", 1000, NULL, 0, 0, 0); /* no counters yet */
    worker(h, "old", 500, "mail", 40, 0, 0);
    dtq_web_history_end(h);
    /* w1's first counts and a queue new to "old" are all new; w2 started since the last
     * sample: all its counts are new; w3 was running before and was missed: a baseline */
    dtq_web_history_begin(h, 15000);
    worker(h, "w1", 1000, "mail", 4, 0, 1);
    worker(h, "old", 500, "mail", 40, 0, 0);
    worker(h, "old", 500, "sms", 2, 0, 0);
    worker(h, "w2", 12000, "mail", 3, 0, 0);
    worker(h, "w3", 100, "mail", 1000, 0, 0);
    dtq_web_history_end(h);
    d = point(h, 1, "mail", &depth);
    ck_assert_int_eq(d.succeeded, 4 + 3);
    ck_assert_int_eq(d.retried, 1);
    ck_assert_int_eq(depth, -1); /* no gauge in the sample */
    d = point(h, 1, "sms", &depth);
    ck_assert_int_eq(d.succeeded, 2);
    d = point(h, 1, NULL, &depth);
    ck_assert_int_eq(d.succeeded, 9);
    /* w1 restarts (new started_at, counters from 0): its new counts are new, not negative;
     * w2 went away and comes back later with the same process: a baseline again */
    dtq_web_history_begin(h, 20000);
    worker(h, "w1", 17000, "mail", 2, 0, 0);
    worker(h, "w3", 100, "mail", 1001, 0, 0);
    dtq_web_history_end(h);
    d = point(h, 2, "mail", &depth);
    ck_assert_int_eq(d.succeeded, 2 + 1);
    dtq_web_history_begin(h, 25000);
    worker(h, "w2", 12000, "mail", 50, 0, 0);
    dtq_web_history_end(h);
    d = point(h, 3, "mail", &depth);
    ck_assert_int_eq(d.succeeded, 0);
    dtq_web_history_free(h);
}
END_TEST

START_TEST(test_ring_and_window) {
    dtq_web_history *h = dtq_web_history_new(4);
    double s, f, r;
    int64_t span = 0;
    int64_t ts, depth, pending;
    dtq_web_counts d;
    for (int i = 0; i < 10; i++) { /* 10 succeed every 5 s */
        dtq_web_history_begin(h, 5000 * i);
        dtq_web_history_gauge(h, "q", i, 0);
        worker(h, "w", 1, "q", 10 * i, 0, 0);
        dtq_web_history_end(h);
    }
    ck_assert_int_eq(dtq_web_history_len(h), 4);
    ck_assert_int_eq(dtq_web_history_point(h, 0, "q", &ts, &depth, &pending, &d), 0);
    ck_assert_int_eq(ts, 30000); /* the oldest kept */
    ck_assert_int_eq(depth, 6);
    ck_assert_int_eq(dtq_web_history_point(h, 4, "q", &ts, &depth, &pending, &d), -1);
    /* a 10 s window: the samples at 35 and 45 s bound it, 20 outcomes in 10 s */
    ck_assert_int_eq(dtq_web_history_rate(h, "q", 10000, &s, &f, &r, &span), 0);
    ck_assert_double_eq_tol(s, 120.0, 1e-9);
    ck_assert_int_eq(span, 10000);
    ck_assert_int_eq(dtq_web_history_rate(h, "q", 600000, &s, &f, &r, NULL), 0);
    ck_assert_double_eq_tol(s, 120.0, 1e-9);
    dtq_web_history_free(h);
}
END_TEST

int main(void) {
    Suite *s = suite_create("web_history");
    TCase *tc = tcase_create("history");
    tcase_add_test(tc, test_baseline_then_deltas);
    tcase_add_test(tc, test_workers_come_restart_and_go);
    tcase_add_test(tc, test_ring_and_window);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
