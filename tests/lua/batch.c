/* batch.c: batches and chains (lua/lib/batch.lua, lua/fn/batch.lua): a batch's counts as
 * its members end each way, its callbacks enqueued exactly once (a member requeued after
 * the batch completed, a stale finish, two members ended by one call), open batches with
 * members added later, the `batch` option of <ns>_enqueue, refusals that write nothing,
 * and chains (each link after the one before, results passed on, a failed link ending the
 * rest). Against a real redis-server, without a daemon. */
#include "lua_suite.h"

/* A batch's JSON (dtq_batch_show), parsed (caller frees). */
static cJSON *show(const char *bid) {
    return th_read_json(C, NULL, "dtq_batch_show 0 %s", bid);
}

static void counts_are(const char *bid, int total, int pending, int ok, int failed, int dead) {
    cJSON *b = show(bid);
    ck_assert_int_eq(th_json_int(b, "total"), total);
    ck_assert_int_eq(th_json_int(b, "pending"), pending);
    ck_assert_int_eq(th_json_int(b, "succeeded"), ok);
    ck_assert_int_eq(th_json_int(b, "failed"), failed);
    ck_assert_int_eq(th_json_int(b, "dead_lettered"), dead);
    cJSON_Delete(b);
}

/* Claims `n` tasks of queue q (failing unless there are n), finishes each with `outcome`
 * in one call; the claimed ids into ids (when not NULL). */
static void run_n(const char *q, int n, enum dtq_outcome_kind outcome, char ids[][64]) {
    redisReply *r = fetch("w1", n, q), *f;
    dtq_finish_record recs[16];
    ck_assert_int_eq(r->element[0]->elements, n);
    for (int i = 0; i < n; i++) {
        recs[i] = th_finish_record(r->element[0]->element[i]);
        recs[i].outcome = outcome;
        recs[i].error = (char *)"boom";
        recs[i].error_class = "permanent";
        if (ids) snprintf(ids[i], 64, "%s", recs[i].task_id);
    }
    f = th_finish(C, "w1", recs, (size_t)n);
    for (int i = 0; i < n; i++) ck_assert_int_eq(f->element[i]->type, REDIS_REPLY_STRING);
    freeReplyObject(f);
    freeReplyObject(r);
}

/* The number of tasks of type `type` in queue q's default band (the callbacks). */
static int tasks_of_type(const char *q, const char *type) {
    redisReply *r = th_cmd(C, "XRANGE dtq:stream:%s:p5 - +", q);
    int n = 0;
    for (size_t i = 0; i < r->elements; i++) {
        char *t = field(th_entry_field(r->element[i], "task_id"), "task_type");
        if (t && !strcmp(t, type)) n++;
        free(t);
    }
    freeReplyObject(r);
    return n;
}

