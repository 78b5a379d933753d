/* cron.c: the periodic tasks' Functions (lua/fn/cron.lua) against a real redis-server,
 * without a daemon: <ns>_cron_set (refusals, created/replaced/unchanged, a replaced
 * schedule replanned), <ns>_cron_fire (a fire time enqueued once however often it is handed
 * over, never early, the catch-up policies, a changed or paused schedule untouched), run,
 * pause, resume, remove, sync by origin, cron_list's JSON. The daemons' side (the leader
 * firing, catch-up after downtime, [cron:NAME] sections, dtqctl cron) is it_periodic.c. */
#include "lua_suite.h"

/* ----------------------------------------------------------------- helpers */

/* ----------------------------------------------------------------- helpers */

/* cron_list's schedule `name` as JSON (caller deletes the root in *root). */
static const cJSON *schedule(const char *name, cJSON **root) {
    redisReply *r = th_cmd(C, "FCALL_RO dtq_cron_list 0 %s", name);
    ck_assert_msg(r->type == REDIS_REPLY_STRING, "cron_list: %s", r->str ? r->str : "");
    *root = cJSON_Parse(r->str);
    freeReplyObject(r);
    ck_assert_ptr_nonnull(*root);
    return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(*root, "schedules"), 0);
}

/* The gen field of a schedule (what cron_due hands the leader). */
static char *gen_of(const char *queue, const char *name) {
    redisReply *r = th_cmd(C, "HGET dtq:cron:%s:%s gen", queue, name);
    char *g;
    ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
    g = strdup(r->str);
    freeReplyObject(r);
    return g;
}

/* FCALL dtq_cron_fire for the schedule, with `next` ("" for none), no error, and the fire
 * times in `fires` (space separated); the number fired. */
static long long fire(const char *queue, const char *name, const char *gen, long long grace,
                      const char *next, const char *fires) {
    const char *argv[64];
    char grace_s[32], buf[512], *save = NULL;
    int argc = 0;
    redisReply *r;
    long long fired;
    snprintf(grace_s, sizeof(grace_s), "%lld", grace);
    snprintf(buf, sizeof(buf), "%s", fires);
    argv[argc++] = "FCALL";
    argv[argc++] = "dtq_cron_fire";
    argv[argc++] = "0";
    argv[argc++] = "w1";
    argv[argc++] = name;
    argv[argc++] = queue;
    argv[argc++] = gen;
    argv[argc++] = grace_s;
    argv[argc++] = next;
    argv[argc++] = "";
    for (char *t = strtok_r(buf, " ", &save); t && argc < 64; t = strtok_r(NULL, " ", &save))
        argv[argc++] = t;
    r = redisCommandArgv(C, argc, argv, NULL);
    ck_assert_ptr_nonnull(r);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY && r->elements == 4, "cron_fire: %d %s", r->type,
                  r->str ? r->str : "");
    fired = r->element[0]->integer;
    freeReplyObject(r);
    return fired;
}

/* ----------------------------------------------------------------- Functions */

