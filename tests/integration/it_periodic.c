/* it_periodic.c: periodic tasks with daemons against a real redis-server: `@every 1s` for
 * 12 s across two daemons with the leader SIGKILLed in the middle (one task per second, no
 * fire time twice), catch-up skip/none/all after 5 s with no daemon, [cron:NAME] sections
 * synced at start and on SIGHUP (runtime schedules kept), and dtqctl's cron verbs. The
 * Functions alone (cron_set, cron_fire, run, pause, sync, cron_list) are tests/lua/cron.c. */
#include <cjson/cJSON.h>
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "util.h"

TH_LIBRARY_FIXTURE();

/* ----------------------------------------------------------------- daemons */

#define CRON_WORKER_INI(id)                                                                        \
    "[worker]\nworker_id = " id "\nqueues = ticks\nheartbeat_interval_s = 1\n"                     \
    "visibility_timeout_s = 3\ndrain_timeout_s = 2\n"                                              \
    "[scheduler]\ninterval_ms = 100\nleader_lock_ms = 1000\n"                                      \
    "[handler:tick]\nbuiltin = noop\n"

static int leader_is(const char *id) {
    redisReply *r = th_cmd(C, "GET dtq:lock:scheduler");
    int yes = r->type == REDIS_REPLY_STRING && !strcmp(r->str, id);
    freeReplyObject(r);
    return yes;
}

static void assert_one_per_second(const int64_t *f, int n, int64_t from, int64_t to) {
    int in = 0;
    for (int i = 1; i < n; i++)
        ck_assert_msg(f[i] != f[i - 1], "fire time %lld twice", (long long)f[i]);
    for (int i = 0; i < n; i++) {
        if (f[i] < from || f[i] > to) continue;
        in++;
        if (i > 0 && f[i - 1] >= from)
            ck_assert_msg(f[i] - f[i - 1] == 1000, "gap between %lld and %lld", (long long)f[i - 1],
                          (long long)f[i]);
    }
    ck_assert_msg(in >= (int)((to - from) / 1000) - 1, "%d fire times in %lld ms", in,
                  (long long)(to - from));
}

START_TEST(test_every_second_across_leader_kill) {
    th_daemon a, b;
    int64_t f[64], t0, t1;
    int n;
    th_daemon_start(&a, &R, CRON_WORKER_INI("w-a"));
    th_daemon_wait_ready(C, "w-a", 10000);
    th_daemon_start(&b, &R, CRON_WORKER_INI("w-b"));
    th_daemon_wait_ready(C, "w-b", 10000);
    th_expect_str(
        th_cmd(C, "FCALL dtq_cron_set 0 a tick %s ticks tick {} catch_up all", "@every 1s"),
        "created");
    t0 = th_redis_ms(C);
    th_sleep_ms(6000);
    /* SIGKILL whoever leads: the other takes the lock when it lapses */
    if (leader_is("w-a")) {
        th_daemon_stop(&a, SIGKILL, 5000);
        th_sleep_ms(6000);
        th_daemon_stop(&b, SIGTERM, 10000);
    } else {
        th_daemon_stop(&b, SIGKILL, 5000);
        th_sleep_ms(6000);
        th_daemon_stop(&a, SIGTERM, 10000);
    }
    t1 = th_redis_ms(C);
    n = th_cron_fire_times(C, "tick", f, 64);
    /* every second of the window exactly once (the first fire is anchor + 1 s) */
    assert_one_per_second(f, n, t0 + 1000, t1 - 2000);
    ck_assert_int_ge(n, 10);
}
END_TEST