START_TEST(test_callbacks_exactly_once) {
    redisReply *r;
    char ids[3][64], *cb, *payload;
    cJSON *b, *p;
    th_queue_groups(C, "bq");
    /* members at priority 9, so that a fetch claims them before the callbacks (p5) */
    r = th_cmd(C, "FCALL dtq_batch 0 create bq 3 echo {\"n\":1} echo {\"n\":2} echo {\"n\":3} "
                  "batch_id b1 priority 9 on_success s_cb on_complete c_cb "
                  "on_complete_payload {\"order\":7}");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    ck_assert_int_eq(r->elements, 4);
    ck_assert_str_eq(r->element[0]->str, "b1");
    th_assert_field(C, r->element[1]->str, "batch", "b1");
    freeReplyObject(r);
    counts_are("b1", 3, 3, 0, 0, 0);

    run_n("bq", 2, OK_, NULL); /* two members end in one call */
    counts_are("b1", 3, 1, 2, 0, 0);
    ck_assert_int_eq(tasks_of_type("bq", "c_cb") + tasks_of_type("bq", "s_cb"), 0);

    run_n("bq", 1, DEAD_, ids); /* the last one is dead-lettered: complete, not success */
    counts_are("b1", 3, 0, 2, 0, 1);
    ck_assert_int_eq(tasks_of_type("bq", "c_cb"), 1);
    ck_assert_int_eq(tasks_of_type("bq", "s_cb"), 0);
    b = show("b1");
    ck_assert_int_gt(th_json_int(b, "completed_at"), 0);
    ck_assert_str_eq(th_json_str(b, "failed_ids.0"), ids[0]);
    cb = strdup(th_json_str(b, "on_complete.task_id"));
    cJSON_Delete(b);
    th_assert_field(C, cb, "batch_callback", "b1");
    payload = field(cb, "payload");
    p = cJSON_Parse(payload);
    ck_assert_int_eq(th_json_int(p, "order"), 7); /* the caller's payload, and the batch */
    ck_assert_str_eq(th_json_str(p, "batch.id"), "b1");
    ck_assert_int_eq(th_json_int(p, "batch.succeeded"), 2);
    ck_assert_int_eq(th_json_int(p, "batch.dead_lettered"), 1);
    ck_assert_str_eq(th_json_str(p, "batch.failed_ids.0"), ids[0]);
    ck_assert_str_eq(th_json_str(p, "batch.callback"), "on_complete");
    cJSON_Delete(p);
    free(payload);
    ck_assert_int_gt(th_int(th_cmd(C, "TTL dtq:batch:b1")), 0); /* kept for the retention */

    /* requeued and then succeeds: counts move, on_success fires, on_complete does not again */
    th_expect_str(th_cmd(C, "FCALL dtq_requeue 0 %s", ids[0]), "queued");
    run_n("bq", 1, OK_, NULL);
    counts_are("b1", 3, 0, 3, 0, 0);
    ck_assert_int_eq(tasks_of_type("bq", "c_cb"), 1);
    ck_assert_int_eq(tasks_of_type("bq", "s_cb"), 1);
    b = show("b1");
    ck_assert_int_eq(th_json_size(b, "failed_ids"), 0);
    ck_assert_str_eq(th_json_str(b, "on_complete.task_id"), cb);
    payload = field(th_json_str(b, "on_success.task_id"), "payload"); /* no caller's payload */
    ck_assert_msg(!strncmp(payload, "{\"batch\":{", 10) && strstr(payload, "\"failed_ids\":[]}") &&
                      strstr(payload, "\"callback\":\"on_success\""),
                  "%s", payload);
    free(payload);
    cJSON_Delete(b);
    free(cb);
}
END_TEST

START_TEST(test_open_add_close) {
    redisReply *r;
    th_queue_groups(C, "oq");
    r = th_cmd(C, "FCALL dtq_batch 0 create oq 1 echo {} batch_id b2 open 1 on_complete done");
    ck_assert_int_eq(r->elements, 2);
    freeReplyObject(r);
    run_n("oq", 1, OK_, NULL);
    counts_are("b2", 1, 0, 1, 0, 0); /* open: nothing pending, yet not complete */
    ck_assert_int_eq(tasks_of_type("oq", "done"), 0);
    /* "jobs within jobs": members added later, one by <ns>_batch add, one by enqueue's option */
    r = th_cmd(C, "FCALL dtq_batch 0 add b2 oq 1 echo {\"late\":1}");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    th_assert_field(C, r->element[0]->str, "batch", "b2");
    freeReplyObject(r);
    r = th_cmd(C, "FCALL dtq_enqueue 0 oq echo {} batch b2");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    counts_are("b2", 3, 2, 1, 0, 0);
    th_expect_str(th_cmd(C, "FCALL dtq_batch 0 close b2"), "closed");
    th_expect_str(th_cmd(C, "FCALL dtq_batch 0 close b2"), "closed"); /* again: the same */
    ck_assert_int_eq(tasks_of_type("oq", "done"), 0);
    /* one cancelled while queued: it counts as failed */
    run_n("oq", 1, OK_, NULL);
    r = th_cmd(C, "XRANGE dtq:stream:oq:p5 - +");
    ck_assert_int_eq(r->elements, 1);
    th_expect_str(th_cmd(C, "FCALL dtq_cancel 0 %s", th_entry_field(r->element[0], "task_id")),
                  "cancelled");
    freeReplyObject(r);
    counts_are("b2", 3, 0, 2, 1, 0);
    ck_assert_int_eq(tasks_of_type("oq", "done"), 1);
    /* complete: no more members */
    th_expect_refused(th_cmd(C, "FCALL dtq_batch 0 add b2 oq 1 echo {}"), "WRONG_STATE batch b2");
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 oq echo {} batch b2"), "WRONG_STATE batch b2");
    th_expect_str(th_cmd(C, "FCALL dtq_batch 0 close b2"), "complete");
}
END_TEST

