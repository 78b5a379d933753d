/* it_flow.c: workflows under real daemons (issue 29): batches made with dtqctl whose
 * members succeed, retry and fail while the daemons are SIGKILLed and restarted and Redis
 * restarts, each callback enqueued exactly once and run; a chain of 50 run in order, each
 * link given the result of the one before. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

static th_redis R;
static redisContext *C;

static void setup(void) {
    th_fixture_start(&R, &C, TH_PERSIST, NULL);
}

static void teardown(void) {
    th_fixture_stop(&R, &C);
}

static void start(th_daemon *d, const char *id) {
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "[worker]\nworker_id = %s\nheartbeat_interval_s = 1\nconcurrency = 8\nqueues = bq,cq\n"
             "visibility_timeout_s = 3\ndrain_timeout_s = 5\n"
             "[retry]\nbase_delay = 0.1\nmax_delay = 0.3\njitter = 0\n"
             "[scheduler]\ninterval_ms = 100\nleader_lock_ms = 2000\n"
             "[handler:echo]\nbuiltin = echo\n[handler:sleep]\nbuiltin = sleep\n"
             "[handler:fail]\nbuiltin = fail\n[handler:flaky]\nbuiltin = flaky\n"
             "[handler:noop]\nbuiltin = noop\n",
             id);
    th_daemon_start(d, &R, ini);
    th_daemon_wait_ready(C, id, 10000);
}

static void install(void) {
    char *out;
    ck_assert_int_eq(th_ctl(&R, &out, "functions install"), 0);
    free(out);
}

/* The batch's view (<ns>_batch_show), parsed (caller frees). */
static cJSON *batch(const char *bid) {
    return th_read_json(C, NULL, "dtq_batch_show 0 %s", bid);
}

static int batch_complete(void *arg) {
    redisContext *c = th_connect(&R);
    redisReply *r = redisCommand(c, "FCALL_RO dtq_batch_show 0 %s", (const char *)arg);
    int done = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "\"completed_at\"") &&
               strstr(r->str, "\"pending\":0");
    if (r) freeReplyObject(r);
    redisFree(c);
    return done;
}

/* The tasks whose batch_callback is `bid`, and of those, how many succeeded. */
static int callbacks_of(const char *bid, int *succeeded) {
    char cursor[32] = "0";
    int n = 0;
    *succeeded = 0;
    do {
        redisReply *r = th_cmd(C, "SCAN %s MATCH dtq:task:* COUNT 1000", cursor);
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            redisReply *h =
                th_cmd(C, "HMGET %s batch_callback status", r->element[1]->element[i]->str);
            if (h->element[0]->type == REDIS_REPLY_STRING && !strcmp(h->element[0]->str, bid)) {
                n++;
                if (h->element[1]->str && !strcmp(h->element[1]->str, "succeeded")) (*succeeded)++;
            }
            freeReplyObject(h);
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0"));
    return n;
}

/* A batch of `n` members from dtqctl: every 20th fails for good (dead-lettered), every 5th
 * succeeds at its second attempt, the rest sleep 30 ms and succeed; with `fails` 0 none fails. */
static void create_batch(const char *bid, int n, int fails) {
    char path[400], args[1024], *out;
    FILE *f;
    th_path(&R, bid, path, sizeof(path));
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < n; i++) {
        if (fails && i % 20 == 0)
            fprintf(f, "fail {\"message\":\"no %d\"}\n", i);
        else if (i % 5 == 1)
            fprintf(f, "flaky {\"succeed_on\":2}\n");
        else
            fprintf(f, "sleep {\"ms\":30}\n");
    }
    fclose(f);
    snprintf(args, sizeof(args),
             "batch create bq --id %s --on-success noop --on-complete echo "
             "--on-complete-payload '{\"note\":\"%s\"}' --max-attempts 10 < %s",
             bid, bid, path);
    ck_assert_int_eq(th_ctl(&R, &out, args), 0);
    ck_assert_msg(!strncmp(out, "batch ", 6), "%s", out);
    free(out);
}

START_TEST(test_batches_exactly_once_under_kills) {
    th_daemon a, b;
    cJSON *v;
    int ok, n;
    install();
    create_batch("big", 1000, 1);
    create_batch("good", 300, 0);
    start(&a, "w-a");
    start(&b, "w-b");
    /* the faults, while members run: each daemon SIGKILLed and replaced, Redis restarted */
    for (int round = 0; round < 3; round++) {
        usleep(400000);
        th_daemon_stop(round % 2 ? &b : &a, SIGKILL, 5000);
        start(round % 2 ? &b : &a, round % 2 ? "w-b" : "w-a");
    }
    th_redis_stop(&R);
    usleep(300000);
    th_redis_restart(&R);
    redisFree(C);
    C = th_connect(&R);
    usleep(300000);
    th_daemon_stop(&a, SIGKILL, 5000);
    start(&a, "w-a");

    ck_assert_msg(th_wait_until(batch_complete, (void *)"big", 120000), "batch big not complete");
    ck_assert_msg(th_wait_until(batch_complete, (void *)"good", 120000), "batch good not complete");
    v = batch("big");
    ck_assert_int_eq(th_json_int(v, "total"), 1000);
    ck_assert_int_eq(th_json_int(v, "pending"), 0);
    /* each member counted once, whatever its attempts: the counts add up to the total */
    ck_assert_int_eq(th_json_int(v, "succeeded") + th_json_int(v, "failed") +
                         th_json_int(v, "dead_lettered"),
                     1000);
    ck_assert_int_ge(th_json_int(v, "dead_lettered"), 50); /* the 50 that fail, at least */
    ck_assert_int_eq(th_json_size(v, "failed_ids"),
                     th_json_int(v, "failed") + th_json_int(v, "dead_lettered"));
    ck_assert_ptr_nonnull(cJSON_GetObjectItem(cJSON_GetObjectItem(v, "on_complete"), "task_id"));
    ck_assert_ptr_null(cJSON_GetObjectItem(cJSON_GetObjectItem(v, "on_success"), "task_id"));
    cJSON_Delete(v);
    v = batch("good");
    ck_assert_int_eq(th_json_int(v, "succeeded"), 300);
    ck_assert_ptr_nonnull(cJSON_GetObjectItem(cJSON_GetObjectItem(v, "on_success"), "task_id"));
    cJSON_Delete(v);

    /* exactly once, and run: one callback for big, two for good */
    for (int i = 0; i < 200; i++) {
        callbacks_of("big", &ok);
        n = ok;
        callbacks_of("good", &ok);
        if (n == 1 && ok == 2) break;
        usleep(100000);
    }
    ck_assert_int_eq(callbacks_of("big", &ok), 1);
    ck_assert_int_eq(ok, 1);
    ck_assert_int_eq(callbacks_of("good", &ok), 2);
    ck_assert_int_eq(ok, 2);
    ck_assert_int_eq(th_daemon_stop(&a, SIGTERM, 10000), 0);
    ck_assert_int_eq(th_daemon_stop(&b, SIGTERM, 10000), 0);
}
END_TEST

