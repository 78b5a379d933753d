/* check_outcome: the retry / dead-letter decision for an ended attempt (src/outcome.c). */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "dtq/handler.h"
#include "handler_exec.h"
#include "harness.h"
#include "outcome.h"

static const dtq_retry_policy policy = {1.0, 60.0, 0.2, DTQ_JITTER_NONE};
static const dtq_outcome_limits limits = {&policy, 8, 24, 0, 0};

/* A known handler's attempt 1 of 3 that ended with `status`. */
static dtq_attempt_end ended(int status) {
    dtq_attempt_end e = {0};
    e.status = status;
    e.handler_known = 1;
    e.attempt = 1;
    e.max_attempts = 3;
    return e;
}

/* A pool's private statuses: a crash retries (class handler_crashed) while attempts
 * remain, a refused payload is permanent (invalid_payload), and a pool with no process
 * defers the task at the same attempt with no grace to run out (pool_unavailable). */
START_TEST(test_pool_statuses) {
    dtq_attempt_end e = ended(DTQ_HANDLER_FAIL_CRASHED);
    dtq_outcome o;
    e.error = "handler_crashed: pool py pid 7 killed by signal 9 (Killed)";
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_int_eq(o.kind, DTQ_OUTCOME_RETRY);
    ck_assert_str_eq(o.error_class, "handler_crashed");
    ck_assert_int_gt(o.delay_ms, 0);
    dtq_outcome_deinit(&o);
    e.attempt = 3; /* the last one */
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_int_eq(o.kind, DTQ_OUTCOME_DEAD_LETTER);
    ck_assert_str_eq(o.error_class, "handler_crashed");
    dtq_outcome_deinit(&o);
    e = ended(DTQ_HANDLER_FAIL_INVALID);
    e.error = "ValidationError: to";
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_int_eq(o.kind, DTQ_OUTCOME_DEAD_LETTER);
    ck_assert_str_eq(o.error_class, "invalid_payload");
    dtq_outcome_deinit(&o);
    e = ended(DTQ_HANDLER_DEFER);
    e.attempt = 3; /* even on the last attempt: it did not run */
    e.error = "pool_unavailable: pool py";
    dtq_outcome_decide(&e, &limits, 0.99, &o);
    ck_assert_int_eq(o.kind, DTQ_OUTCOME_DEFER);
    ck_assert_str_eq(o.error_class, "pool_unavailable");
    ck_assert_int_eq(o.grace_ms, -1);
    ck_assert_int_ge(o.delay_ms, DTQ_DEFER_DELAY_MS * 8 / 10);
    ck_assert_int_le(o.delay_ms, DTQ_DEFER_DELAY_MS * 12 / 10);
    dtq_outcome_deinit(&o);
    e.timed_out = 1; /* a timeout while it waited in the backlog is a timeout */
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_str_eq(o.error_class, "timeout");
    dtq_outcome_deinit(&o);
}
END_TEST

START_TEST(test_success_and_results) {
    dtq_attempt_end e = ended(DTQ_HANDLER_OK);
    dtq_outcome o;
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_int_eq(o.kind, DTQ_OUTCOME_SUCCEEDED);
    ck_assert_int_eq(o.result_state, DTQ_RESULT_NONE);
    ck_assert_ptr_null(o.error);
    e.result = "null";
    e.result_len = 4;
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_int_eq(o.result_state, DTQ_RESULT_NONE); /* a JSON null is no result */
    e.result = "[1,2]";
    e.result_len = 5;
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_int_eq(o.result_state, DTQ_RESULT_FULL);
    ck_assert_int_eq(o.result_len, 5);
    e.result = "\"0123456789\"";
    e.result_len = strlen(e.result);
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_int_eq(o.result_state, DTQ_RESULT_TRUNCATED);
    ck_assert_int_eq(o.result_len, 8); /* result_max_bytes */
}
END_TEST

/* exec output cut while it was read: its head is kept as it is, not parsed (a cut JSON
 * text is no JSON text), and the task succeeds. */