START_TEST(test_refusals_write_nothing) {
    redisReply *r;
    th_expect_refused(th_cmd(C, "FCALL dtq_batch 0 create rq 2 echo {} echo nojson"),
                      "INVALID_ARGUMENT payload is not valid JSON");
    th_expect_refused(th_cmd(C, "FCALL dtq_batch 0 create rq 1 echo {} on_success s "
                                "on_success_payload [1]"),
                      "INVALID_ARGUMENT on_success_payload must be a JSON object");
    th_expect_refused(th_cmd(C, "FCALL dtq_batch 0 create rq 1 echo {} on_complete_payload {}"),
                      "INVALID_ARGUMENT on_complete_payload needs on_complete");
    th_expect_refused(th_cmd(C, "FCALL dtq_batch 0 create rq 3 echo {}"),
                      "INVALID_ARGUMENT n must");
    th_expect_refused(th_cmd(C, "FCALL dtq_batch 0 create rq 1 echo {} idempotency_key k"),
                      "INVALID_ARGUMENT unknown option idempotency_key");
    th_expect_refused(th_cmd(C, "FCALL dtq_batch 0 frobnicate"), "INVALID_ARGUMENT");
    th_expect_refused(th_cmd(C, "FCALL dtq_batch 0 add nob rq 1 echo {}"), "NOT_FOUND batch nob");
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 0 rq echo {} batch nob"), "NOT_FOUND batch nob");
    th_expect_refused(th_cmd(C, "FCALL_RO dtq_batch_show 0 nob"), "NOT_FOUND batch nob");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:rq:p5")), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:batches")), 0);
    r = th_cmd(C, "FCALL dtq_batch 0 create rq 1 echo {} batch_id dup");
    freeReplyObject(r);
    th_expect_refused(th_cmd(C, "FCALL dtq_batch 0 create rq 1 echo {} batch_id dup"),
                      "ID_EXISTS batch dup");
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:rq:p5")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD dtq:batches")), 1);
    /* the list: newest first, a gone batch left out of it and pruned by the next create */
    freeReplyObject(th_cmd(C, "FCALL dtq_batch 0 create rq 1 echo {} batch_id second"));
    freeReplyObject(th_cmd(C, "FCALL dtq_batch 0 create rq 1 echo {} batch_id third"));
    {
        cJSON *l = th_read_json(C, NULL, "dtq_batch_list 0 2");
        ck_assert_int_eq(th_json_size(l, "batches"), 2);
        ck_assert_str_eq(th_json_str(l, "batches.0.id"), "third");
        ck_assert_int_eq(th_json_int(l, "batches.1.total"), 1);
        ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(l, "more")));
        cJSON_Delete(l);
    }
    freeReplyObject(th_cmd(C, "DEL dtq:batch:dup"));
    {
        cJSON *l = th_read_json(C, NULL, "dtq_batch_list 0");
        ck_assert_int_eq(th_json_size(l, "batches"), 2); /* dup is gone */
        cJSON_Delete(l);
    }
    freeReplyObject(th_cmd(C, "FCALL dtq_batch 0 create rq 1 echo {} batch_id fourth"));
    {
        redisReply *z = th_cmd(C, "ZSCORE dtq:batches dup");
        ck_assert_int_eq(z->type, REDIS_REPLY_NIL); /* pruned */
        freeReplyObject(z);
    }
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD dtq:batches")), 3);
}
END_TEST

