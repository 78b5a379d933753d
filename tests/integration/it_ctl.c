/* it_ctl.c: dtqctl against a real Redis with a running daemon: output, --json, and the
 * exit codes 0 (ok), 1 (refused / not found / unreachable) and 2 (usage or configuration).
 * The "cluster_hash_tag" case runs every verb against a daemon whose keys are {dtq}:...,
 * with the setting given to dtqctl through DTQ_REDIS_CLUSTER_HASH_TAG or -c FILE. */
#include <check.h>
#include <cjson/cJSON.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static th_redis R;
static redisContext *C;
static th_daemon D;

static void setup(void) {
    th_fixture_start(&R, &C, 0, NULL);
    th_daemon_start(&D, &R,
                    "[worker]\nworker_id = w-ctl\n[handler:echo]\nbuiltin = echo\n"
                    "[handler:fail]\nbuiltin = fail\n");
    th_daemon_wait_ready(C, "w-ctl", 10000);
}

static void teardown(void) {
    th_daemon_stop(&D, SIGTERM, 10000);
    th_fixture_stop(&R, &C);
}

/* dtqctl told the URL and DTQ_REDIS_CLUSTER_HASH_TAG=true. */
static int tag(char **out, const char *args) {
    char env[600];
    snprintf(env, sizeof(env), "DTQ_REDIS_URL='%s' DTQ_REDIS_CLUSTER_HASH_TAG=true", R.url);
    return th_run_dtqctl(&R, out, env, args);
}

/* Fails unless `out` holds the line "<field padded to 18> <value>" that show prints. */
static void assert_shown(const char *out, const char *field, const char *value) {
    char line[512];
    snprintf(line, sizeof(line), "%-18s %s\n", field, value);
    ck_assert_msg(strstr(out, line) != NULL, "no '%s %s' in: %s", field, value, out);
}

/* enqueue-bulk with stdin from `input`: exit code, stdout in *out, stderr in *err. */
static int run_bulk(char **out, char **err, const char *input, const char *args) {
    char cmd[3072], in[400], o[400], e[400];
    FILE *f;
    int status;
    th_path(&R, "bulk.in", in, sizeof(in));
    th_path(&R, "bulk.out", o, sizeof(o));
    th_path(&R, "bulk.err", e, sizeof(e));
    f = fopen(in, "w");
    ck_assert_ptr_nonnull(f);
    fputs(input, f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "env DTQ_REDIS_URL='%s' %s %s <%s >%s 2>%s", R.url, DTQCTL_BIN, args,
             in, o, e);
    status = system(cmd);
    *out = th_read_file(o);
    *err = th_read_file(e);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

static char *hget(const char *key, const char *field) {
    redisReply *r = th_cmd(C, "HGET %s %s", key, field);
    char *v = r->type == REDIS_REPLY_STRING ? strdup(r->str) : NULL;
    freeReplyObject(r);
    return v;
}

/* Polls HGET key field until it equals want; returns 1 on success. */
static int wait_field(const char *key, const char *field, const char *want, int timeout_ms) {
    int64_t end = th_now_ms() + timeout_ms;
    while (th_now_ms() < end) {
        char *v = hget(key, field);
        int ok = v && !strcmp(v, want);
        free(v);
        if (ok) return 1;
        th_sleep_ms(20);
    }
    return 0;
}

/* th_wait_status for the {dtq}:task:<id> keys of the hash-tagged daemon. */
static int tag_wait_status(const char *id, const char *status, int timeout_ms) {
    char key[200];
    snprintf(key, sizeof(key), "{dtq}:task:%s", id);
    return wait_field(key, "status", status, timeout_ms);
}

START_TEST(test_enqueue_wait_and_show) {
    char *out;
    ck_assert_int_eq(th_ctl(&R, &out, "enqueue default echo '{\"x\":1}' --priority 7 --wait"), 0);
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
    ck_assert_int_eq(th_ctl(&R, &out, "--json enqueue default echo 5 --id my-task --wait"), 0);
    ck_assert_ptr_nonnull(strstr(out, "\"id\":\"my-task\""));
    ck_assert_ptr_nonnull(strstr(out, "\"result\":5"));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "show my-task"), 0);
    ck_assert_ptr_nonnull(strstr(out, "succeeded"));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "--json show my-task"), 0);
    ck_assert_ptr_nonnull(strstr(out, "\"status\":\"succeeded\""));
    free(out);
}
END_TEST

START_TEST(test_refusals_and_usage) {
    char *out;
    ck_assert_int_eq(th_ctl(&R, &out, "show nope"), 1);
    ck_assert_ptr_nonnull(strstr(out, "NOT_FOUND"));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "enqueue default echo '{bad'"), 1);
    ck_assert_ptr_nonnull(strstr(out, "INVALID_ARGUMENT"));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "enqueue default echo 1 --id dup"), 0);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "enqueue default echo 1 --id dup"), 1);
    ck_assert_ptr_nonnull(strstr(out, "ID_EXISTS"));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "frobnicate"), 2);
    ck_assert_ptr_nonnull(strstr(out, "unknown command"));
    ck_assert_ptr_nonnull(strstr(out, "dtqctl --help"));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "enqueue default"), 2);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "enqueue default echo 1 --bogus 3"), 2);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "-u unix:///nonexistent/redis.sock stats"), 1);
    ck_assert_ptr_nonnull(strstr(out, "cannot connect"));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "--help"), 0);
    ck_assert_ptr_nonnull(strstr(out, "usage: dtqctl"));
    free(out);
}
END_TEST

/* enqueue --after/--on-failure: the task waits for its parents (queue held: no daemon
 * serves it), and a parent's cancel lets it run (on_failure run); a parent that does not
 * exist is refused. */
START_TEST(test_enqueue_after) {
    char *out;
    ck_assert_int_eq(th_ctl(&R, &out, "enqueue held echo 1 --id dp1"), 0);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "enqueue held echo 1 --id dc1 --after dp1 --on-failure run"),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "dc1 created"));
    free(out);
    th_assert_field(C, "dc1", "status", "waiting");
    th_assert_field(C, "dc1", "after", "dp1");
    th_assert_field(C, "dc1", "on_failure", "run");
    ck_assert_int_eq(th_ctl(&R, &out, "enqueue held echo 1 --after dp1,nope"), 1);
    ck_assert_ptr_nonnull(strstr(out, "NOT_FOUND task nope"));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "enqueue held echo 1 --after dp1 --on-failure maybe"), 1);
    ck_assert_ptr_nonnull(strstr(out, "on_failure must be cancel, run or dead_letter"));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "enqueue held echo 1 --after"), 2);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "cancel dp1"), 0);
    free(out);
    th_assert_field(C, "dc1", "status", "queued");
}
END_TEST

/* enqueue --unique-for/--unique-key/--unique-mode: the holder's id for a duplicate, a
 * debounce of a waiting task (queue held: no daemon serves it), a bad mode refused. */
START_TEST(test_enqueue_unique) {
    char *out;
    ck_assert_int_eq(th_ctl(&R, &out, "enqueue held echo 1 --id du1 --unique-for 60"), 0);
    ck_assert_ptr_nonnull(strstr(out, "du1 created"));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "enqueue held echo 1 --unique-for 60"), 0);
    ck_assert_ptr_nonnull(strstr(out, "du1 duplicate"));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out,
                            "enqueue held echo 1 --id db1 --unique-for 60 --unique-key k "
                            "--unique-mode debounce"),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "db1 created"));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out,
                            "--json enqueue held echo 2 --unique-for 60 --unique-key k "
                            "--unique-mode debounce"),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "{\"task_id\":\"db1\",\"result\":\"debounced\"}"));
    free(out);
    th_assert_field(C, "db1", "payload", "2");
    th_assert_field(C, "db1", "status", "pending");
    ck_assert_int_eq(th_ctl(&R, &out, "enqueue held echo 1 --unique-for 60 --unique-mode once"), 1);
    ck_assert_ptr_nonnull(strstr(out, "unique_mode must be until_started, until_finished or"));
    free(out);
}
END_TEST

