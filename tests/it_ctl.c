/* it_ctl.c: dtqctl against a real Redis with a running daemon: output, --json, and the
 * exit codes 0 (ok), 1 (refused / not found / unreachable) and 2 (usage). */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "harness.h"

static th_redis R;
static redisContext *C;
static th_daemon D;

static void setup(void) {
    th_redis_start(&R, 0);
    C = th_connect(&R);
    th_daemon_start(&D, &R,
                    "[worker]\nworker_id = w-ctl\n[handler:echo]\nbuiltin = echo\n"
                    "[handler:fail]\nbuiltin = fail\n");
    th_daemon_wait_ready(C, "w-ctl", 10000);
}

static void teardown(void) {
    th_daemon_stop(&D, SIGTERM, 10000);
    redisFree(C);
    th_redis_stop(&R);
}

/* Runs dtqctl with `args` (shell words, test-controlled); returns the exit code and the
 * output (stdout, then stderr) in *out. */
static int ctl(char **out, const char *args) {
    char cmd[2048], path[400];
    int status;
    th_path(&R, "ctl.out", path, sizeof(path));
    snprintf(cmd, sizeof(cmd), "DTQ_REDIS_URL='%s' %s %s >%s 2>&1 </dev/null", R.url, DTQCTL_BIN,
             args, path);
    status = system(cmd);
    *out = th_read_file(path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

START_TEST(test_enqueue_wait_and_show) {
    char *out;
    ck_assert_int_eq(ctl(&out, "enqueue default echo '{\"x\":1}' --priority 7 --wait"), 0);
    ck_assert_ptr_nonnull(strstr(out, "created"));
    ck_assert_ptr_nonnull(strstr(out, "succeeded"));
    ck_assert_ptr_nonnull(strstr(out, "{\"x\":1}"));
    {
        char id[37];
        ck_assert_int_eq(sscanf(out, "%36s created", id), 1);
        ck_assert_int_eq(strlen(id), 36); /* dtqctl mints UUIDv4 ids */
        ck_assert(id[14] == '4');
    }
    free(out);
    ck_assert_int_eq(ctl(&out, "--json enqueue default echo 5 --id my-task --wait"), 0);
    ck_assert_ptr_nonnull(strstr(out, "\"id\":\"my-task\""));
    ck_assert_ptr_nonnull(strstr(out, "\"result\":5"));
    free(out);
    ck_assert_int_eq(ctl(&out, "show my-task"), 0);
    ck_assert_ptr_nonnull(strstr(out, "succeeded"));
    free(out);
    ck_assert_int_eq(ctl(&out, "--json show my-task"), 0);
    ck_assert_ptr_nonnull(strstr(out, "\"status\":\"succeeded\""));
    free(out);
}
END_TEST

START_TEST(test_refusals_and_usage) {
    char *out;
    ck_assert_int_eq(ctl(&out, "show nope"), 1);
    ck_assert_ptr_nonnull(strstr(out, "NOT_FOUND"));
    free(out);
    ck_assert_int_eq(ctl(&out, "enqueue default echo '{bad'"), 1);
    ck_assert_ptr_nonnull(strstr(out, "INVALID_ARGUMENT"));
    free(out);
    ck_assert_int_eq(ctl(&out, "enqueue default echo 1 --id dup"), 0);
    free(out);
    ck_assert_int_eq(ctl(&out, "enqueue default echo 1 --id dup"), 1);
    ck_assert_ptr_nonnull(strstr(out, "ID_EXISTS"));
    free(out);
    ck_assert_int_eq(ctl(&out, "frobnicate"), 2);
    ck_assert_ptr_nonnull(strstr(out, "unknown command"));
    ck_assert_ptr_nonnull(strstr(out, "dtqctl --help"));
    free(out);
    ck_assert_int_eq(ctl(&out, "enqueue default"), 2);
    free(out);
    ck_assert_int_eq(ctl(&out, "enqueue default echo 1 --bogus 3"), 2);
    free(out);
    ck_assert_int_eq(ctl(&out, "-u unix:///nonexistent/redis.sock stats"), 1);
    ck_assert_ptr_nonnull(strstr(out, "cannot connect"));
    free(out);
    ck_assert_int_eq(ctl(&out, "--help"), 0);
    ck_assert_ptr_nonnull(strstr(out, "usage: dtqctl"));
    free(out);
}
END_TEST

START_TEST(test_dlq_queues_workers) {
    char *out;
    ck_assert_int_eq(ctl(&out, "enqueue default fail '{\"message\":\"nope\"}' --id f1 --wait"), 1);
    ck_assert_ptr_nonnull(strstr(out, "dead_lettered"));
    free(out);
    ck_assert_int_eq(ctl(&out, "dlq list"), 0);
    ck_assert_ptr_nonnull(strstr(out, "f1"));
    ck_assert_ptr_nonnull(strstr(out, "nope"));
    free(out);
    ck_assert_int_eq(ctl(&out, "--json dlq list --count 5"), 0);
    ck_assert_ptr_nonnull(strstr(out, "\"task_id\":\"f1\""));
    free(out);
    ck_assert_int_eq(ctl(&out, "dlq requeue f1"), 0);
    ck_assert_ptr_nonnull(strstr(out, "queued"));
    free(out);
    ck_assert(th_wait_status(C, "f1", "dead_lettered", 5000));
    ck_assert_int_eq(ctl(&out, "dlq discard f1"), 0);
    ck_assert_ptr_nonnull(strstr(out, "discarded"));
    free(out);
    ck_assert_int_eq(ctl(&out, "dlq purge"), 0);
    free(out);
    ck_assert_int_eq(ctl(&out, "pause default"), 0);
    ck_assert_ptr_nonnull(strstr(out, "paused"));
    free(out);
    ck_assert_int_eq(ctl(&out, "queues"), 0);
    ck_assert_ptr_nonnull(strstr(out, "default"));
    ck_assert_ptr_nonnull(strstr(out, "paused"));
    free(out);
    ck_assert_int_eq(ctl(&out, "--json queues"), 0);
    ck_assert_ptr_nonnull(strstr(out, "\"queue\":\"default\""));
    free(out);
    ck_assert_int_eq(ctl(&out, "resume default"), 0);
    free(out);
    ck_assert_int_eq(ctl(&out, "workers"), 0);
    ck_assert_ptr_nonnull(strstr(out, "w-ctl"));
    free(out);
    ck_assert_int_eq(ctl(&out, "--json stats"), 0);
    ck_assert_ptr_nonnull(strstr(out, "\"workers\":1"));
    free(out);
    {
        redisReply *r = th_cmd(C, "XREVRANGE dtq:stream:audit + - COUNT 1");
        ck_assert_str_eq(r->element[0]->element[1]->element[1]->str, "dtqctl");
        freeReplyObject(r);
    }
}
END_TEST

/* True once a client (dtqctl events) is subscribed to the events channel. */
static int events_subscribed(void *arg) {
    redisReply *r = th_cmd(C, "PUBSUB NUMSUB dtq:events");
    int ok = r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->integer > 0;
    (void)arg;
    freeReplyObject(r);
    return ok;
}

START_TEST(test_events_follow) {
    char path[400], cmd[1200], *out;
    th_path(&R, "events.out", path, sizeof(path));
    /* follow the channel in the background for a moment while a task runs */
    snprintf(cmd, sizeof(cmd), "DTQ_REDIS_URL='%s' timeout 2 %s events >%s 2>&1 &", R.url,
             DTQCTL_BIN, path);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_msg(th_wait_until(events_subscribed, NULL, 5000), "dtqctl events did not subscribe");
    ck_assert_int_eq(ctl(&out, "enqueue default echo 1 --id ev-task --wait"), 0);
    free(out);
    ck_assert_msg(th_wait_log(path, "\"type\":\"TASK_SUCCEEDED\"", 1, 5000), "no TASK_SUCCEEDED");
    out = th_read_file(path);
    ck_assert_msg(strstr(out, "\"type\":\"TASK_SUCCEEDED\"") != NULL, "events: %s", out);
    ck_assert_ptr_nonnull(strstr(out, "\"task_id\":\"ev-task\""));
    free(out);
}
END_TEST

int main(void) {
    Suite *s = suite_create("ctl");
    TCase *tc = tcase_create("dtqctl");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_enqueue_wait_and_show);
    tcase_add_test(tc, test_refusals_and_usage);
    tcase_add_test(tc, test_dlq_queues_workers);
    tcase_add_test(tc, test_events_follow);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