START_TEST(test_chain) {
    redisReply *r;
    char first[64], second[64], third[64], ids[1][64];
    cJSON *v;
    char *text;
    th_queue_groups(C, "cq");
    r = th_cmd(C, "FCALL dtq_chain 0 cq 3 echo {\"s\":1} echo {\"s\":2} echo {\"s\":3}");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    ck_assert_int_eq(r->elements, 3);
    snprintf(first, sizeof(first), "%s", r->element[0]->str);
    snprintf(second, sizeof(second), "%s", r->element[1]->str);
    snprintf(third, sizeof(third), "%s", r->element[2]->str);
    freeReplyObject(r);
    th_assert_field(C, first, "status", "queued");
    th_assert_field(C, second, "status", "waiting");
    th_assert_field(C, second, "after", first);
    th_assert_field(C, third, "after", second);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:cq:p5")), 1);

    r = fetch("w1", 1, "cq");
    {
        redisReply *f =
            finish_one("w1", r->element[0]->element[0], OK_, "{\"sum\":1}", DTQ_RESULT_FULL);
        freeReplyObject(f);
    }
    freeReplyObject(r);
    th_assert_field(C, second, "status", "queued"); /* released, with the result */
    v = th_read_json(C, &text, "dtq_task_view 0 %s", second);
    {
        char path[96];
        snprintf(path, sizeof(path), "deps.parent_results.%s.sum", first);
        ck_assert_int_eq(th_json_int(v, path), 1);
    }
    cJSON_Delete(v);
    free(text);
    run_n("cq", 1, DEAD_, ids);
    ck_assert_str_eq(ids[0], second);
    th_assert_field(C, third, "status", "cancelled"); /* the rest of the chain ends */
    th_assert_field(C, third, "last_error_class", "dependency_failed");

    /* a long chain in one call; a first link that waits for a task given with after */
    r = th_cmd(C,
               "FCALL dtq_chain 0 cq 50 " /* 50 pairs */
               "e {} e {} e {} e {} e {} e {} e {} e {} e {} e {} e {} e {} e {} e {} e {} "
               "e {} e {} e {} e {} e {} e {} e {} e {} e {} e {} e {} e {} e {} e {} e {} "
               "e {} e {} e {} e {} e {} e {} e {} e {} e {} e {} e {} e {} e {} e {} e {} "
               "e {} e {} e {} e {} e {} after %s",
               third);
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    ck_assert_int_eq(r->elements, 50);
    /* its first link waited for a cancelled task: on_failure cancel ended it, and the rest */
    th_assert_field(C, r->element[0]->str, "status", "cancelled");
    th_assert_field(C, r->element[49]->str, "status", "cancelled");
    freeReplyObject(r);
    th_expect_refused(th_cmd(C, "FCALL dtq_chain 0 cq 1 e {} delay_ms 5"),
                      "INVALID_ARGUMENT delay_ms is refused in a chain");
    th_expect_refused(th_cmd(C, "FCALL dtq_chain 0 cq 1 e {} after nosuch"),
                      "NOT_FOUND task nosuch");
}
END_TEST

/* The cluster layout: a batch and its members live in their queue's slot; another queue's
 * call does not find the batch, and says why; a chain too stays in its slot. */
