/* deps.c: task dependencies (lua/lib/deps.lua, the `after` and `on_failure` options of
 * <ns>_enqueue): a waiting task released by the call that ends its last parent, each
 * on_failure for each way a parent can fail, cascades, the cancel of a waiting task, a
 * requeued parent that then succeeds, refusals, parent_results and its bound, a stale
 * finish. Against a real redis-server, without a daemon. Each parent is alone in a queue
 * named after it, so that a fetch of that queue claims it and nothing else. */
#include <unistd.h>
#include "lua_suite.h"

#define CANCELLED_ DTQ_OUTCOME_CANCELLED

static void expect_created(redisReply *r) {
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "enqueue: %s", r->str ? r->str : "?");
    ck_assert_str_eq(r->element[1]->str, "created");
    freeReplyObject(r);
}

#define ENQ(...) expect_created(th_cmd(C, __VA_ARGS__))

/* A parent: task `id` alone in queue `id`. */
static void parent(const char *id) {
    th_queue_groups(C, id);
    ENQ("FCALL dtq_enqueue 0 %s echo 1 task_id %s", id, id);
}

/* A child in queue kids: task `id` after `after`, with on_failure `on` (NULL: default). */
static void child(const char *id, const char *after, const char *on) {
    if (on)
        ENQ("FCALL dtq_enqueue 0 kids echo {\"c\":1} task_id %s after %s on_failure %s", id, after,
            on);
    else
        ENQ("FCALL dtq_enqueue 0 kids echo {\"c\":1} task_id %s after %s", id, after);
}

/* Claims task `id`, alone in its queue; the fetch reply (the claim is element[0]->element[0]). */
static redisReply *claim(const char *id) {
    redisReply *r = fetch("w1", 1, id);
    ck_assert_msg(r->element[0]->elements == 1, "nothing to claim in queue %s", id);
    return r;
}

/* Runs task `id` to `outcome` (result `result`, "" for none); the finish verdict must be
 * `verdict`. */
static void end_with(const char *id, enum dtq_outcome_kind outcome, const char *result,
                     const char *verdict) {
    redisReply *r = claim(id);
    redisReply *f = finish_one("w1", r->element[0]->element[0], outcome, result,
                               *result ? DTQ_RESULT_FULL : DTQ_RESULT_NONE);
    ck_assert_int_eq(f->type, REDIS_REPLY_ARRAY);
    ck_assert_str_eq(f->element[0]->str, verdict);
    freeReplyObject(f);
    freeReplyObject(r);
}

static void status_is(const char *id, const char *want) {
    th_assert_field(C, id, "status", want);
}

static long long kids_len(void) {
    return th_int(th_cmd(C, "XLEN dtq:stream:kids:p5"));
}