START_TEST(test_output_cut_while_read) {
    dtq_attempt_end e = ended(DTQ_HANDLER_OK_TRUNCATED);
    dtq_outcome o;
    e.result = "{\"a\":[1,2";
    e.result_len = 8; /* result_max_bytes */
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_int_eq(o.kind, DTQ_OUTCOME_SUCCEEDED);
    ck_assert_int_eq(o.result_state, DTQ_RESULT_TRUNCATED);
    ck_assert_int_eq(o.result_len, 8);
    ck_assert_ptr_null(o.error);
    e.result = NULL; /* result_max_bytes = 0: nothing kept, still cut */
    e.result_len = 0;
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_int_eq(o.kind, DTQ_OUTCOME_SUCCEEDED);
    ck_assert_int_eq(o.result_state, DTQ_RESULT_TRUNCATED);
    ck_assert_int_eq(o.result_len, 0);
    e = ended(DTQ_HANDLER_OK_TRUNCATED);
    e.timed_out = 1; /* the timeout decided first */
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_str_eq(o.error_class, "timeout");
    dtq_outcome_deinit(&o);
}
END_TEST

START_TEST(test_bad_result_is_permanent) {
    dtq_attempt_end e = ended(DTQ_HANDLER_OK);
    dtq_outcome o;
    e.result = "{oops";
    e.result_len = 5;
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_int_eq(o.kind, DTQ_OUTCOME_DEAD_LETTER);
    ck_assert_str_eq(o.error_class, "bad_result");
    ck_assert_str_eq(o.error, "result is not valid JSON");
    dtq_outcome_deinit(&o);
}
END_TEST

/* A result is one whole JSON text: cJSON alone stops after the first value and took what
 * followed it (found by tests/fuzz/fuzz_exec_result: stdout "{"n": 11}}" was stored as a
 * JSON result). Blanks after the value are part of a JSON text. */
START_TEST(test_result_is_one_whole_json_text) {
    static const dtq_outcome_limits wide = {&policy, 1024, 64, 0, 0};
    static const struct {
        const char *text;
        size_t len;
    } bad[] = {{"{\"n\": 11}}\n", 11},
               {"{\"a\":1}\n{\"b\":2}\n", 16},
               {"1 2", 3},
               {"\"a\"\0junk", 8},
               {"0x10", 4},
               {"[1] x", 5}};
    dtq_attempt_end e = ended(DTQ_HANDLER_OK);
    dtq_outcome o;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        e.result = bad[i].text;
        e.result_len = bad[i].len;
        dtq_outcome_decide(&e, &wide, 0.5, &o);
        ck_assert_msg(o.kind == DTQ_OUTCOME_DEAD_LETTER, "case %zu", i);
        ck_assert_int_eq(o.result_state, DTQ_RESULT_NONE);
        ck_assert_str_eq(o.error_class, "bad_result");
        dtq_outcome_deinit(&o);
    }
    e.result = " [1, {\"a\": null}] \r\n\t";
    e.result_len = strlen(e.result);
    dtq_outcome_decide(&e, &wide, 0.5, &o);
    ck_assert_int_eq(o.kind, DTQ_OUTCOME_SUCCEEDED);
    ck_assert_int_eq(o.result_state, DTQ_RESULT_FULL);
    ck_assert_int_eq(o.result_len, e.result_len);
}
END_TEST

START_TEST(test_retryable_until_the_last_attempt) {
    dtq_attempt_end e = ended(DTQ_HANDLER_RETRY);
    dtq_outcome o;
    e.error = "try later";
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_int_eq(o.kind, DTQ_OUTCOME_RETRY);
    ck_assert_str_eq(o.error_class, "retryable");
    ck_assert_int_eq(o.delay_ms, 1000);
    dtq_outcome_deinit(&o);
    e.attempt = 2;
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_int_eq(o.delay_ms, 2000);
    dtq_outcome_deinit(&o);
    e.attempt = 3; /* the last of max_attempts, as resolved at claim */
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_int_eq(o.kind, DTQ_OUTCOME_DEAD_LETTER);
    dtq_outcome_deinit(&o);
    e.max_attempts = 1;
    e.attempt = 1;
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_int_eq(o.kind, DTQ_OUTCOME_DEAD_LETTER);
    dtq_outcome_deinit(&o);
}
END_TEST