START_TEST(test_cluster_layout) {
    redisReply *r = th_cmd(C, "FCALL dtq_batch 1 {dtq:cb} create cb 2 echo {} echo {} batch_id bc "
                              "on_complete done");
    char m1[64], m2[64];
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    snprintf(m1, sizeof(m1), "%s", r->element[1]->str);
    snprintf(m2, sizeof(m2), "%s", r->element[2]->str);
    freeReplyObject(r);
    th_expect_str(th_cmd(C, "HGET {dtq:cb}:batch:bc total"), "2");
    th_expect_str(th_cmd(C, "HGET {dtq:cb}:task:%s batch", m1), "bc");
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:batch:bc")), 0);
    th_expect_refused(th_cmd(C, "FCALL dtq_enqueue 1 {dtq:other} other echo {} batch bc"),
                      "NOT_FOUND batch bc does not exist in the slot of queue other (cluster "
                      "layout: a batch holds tasks of its own queue only)");
    th_expect_refused(th_cmd(C, "FCALL dtq_batch 1 {dtq:cb} add bc other 1 echo {}"),
                      "INVALID_ARGUMENT queue 'other'");
    /* both members cancelled in the slot: complete, the callback in the slot's queue */
    th_expect_str(th_cmd(C, "FCALL dtq_cancel 1 {dtq:cb} %s", m1), "cancelled");
    th_expect_str(th_cmd(C, "FCALL dtq_cancel 1 {dtq:cb} %s", m2), "cancelled");
    th_expect_str(th_cmd(C, "HGET {dtq:cb}:batch:bc failed"), "2");
    r = th_cmd(C, "HGET {dtq:cb}:batch:bc complete_task");
    ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
    th_expect_str(th_cmd(C, "HGET {dtq:cb}:task:%s task_type", r->str), "done");
    freeReplyObject(r);
    r = th_cmd(C, "FCALL dtq_chain 1 {dtq:cb} cb 2 echo {} echo {}");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    th_expect_str(th_cmd(C, "HGET {dtq:cb}:task:%s status", r->element[1]->str), "waiting");
    freeReplyObject(r);
}
END_TEST

/* A batch's progress: its ended members whole, its running ones by their last report. */
START_TEST(test_progress) {
    redisReply *r, *f;
    cJSON *b;
    char tid[64];
    th_queue_groups(C, "pg");
    freeReplyObject(th_cmd(C, "FCALL dtq_batch 0 create pg 4 echo {} echo {} echo {} echo {} "
                              "batch_id bp"));
    r = fetch("w1", 1, "pg");
    snprintf(tid, sizeof(tid), "%s", r->element[0]->element[0]->element[2]->str);
    th_expect_str(th_cmd(C, "FCALL dtq_progress 0 w1 %s 1 0.5 half", tid), "ok");
    b = show("bp");
    ck_assert_double_eq_tol(th_json_num(b, "progress"), 0.125, 1e-9); /* (0 + 0.5) / 4 */
    cJSON_Delete(b);
    th_expect_str(th_cmd(C, "FCALL dtq_progress 0 w1 %s 1 0.75 more", tid), "ok");
    b = show("bp");
    ck_assert_double_eq_tol(th_json_num(b, "progress"), 0.1875, 1e-9); /* the last report */
    cJSON_Delete(b);
    f = finish_one("w1", r->element[0]->element[0], OK_, "", DTQ_RESULT_NONE);
    freeReplyObject(f);
    freeReplyObject(r);
    b = show("bp");
    ck_assert_double_eq_tol(th_json_num(b, "progress"), 0.25, 1e-9); /* ended: whole */
    cJSON_Delete(b);
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:batch:bp:progress")), 0);
    run_n("pg", 3, OK_, NULL);
    b = show("bp");
    ck_assert_double_eq_tol(th_json_num(b, "progress"), 1.0, 1e-9);
    cJSON_Delete(b);
}
END_TEST

int main(void) {
    Suite *s = suite_create("lua_batch");
    TCase *tc = tcase_create("batch");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_callbacks_exactly_once);
    tcase_add_test(tc, test_open_add_close);
    tcase_add_test(tc, test_refusals_write_nothing);
    tcase_add_test(tc, test_chain);
    tcase_add_test(tc, test_cluster_layout);
    tcase_add_test(tc, test_progress);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