START_TEST(test_catch_up_after_downtime) {
    th_daemon d;
    int64_t f[3][64], t_stop, t_start;
    const char *names[3] = {"c_all", "c_skip", "c_none"};
    int missing[3];
    th_daemon_start(&d, &R, CRON_WORKER_INI("w-c"));
    th_daemon_wait_ready(C, "w-c", 10000);
    th_expect_str(
        th_cmd(C, "FCALL dtq_cron_set 0 a c_all %s ticks tick {} catch_up all", "@every 1s"),
        "created");
    th_expect_str(
        th_cmd(C, "FCALL dtq_cron_set 0 a c_skip %s ticks tick {} catch_up skip", "@every 1s"),
        "created");
    th_expect_str(
        th_cmd(C, "FCALL dtq_cron_set 0 a c_none %s ticks tick {} catch_up none", "@every 1s"),
        "created");
    th_sleep_ms(3000);
    th_daemon_stop(&d, SIGTERM, 10000);
    t_stop = th_redis_ms(C);
    th_sleep_ms(5000);
    t_start = th_redis_ms(C);
    th_daemon_start(&d, &R, CRON_WORKER_INI("w-c"));
    th_daemon_wait_ready(C, "w-c", 10000);
    th_sleep_ms(3000);
    th_daemon_stop(&d, SIGTERM, 10000);
    for (int k = 0; k < 3; k++) {
        int n = th_cron_fire_times(C, names[k], f[k], 64), first_gap = -1;
        missing[k] = 0;
        for (int i = 1; i < n; i++) {
            ck_assert_msg(f[k][i] != f[k][i - 1], "%s: fire time twice", names[k]);
            if (f[k][i] - f[k][i - 1] > 1000) {
                ck_assert_msg(first_gap < 0, "%s: more than one gap", names[k]);
                first_gap = i;
                missing[k] = (int)((f[k][i] - f[k][i - 1]) / 1000) - 1;
                /* the gap starts with the first fire time after the stop */
                ck_assert_int_le(f[k][i - 1], t_stop);
                ck_assert_int_gt(f[k][i - 1] + 1000, t_stop - 1000);
            }
        }
        ck_assert_int_gt(f[k][n - 1], t_start);
    }
    ck_assert_msg(missing[0] == 0, "all: %d missed", missing[0]);
    ck_assert_msg(missing[1] >= 2, "skip: %d missed", missing[1]);
    ck_assert_msg(missing[2] == missing[1] + 1 || missing[2] == missing[1] + 2,
                  "none: %d missed, skip %d", missing[2], missing[1]);
}
END_TEST

START_TEST(test_config_sections_and_sighup) {
    th_daemon d;
    char ini[2048], *out = NULL;
    FILE *fp;
    int rc;
    snprintf(ini, sizeof(ini),
             CRON_WORKER_INI(
                 "w-cfg") "[cron:nightly]\nspec = 30 2 * * *\ntz = America/New_York\n"
                          "queue = ticks\ntask_type = tick\npayload = {\"r\":1}\n"
                          "[cron:hourly]\nspec = @hourly\nqueue = ticks\ntask_type = tick\n");
    th_daemon_start(&d, &R, ini);
    th_daemon_wait_ready(C, "w-cfg", 10000);
    for (int i = 0; i < 100 && th_int(th_cmd(C, "HLEN dtq:crons")) < 2; i++) th_sleep_ms(50);
    ck_assert_int_eq(th_int(th_cmd(C, "HLEN dtq:crons")), 2);
    /* the leader plans them: a next fire time in the future */
    for (int i = 0; i < 100; i++) {
        redisReply *r = th_cmd(C, "HGET dtq:cron:ticks:nightly next_fire");
        int planned = r->type == REDIS_REPLY_STRING && *r->str;
        freeReplyObject(r);
        if (planned) break;
        th_sleep_ms(50);
    }
    {
        redisReply *r = th_cmd(C, "HGET dtq:cron:ticks:nightly next_fire");
        ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
        ck_assert_int_gt(atoll(r->str), th_redis_ms(C));
        freeReplyObject(r);
    }
    /* a runtime schedule beside them, then the file loses `hourly`: SIGHUP removes it only */
    rc = th_ctl(&R, &out, "cron add live '@every 1h' ticks tick '{}'");
    ck_assert_msg(rc == 0, "cron add: %s", out);
    free(out);
    fp = fopen(d.cfg, "w");
    ck_assert_ptr_nonnull(fp);
    fprintf(fp,
            "[redis]\nurl = %s\n" CRON_WORKER_INI(
                "w-cfg") "[cron:nightly]\nspec = 30 2 * * *\n"
                         "tz = America/New_York\nqueue = ticks\ntask_type = tick\npayload = "
                         "{\"r\":1}\n",
            R.url);
    fclose(fp);
    kill(d.pid, SIGHUP);
    for (int i = 0; i < 100 && th_int(th_cmd(C, "HEXISTS dtq:crons hourly")); i++) th_sleep_ms(50);
    ck_assert_int_eq(th_int(th_cmd(C, "HEXISTS dtq:crons hourly")), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "HEXISTS dtq:crons nightly")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "HEXISTS dtq:crons live")), 1);
    th_daemon_stop(&d, SIGTERM, 10000);
    /* a bad section: the daemon refuses to start, naming it */
    {
        char *err = NULL;
        char path[400];
        th_path(&R, "bad.ini", path, sizeof(path));
        fp = fopen(path, "w");
        fprintf(fp, "[cron:x]\nspec = 0 25 * * *\nqueue = q\ntask_type = t\n");
        fclose(fp);
        rc = th_run_worker(&err, "-c", path, "--check-config", NULL);
        ck_assert_int_ne(rc, 0);
        ck_assert_msg(strstr(err, "[cron:x] spec") != NULL, "%s", err);
        free(err);
    }
}
END_TEST