START_TEST(test_dlq_queues_workers) {
    char *out;
    ck_assert_int_eq(
        th_ctl(&R, &out, "enqueue default fail '{\"message\":\"nope\"}' --id f1 --wait"), 1);
    ck_assert_ptr_nonnull(strstr(out, "dead_lettered"));
    ck_assert_ptr_null(strstr(out, "warning")); /* w-ctl serves default */
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "dlq list"), 0);
    ck_assert_ptr_nonnull(strstr(out, "f1  default  fail  attempts=")); /* the queue shown */
    ck_assert_ptr_nonnull(strstr(out, "nope"));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "--json dlq list --count 5"), 0);
    ck_assert_ptr_nonnull(strstr(out, "\"task_id\":\"f1\""));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "dlq list --class timeout"), 0); /* another class */
    ck_assert_str_eq(out, "");
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "dlq list --class permanent"), 0);
    ck_assert_ptr_nonnull(strstr(out, "f1  default  fail"));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "dlq requeue f1"), 0);
    ck_assert_ptr_nonnull(strstr(out, "queued"));
    free(out);
    ck_assert(th_wait_status(C, "f1", "dead_lettered", 5000));
    ck_assert_int_eq(th_ctl(&R, &out, "dlq discard f1"), 0);
    ck_assert_ptr_nonnull(strstr(out, "discarded"));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "dlq purge"), 0);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "pause default"), 0);
    ck_assert_ptr_nonnull(strstr(out, "paused"));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "queues"), 0);
    ck_assert_ptr_nonnull(strstr(out, "default"));
    ck_assert_ptr_nonnull(strstr(out, "paused"));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "--json queues"), 0);
    ck_assert_ptr_nonnull(strstr(out, "\"queue\":\"default\""));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "resume default"), 0);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "workers"), 0);
    ck_assert_ptr_nonnull(strstr(out, "w-ctl"));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "--json stats"), 0);
    ck_assert_ptr_nonnull(strstr(out, "\"workers\":1"));
    free(out);
    {
        redisReply *r = th_cmd(C, "XREVRANGE dtq:stream:audit + - COUNT 1");
        ck_assert_str_eq(r->element[0]->element[1]->element[1]->str, "dtqctl");
        freeReplyObject(r);
    }
}
END_TEST

/* dlq requeue-all loops over <ns>_requeue_dlq's chunks (1000 per call) until all 2500 are
 * requeued. Their queue "parked" is not served, so none comes back while it loops. Also:
 * the daemon's setup put its served queue in dtq:queues. */
START_TEST(test_dlq_requeue_all_chunks) {
    char *out;
    redisReply *r;
    ck_assert_int_eq(th_int(th_cmd(C, "SISMEMBER dtq:queues default")), 1);
    for (int i = 1; i <= 2500; i++) {
        redisAppendCommand(C,
                           "HSET dtq:task:dl%d id dl%d queue parked task_type echo payload 1 "
                           "status dead_lettered attempt 1 priority 5 created_at 1 dlq_entry 1-%d",
                           i, i, i);
        redisAppendCommand(C, "XADD dtq:stream:dead-letter 1-%d task_id dl%d", i, i);
    }
    for (int i = 0; i < 5000; i++) {
        ck_assert_int_eq(redisGetReply(C, (void **)&r), REDIS_OK);
        ck_assert_int_ne(r->type, REDIS_REPLY_ERROR);
        freeReplyObject(r);
    }
    ck_assert_int_eq(th_ctl(&R, &out, "dlq requeue-all"), 0);
    ck_assert_str_eq(out, "requeued 2500 dead letters\n");
    free(out);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:dead-letter")), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:parked:p5")), 2500);
    th_assert_field(C, "dl2500", "status", "queued");
    ck_assert_int_eq(th_ctl(&R, &out, "--json dlq requeue-all"), 0);
    ck_assert_str_eq(out, "{\"requeued\":0}\n");
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "dlq requeue-all --json"), 0); /* --json after the verb */
    ck_assert_str_eq(out, "{\"requeued\":0}\n");
    free(out);
}
END_TEST

START_TEST(test_events_follow) {
    char path[400], cmd[1200], *out;
    th_path(&R, "events.out", path, sizeof(path));
    /* follow the channel in the background for a moment while a task runs */
    snprintf(cmd, sizeof(cmd), "DTQ_REDIS_URL='%s' timeout 2 %s events >%s 2>&1 &", R.url,
             DTQCTL_BIN, path);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_msg(th_wait_until(th_events_subscribed, C, 5000), "dtqctl events did not subscribe");
    ck_assert_int_eq(th_ctl(&R, &out, "enqueue default echo 1 --id ev-task --wait"), 0);
    free(out);
    ck_assert_msg(th_wait_log(path, "\"type\":\"TASK_SUCCEEDED\"", 1, 5000), "no TASK_SUCCEEDED");
    out = th_read_file(path);
    ck_assert_msg(strstr(out, "\"type\":\"TASK_SUCCEEDED\"") != NULL, "events: %s", out);
    ck_assert_ptr_nonnull(strstr(out, "\"task_id\":\"ev-task\""));
    free(out);
}
END_TEST

/* A config that does not load is one line and exit 2; no message ever shows a URL's
 * password. */
START_TEST(test_bad_config_and_secrets) {
    char path[400], args[600], *out;
    FILE *f;
    th_path(&R, "bad.ini", path, sizeof(path));
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("[redis]\nnamespace = jobs\ncluster_hash_tag = perhaps\n", f);
    fclose(f);
    snprintf(args, sizeof(args), "-c '%s' show x", path);
    ck_assert_int_eq(th_ctl(&R, &out, args), 2);
    ck_assert_int_eq(count_lines(out), 1);
    ck_assert_msg(!strncmp(out, "dtqctl: config error: ", 22), "%s", out);
    ck_assert_ptr_nonnull(strstr(out, path));
    ck_assert_ptr_nonnull(strstr(out, "[redis] cluster_hash_tag"));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "-c /nonexistent/worker.ini show x"), 2);
    ck_assert_int_eq(count_lines(out), 1);
    ck_assert_ptr_nonnull(
        strstr(out, "dtqctl: config error: /nonexistent/worker.ini: cannot open"));
    free(out);
    ck_assert_int_eq(tag(&out, "-c /nonexistent/worker.ini --help"), 0); /* help needs no config */
    free(out);
    snprintf(args, sizeof(args), "DTQ_REDIS_URL='%s' DTQ_REDIS_CLUSTER_HASH_TAG=perhaps", R.url);
    ck_assert_int_eq(th_run_dtqctl(&R, &out, args, "show x"), 2);
    ck_assert_int_eq(count_lines(out), 1);
    ck_assert_ptr_nonnull(strstr(out, "DTQ_REDIS_CLUSTER_HASH_TAG"));
    free(out);
    /* passwords: unreachable, malformed (-u), malformed (environment) */
    ck_assert_int_eq(th_ctl(&R, &out, "-u redis://u:s3cret@127.0.0.1:1/0 stats"), 1);
    ck_assert_ptr_nonnull(strstr(out, "cannot connect to Redis at 127.0.0.1:1:"));
    ck_assert_ptr_null(strstr(out, "s3cret"));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "-u redis://u:s3cret@127.0.0.1:99999/0 stats"), 2);
    ck_assert_ptr_nonnull(strstr(out, "bad Redis URL"));
    ck_assert_ptr_null(strstr(out, "s3cret"));
    free(out);
    ck_assert_int_eq(
        th_run_dtqctl(&R, &out, "DTQ_REDIS_URL=redis://:s3cret@127.0.0.1:99999", "stats"), 2);
    ck_assert_int_eq(count_lines(out), 1);
    ck_assert_ptr_null(strstr(out, "s3cret"));
    free(out);
    ck_assert_int_eq(th_run_dtqctl(&R, &out, "DTQ_REDIS_URL=redis://:s3cret@127.0.0.1:1", "stats"),
                     1);
    ck_assert_ptr_nonnull(strstr(out, "127.0.0.1:1"));
    ck_assert_ptr_null(strstr(out, "s3cret"));
    free(out);
}
END_TEST

/* ---- a daemon with [redis] cluster_hash_tag = true: keys are {dtq}:... ---- */

static void setup_tag(void) {
    th_fixture_start(&R, &C, 0, NULL);
    th_daemon_start(&D, &R,
                    "[redis]\ncluster_hash_tag = true\n[worker]\nworker_id = w-tag\n"
                    "[handler:echo]\nbuiltin = echo\n[handler:fail]\nbuiltin = fail\n");
    ck_assert_msg(wait_field("{dtq}:worker:w-tag", "status", "running", 10000),
                  "worker w-tag did not become ready");
}