START_TEST(test_set_refusals_and_replace) {
    cJSON *root;
    const cJSON *s;
    char *g1, *g2;
    th_expect_refused(th_cmd(C, "FCALL dtq_cron_set 0 a bad:name %s q t {}", "@every 1s"),
                      "INVALID_ARGUMENT name");
    th_expect_refused(th_cmd(C, "FCALL dtq_cron_set 0 a n %s q t {", "@every 1s"),
                      "INVALID_ARGUMENT payload");
    th_expect_refused(th_cmd(C, "FCALL dtq_cron_set 0 a n %s q t {} catch_up later", "@every 1s"),
                      "INVALID_ARGUMENT catch_up");
    th_expect_refused(th_cmd(C, "FCALL dtq_cron_set 0 a n %s q t {} tz ../etc", "@every 1s"),
                      "INVALID_ARGUMENT tz");
    th_expect_refused(th_cmd(C, "FCALL dtq_cron_set 0 a n %s q t {} priority 99", "@every 1s"),
                      "INVALID_ARGUMENT priority");
    th_expect_refused(th_cmd(C, "FCALL dtq_cron_set 0 a n %s q t {} color red", "@every 1s"),
                      "INVALID_ARGUMENT unknown option color");
    th_expect_str(th_cmd(C, "FCALL dtq_cron_set 0 a n %s q t {} tz Europe/Berlin", "0 3 * * *"),
                  "created");
    th_expect_str(th_cmd(C, "FCALL dtq_cron_set 0 a n %s q t {} tz Europe/Berlin", "0 3 * * *"),
                  "unchanged");
    g1 = gen_of("q", "n");
    /* a new payload replaces without replanning; a new spec replans (a new generation) */
    th_expect_str(
        th_cmd(C, "FCALL dtq_cron_set 0 a n %s q t {\"x\":1} tz Europe/Berlin", "0 3 * * *"),
        "replaced");
    g2 = gen_of("q", "n");
    ck_assert_str_eq(g1, g2);
    free(g2);
    th_expect_str(th_cmd(C, "FCALL dtq_cron_set 0 a n %s q t {} tz Europe/Berlin", "0 4 * * *"),
                  "replaced");
    g2 = gen_of("q", "n");
    ck_assert_str_ne(g1, g2);
    free(g1);
    free(g2);
    /* moved to another queue: the old key is gone */
    th_expect_str(th_cmd(C, "FCALL dtq_cron_set 0 a n %s q2 t {} tz Europe/Berlin", "0 4 * * *"),
                  "replaced");
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:cron:q:n")), 0);
    s = schedule("n", &root);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(s, "queue")->valuestring, "q2");
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(s, "tz")->valuestring, "Europe/Berlin");
    ck_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(s, "next_fire_ms")));
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(s, "paused")));
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(s, "origin")->valuestring, "runtime");
    cJSON_Delete(root);
    /* every change is audited */
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:audit")), 4); /* not for `unchanged` */
    th_expect_refused(th_cmd(C, "FCALL dtq_cron_remove 0 a nope"), "NOT_FOUND");
    ck_assert_int_eq(th_int(th_cmd(C, "FCALL dtq_cron_remove 0 a n")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "HLEN dtq:crons")), 0);
}
END_TEST

START_TEST(test_fire_once_and_never_early) {
    int64_t now = th_redis_ms(C), f[8];
    char fires[128], next[32], *g;
    cJSON *root;
    const cJSON *s;
    th_expect_str(th_cmd(C, "FCALL dtq_cron_set 0 a tick %s q t {\"k\":1}", "@every 1s"),
                  "created");
    g = gen_of("q", "tick");
    snprintf(fires, sizeof(fires), "%lld %lld", (long long)(now - 2000), (long long)(now - 1000));
    snprintf(next, sizeof(next), "%lld", (long long)(now + 1000));
    ck_assert_int_eq(fire("q", "tick", g, 60000, next, fires), 2);
    /* the same fire times again (a second leader, a retried call): nothing */
    ck_assert_int_eq(fire("q", "tick", g, 60000, next, fires), 0);
    /* a fire time in the future is not enqueued, whatever the caller says: it becomes
     * the next fire time (Redis's clock may have stepped back), not lost */
    snprintf(fires, sizeof(fires), "%lld", (long long)(now + 60000));
    ck_assert_int_eq(fire("q", "tick", g, 60000, next, fires), 0);
    /* a stale generation (the schedule changed since cron_due) writes nothing */
    snprintf(fires, sizeof(fires), "%lld", (long long)(now - 500));
    ck_assert_int_eq(fire("q", "tick", "999", 60000, next, fires), 0);
    ck_assert_int_eq(th_cron_fire_times(C, "tick", f, 8), 2);
    ck_assert_int_eq(f[0], now - 2000);
    ck_assert_int_eq(f[1], now - 1000);
    s = schedule("tick", &root);
    ck_assert_int_eq((int64_t)th_json_num(s, "last_fire_ms"), now - 1000);
    ck_assert_int_eq((int64_t)th_json_num(s, "next_fire_ms"), now + 60000);
    ck_assert(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(s, "last_task_id")));
    cJSON_Delete(root);
    /* the task is an ordinary task of the queue, with cron and fire_time */
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:q:p5")), 2);
    /* paused: fires nothing */
    ck_assert_int_eq(th_int(th_cmd(C, "FCALL dtq_cron_pause 0 a tick")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "FCALL dtq_cron_pause 0 a tick")), 0);
    ck_assert_int_eq(fire("q", "tick", g, 60000, next, fires), 0);
    free(g);
    /* resumed: a new generation, replanned from now (no catch-up of the pause) */
    ck_assert_int_eq(th_int(th_cmd(C, "FCALL dtq_cron_resume 0 a tick")), 1);
    s = schedule("tick", &root);
    ck_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(s, "next_fire_ms")));
    cJSON_Delete(root);
}
END_TEST