START_TEST(test_failure_classes) {
    dtq_attempt_end e = ended(DTQ_HANDLER_RETRY);
    dtq_outcome o;
    e.timed_out = 1;
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_int_eq(o.kind, DTQ_OUTCOME_RETRY);
    ck_assert_str_eq(o.error_class, "timeout");
    dtq_outcome_deinit(&o);
    e = ended(DTQ_HANDLER_FAIL);
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_int_eq(o.kind, DTQ_OUTCOME_DEAD_LETTER); /* permanent on attempt 1 of 3 */
    ck_assert_str_eq(o.error_class, "permanent");
    ck_assert_str_eq(o.error, "handler failed");
    dtq_outcome_deinit(&o);
    e = ended(DTQ_HANDLER_FAIL_SIGNAL);
    e.error = "signal:9";
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_str_eq(o.error_class, "signal");
    ck_assert_str_eq(o.error, "signal:9");
    ck_assert_int_eq(o.kind, DTQ_OUTCOME_RETRY); /* killed from outside: not the task's fault */
    ck_assert_int_eq(o.delay_ms, 1000);          /* the normal backoff */
    dtq_outcome_deinit(&o);
    e.attempt = 3; /* killed on every attempt: the last one dead-letters */
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_int_eq(o.kind, DTQ_OUTCOME_DEAD_LETTER);
    ck_assert_str_eq(o.error_class, "signal");
    dtq_outcome_deinit(&o);
    e = ended(DTQ_HANDLER_FAIL);
    e.handler_known = 0;
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_str_eq(o.error_class, "unknown_task_type");
    ck_assert_int_eq(o.kind, DTQ_OUTCOME_DEAD_LETTER);
    dtq_outcome_deinit(&o);
}
END_TEST

START_TEST(test_error_keeps_its_tail_and_cancel_wins) {
    dtq_attempt_end e = ended(DTQ_HANDLER_FAIL);
    dtq_outcome o;
    e.error = "first part ... what finally broke";
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_int_eq(strlen(o.error), 24);
    ck_assert_str_eq(o.error, "t ... what finally broke"); /* error_max_bytes, from the end */
    dtq_outcome_deinit(&o);
    e.cancelled = 1;
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_int_eq(o.kind, DTQ_OUTCOME_CANCELLED);
    dtq_outcome_deinit(&o);
}
END_TEST

START_TEST(test_record_words) {
    ck_assert_str_eq(dtq_outcome_kind_name(DTQ_OUTCOME_SUCCEEDED), "succeeded");
    ck_assert_str_eq(dtq_outcome_kind_name(DTQ_OUTCOME_RETRY), "retry");
    ck_assert_str_eq(dtq_outcome_kind_name(DTQ_OUTCOME_DEAD_LETTER), "dead_letter");
    ck_assert_str_eq(dtq_outcome_kind_name(DTQ_OUTCOME_CANCELLED), "cancelled");
    ck_assert_str_eq(dtq_result_state_name(DTQ_RESULT_NONE), "none");
    ck_assert_str_eq(dtq_result_state_name(DTQ_RESULT_FULL), "full");
    ck_assert_str_eq(dtq_result_state_name(DTQ_RESULT_TRUNCATED), "truncated");
}
END_TEST

/* result = text: stdout as a JSON string, escaped, cut at a character to fit
 * result_max_bytes (8 here) with its quotes; invalid UTF-8 is a bad_result. */