START_TEST(test_tag_enqueue_show_cancel) {
    char *out;
    ck_assert_int_eq(tag(&out, "enqueue default echo '{\"x\":1}' --id t1"), 0);
    ck_assert_str_eq(out, "t1 created\n");
    free(out);
    ck_assert(tag_wait_status("t1", "succeeded", 5000));
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:task:t1")), 0);
    ck_assert_int_eq(tag(&out, "show t1"), 0);
    assert_shown(out, "id", "t1");
    assert_shown(out, "status", "succeeded");
    assert_shown(out, "queue", "default");
    assert_shown(out, "task_type", "echo");
    assert_shown(out, "payload", "{\"x\":1}");
    assert_shown(out, "result", "{\"x\":1}");
    free(out);
    ck_assert_int_eq(tag(&out, "--json show t1"), 0);
    ck_assert_ptr_nonnull(strstr(out, "\"status\":\"succeeded\""));
    ck_assert_ptr_nonnull(strstr(out, "\"result\":{\"x\":1}"));
    free(out);
    /* without the setting too: show reads through dtq_task_view, and the library the
     * daemon loaded names {dtq}:task:t1 */
    ck_assert_int_eq(th_ctl(&R, &out, "show t1"), 0);
    assert_shown(out, "id", "t1");
    free(out);

    ck_assert_int_eq(tag(&out, "enqueue default echo '{\"y\":2}' --id t2 --wait"), 0);
    ck_assert_msg(!strncmp(out, "t2 created\n", 11), "%s", out);
    ck_assert_ptr_null(strstr(out, "disappeared"));
    assert_shown(out, "status", "succeeded");
    assert_shown(out, "result", "{\"y\":2}");
    free(out);
    ck_assert_int_eq(tag(&out, "--json enqueue default echo 5 --id t3 --wait"), 0);
    ck_assert_ptr_nonnull(strstr(out, "\"id\":\"t3\""));
    ck_assert_ptr_nonnull(strstr(out, "\"result\":5"));
    free(out);

    /* a delayed task stays pending until cancelled */
    ck_assert_int_eq(tag(&out, "enqueue default echo 1 --id c1 --delay-ms 600000"), 0);
    free(out);
    ck_assert(tag_wait_status("c1", "pending", 1000));
    ck_assert_int_eq(tag(&out, "cancel c1"), 0);
    ck_assert_str_eq(out, "cancelled\n");
    free(out);
    ck_assert(tag_wait_status("c1", "cancelled", 1000));
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD {dtq}:retry:schedule")), 0);
    ck_assert_int_eq(tag(&out, "cancel c1"), 1);
    ck_assert_ptr_nonnull(strstr(out, "WRONG_STATE cancelled"));
    free(out);
}
END_TEST

START_TEST(test_tag_dlq) {
    char *out;
    ck_assert_int_eq(tag(&out, "enqueue default fail '{\"message\":\"nope\"}' --id f1 --wait"), 1);
    ck_assert_ptr_null(strstr(out, "disappeared"));
    assert_shown(out, "status", "dead_lettered");
    free(out);
    ck_assert_int_eq(tag(&out, "dlq list"), 0);
    ck_assert_msg(!strncmp(out, "f1  default  fail  attempts=", 28), "%s", out);
    ck_assert_ptr_nonnull(strstr(out, "nope"));
    ck_assert_int_eq(count_lines(out), 1);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "dlq list"), 0); /* dtq_dead_letters: the library's keys */
    ck_assert_msg(!strncmp(out, "f1  default  fail  attempts=", 28), "%s", out);
    free(out);
    ck_assert_int_eq(tag(&out, "--json dlq list --count 5"), 0);
    ck_assert_ptr_nonnull(strstr(out, "\"task_id\":\"f1\""));
    free(out);
    ck_assert_int_eq(tag(&out, "dlq requeue f1"), 0);
    ck_assert_str_eq(out, "queued\n");
    free(out);
    ck_assert(tag_wait_status("f1", "dead_lettered", 5000));
    ck_assert_int_eq(tag(&out, "dlq discard f1"), 0);
    ck_assert_str_eq(out, "discarded\n");
    free(out);
    ck_assert_int_eq(tag(&out, "dlq list"), 0);
    ck_assert_str_eq(out, "");
    free(out);

    ck_assert_int_eq(tag(&out, "enqueue default fail '{\"message\":\"a\"}' --id f2 --wait"), 1);
    free(out);
    ck_assert_int_eq(tag(&out, "enqueue default fail '{\"message\":\"b\"}' --id f3 --wait"), 1);
    free(out);
    ck_assert_int_eq(tag(&out, "dlq requeue-all"), 0);
    ck_assert_str_eq(out, "requeued 2 dead letters\n");
    free(out);
    ck_assert(tag_wait_status("f2", "dead_lettered", 5000));
    ck_assert(tag_wait_status("f3", "dead_lettered", 5000));
    ck_assert_int_eq(tag(&out, "dlq list"), 0);
    ck_assert_int_eq(count_lines(out), 2);
    free(out);
    ck_assert_int_eq(tag(&out, "dlq purge"), 0);
    ck_assert_str_eq(out, "purged 2 dead letters\n");
    free(out);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN {dtq}:stream:dead-letter")), 0);
    {
        redisReply *r = th_cmd(C, "XREVRANGE {dtq}:stream:audit + - COUNT 1");
        ck_assert_str_eq(r->element[0]->element[1]->element[1]->str, "dtqctl");
        ck_assert_str_eq(r->element[0]->element[1]->element[3]->str, "purge_dlq");
        freeReplyObject(r);
    }
}
END_TEST

START_TEST(test_tag_queues_workers_stats) {
    char *out, row[200];
    ck_assert_int_eq(tag(&out, "enqueue default echo 1 --id q1 --wait"), 0);
    free(out);
    ck_assert_int_eq(tag(&out, "enqueue default echo 1 --id s1 --delay-ms 600000"), 0);
    free(out);
    ck_assert_int_eq(tag(&out, "pause default"), 0);
    ck_assert_str_eq(out, "paused\n");
    free(out);
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS {dtq}:queue:default:paused")), 1);
    /* SCHEDULED counts {dtq}:retry:schedule by the queue in each {dtq}:task:<id> */
    ck_assert_int_eq(tag(&out, "queues"), 0);
    snprintf(row, sizeof(row), "%-24s %10d %10d %10d %s\n", "default", 0, 0, 1, "paused");
    ck_assert_msg(strstr(out, row) != NULL, "no row '%s' in: %s", row, out);
    free(out);
    ck_assert_int_eq(tag(&out, "--json queues"), 0);
    ck_assert_str_eq(out, "[{\"queue\":\"default\",\"depth\":0,\"pending\":0,\"scheduled\":1,"
                          "\"paused\":true,\"mode\":\"full\"}]\n");
    free(out);
    ck_assert_int_eq(tag(&out, "resume default"), 0);
    ck_assert_str_eq(out, "resumed\n");
    free(out);
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS {dtq}:queue:default:paused")), 0);
    ck_assert_int_eq(tag(&out, "queues"), 0);
    snprintf(row, sizeof(row), "%-24s %10d %10d %10d %s\n", "default", 0, 0, 1, "");
    ck_assert_msg(strstr(out, row) != NULL, "no row '%s' in: %s", row, out);
    free(out);

    ck_assert_int_eq(tag(&out, "workers"), 0);
    ck_assert_ptr_nonnull(strstr(out, "WORKER"));
    ck_assert_msg(strstr(out, "\nw-tag ") != NULL, "%s", out);
    ck_assert_ptr_nonnull(strstr(out, " running\n"));
    ck_assert_int_eq(count_lines(out), 2);
    free(out);
    ck_assert_int_eq(tag(&out, "--json workers"), 0);
    ck_assert_ptr_nonnull(strstr(out, "\"worker_id\":\"w-tag\""));
    ck_assert_ptr_nonnull(strstr(out, "\"status\":\"running\""));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "workers"), 0); /* dtq_workers: the library's keys */
    ck_assert_msg(strstr(out, "\nw-tag ") != NULL, "%s", out);
    free(out);

    ck_assert_int_eq(tag(&out, "stats"), 0);
    snprintf(row, sizeof(row), "%-32s %d\n", "workers", 1);
    ck_assert_msg(strstr(out, row) != NULL, "%s", out);
    snprintf(row, sizeof(row), "%-32s %d\n", "scheduled", 1);
    ck_assert_msg(strstr(out, row) != NULL, "%s", out);
    free(out);
    ck_assert_int_eq(tag(&out, "--json stats"), 0);
    ck_assert_ptr_nonnull(strstr(out, "\"queues\":{\"default\":{\"depth\":0,")); /* nested */
    ck_assert_ptr_nonnull(strstr(out, "\"scheduled\":1"));
    ck_assert_ptr_nonnull(strstr(out, "\"workers\":1"));
    free(out);
}
END_TEST