START_TEST(test_release_on_last_parent) {
    redisReply *r, *f;
    char *v;
    parent("pa");
    parent("pb");
    child("c", "pa,pb,pa", NULL); /* a repeated id counts once */
    status_is("c", "waiting");
    th_assert_field(C, "c", "after", "pa,pb");
    th_assert_field(C, "c", "deps_pending", "2");
    th_assert_field(C, "c", "on_failure", "cancel");
    th_assert_field(C, "pa", "has_waiters", "1");
    ck_assert_int_eq(kids_len(), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD dtq:retry:schedule")), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "SISMEMBER dtq:waiters:pa c")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "SISMEMBER dtq:waiters:pb c")), 1);

    end_with("pa", OK_, "{\"a\":1}", "succeeded"); /* partial: one of two */
    status_is("c", "waiting");
    th_assert_field(C, "c", "deps_pending", "1");
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:waiters:pa")), 0);
    ck_assert_int_eq(kids_len(), 0);

    r = claim("pb");
    f = finish_one("w1", r->element[0]->element[0], OK_, "[2]", DTQ_RESULT_FULL);
    ck_assert_str_eq(f->element[0]->str, "succeeded");
    freeReplyObject(f);
    status_is("c", "queued");
    th_assert_field(C, "c", "deps_pending", "0");
    th_assert_field(C, "c", "parent_results", "{\"pa\":{\"a\":1},\"pb\":[2]}");
    ck_assert_int_eq(kids_len(), 1);
    assert_string_key("dtq:queue:kids:length", "1");

    /* the same finish again (a stale record): nothing released twice */
    f = finish_one("w1", r->element[0]->element[0], OK_, "[2]", DTQ_RESULT_FULL);
    ck_assert_str_eq(f->element[0]->str, "stale");
    freeReplyObject(f);
    freeReplyObject(r);
    ck_assert_int_eq(kids_len(), 1);
    assert_string_key("dtq:queue:kids:length", "1");

    /* the released task runs like any other */
    th_queue_groups(C, "kids");
    r = fetch("w1", 10, "kids");
    ck_assert_int_eq(r->element[0]->elements, 1);
    ck_assert_str_eq(r->element[0]->element[0]->element[2]->str, "c");
    freeReplyObject(r);
    v = field("c", "parent_results_truncated");
    ck_assert_ptr_null(v);
}
END_TEST

START_TEST(test_parents_already_done) {
    parent("pa");
    end_with("pa", OK_, "7", "succeeded");
    parent("pd");
    end_with("pd", DEAD_, "", "dead_lettered");
    parent("pq"); /* still queued */

    child("c1", "pa", NULL); /* every parent done: queued at once */
    status_is("c1", "queued");
    th_assert_field(C, "c1", "parent_results", "{\"pa\":7}");
    ck_assert_int_eq(kids_len(), 1);

    child("c2", "pa,pq", NULL);
    status_is("c2", "waiting");
    th_assert_field(C, "c2", "deps_pending", "1");

    child("c3", "pd,pq", "cancel"); /* a parent ended otherwise: on_failure at once */
    status_is("c3", "cancelled");
    th_assert_field(C, "c3", "last_error", "dependency_failed: pd dead_lettered");
    th_assert_field(C, "c3", "last_error_class", "dependency_failed");
    th_assert_field(C, "c3", "failed_by", "pd");
    ck_assert_int_gt(th_int(th_cmd(C, "TTL dtq:task:c3")), 0);

    child("c4", "pd,pa", "run");
    status_is("c4", "queued");
    th_assert_field(C, "c4", "deps_failed", "{\"pd\":\"dead_lettered\"}");
    th_assert_field(C, "c4", "parent_results", "{\"pd\":null,\"pa\":7}");

    child("c5", "pd", "dead_letter");
    status_is("c5", "dead_lettered");
    th_assert_field(C, "c5", "last_error_class", "dependency_failed");
    assert_dead_lettered_with("dependency_failed: pd dead_lettered");
    ck_assert_int_eq(kids_len(), 2);
}
END_TEST

/* Three children of parent `p`, one per on_failure: <p>_cancel, <p>_run, <p>_dl. */
static void three_children(const char *p) {
    char id[64];
    snprintf(id, sizeof(id), "%s_cancel", p);
    child(id, p, "cancel");
    snprintf(id, sizeof(id), "%s_run", p);
    child(id, p, "run");
    snprintf(id, sizeof(id), "%s_dl", p);
    child(id, p, "dead_letter");
    status_is(id, "waiting");
}

/* The children of `p` after it ended in `st`. */
static void three_followed(const char *p, const char *st) {
    char id[64], err[128];
    snprintf(err, sizeof(err), "dependency_failed: %s %s", p, st);
    snprintf(id, sizeof(id), "%s_cancel", p);
    status_is(id, "cancelled");
    th_assert_field(C, id, "last_error", err);
    th_assert_field(C, id, "last_error_class", "dependency_failed");
    th_assert_field(C, id, "failed_by", p);
    snprintf(id, sizeof(id), "%s_run", p);
    status_is(id, "queued");
    snprintf(id, sizeof(id), "%s_dl", p);
    status_is(id, "dead_lettered");
    th_assert_field(C, id, "last_error", err);
    th_assert_field(C, id, "last_error_class", "dependency_failed");
    th_assert_field(C, id, "failed_by", p);
}

START_TEST(test_each_failure_kind) {
    redisReply *r;
    /* finish: dead letter, cancelled */
    parent("fdead");
    three_children("fdead");
    end_with("fdead", DEAD_, "", "dead_lettered");
    three_followed("fdead", "dead_lettered");

    parent("fcanc");
    three_children("fcanc");
    end_with("fcanc", CANCELLED_, "", "cancelled");
    three_followed("fcanc", "cancelled");

    /* <ns>_cancel of a queued parent */
    parent("acanc");
    three_children("acanc");
    th_expect_str(th_cmd(C, "FCALL dtq_cancel 0 acanc"), "cancelled");
    three_followed("acanc", "cancelled");

    /* queue_clear: dead-lettered, class cleared */
    parent("clr");
    three_children("clr");
    r = th_cmd(C, "FCALL dtq_queue_clear 0 tester clr");
    ck_assert_int_eq(r->element[0]->integer, 1);
    freeReplyObject(r);
    three_followed("clr", "dead_lettered");

    /* sched_delete of a delayed parent */
    th_queue_groups(C, "sdel");
    ENQ("FCALL dtq_enqueue 0 sdel echo 1 task_id sdel delay_ms 600000");
    three_children("sdel");
    r = th_cmd(C, "FCALL dtq_sched_delete 0 tester sdel");
    ck_assert_str_eq(r->element[0]->str, "done");
    freeReplyObject(r);
    three_followed("sdel", "cancelled");

    /* a poisoned parent, dead-lettered by the fetch that finds it */
    parent("pois");
    three_children("pois");
    freeReplyObject(th_cmd(C, "HSET dtq:task:pois priority x"));
    r = fetch("w1", 1, "pois");
    ck_assert_int_eq(r->element[0]->elements, 0);
    freeReplyObject(r);
    three_followed("pois", "dead_lettered");

    /* the TTL, at delivery */
    th_queue_groups(C, "ttl");
    ENQ("FCALL dtq_enqueue 0 ttl echo 1 task_id ttl ttl_seconds 1");
    three_children("ttl");
    usleep(1100 * 1000);
    r = fetch("w1", 1, "ttl");
    ck_assert_int_eq(r->element[0]->elements, 0);
    freeReplyObject(r);
    three_followed("ttl", "expired");

    /* dlq_enabled 0: failed */
    freeReplyObject(th_cmd(C, "HSET dtq:config dlq_enabled 0"));
    parent("fail");
    three_children("fail");
    end_with("fail", DEAD_, "", "failed");
    status_is("fail_cancel", "cancelled");
    status_is("fail_run", "queued");
    status_is("fail_dl", "failed");
    th_assert_field(C, "fail_dl", "last_error", "dependency_failed: fail failed");
}
END_TEST

START_TEST(test_cascade) {
    parent("a");
    ENQ("FCALL dtq_enqueue 0 b echo 1 task_id b after a");
    ENQ("FCALL dtq_enqueue 0 c echo 1 task_id c after b on_failure dead_letter");
    ENQ("FCALL dtq_enqueue 0 d echo 1 task_id d after c");
    th_queue_groups(C, "b");
    th_queue_groups(C, "c");
    th_queue_groups(C, "d");
    status_is("d", "waiting");
    end_with("a", DEAD_, "", "dead_lettered");
    status_is("b", "cancelled");
    th_assert_field(C, "b", "last_error", "dependency_failed: a dead_lettered");
    status_is("c", "dead_lettered");
    th_assert_field(C, "c", "last_error", "dependency_failed: b cancelled");
    status_is("d", "cancelled");
    th_assert_field(C, "d", "last_error", "dependency_failed: c dead_lettered");
    th_assert_field(C, "d", "failed_by", "c");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 2);

    /* a requeued, then succeeds: b revived and released; c and d wait for b and c */
    th_expect_str(th_cmd(C, "FCALL dtq_requeue 0 a"), "queued");
    status_is("b", "cancelled");
    end_with("a", OK_, "1", "succeeded");
    status_is("b", "queued");
    status_is("c", "dead_lettered");
    end_with("b", OK_, "2", "succeeded");
    status_is("c", "queued"); /* revived: its dead letter gone */
    th_assert_field(C, "c", "dlq_entry", "");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "TTL dtq:task:c")), -1);
    status_is("d", "cancelled");
    end_with("c", OK_, "3", "succeeded");
    status_is("d", "queued");
    th_assert_field(C, "d", "parent_results", "{\"c\":3}");
}
END_TEST