START_TEST(test_text_result) {
    dtq_attempt_end e = ended(DTQ_HANDLER_OK);
    dtq_outcome o;
    e.result_mode = DTQ_RESULT_MODE_TEXT;
    e.result = "done\n";
    e.result_len = 5;
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_int_eq(o.kind, DTQ_OUTCOME_SUCCEEDED);
    ck_assert_int_eq(o.result_state, DTQ_RESULT_FULL);
    ck_assert_int_eq(o.result_len, 8);
    ck_assert_str_eq(o.result, "\"done\\n\"");
    dtq_outcome_deinit(&o);
    e.result = NULL; /* no output at all: the empty string, not null */
    e.result_len = 0;
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_int_eq(o.result_state, DTQ_RESULT_FULL);
    ck_assert_str_eq(o.result, "\"\"");
    dtq_outcome_deinit(&o);
    e.result = "a\"\x01\xc3\xa9"; /* quote, control character, é */
    e.result_len = 5;
    {
        static const dtq_outcome_limits wide = {&policy, 64, 24, 0, 0};
        dtq_outcome_decide(&e, &wide, 0.5, &o);
    }
    ck_assert_str_eq(o.result, "\"a\\\"\\u0001\xc3\xa9\"");
    ck_assert_int_eq(o.result_state, DTQ_RESULT_FULL);
    dtq_outcome_deinit(&o);
    e.result = "abcde\xc3\xa9"; /* é would need 9 bytes with the quotes: not cut in half */
    e.result_len = 7;
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_int_eq(o.result_state, DTQ_RESULT_TRUNCATED);
    ck_assert_str_eq(o.result, "\"abcde\"");
    ck_assert_int_eq(o.result_len, 7);
    dtq_outcome_deinit(&o);
    e.result = "abcde\\"; /* nor is an escape */
    e.result_len = 6;
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_str_eq(o.result, "\"abcde\"");
    ck_assert_int_eq(o.result_state, DTQ_RESULT_TRUNCATED);
    dtq_outcome_deinit(&o);
    e.result = "abcdef"; /* exactly 8 with the quotes: whole */
    e.result_len = 6;
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_str_eq(o.result, "\"abcdef\"");
    ck_assert_int_eq(o.result_state, DTQ_RESULT_FULL);
    dtq_outcome_deinit(&o);
    /* cut while it was read, inside é: the partial character is dropped, not refused */
    e = ended(DTQ_HANDLER_OK_TRUNCATED);
    e.result_mode = DTQ_RESULT_MODE_TEXT;
    e.result = "ab\xc3";
    e.result_len = 3;
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_int_eq(o.kind, DTQ_OUTCOME_SUCCEEDED);
    ck_assert_int_eq(o.result_state, DTQ_RESULT_TRUNCATED);
    ck_assert_str_eq(o.result, "\"ab\"");
    dtq_outcome_deinit(&o);
    /* not UTF-8: a lone continuation byte, an overlong '/', a surrogate, a partial
     * character at the end of output that was not cut */
    {
        static const char *const bad[] = {"ok\x80", "\xc0\xaf", "\xed\xa0\x80", "ab\xc3"};
        static const size_t len[] = {3, 2, 3, 3};
        for (int i = 0; i < 4; i++) {
            e = ended(DTQ_HANDLER_OK);
            e.result_mode = DTQ_RESULT_MODE_TEXT;
            e.result = bad[i];
            e.result_len = len[i];
            dtq_outcome_decide(&e, &limits, 0.5, &o);
            ck_assert_int_eq(o.kind, DTQ_OUTCOME_DEAD_LETTER);
            ck_assert_str_eq(o.error_class, "bad_result");
            ck_assert_ptr_null(o.result);
            dtq_outcome_deinit(&o);
        }
    }
    e.result = "ok\x80";
    e.result_len = 3;
    {
        static const dtq_outcome_limits wide = {&policy, 64, 256, 0, 0};
        dtq_outcome_decide(&e, &wide, 0.5, &o);
    }
    ck_assert_str_eq(o.error, "result is not UTF-8 text (byte 3 of stdout)");
    dtq_outcome_deinit(&o);
}
END_TEST