START_TEST(test_tag_events) {
    int fds[2], status;
    pid_t pid;
    struct pollfd pfd;
    FILE *f;
    char line[4096], *out;
    cJSON *ev;
    int64_t end;
    ck_assert_int_eq(pipe(fds), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(fds[1], STDOUT_FILENO);
        dup2(fds[1], STDERR_FILENO);
        close(fds[0]);
        close(fds[1]);
        unsetenv("DTQ_REDIS_NAMESPACE");
        setenv("DTQ_REDIS_URL", R.url, 1);
        setenv("DTQ_REDIS_CLUSTER_HASH_TAG", "true", 1);
        execl(DTQCTL_BIN, "dtqctl", "events", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    /* subscribed: the {dtq}:events channel has a subscriber */
    end = th_now_ms() + 5000;
    for (;;) {
        redisReply *r = th_cmd(C, "PUBSUB NUMSUB {dtq}:events");
        long long n = r->element[1]->integer;
        freeReplyObject(r);
        if (n == 1) break;
        ck_assert_msg(th_now_ms() < end, "dtqctl events did not subscribe to {dtq}:events");
        th_sleep_ms(20);
    }
    ck_assert_int_eq(tag(&out, "enqueue default echo 1 --id ev1"), 0);
    free(out);
    pfd.fd = fds[0];
    pfd.events = POLLIN;
    ck_assert_msg(poll(&pfd, 1, 5000) == 1, "no event within 5 s");
    f = fdopen(fds[0], "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
    kill(pid, SIGTERM);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    fclose(f);
    ev = cJSON_Parse(line);
    ck_assert_msg(ev != NULL, "not JSON: %s", line);
    ck_assert_str_eq(cJSON_GetObjectItem(ev, "type")->valuestring, "TASK_QUEUED");
    ck_assert_str_eq(cJSON_GetObjectItem(ev, "task_id")->valuestring, "ev1");
    ck_assert_str_eq(cJSON_GetObjectItem(ev, "queue")->valuestring, "default");
    cJSON_Delete(ev);
}
END_TEST

/* dtqctl -c on the daemon's own file: url, namespace and cluster_hash_tag all come from it
 * (no DTQ_REDIS_* in the environment); the environment, -n and -u still override it. */
START_TEST(test_config_file) {
    th_daemon d;
    char args[800], *out;
    th_daemon_start(&d, &R,
                    "[redis]\nnamespace = jobs\ncluster_hash_tag = true\n"
                    "[worker]\nworker_id = w-jobs\n[handler:echo]\nbuiltin = echo\n");
    ck_assert_msg(wait_field("{jobs}:worker:w-jobs", "status", "running", 10000),
                  "worker w-jobs did not become ready");
    snprintf(args, sizeof(args), "-c '%s' enqueue default echo 7 --id j1 --wait", d.cfg);
    ck_assert_int_eq(th_run_dtqctl(&R, &out, "", args), 0);
    ck_assert_msg(!strncmp(out, "j1 created\n", 11), "%s", out);
    assert_shown(out, "status", "succeeded");
    free(out);
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS {jobs}:task:j1")), 1);
    snprintf(args, sizeof(args), "-c '%s' show j1", d.cfg);
    ck_assert_int_eq(th_run_dtqctl(&R, &out, "", args), 0);
    assert_shown(out, "id", "j1");
    assert_shown(out, "status", "succeeded");
    assert_shown(out, "task_type", "echo");
    assert_shown(out, "result", "7");
    free(out);
    snprintf(args, sizeof(args), "-c '%s' workers", d.cfg);
    ck_assert_int_eq(th_run_dtqctl(&R, &out, "", args), 0);
    ck_assert_ptr_nonnull(strstr(out, "w-jobs"));
    ck_assert_ptr_null(strstr(out, "w-tag"));
    free(out);
    snprintf(args, sizeof(args), "-c '%s' --json stats", d.cfg);
    ck_assert_int_eq(th_run_dtqctl(&R, &out, "", args), 0); /* FCALL_RO jobs_stats */
    ck_assert_ptr_nonnull(strstr(out, "\"workers\":1"));
    free(out);
    snprintf(args, sizeof(args), "-c '%s' -n dtq show j1", d.cfg);
    ck_assert_int_eq(th_run_dtqctl(&R, &out, "", args), 1); /* {dtq}:task:j1 */
    ck_assert_ptr_nonnull(strstr(out, "NOT_FOUND"));
    free(out);
    /* the environment's cluster_hash_tag over the file's: the prefix dtqctl names keys
     * with (its reads go through the library, whose prefix is the daemon's) */
    snprintf(args, sizeof(args), "-c '%s' acl monitor", d.cfg);
    ck_assert_int_eq(th_run_dtqctl(&R, &out, "DTQ_REDIS_CLUSTER_HASH_TAG=false", args), 0);
    ck_assert_msg(strstr(out, " %R~jobs:* ") != NULL, "%s", out);
    ck_assert_ptr_null(strstr(out, "{jobs}"));
    free(out);
    ck_assert_int_eq(th_run_dtqctl(&R, &out, "", args), 0);
    ck_assert_msg(strstr(out, " %R~{jobs}:* ") != NULL, "%s", out);
    free(out);
    snprintf(args, sizeof(args), "-c '%s' -u unix:///nonexistent/redis.sock show j1", d.cfg);
    ck_assert_int_eq(th_run_dtqctl(&R, &out, "", args), 1);
    ck_assert_ptr_nonnull(strstr(out, "cannot connect to Redis at /nonexistent/redis.sock"));
    free(out);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* enqueue-bulk: one payload per line of stdin, chunks of 1000 per Function call, one
 * output line per task, a refused line named on stderr with exit 1, the rest created. */
START_TEST(test_enqueue_bulk_from_stdin) {
    size_t cap = 2600 * 16;
    char *input = calloc(1, cap), *out, *err;
    size_t len = 0;
    int rc;
    for (int i = 1; i <= 2500; i++)
        len +=
            (size_t)snprintf(input + len, cap - len, i == 1234 ? "{broken\n" : "{\"n\":%d}\n", i);
    freeReplyObject(th_cmd(C, "FCALL dtq_pause 0 bulk tester create"));
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:queue:bulk:paused")), 1);
    rc = run_bulk(&out, &err, input, "enqueue-bulk bulk echo --priority 3");
    ck_assert_int_eq(rc, 1);
    ck_assert_int_eq(count_lines(out), 2499);
    {
        /* each line is "<task id> created", from the flat reply of the Function */
        char id[65] = "";
        ck_assert_int_eq(sscanf(out, "%64s", id), 1);
        ck_assert_int_eq(strncmp(out + strlen(id), " created\n", 9), 0);
        th_assert_field(C, id, "queue", "bulk");
    }
    ck_assert_ptr_nonnull(strstr(err, "line 1234: INVALID_ARGUMENT payload is not valid JSON"));
    /* and, as no daemon runs here, the warning that no live worker serves the queue */
    ck_assert_ptr_nonnull(strstr(err, "dtqctl: warning: no live worker serves queue 'bulk' (1 "
                                      "worker live): the task waits until one does\n"));
    ck_assert_int_eq(count_lines(err), 2);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:bulk:p3")), 2499);
    free(out);
    free(err);
    rc = run_bulk(&out, &err, "{\"a\":1}\n\n{\"a\":2}\n", "--json enqueue-bulk bulk echo");
    ck_assert_int_eq(rc, 0);
    ck_assert_ptr_nonnull(strstr(out, "\"line\":3,\"task_id\":"));
    ck_assert_ptr_nonnull(strstr(out, "\"result\":\"created\""));
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:bulk:p5")), 2);
    free(out);
    free(err);
    free(input);
}
END_TEST

/* --help lists exactly the verb table's rows, in its order; each listed verb is dispatched
 * (a wrong argument count is its own usage line from the table, exit 2, not "unknown
 * command"). */
START_TEST(test_help_is_the_table) {
    static const struct {
        const char *verb, *wrong, *usage;
    } want[] = {
        {"enqueue", "enqueue q", "usage: dtqctl enqueue <queue> <task_type> <payload> [options]"},
        {"enqueue-bulk", "enqueue-bulk q",
         "usage: dtqctl enqueue-bulk <queue> <task_type> [options]"},
        {"chain", "chain", "usage: dtqctl chain <queue> [options]"},
        {"batch create", "batch create", "usage: dtqctl batch create <queue> [options]"},
        {"batch add", "batch add x", "usage: dtqctl batch add <batch_id> <queue> [options]"},
        {"batch close", "batch close", "usage: dtqctl batch close <batch_id> [options]"},
        {"batch list", "batch list a b c d", "usage: dtqctl batch list [options]"},
        {"batch show", "batch show", "usage: dtqctl batch show <batch_id> [options]"},
        {"show", "show", "usage: dtqctl show <id> [options]"},
        {"cancel", "cancel a b", "usage: dtqctl cancel <id> [options]"},
        {"dlq list", NULL, NULL},
        {"dlq requeue", "dlq requeue", "usage: dtqctl dlq requeue <id> [options]"},
        {"dlq requeue-all", "dlq requeue-all x", "usage: dtqctl dlq requeue-all"},
        {"dlq discard", "dlq discard a b", "usage: dtqctl dlq discard <id> [options]"},
        {"dlq purge", "dlq purge x", "usage: dtqctl dlq purge"},
        {"scheduled list", NULL, NULL},
        {"scheduled run-now", "scheduled run-now",
         "usage: dtqctl scheduled run-now <id> [options]"},
        {"scheduled delete", "scheduled delete a b",
         "usage: dtqctl scheduled delete <id> [options]"},
        {"queues", "queues x", "usage: dtqctl queues"},
        {"queue clear", "queue clear", "usage: dtqctl queue clear <queue> [options]"},
        {"queue remove", "queue remove", "usage: dtqctl queue remove <queue>"},
        {"queue mode", "queue mode q", "usage: dtqctl queue mode <queue> lean|full"},
        {"pause", "pause", "usage: dtqctl pause <queue> [options]"},
        {"resume", "resume a b c", "usage: dtqctl resume <queue> [options]"},
        {"cron add", "cron add a b",
         "usage: dtqctl cron add NAME SPEC QUEUE TASK_TYPE PAYLOAD [options]"},
        {"cron list", "cron list a b", "usage: dtqctl cron list [options]"},
        {"cron remove", "cron remove", "usage: dtqctl cron remove NAME [options]"},
        {"cron pause", "cron pause a b", "usage: dtqctl cron pause NAME [options]"},
        {"cron resume", "cron resume", "usage: dtqctl cron resume NAME [options]"},
        {"cron run", "cron run", "usage: dtqctl cron run NAME [options]"},
        {"limit set", "limit set", "usage: dtqctl limit set <target> [options]"},
        {"limit list", "limit list a b", "usage: dtqctl limit list [options]"},
        {"limit remove", "limit remove", "usage: dtqctl limit remove <target>"},
        {"pool restart", "pool restart", "usage: dtqctl pool restart NAME"},
        {"workers", "workers x", "usage: dtqctl workers"},
        {"events", "events x", "usage: dtqctl events"},
        {"stats", "stats x", "usage: dtqctl stats"},
        {"functions install", "functions install x", "usage: dtqctl functions install"},
        {"acl", "acl", "usage: dtqctl acl ROLE..."},
    };
    size_t n = sizeof(want) / sizeof(want[0]), i = 0;
    char *out, *p, *end;
    ck_assert_int_eq(th_ctl(&R, &out, "--help"), 0);
    p = strstr(out, "\ncommands:\n");
    ck_assert_ptr_nonnull(p);
    p += strlen("\ncommands:\n");
    end = strstr(p, "\n\n");
    ck_assert_ptr_nonnull(end);
    /* a verb's line starts with two spaces and a letter; deeper lines continue it */
    for (char *line = p; line < end; line = strchr(line, '\n') + 1) {
        char verb[64], w1[32], w2[32];
        if (strncmp(line, "  ", 2) || line[2] == ' ') continue;
        ck_assert_int_ge(sscanf(line, "%31s %31s", w1, w2), 1);
        if (!strcmp(w1, "dlq") || !strcmp(w1, "functions") || !strcmp(w1, "scheduled") ||
            !strcmp(w1, "queue") || !strcmp(w1, "cron") || !strcmp(w1, "limit") ||
            !strcmp(w1, "pool") || !strcmp(w1, "batch"))
            snprintf(verb, sizeof(verb), "%s %s", w1, w2);
        else
            snprintf(verb, sizeof(verb), "%s", w1);
        ck_assert_msg(i < n, "--help lists more verbs than the table: %s", verb);
        ck_assert_str_eq(verb, want[i].verb);
        i++;
    }
    ck_assert_int_eq(i, n);
    free(out);
    for (i = 0; i < n; i++) {
        char line[200];
        if (!want[i].wrong) continue; /* dlq list takes any count of words (its options) */
        ck_assert_int_eq(th_ctl(&R, &out, want[i].wrong), 2);
        snprintf(line, sizeof(line), "dtqctl: %s\nTry 'dtqctl --help'.\n", want[i].usage);
        ck_assert_str_eq(out, line);
        free(out);
    }
    ck_assert_int_eq(th_ctl(&R, &out, "dlq"), 2);
    ck_assert_str_eq(out, "dtqctl: usage: dtqctl dlq list|requeue|requeue-all|discard|purge\n"
                          "Try 'dtqctl --help'.\n");
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "dlq requeue-al"), 2);
    ck_assert_ptr_nonnull(
        strstr(out, "dtqctl: unknown dlq command 'requeue-al'; did you mean 'dlq requeue-all'?\n"));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "queus"), 2);
    ck_assert_ptr_nonnull(strstr(out, "dtqctl: unknown command 'queus'; did you mean 'queues'?\n"));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "frobnicate"), 2); /* nothing close: no suggestion */
    ck_assert_str_eq(out, "dtqctl: unknown command 'frobnicate'\nTry 'dtqctl --help'.\n");
    free(out);
    /* under --json the error is JSON too, wherever --json stands */
    ck_assert_int_eq(th_ctl(&R, &out, "show nosuch --json"), 1);
    ck_assert_msg(!strncmp(out, "{\"error\":\"", 10) && strstr(out, "NOT_FOUND") &&
                      strstr(out, "\"exit\":1}\n"),
                  "%s", out);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "--json queus"), 2);
    ck_assert_str_eq(
        out, "{\"error\":\"unknown command 'queus'; did you mean 'queues'?\",\"exit\":2}\n");
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "dlq list --count 0"), 2);
    ck_assert_ptr_nonnull(strstr(out, "dtqctl: dlq list: bad argument '--count'\n"));
    free(out);
}
END_TEST