START_TEST(test_cancel_waiting) {
    parent("pa");
    ENQ("FCALL dtq_enqueue 0 w echo 1 task_id w after pa");
    ENQ("FCALL dtq_enqueue 0 kids echo 1 task_id g after w on_failure run");
    ENQ("FCALL dtq_enqueue 0 kids echo 1 task_id g2 after w");
    th_expect_str(th_cmd(C, "FCALL dtq_cancel 0 w"), "cancelled");
    status_is("w", "cancelled");
    status_is("g", "queued");
    th_assert_field(C, "g", "deps_failed", "{\"w\":\"cancelled\"}");
    status_is("g2", "cancelled");
    th_assert_field(C, "g2", "last_error", "dependency_failed: w cancelled");
    th_expect_refused(th_cmd(C, "FCALL dtq_cancel 0 w"), "WRONG_STATE cancelled");
    /* its parent's success does not bring back a task cancelled by hand */
    end_with("pa", OK_, "", "succeeded");
    status_is("w", "cancelled");
    ck_assert_int_eq(kids_len(), 1);
}
END_TEST

START_TEST(test_requeued_parent_releases) {
    redisReply *r;
    parent("pa");
    parent("pb");
    child("c", "pa,pb", "cancel");
    child("c2", "pa", "dead_letter");
    child("c3", "pa", "run");
    child("c5", "pa", "dead_letter");
    end_with("pa", DEAD_, "", "dead_lettered");
    th_expect_str(th_cmd(C, "FCALL dtq_discard 0 c5"), "discarded"); /* never revived */
    status_is("c", "cancelled");
    status_is("c2", "dead_lettered");
    status_is("c3", "queued");
    ck_assert_int_eq(kids_len(), 1);
    ck_assert_int_gt(th_int(th_cmd(C, "TTL dtq:waiters:pa")), 0);
    end_with("pb", OK_, "\"b\"", "succeeded"); /* c is over: nothing */
    status_is("c", "cancelled");

    /* requeue_dlq: pa queued (its waiters kept, no TTL), c2 revived: waiting for pa */
    r = th_cmd(C, "FCALL dtq_requeue_dlq 0");
    ck_assert_int_eq(r->integer, 2);
    freeReplyObject(r);
    ck_assert_int_eq(th_int(th_cmd(C, "TTL dtq:waiters:pa")), -1);
    status_is("pa", "queued");
    status_is("c2", "waiting");
    th_assert_field(C, "c2", "dlq_entry", "");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 0);

    end_with("pa", OK_, "\"a\"", "succeeded");
    status_is("c", "queued"); /* revived with pb re-checked: done */
    th_assert_field(C, "c", "parent_results", "{\"pa\":\"a\",\"pb\":\"b\"}");
    ck_assert_ptr_null(field("c", "failed_by"));
    status_is("c2", "queued");
    status_is("c3", "queued"); /* released once only */
    status_is("c5", "dead_lettered");
    ck_assert_int_eq(kids_len(), 3);
}
END_TEST