/* result = ignore: success without a result, whatever was printed (even no JSON). */
START_TEST(test_ignored_result) {
    dtq_attempt_end e = ended(DTQ_HANDLER_OK);
    dtq_outcome o;
    e.result_mode = DTQ_RESULT_MODE_IGNORE;
    e.result = "{oops";
    e.result_len = 5;
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_int_eq(o.kind, DTQ_OUTCOME_SUCCEEDED);
    ck_assert_int_eq(o.result_state, DTQ_RESULT_NONE);
    e.status = DTQ_HANDLER_OK_TRUNCATED;
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_int_eq(o.result_state, DTQ_RESULT_NONE);
    e.status = DTQ_HANDLER_FAIL; /* a failure is still one */
    dtq_outcome_decide(&e, &limits, 0.5, &o);
    ck_assert_int_eq(o.kind, DTQ_OUTCOME_DEAD_LETTER);
    dtq_outcome_deinit(&o);
}
END_TEST

/* unknown_task_type = hand_back: a task type without a handler is deferred (the Function
 * applies the grace), with a short spread delay; a known type's failure is not. */
START_TEST(test_unknown_type_hand_back) {
    static const dtq_outcome_limits back = {&policy, 8, 64, 1, 5000};
    dtq_attempt_end e = ended(DTQ_HANDLER_FAIL);
    dtq_outcome o;
    e.handler_known = 0;
    e.error = "unknown_task_type:resize";
    dtq_outcome_decide(&e, &back, 0.0, &o);
    ck_assert_int_eq(o.kind, DTQ_OUTCOME_DEFER);
    ck_assert_str_eq(o.error_class, "unknown_task_type");
    ck_assert_str_eq(o.error, "unknown_task_type:resize");
    ck_assert_int_eq(o.delay_ms, DTQ_DEFER_DELAY_MS * 8 / 10);
    ck_assert_int_eq(o.grace_ms, 5000);
    dtq_outcome_deinit(&o);
    dtq_outcome_decide(&e, &back, 0.999, &o);
    ck_assert_int_le(o.delay_ms, DTQ_DEFER_DELAY_MS * 12 / 10);
    ck_assert_int_gt(o.delay_ms, DTQ_DEFER_DELAY_MS);
    dtq_outcome_deinit(&o);
    e.attempt = e.max_attempts = 1; /* uses no attempt, so the last one too */
    dtq_outcome_decide(&e, &back, 0.5, &o);
    ck_assert_int_eq(o.kind, DTQ_OUTCOME_DEFER);
    dtq_outcome_deinit(&o);
    e = ended(DTQ_HANDLER_FAIL); /* known type: dead-lettered as ever */
    dtq_outcome_decide(&e, &back, 0.5, &o);
    ck_assert_int_eq(o.kind, DTQ_OUTCOME_DEAD_LETTER);
    ck_assert_str_eq(o.error_class, "permanent");
    dtq_outcome_deinit(&o);
    ck_assert_str_eq(dtq_outcome_kind_name(DTQ_OUTCOME_DEFER), "defer");
}
END_TEST

int main(void) {
    Suite *s = suite_create("outcome");
    TCase *tc = tcase_create("decide");
    tcase_add_test(tc, test_success_and_results);
    tcase_add_test(tc, test_output_cut_while_read);
    tcase_add_test(tc, test_bad_result_is_permanent);
    tcase_add_test(tc, test_result_is_one_whole_json_text);
    tcase_add_test(tc, test_retryable_until_the_last_attempt);
    tcase_add_test(tc, test_failure_classes);
    tcase_add_test(tc, test_error_keeps_its_tail_and_cancel_wins);
    tcase_add_test(tc, test_record_words);
    tcase_add_test(tc, test_text_result);
    tcase_add_test(tc, test_ignored_result);
    tcase_add_test(tc, test_unknown_type_hand_back);
    tcase_add_test(tc, test_pool_statuses);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