/* dlq list pages through <ns>_dead_letters (500 per call at most), oldest first, with
 * whole values (field_max 0), the same lines and --json array as one XRANGE gave. */
START_TEST(test_dlq_list_pages) {
    char *out, *big = malloc(3001), line[200];
    cJSON *arr, *e;
    redisReply *r;
    memset(big, 'x', 3000);
    big[3000] = 0;
    for (int i = 1; i <= 1203; i++)
        redisAppendCommand(C,
                           "XADD dtq:stream:dead-letter 1-%d task_id dl%d queue q task_type echo "
                           "attempts_made %d last_error e%d payload %s",
                           i, i, i % 7, i, big);
    for (int i = 1; i <= 1203; i++) {
        ck_assert_int_eq(redisGetReply(C, (void **)&r), REDIS_OK);
        ck_assert_int_ne(r->type, REDIS_REPLY_ERROR);
        freeReplyObject(r);
    }
    ck_assert_int_eq(th_ctl(&R, &out, "dlq list"), 0);
    ck_assert_int_eq(count_lines(out), 20);
    ck_assert_msg(!strncmp(out, "dl1  q  echo  attempts=1  e1\n", 29), "%s", out);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "dlq list --count 1100"), 0);
    ck_assert_int_eq(count_lines(out), 1100);
    ck_assert_msg(!strncmp(out, "dl1  q  echo  attempts=1  e1\n", 29), "%.200s", out);
    snprintf(line, sizeof(line), "\ndl501  q  echo  attempts=%d  e501\n", 501 % 7);
    ck_assert_ptr_nonnull(strstr(out, line));
    snprintf(line, sizeof(line), "\ndl1100  q  echo  attempts=%d  e1100\n", 1100 % 7);
    ck_assert_ptr_nonnull(strstr(out, line));
    ck_assert_ptr_null(strstr(out, "dl1101 "));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "--json dlq list --count 1000000"), 0);
    arr = cJSON_Parse(out);
    ck_assert_msg(cJSON_IsArray(arr), "%.300s", out);
    ck_assert_int_eq(cJSON_GetArraySize(arr), 1203);
    for (int i = 0; i < 1203; i++) {
        char id[32], tid[32];
        e = cJSON_GetArrayItem(arr, i);
        snprintf(id, sizeof(id), "1-%d", i + 1);
        snprintf(tid, sizeof(tid), "dl%d", i + 1);
        ck_assert_str_eq(cJSON_GetObjectItem(e, "entry_id")->valuestring, id);
        ck_assert_str_eq(cJSON_GetObjectItem(e, "task_id")->valuestring, tid);
        ck_assert_int_eq(strlen(cJSON_GetObjectItem(e, "payload")->valuestring), 3000);
        ck_assert_ptr_null(cJSON_GetObjectItem(e, "payload_truncated"));
        ck_assert_int_eq(cJSON_GetObjectItem(e, "entry_ms")->valuedouble, 1); /* 1-<n> */
        ck_assert_int_eq(cJSON_GetObjectItem(e, "attempts_made")->valuedouble, (i + 1) % 7);
    }
    cJSON_Delete(arr);
    free(out);
    free(big);
}
END_TEST