START_TEST(test_refusals) {
    char many[2000] = "";
    redisReply *r;
    parent("pa");
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 kids echo 1 after pa,nope"),
                      "NOT_FOUND task nope (named by after) does not exist");
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 kids echo 1 after pa on_failure maybe"),
                      "INVALID_ARGUMENT on_failure must be");
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 kids echo 1 on_failure run"),
                      "INVALID_ARGUMENT on_failure needs after");
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 kids echo 1 after pa delay_ms 10"),
                      "INVALID_ARGUMENT delay_ms is refused with after");
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 kids echo 1 after pa,,pb"),
                      "INVALID_ARGUMENT after must be task ids");
    for (int i = 0; i < 101; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many), "%sx%d", i ? "," : "", i);
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 kids echo 1 after %s", many),
                      "INVALID_ARGUMENT after names more than 100 tasks");
    freeReplyObject(th_cmd(C, "FCALL dtq_queue_mode 0 tester lean lean"));
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 lean echo 1 after pa"),
                      "INVALID_ARGUMENT after is refused on lean queue lean");
    /* nothing was written by the refusals */
    ck_assert_int_eq(th_int(th_cmd(C, "SCARD dtq:waiters:pa")), 0);
    ck_assert_int_eq(kids_len(), 0);

    /* the cluster layout: a call in its queue's slot finds only that queue's tasks */
    r = th_cmd(C, "FCALL dtq_enqueue 1 {dtq:q1} q1 echo 1 task_id x1");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 1 {dtq:q1} q1 echo 1 after pa"),
                      "NOT_FOUND task pa (named by after) does not exist in the slot of queue "
                      "q1 (cluster layout: a task can wait only for tasks of its own queue)");
    r = th_cmd(C, "FCALL dtq_enqueue 1 {dtq:q1} q1 echo 1 task_id x2 after x1");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    th_expect_str(th_cmd(C, "HGET {dtq:q1}:task:x2 status"), "waiting");
    ck_assert_int_eq(th_int(th_cmd(C, "SISMEMBER {dtq:q1}:waiters:x1 x2")), 1);
}
END_TEST