START_TEST(test_chain_of_50_in_order) {
    th_daemon d;
    char path[400], args[512], *out, *save = NULL, ids[50][64];
    FILE *f;
    int n = 0;
    install();
    th_path(&R, "chain.txt", path, sizeof(path));
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 50; i++) fprintf(f, "echo {\"i\":%d}\n", i);
    fclose(f);
    snprintf(args, sizeof(args), "chain cq < %s", path);
    ck_assert_int_eq(th_ctl(&R, &out, args), 0);
    for (char *t = strtok_r(out, "\n", &save); t && n < 50; t = strtok_r(NULL, "\n", &save))
        snprintf(ids[n++], sizeof(ids[0]), "%s", t);
    free(out);
    ck_assert_int_eq(n, 50);
    th_assert_field(C, ids[49], "status", "waiting");
    start(&d, "w-chain");
    th_expect_status(C, ids[49], "succeeded", 60000);
    for (int i = 1; i < 50; i++) {
        char *fin = th_task_field(C, ids[i - 1], "finished_at"),
             *st = th_task_field(C, ids[i], "started_at"),
             *pr = th_task_field(C, ids[i], "parent_results"), want[160];
        ck_assert_int_ge(atoll(st), atoll(fin)); /* in order: each after the one before ended */
        snprintf(want, sizeof(want), "{\"%.64s\":{\"i\":%d}}", ids[i - 1],
                 i - 1); /* echo's result */
        ck_assert_str_eq(pr, want);
        free(fin);
        free(st);
        free(pr);
    }
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* An exec program's progress (its descriptor 3, DTQ_PROGRESS_FD): stored in the task hash,
 * published as TASK_PROGRESS; a line that does not parse is ignored. */
START_TEST(test_exec_progress) {
    th_daemon d;
    char script[400], ini[2048], *p;
    FILE *f;
    cJSON *v;
    install();
    th_path(&R, "progress.sh", script, sizeof(script));
    f = fopen(script, "w");
    ck_assert_ptr_nonnull(f);
    fputs("#!/bin/sh\n[ \"$DTQ_PROGRESS_FD\" = 3 ] || exit 9\n"
          "echo 'not a fraction' >&3\necho '1.5 too far' >&3\necho '0.5 half way' >&3\n"
          "sleep 0.3\necho '{\"ok\":1}'\n",
          f);
    fclose(f);
    ck_assert_int_eq(chmod(script, 0755), 0);
    snprintf(ini, sizeof(ini),
             "[worker]\nworker_id = w-prog\nheartbeat_interval_s = 1\nqueues = pq\n"
             "[limits]\nevents_stream_maxlen = 1000\n[handler:report]\nexec = %s\n",
             script);
    th_daemon_start(&d, &R, ini);
    th_daemon_wait_ready(C, "w-prog", 10000);
    th_enqueue(C, "pq", "pr1", "report", "{}", NULL);
    th_expect_status(C, "pr1", "succeeded", 15000);
    p = th_task_field(C, "pr1", "progress");
    ck_assert_ptr_nonnull(p);
    v = cJSON_Parse(p);
    ck_assert_ptr_nonnull(v);
    ck_assert_double_eq_tol(th_json_num(v, "fraction"), 0.5, 1e-9);
    ck_assert_str_eq(th_json_str(v, "message"), "half way");
    cJSON_Delete(v);
    free(p);
    {
        redisReply *r = th_cmd(C, "XRANGE dtq:stream:events - +");
        int n = 0;
        for (size_t i = 0; i < r->elements; i++) {
            const char *e = th_entry_field(r->element[i], "event"); /* the event's JSON */
            if (e && strstr(e, "\"type\":\"TASK_PROGRESS\"") && strstr(e, "\"task_id\":\"pr1\""))
                n++;
        }
        freeReplyObject(r);
        ck_assert_int_eq(n, 1); /* the two bad lines reported nothing */
    }
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("flow");
    TCase *tc = tcase_create("flow");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_batches_exactly_once_under_kills);
    tcase_add_test(tc, test_chain_of_50_in_order);
    tcase_add_test(tc, test_exec_progress);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