/* show renders dtq_task_view: the fields in the order of the reference's table, a JSON
 * result as stored (text) or parsed (--json), a text result as it is (text) or null
 * (--json), no result as null. */
START_TEST(test_show_renders_task_view) {
    char *out;
    ck_assert_int_eq(
        th_ctl(&R, &out,
               "enqueue default echo '{\"a\": [1, 2],  \"n\": 12345678901234567890}' --id s1 "
               "--wait"),
        0);
    {
        const char *head = "s1 created\nid                 s1\nqueue              default\n"
                           "task_type          echo\n";
        ck_assert_msg(!strncmp(out, head, strlen(head)), "%s", out);
    }
    assert_shown(out, "result", "{\"a\": [1, 2],  \"n\": 12345678901234567890}");
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "--json show s1"), 0);
    ck_assert_msg(strstr(out, "\"result\":{\"a\":[1,2],\"n\":") != NULL, "%s", out);
    ck_assert_msg(!strncmp(out, "{\"id\":\"s1\",\"queue\":\"default\",", 29), "%s", out);
    free(out);
    freeReplyObject(th_cmd(C, "HSET dtq:task:s2 id s2 queue default status succeeded zz 1"));
    freeReplyObject(th_cmd(C, "SET dtq:result:s2 %s", "not json"));
    ck_assert_int_eq(th_ctl(&R, &out, "show s2"), 0);
    ck_assert_str_eq(out, "id                 s2\nqueue              default\n"
                          "status             succeeded\nzz                 1\n"
                          "result             not json\n");
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "--json show s2"), 0);
    ck_assert_str_eq(out, "{\"id\":\"s2\",\"queue\":\"default\",\"status\":\"succeeded\","
                          "\"zz\":\"1\",\"result\":null}\n");
    free(out);
    freeReplyObject(th_cmd(C, "DEL dtq:result:s2"));
    ck_assert_int_eq(th_ctl(&R, &out, "show s2"), 0);
    assert_shown(out, "result", "null");
    free(out);
}
END_TEST

/* --version: "dtqctl <version>", exit 0, without a configuration; --help names it. */
START_TEST(test_version) {
    char *out, want[64];
    snprintf(want, sizeof(want), "dtqctl %s\n", DTQ_VERSION);
    ck_assert_int_eq(th_ctl(&R, &out, "--version"), 0);
    ck_assert_str_eq(out, want);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "-c /nonexistent/worker.ini -V"), 0);
    ck_assert_str_eq(out, want);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "--help"), 0);
    ck_assert_ptr_nonnull(strstr(out, "--version"));
    ck_assert_ptr_nonnull(strstr(out, "\n  -V, --version "));
    ck_assert_ptr_nonnull(strstr(out, " 3 enqueue --wait\n--timeout S ran out"));
    free(out);
}
END_TEST

/* The member `name` of the JSON object text `out`, which must parse. */
static const cJSON *json_member(cJSON *o, const char *name, const char *out) {
    const cJSON *v;
    ck_assert_msg(o != NULL, "not JSON: %s", out);
    v = cJSON_GetObjectItemCaseSensitive(o, name);
    ck_assert_msg(v != NULL, "no %s in %s", name, out);
    return v;
}

static void assert_json_num(cJSON *o, const char *name, long long want, const char *out) {
    const cJSON *v = json_member(o, name, out);
    ck_assert_msg(cJSON_IsNumber(v), "%s is not a number in %s", name, out);
    if (want >= 0) ck_assert_msg((long long)v->valuedouble == want, "%s in %s", name, out);
}

/* --json gives numbers as JSON numbers: show's integer task fields (a value dtq did not
 * write stays a string), workers (the read model's worker object, per-queue counters as
 * an object), dlq list (entry_ms kept), queues and stats. */
START_TEST(test_json_numbers) {
    char *out, *created;
    cJSON *o, *w;
    const cJSON *v;
    ck_assert_int_eq(
        th_ctl(&R, &out, "enqueue default echo '{\"x\":1}' --id n1 --priority 7 --wait"), 0);
    free(out);
    created = hget("dtq:task:n1", "created_at");
    ck_assert_int_eq(th_ctl(&R, &out, "--json show n1"), 0);
    o = cJSON_Parse(out);
    assert_json_num(o, "attempt", 1, out);
    assert_json_num(o, "priority", 7, out);
    assert_json_num(o, "max_attempts", -1, out);
    assert_json_num(o, "timeout_ms", -1, out);
    assert_json_num(o, "cancel_requested", 0, out);
    assert_json_num(o, "created_at", atoll(created), out);
    assert_json_num(o, "started_at", -1, out);
    assert_json_num(o, "finished_at", -1, out);
    ck_assert(cJSON_IsString(json_member(o, "payload", out)));
    ck_assert(cJSON_IsString(json_member(o, "worker_id", out)));
    ck_assert(cJSON_IsString(json_member(o, "metadata", out)));
    ck_assert_ptr_nonnull(strstr(out, ",\"created_at\":"));
    cJSON_Delete(o);
    free(out);
    free(created);
    /* a value dtq did not write stays as it is; an empty one is null; updated_at is the
     * latest time the hash holds (here created_at alone) */
    freeReplyObject(th_cmd(C,
                           "HSET dtq:task:n2 id n2 queue default status queued attempt 2x "
                           "priority %s created_at 1796159654123 zz 7",
                           ""));
    ck_assert_int_eq(th_ctl(&R, &out, "--json show n2"), 0);
    ck_assert_str_eq(out, "{\"id\":\"n2\",\"queue\":\"default\",\"status\":\"queued\","
                          "\"attempt\":\"2x\",\"priority\":null,\"created_at\":1796159654123,"
                          "\"updated_at\":1796159654123,\"zz\":\"7\",\"result\":null}\n");
    free(out);

    ck_assert_int_eq(th_ctl(&R, &out, "--json workers"), 0);
    o = cJSON_Parse(out);
    ck_assert_msg(cJSON_IsArray(o) && cJSON_GetArraySize(o) == 1, "%s", out);
    w = cJSON_GetArrayItem(o, 0);
    ck_assert_str_eq(json_member(w, "worker_id", out)->valuestring, "w-ctl");
    assert_json_num(w, "pid", D.pid, out);
    assert_json_num(w, "started_at", -1, out);
    assert_json_num(w, "last_heartbeat", -1, out);
    assert_json_num(w, "heartbeat_age_ms", -1, out);
    assert_json_num(w, "active_tasks", -1, out);
    assert_json_num(w, "concurrency", -1, out);
    assert_json_num(w, "tasks_processed", -1, out);
    ck_assert(cJSON_IsString(json_member(w, "status", out)));
    ck_assert(cJSON_IsObject(json_member(w, "queues", out)));
    ck_assert_ptr_null(cJSON_GetObjectItem(w, "heartbeat_age_s"));
    ck_assert_ptr_null(strstr(out, "\"q:"));
    {
        const char *head = "[{\"worker_id\":\"w-ctl\",\"hostname\":";
        ck_assert_msg(!strncmp(out, head, strlen(head)), "%s", out);
    }
    cJSON_Delete(o);
    free(out);
    /* the per-queue counters, once a beat carries them */
    freeReplyObject(th_cmd(C, "HSET dtq:worker:w-ctl q:default:succeeded 4 q:default:failed 1"));
    ck_assert_int_eq(th_ctl(&R, &out, "--json workers"), 0);
    ck_assert_msg(strstr(out, "\"queues\":{\"default\":{") != NULL, "%s", out);
    o = cJSON_Parse(out);
    v = cJSON_GetObjectItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(o, 0), "queues"), "default"),
        "failed");
    ck_assert(cJSON_IsNumber(v));
    cJSON_Delete(o);
    free(out);

    ck_assert_int_eq(th_ctl(&R, &out, "enqueue default fail '{\"message\":\"no\"}' --id n3 --wait"),
                     1);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "--json dlq list"), 0);
    o = cJSON_Parse(out);
    ck_assert_msg(cJSON_IsArray(o) && cJSON_GetArraySize(o) == 1, "%s", out);
    w = cJSON_GetArrayItem(o, 0);
    {
        char *entry = hget("dtq:task:n3", "dlq_entry");
        assert_json_num(w, "entry_ms", atoll(entry), out);
        free(entry);
    }
    assert_json_num(w, "attempts_made", -1, out);
    assert_json_num(w, "attempt", -1, out);
    assert_json_num(w, "failed_at_ms", -1, out);
    assert_json_num(w, "priority", 5, out);
    assert_json_num(w, "retryable", 0, out);
    ck_assert(cJSON_IsString(json_member(w, "task_id", out)));
    ck_assert(cJSON_IsString(json_member(w, "last_error", out)));
    cJSON_Delete(o);
    free(out);

    ck_assert_int_eq(th_ctl(&R, &out, "--json queues"), 0);
    o = cJSON_Parse(out);
    assert_json_num(cJSON_GetArrayItem(o, 0), "depth", 0, out);
    assert_json_num(cJSON_GetArrayItem(o, 0), "scheduled", 0, out);
    cJSON_Delete(o);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "--json stats"), 0);
    o = cJSON_Parse(out);
    assert_json_num(o, "workers", 1, out);
    cJSON_Delete(o);
    free(out);
}
END_TEST