/* Six fire times, one a second up to now, under `policy`; with grace 2500 the four oldest
 * are missed and the two newest on time, with grace 500 all six are missed. */
static void catch_up_fired(const char *name, const char *policy, long long grace,
                           int64_t *newest_missed) {
    int64_t now = th_redis_ms(C);
    char fires[256], *g;
    int n = 0;
    th_expect_str(
        th_cmd(C, "FCALL dtq_cron_set 0 a %s %s q t {} catch_up %s", name, "@every 1s", policy),
        "created");
    g = gen_of("q", name);
    for (int i = 6; i >= 1; i--)
        n += snprintf(fires + n, sizeof(fires) - (size_t)n, "%s%lld", n ? " " : "",
                      (long long)(now - i * 1000 + 10));
    *newest_missed = grace > 1000 ? now - 3000 + 10 : now - 1000 + 10;
    fire("q", name, g, grace, "", fires);
    free(g);
}

START_TEST(test_catch_up_policies) {
    int64_t f[16], newest;
    int n;
    catch_up_fired("s_all", "all", 2500, &newest);
    ck_assert_int_eq(th_cron_fire_times(C, "s_all", f, 16), 6);
    /* skip: of the missed ones the latest runs, once; the two on time run as usual... */
    catch_up_fired("s_skip", "skip", 2500, &newest);
    n = th_cron_fire_times(C, "s_skip", f, 16);
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(f[0], newest);
    /* ... and with nothing on time, the latest missed one alone */
    catch_up_fired("s_skip2", "skip", 500, &newest);
    n = th_cron_fire_times(C, "s_skip2", f, 16);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(f[0], newest);
    catch_up_fired("s_none", "none", 2500, &newest);
    n = th_cron_fire_times(C, "s_none", f, 16);
    ck_assert_int_eq(n, 2);
    ck_assert_int_gt(f[0], newest);
    catch_up_fired("s_none2", "none", 500, &newest);
    ck_assert_int_eq(th_cron_fire_times(C, "s_none2", f, 16), 0);
}
END_TEST

/* A schedule removed and set again never takes a generation an old cron_fire carries, and
 * setting a schedule again clears the error a leader recorded. */