START_TEST(test_results_bound) {
    size_t big = 40000;
    char *res = malloc(big + 3);
    cJSON *v;
    char *text;
    res[0] = '"';
    memset(res + 1, 'x', big);
    res[big + 1] = '"';
    res[big + 2] = '\0';
    parent("r1");
    parent("r2");
    parent("r3");
    child("c", "r1,r2,r3", NULL);
    end_with("r1", OK_, res, "succeeded");
    end_with("r2", OK_, res, "succeeded");
    {
        /* a result cut to result_max_bytes is not JSON: handed on as a string */
        redisReply *r = claim("r3");
        redisReply *f =
            finish_one("w1", r->element[0]->element[0], OK_, "{\"cut", DTQ_RESULT_TRUNCATED);
        freeReplyObject(f);
        freeReplyObject(r);
    }
    status_is("c", "queued");
    th_assert_field(C, "c", "parent_results_truncated", "1");
    text = field("c", "parent_results");
    v = cJSON_Parse(text);
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq((int)strlen(th_json_str(v, "r1")), (int)big);
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(v, "r2")));
    ck_assert_str_eq(th_json_str(v, "r3"), "{\"cut");
    cJSON_Delete(v);
    free(text);
    free(res);
}
END_TEST

START_TEST(test_task_view) {
    cJSON *v;
    char *text;
    parent("pa");
    parent("pb");
    child("c", "pa,pb", "run");
    end_with("pa", OK_, "{\"n\":1}", "succeeded");
    v = th_read_json(C, &text, "dtq_task_view 0 c");
    ck_assert_str_eq(th_json_str(v, "status"), "waiting");
    ck_assert_int_eq(th_json_int(v, "deps.pending"), 1);
    ck_assert_str_eq(th_json_str(v, "deps.on_failure"), "run");
    ck_assert_int_eq(th_json_size(v, "deps.parents"), 2);
    ck_assert_str_eq(th_json_str(v, "deps.parents.0.status"), "succeeded");
    ck_assert_str_eq(th_json_str(v, "deps.parents.1.status"), "queued");
    ck_assert_str_eq(th_json_str(v, "fields.after"), "pa,pb");
    cJSON_Delete(v);
    free(text);
    end_with("pb", DEAD_, "", "dead_lettered");
    v = th_read_json(C, &text, "dtq_task_view 0 c");
    ck_assert_str_eq(th_json_str(v, "status"), "queued");
    ck_assert_int_eq(th_json_int(v, "deps.parent_results.pa.n"), 1);
    cJSON_Delete(v);
    free(text);
}
END_TEST

int main(void) {
    Suite *s = suite_create("lua_deps");
    TCase *tc = tcase_create("deps");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_release_on_last_parent);
    tcase_add_test(tc, test_parents_already_done);
    tcase_add_test(tc, test_each_failure_kind);
    tcase_add_test(tc, test_cascade);
    tcase_add_test(tc, test_cancel_waiting);
    tcase_add_test(tc, test_requeued_parent_releases);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_results_bound);
    tcase_add_test(tc, test_task_view);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