/* "2026-12-01T21:14:14.123Z (1796159654123)" for a time field of show. */
static void iso_of(const char *ms_text, char *buf, size_t size) {
    long long ms = atoll(ms_text);
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;
    char date[32];
    gmtime_r(&secs, &tm);
    strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, size, "%s.%03lldZ (%lld)", date, ms % 1000, ms);
}

/* show (text): times in ISO 8601 UTC with their epoch ms, the due time of a delayed task
 * after its status, continuation lines of a multi-line value indented under it. */
START_TEST(test_show_times_due_and_errors) {
    char *out, *ms, iso[96];
    redisReply *r;
    ck_assert_int_eq(th_ctl(&R, &out, "enqueue default echo 1 --id d1 --delay-ms 600000"), 0);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "show d1"), 0);
    ms = hget("dtq:task:d1", "created_at");
    iso_of(ms, iso, sizeof(iso));
    assert_shown(out, "created_at", iso);
    free(ms);
    /* the hash holds no updated_at until a change without a time of its own: show resolves
     * it as the latest of those times, here the creation */
    ck_assert_int_eq(th_int(th_cmd(C, "HEXISTS dtq:task:d1 updated_at")), 0);
    ms = hget("dtq:task:d1", "created_at");
    iso_of(ms, iso, sizeof(iso));
    assert_shown(out, "updated_at", iso);
    free(ms);
    r = th_cmd(C, "ZSCORE dtq:retry:schedule d1");
    ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
    iso_of(r->str, iso, sizeof(iso));
    {
        char line[256];
        /* right after the status, in the fixed order */
        snprintf(line, sizeof(line),
                 "\nstatus             pending\ndue_at             %s\n"
                 "attempt            1\n",
                 iso);
        ck_assert_msg(strstr(out, line) != NULL, "no '%s' in: %s", line, out);
    }
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "--json show d1"), 0);
    {
        cJSON *o = cJSON_Parse(out);
        assert_json_num(o, "due_at", atoll(r->str), out);
        ck_assert(cJSON_IsFalse(json_member(o, "due_claimed", out)));
        cJSON_Delete(o);
    }
    freeReplyObject(r);
    free(out);
    /* a task that is not scheduled has no due time */
    ck_assert_int_eq(th_ctl(&R, &out, "enqueue default echo 1 --id d2 --wait"), 0);
    ck_assert_ptr_null(strstr(out, "due_at"));
    ms = hget("dtq:task:d2", "finished_at");
    iso_of(ms, iso, sizeof(iso));
    assert_shown(out, "finished_at", iso);
    free(ms);
    free(out);
    /* a multi-line last_error: its continuation lines under its first */
    freeReplyObject(th_cmd(C, "HSET dtq:task:d2 last_error %s", "Traceback:\n  at f()\nboom"));
    ck_assert_int_eq(th_ctl(&R, &out, "show d2"), 0);
    ck_assert_msg(strstr(out, "\nlast_error         Traceback:\n"
                              "                     at f()\n"
                              "                   boom\n") != NULL,
                  "%s", out);
    free(out);
}
END_TEST

/* pause / resume of a queue no task has used (not in dtq:queues) is refused, NOT_FOUND
 * and exit 1, nothing written; --create pauses it (and lists it). */
START_TEST(test_pause_unknown_queue) {
    char *out;
    ck_assert_int_eq(th_ctl(&R, &out, "pause nosuch"), 1);
    ck_assert_msg(strstr(out, "NOT_FOUND queue nosuch") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "--create") != NULL, "%s", out);
    free(out);
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:queue:nosuch:paused")), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "SISMEMBER dtq:queues nosuch")), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:audit")), 0);
    ck_assert_int_eq(th_ctl(&R, &out, "resume nosuch"), 1);
    ck_assert_ptr_nonnull(strstr(out, "NOT_FOUND"));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "pause nosuch --create"), 0);
    ck_assert_str_eq(out, "paused\n");
    free(out);
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:queue:nosuch:paused")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "SISMEMBER dtq:queues nosuch")), 1);
    ck_assert_int_eq(th_ctl(&R, &out, "--json queues"), 0);
    ck_assert_msg(strstr(out, "{\"queue\":\"nosuch\",\"depth\":0,\"pending\":0,\"scheduled\":0,"
                              "\"paused\":true,\"mode\":\"full\"}") != NULL,
                  "%s", out);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "resume nosuch"), 0); /* known now */
    ck_assert_str_eq(out, "resumed\n");
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "resume --create other"), 0);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "pause default"), 0); /* the daemon's queue is known */
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "pause default --bogus"), 2);
    free(out);
}
END_TEST

/* The single layout: the first write checks the layout marker (a namespace marked for Redis
 * Cluster is refused, WRONG_LAYOUT, exit 1; reads are not checked), and --queue is accepted
 * by the verbs by id and ignored (ids are unique in the namespace). */
START_TEST(test_layout_and_queue_option) {
    char *out, id[64], args[160];
    ck_assert_int_eq(th_ctl(&R, &out, "enqueue default echo {}"), 0);
    ck_assert_int_eq(sscanf(out, "%63s", id), 1);
    free(out);
    th_expect_str(th_cmd(C, "GET dtq:layout"), "single");
    freeReplyObject(th_cmd(C, "SET dtq:layout cluster"));
    ck_assert_int_eq(th_ctl(&R, &out, "enqueue default echo {}"), 1);
    ck_assert_msg(strstr(out, "WRONG_LAYOUT namespace dtq is laid out for Redis Cluster"), "%s",
                  out);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "cancel nosuch"), 1);
    ck_assert_ptr_nonnull(strstr(out, "WRONG_LAYOUT"));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "stats"), 0);
    free(out);
    freeReplyObject(th_cmd(C, "SET dtq:layout single"));
    snprintf(args, sizeof(args), "--json show --queue whatever %s", id);
    ck_assert_int_eq(th_ctl(&R, &out, args), 0);
    ck_assert_ptr_nonnull(strstr(out, id));
    free(out);
    snprintf(args, sizeof(args), "show %s --queue", id);
    ck_assert_int_eq(th_ctl(&R, &out, args), 2);
    ck_assert_ptr_nonnull(strstr(out, "--queue needs a queue"));
    free(out);
}
END_TEST