START_TEST(test_generations_and_error_reset) {
    int64_t now = th_redis_ms(C), f[4];
    char fires[32], *g_old, *g_new;
    cJSON *root;
    const cJSON *s;
    redisReply *r;
    th_expect_str(th_cmd(C, "FCALL dtq_cron_set 0 a re %s q t {}", "@every 1s"), "created");
    g_old = gen_of("q", "re");
    ck_assert_int_eq(th_int(th_cmd(C, "FCALL dtq_cron_remove 0 a re")), 1);
    th_expect_str(th_cmd(C, "FCALL dtq_cron_set 0 a re %s q t {}", "@every 1s"), "created");
    g_new = gen_of("q", "re");
    ck_assert_str_ne(g_old, g_new);
    snprintf(fires, sizeof(fires), "%lld", (long long)(now - 500));
    ck_assert_int_eq(fire("q", "re", g_old, 60000, "", fires), 0);
    ck_assert_int_eq(th_cron_fire_times(C, "re", f, 4), 0);
    /* an error recorded, then the same set again: cleared and planned afresh */
    r = th_cmd(C, "FCALL dtq_cron_fire 0 w1 re q %s 1000 %s %s", g_new, "", "spec: broken");
    freeReplyObject(r);
    th_expect_str(th_cmd(C, "FCALL dtq_cron_set 0 a re %s q t {}", "@every 1s"), "unchanged");
    s = schedule("re", &root);
    ck_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(s, "error")));
    cJSON_Delete(root);
    free(g_old);
    free(g_new);
}
END_TEST

START_TEST(test_run_error_and_sync) {
    redisReply *r;
    cJSON *root;
    const cJSON *s;
    char *g;
    th_expect_str(
        th_cmd(C, "FCALL dtq_cron_set 0 a mine %s q t {} origin config:h:/a.ini", "@hourly"),
        "created");
    th_expect_str(
        th_cmd(C, "FCALL dtq_cron_set 0 a theirs %s q t {} origin config:h:/b.ini", "@hourly"),
        "created");
    th_expect_str(th_cmd(C, "FCALL dtq_cron_set 0 a live %s q t {}", "@hourly"), "created");
    /* run: a task now, last_fire untouched */
    r = th_cmd(C, "FCALL dtq_cron_run 0 a live");
    ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
    th_assert_field(C, r->str, "cron", "live");
    th_assert_field(C, r->str, "status", "queued");
    freeReplyObject(r);
    s = schedule("live", &root);
    ck_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(s, "last_fire_ms")));
    cJSON_Delete(root);
    /* an error the leader reports: recorded, and cron_due no longer hands it out */
    g = gen_of("q", "live");
    r = th_cmd(C, "FCALL dtq_cron_fire 0 w1 live q %s 1000 %s %s", g, "", "spec: broken");
    freeReplyObject(r);
    free(g);
    s = schedule("live", &root);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(s, "error")->valuestring, "spec: broken");
    cJSON_Delete(root);
    r = th_cmd(C, "FCALL_RO dtq_cron_due 0");
    for (size_t i = 4; i < r->elements; i++)
        ck_assert_str_ne(r->element[i]->element[0]->str, "live");
    ck_assert_int_eq(r->elements, 4 + 2); /* mine and theirs, unplanned */
    freeReplyObject(r);
    /* a sync of /a.ini without `mine` removes it, and nothing of another origin */
    ck_assert_int_eq(th_int(th_cmd(C, "FCALL dtq_cron_sync 0 a config:h:/a.ini")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "HEXISTS dtq:crons mine")), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "HEXISTS dtq:crons theirs")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "HEXISTS dtq:crons live")), 1);
}
END_TEST

int main(void) {
    Suite *s = suite_create("lua_cron");
    TCase *sched = tcase_create("schedules"), *fire = tcase_create("firing");
    tcase_add_checked_fixture(sched, setup, teardown);
    tcase_set_timeout(sched, 60);
    tcase_add_test(sched, test_set_refusals_and_replace);
    tcase_add_test(sched, test_run_error_and_sync);
    suite_add_tcase(s, sched);
    tcase_add_checked_fixture(fire, setup, teardown);
    tcase_set_timeout(fire, 60);
    tcase_add_test(fire, test_fire_once_and_never_early);
    tcase_add_test(fire, test_catch_up_policies);
    tcase_add_test(fire, test_generations_and_error_reset);
    suite_add_tcase(s, fire);
    return th_run_suite(s);
}