START_TEST(test_dtqctl_cron) {
    char *out = NULL;
    int rc;
    cJSON *list;
    rc = th_ctl(&R, &out, "cron add bad '0 25 * * *' q t '{}'");
    ck_assert_int_eq(rc, 1);
    ck_assert_msg(strstr(out, "INVALID_ARGUMENT spec") && strstr(out, "hour"), "%s", out);
    free(out);
    rc = th_ctl(&R, &out, "cron add bad '0 3 * * *' q t '{}' --tz Mars/Olympus");
    ck_assert_int_eq(rc, 1);
    ck_assert_msg(strstr(out, "INVALID_ARGUMENT tz") != NULL, "%s", out);
    free(out);
    rc = th_ctl(&R, &out, "cron add never '0 0 30 2 *' q t '{}'");
    ck_assert_int_eq(rc, 1);
    ck_assert_msg(strstr(out, "never fires: day 30 does not occur in February") != NULL, "%s", out);
    free(out);
    rc = th_ctl(&R, &out,
                "cron add report '0 9 * * MON-FRI' reports build '{\"a\":1}' --tz "
                "Europe/Berlin --catch-up none --priority 7 --max-attempts 3");
    ck_assert_msg(rc == 0 && strstr(out, "created"), "%s", out);
    free(out);
    rc = th_ctl(&R, &out, "cron list --json");
    ck_assert_int_eq(rc, 0);
    list = cJSON_Parse(out);
    ck_assert_ptr_nonnull(list);
    ck_assert_int_eq(cJSON_GetArraySize(list), 1);
    {
        const cJSON *s = cJSON_GetArrayItem(list, 0);
        ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(s, "spec")->valuestring,
                         "0 9 * * MON-FRI");
        ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(s, "catch_up")->valuestring, "none");
        ck_assert_int_eq(th_json_num(s, "priority"), 7);
        ck_assert_int_eq(th_json_num(s, "max_attempts"), 3);
    }
    cJSON_Delete(list);
    free(out);
    rc = th_ctl(&R, &out, "cron list");
    ck_assert_msg(rc == 0 &&
                      strstr(out, "report  '0 9 * * MON-FRI'  Europe/Berlin  reports  build"),
                  "%s", out);
    free(out);
    rc = th_ctl(&R, &out, "cron pause report");
    ck_assert_msg(rc == 0 && !strcmp(out, "paused report\n"), "%s", out);
    free(out);
    rc = th_ctl(&R, &out, "cron pause report");
    ck_assert_msg(rc == 0 && !strcmp(out, "report was paused already\n"), "%s", out);
    free(out);
    rc = th_ctl(&R, &out, "--json cron pause report");
    ck_assert_msg(rc == 0 && !strcmp(out, "{\"name\":\"report\",\"changed\":false}\n"), "%s", out);
    free(out);
    rc = th_ctl(&R, &out, "cron run report");
    ck_assert_int_eq(rc, 0);
    out[strcspn(out, "\n")] = '\0';
    th_assert_field(C, out, "cron", "report");
    th_assert_field(C, out, "priority", "7");
    free(out);
    rc = th_ctl(&R, &out, "cron resume report");
    ck_assert_msg(rc == 0 && !strcmp(out, "resumed report\n"), "%s", out);
    free(out);
    rc = th_ctl(&R, &out, "cron remove report");
    ck_assert_int_eq(rc, 0);
    free(out);
    rc = th_ctl(&R, &out, "cron remove report");
    ck_assert_msg(rc == 1 && strstr(out, "NOT_FOUND"), "%s", out);
    free(out);
}
END_TEST

int main(void) {
    Suite *s = suite_create("periodic");
    TCase *ctl = tcase_create("dtqctl"), *dm = tcase_create("daemons");
    tcase_add_checked_fixture(ctl, setup, teardown);
    tcase_set_timeout(ctl, 60);
    tcase_add_test(ctl, test_dtqctl_cron);
    suite_add_tcase(s, ctl);
    tcase_add_checked_fixture(dm, setup, teardown);
    tcase_set_timeout(dm, 120);
    tcase_add_test(dm, test_every_second_across_leader_kill);
    tcase_add_test(dm, test_catch_up_after_downtime);
    tcase_add_test(dm, test_config_sections_and_sighup);
    suite_add_tcase(s, dm);
    return th_run_suite(s);
}