/* enqueue --wait prints the id at once, into a pipe too (it is flushed before the wait),
 * and ends with the task; --timeout S: exit 3 when the task is not done by then. */
START_TEST(test_enqueue_wait_pipe_and_timeout) {
    int fds[2], status;
    pid_t pid;
    struct pollfd pfd;
    char buf[4096];
    ssize_t n;
    size_t len = 0;
    char *out;
    int64_t t0;
    ck_assert_int_eq(th_ctl(&R, &out, "pause default"), 0);
    free(out);
    ck_assert_int_eq(pipe(fds), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        unsetenv("DTQ_REDIS_NAMESPACE");
        unsetenv("DTQ_REDIS_CLUSTER_HASH_TAG");
        setenv("DTQ_REDIS_URL", R.url, 1);
        execl(DTQCTL_BIN, "dtqctl", "enqueue", "default", "echo", "5", "--id", "p1", "--wait",
              (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    pfd.fd = fds[0];
    pfd.events = POLLIN;
    ck_assert_msg(poll(&pfd, 1, 5000) == 1, "no id on the pipe within 5 s");
    n = read(fds[0], buf, sizeof(buf) - 1);
    ck_assert_int_gt(n, 0);
    buf[n] = 0;
    ck_assert_str_eq(buf, "p1 created\n");
    len = (size_t)n;
    ck_assert_int_eq(waitpid(pid, &status, WNOHANG), 0); /* still waiting: the queue is paused */
    ck_assert_int_eq(th_ctl(&R, &out, "resume default"), 0);
    free(out);
    while (len < sizeof(buf) - 1 && (n = read(fds[0], buf + len, sizeof(buf) - 1 - len)) > 0)
        len += (size_t)n;
    buf[len] = 0;
    close(fds[0]);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert_msg(strstr(buf, "\nstatus             succeeded\n") != NULL, "%s", buf);

    /* --timeout: exit 3, after about S seconds, the id printed, the reason on stderr */
    ck_assert_int_eq(th_ctl(&R, &out, "pause default"), 0);
    free(out);
    t0 = th_now_ms();
    ck_assert_int_eq(th_ctl(&R, &out, "enqueue default echo 1 --id p2 --wait --timeout 0.6"), 3);
    ck_assert_int_ge(th_now_ms() - t0, 600);
    ck_assert_str_eq(out, "p2 created\ndtqctl: task p2 is still queued after --timeout 0.6 s\n");
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "--json enqueue default echo 1 --id p3 --wait --timeout 0.2"),
                     3);
    {
        const char *head = "{\"task_id\":\"p3\",\"result\":\"created\"}\n";
        ck_assert_msg(!strncmp(out, head, strlen(head)), "%s", out);
    }
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "enqueue default echo 1 --timeout 1"), 2);
    ck_assert_ptr_nonnull(strstr(out, "--timeout goes with --wait"));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "enqueue default echo 1 --wait --timeout 0"), 2);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "enqueue default echo 1 --wait --timeout soon"), 2);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "resume default"), 0);
    free(out);
    ck_assert(th_wait_status(C, "p2", "succeeded", 5000));
}
END_TEST

/* The schedule and a queue as a whole: scheduled list (filtered by queue, as JSON),
 * run-now and delete by id, queue clear (dead letters of class cleared, or deleted) and
 * queue remove (refused while the queue holds anything). */
START_TEST(test_scheduled_and_queue_verbs) {
    char *out, args[200];
    cJSON *list;
    ck_assert_int_eq(th_ctl(&R, &out, "pause qs --create"), 0);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "enqueue qs echo {} --id s1 --delay-ms 600000"), 0);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "enqueue qs echo {} --id s2 --delay-ms 700000"), 0);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "enqueue qt echo {} --id t1 --delay-ms 650000"), 0);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "scheduled list"), 0);
    ck_assert_int_eq(count_lines(out), 3);
    ck_assert_msg(strstr(out, "s1  qs  echo  delayed  due=") == out, "%s", out);
    ck_assert_msg(strstr(out, "\nt1  qt") < strstr(out, "\ns2  qs"), "not by due time: %s", out);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "--json scheduled list --queue qs"), 0);
    list = cJSON_Parse(out);
    ck_assert_msg(cJSON_IsArray(list) && cJSON_GetArraySize(list) == 2, "%s", out);
    ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(list, 0), "task_id")->valuestring,
                     "s1");
    ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetArrayItem(list, 0), "due_ms")));
    cJSON_Delete(list);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "scheduled run-now s1"), 0);
    ck_assert_str_eq(out, "s1 done\n");
    free(out);
    th_assert_field(C, "s1", "status", "queued"); /* its queue is paused: it waits there */
    ck_assert_int_eq(th_ctl(&R, &out, "scheduled delete s2"), 0);
    free(out);
    th_assert_field(C, "s2", "status", "cancelled");
    ck_assert_int_eq(th_ctl(&R, &out, "scheduled run-now s2"), 1);
    ck_assert_ptr_nonnull(strstr(out, "not in the schedule"));
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "scheduled delete nope"), 1);
    free(out);
    /* queue remove is refused while qs holds s1 */
    ck_assert_int_eq(th_ctl(&R, &out, "queue remove qs"), 1);
    ck_assert_ptr_nonnull(strstr(out, "NOT_EMPTY"));
    free(out);
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof(args), "enqueue qs echo {} --id c%d", i);
        ck_assert_int_eq(th_ctl(&R, &out, args), 0);
        free(out);
    }
    ck_assert_int_eq(th_ctl(&R, &out, "queue clear qs"), 0);
    ck_assert_str_eq(out, "4 dead-lettered (class cleared)\n"); /* s1 and c0..c2 */
    free(out);
    th_assert_field(C, "c1", "status", "dead_lettered");
    th_assert_field(C, "c1", "last_error_class", "cleared");
    ck_assert_int_eq(th_ctl(&R, &out, "queue remove qs"), 0);
    ck_assert_str_eq(out, "qs removed\n");
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "enqueue qt echo {} --id d1"), 0);
    free(out);
    ck_assert_int_eq(th_ctl(&R, &out, "queue clear qt --delete"), 0);
    ck_assert_str_eq(out, "1 deleted\n");
    free(out);
    th_assert_field(C, "d1", "status", "cancelled");
    th_assert_field(C, "t1", "status", "pending"); /* scheduled, not waiting: not cleared */
}
END_TEST

/* A TCase of the suite with the usual fixture (one redis-server, no daemon). */
static TCase *themed_case(Suite *s, const char *name) {
    TCase *tc = tcase_create(name);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return tc;
}

int main(void) {
    Suite *s = suite_create("ctl");
    TCase *tc;
    tc = themed_case(s, "tasks"); /* enqueue, show, wait, events */
    tcase_add_test(tc, test_enqueue_wait_and_show);
    tcase_add_test(tc, test_enqueue_bulk_from_stdin);
    tcase_add_test(tc, test_enqueue_after);
    tcase_add_test(tc, test_enqueue_unique);
    tcase_add_test(tc, test_enqueue_wait_pipe_and_timeout);
    tcase_add_test(tc, test_show_renders_task_view);
    tcase_add_test(tc, test_show_times_due_and_errors);
    tcase_add_test(tc, test_events_follow);
    tcase_add_test(tc, test_json_numbers);
    tc = themed_case(s, "admin"); /* dead letters, queues, workers, the schedule */
    tcase_add_test(tc, test_dlq_queues_workers);
    tcase_add_test(tc, test_dlq_requeue_all_chunks);
    tcase_add_test(tc, test_dlq_list_pages);
    tcase_add_test(tc, test_pause_unknown_queue);
    tcase_add_test(tc, test_scheduled_and_queue_verbs);
    tcase_add_test(tc, test_layout_and_queue_option);
    tc = themed_case(s, "cli"); /* usage, refusals, config and secrets, help, version */
    tcase_add_test(tc, test_refusals_and_usage);
    tcase_add_test(tc, test_bad_config_and_secrets);
    tcase_add_test(tc, test_help_is_the_table);
    tcase_add_test(tc, test_version);
    tc = tcase_create("cluster_hash_tag");
    tcase_add_checked_fixture(tc, setup_tag, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_tag_enqueue_show_cancel);
    tcase_add_test(tc, test_tag_dlq);
    tcase_add_test(tc, test_tag_queues_workers_stats);
    tcase_add_test(tc, test_tag_events);
    tcase_add_test(tc, test_config_file);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
