/* it_obs.c: what an operator of a real dtq-worker sees. /metrics, scraped after known work
 * (successes, a retry, dead letters, a timeout, an unknown task type) and parsed with
 * Prometheus' own parser (tests/support/prom_parse.py, python3-prometheus-client): every family
 * has HELP and TYPE, the labelled task counters and histograms have the values the work
 * implies, and no label value comes from a task. The log: one line per failed, retried,
 * dead-lettered, timed-out, cancelled or handed-back attempt, as JSON with separate fields
 * or as key=value text, and a rate limit that turns a poisoned burst into a few lines and a
 * summary with the count. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <check.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

static th_redis R;
static redisContext *C;

#define HANDLERS                                                                                   \
    "[handler:ok]\nbuiltin = noop\n"                                                               \
    "[handler:flaky]\nbuiltin = flaky\n"                                                           \
    "[handler:fail]\nbuiltin = fail\n"                                                             \
    "[handler:slow]\nbuiltin = sleep\ntimeout_ms = 300\nmax_attempts = 1\n"                        \
    "[handler:nap]\nbuiltin = sleep\n"
#define FAST_RETRY "[retry]\nbase_delay = 0.1\nmax_delay = 0.2\njitter = 0\n"
#define FAST_SCHED "[scheduler]\ninterval_ms = 100\nleader_lock_ms = 2000\n"

static void setup(void) {
    th_fixture_start(&R, &C, TH_LIBRARY, NULL);
}

static void teardown(void) {
    th_fixture_stop(&R, &C);
}

/* Starts a daemon with the test's handlers and `extra` config; with port > 0, [http] too. */
static void start(th_daemon *d, const char *id, int port, const char *extra) {
    char ini[4096], http[64] = "";
    if (port > 0) snprintf(http, sizeof(http), "[http]\nlisten = 127.0.0.1:%d\n", port);
    snprintf(ini, sizeof(ini),
             "[worker]\nworker_id = %s\nheartbeat_interval_s = 1\nvisibility_timeout_s = 5\n"
             "drain_timeout_s = 1\n%s%s%s%s%s",
             id, extra, http, FAST_RETRY, FAST_SCHED, HANDLERS);
    th_daemon_start(d, &R, ini);
    th_daemon_wait_ready(C, id, 10000);
}

/* ---- /metrics through Prometheus' parser ---- */

/* GET /metrics: the body of a 200 answer (caller frees). */
static char *scrape(int port) {
    struct sockaddr_in sa = {0};
    const char *req = "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n";
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    size_t cap = 1 << 20, got = 0;
    char *buf = malloc(cap), *body;
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        ssize_t n;
        ck_assert_msg(poll(&p, 1, 5000) == 1, "no answer from /metrics");
        n = recv(fd, buf + got, cap - 1 - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
        ck_assert_uint_lt(got, cap - 1);
    }
    close(fd);
    buf[got] = '\0';
    ck_assert_msg(!strncmp(buf, "HTTP/1.1 200 ", 13), "not a 200: %.80s", buf);
    body = strstr(buf, "\r\n\r\n");
    ck_assert_ptr_nonnull(body);
    body = strdup(body + 4);
    free(buf);
    return body;
}

static cJSON *family(cJSON *fams, const char *name) {
    cJSON *f;
    cJSON_ArrayForEach(f, fams) {
        if (!strcmp(cJSON_GetObjectItem(f, "name")->valuestring, name)) return f;
    }
    return NULL;
}

static void assert_value(cJSON *fams, const char *name, const char *labels, double want) {
    double have = th_metrics_value(fams, name, labels);
    ck_assert_msg(have == want, "%s{%s} is %g, want %g", name, labels, have, want);
}

/* Sum of the samples of one name over all label sets. */
static double total(cJSON *fams, const char *name) {
    cJSON *f, *s;
    double sum = 0;
    cJSON_ArrayForEach(f, fams) {
        cJSON_ArrayForEach(s, cJSON_GetObjectItem(f, "samples")) {
            if (!strcmp(cJSON_GetObjectItem(s, "name")->valuestring, name))
                sum += cJSON_GetObjectItem(s, "value")->valuedouble;
        }
    }
    return sum;
}

typedef struct scrape_until {
    int port;
    const char *name;
    double want;
    cJSON *fams; /* the last parse */
} scrape_until;

static int total_reached(void *arg) {
    scrape_until *u = arg;
    char *body = scrape(u->port);
    if (u->fams) cJSON_Delete(u->fams);
    u->fams = th_metrics_parse(&R, body);
    free(body);
    return total(u->fams, u->name) >= u->want;
}

/* Scrapes until the samples of `name` add up to want; returns the families of then. */
static cJSON *scrape_until_total(int port, const char *name, double want) {
    scrape_until u = {port, name, want, NULL};
    ck_assert_msg(th_wait_until(total_reached, &u, 10000), "%s stays at %g, want %g", name,
                  u.fams ? total(u.fams, name) : -1, want);
    return u.fams;
}

/* Every family has HELP and a TYPE; counters' samples end in _total; every label value of
 * the task families is a configured name or _other. */
static void assert_conventions(cJSON *fams) {
    static const char *const allowed_types[] = {"ok", "flaky", "fail", "slow", "nap", "_other"};
    cJSON *f, *s;
    cJSON_ArrayForEach(f, fams) {
        const char *name = cJSON_GetObjectItem(f, "name")->valuestring;
        const char *type = cJSON_GetObjectItem(f, "type")->valuestring;
        ck_assert_msg(strlen(cJSON_GetObjectItem(f, "help")->valuestring) > 0, "%s has no HELP",
                      name);
        ck_assert_msg(!strcmp(type, "counter") || !strcmp(type, "gauge") ||
                          !strcmp(type, "histogram"),
                      "%s has type %s (no TYPE line?)", name, type);
        cJSON_ArrayForEach(s, cJSON_GetObjectItem(f, "samples")) {
            const char *sn = cJSON_GetObjectItem(s, "name")->valuestring;
            cJSON *l = cJSON_GetObjectItem(s, "labels"), *tt = cJSON_GetObjectItem(l, "task_type");
            cJSON *q = cJSON_GetObjectItem(l, "queue");
            size_t n = strlen(sn);
            int ok = 0;
            if (!strcmp(type, "counter"))
                ck_assert_msg(n > 6 && !strcmp(sn + n - 6, "_total"), "counter sample %s", sn);
            if (q)
                ck_assert_msg(!strcmp(q->valuestring, "default") ||
                                  !strcmp(q->valuestring, "_other"),
                              "%s has queue=%s", sn, q->valuestring);
            if (!tt) continue;
            for (size_t i = 0; i < sizeof(allowed_types) / sizeof(allowed_types[0]); i++)
                if (!strcmp(tt->valuestring, allowed_types[i])) ok = 1;
            ck_assert_msg(ok, "%s has task_type=%s, not a configured handler", sn, tt->valuestring);
        }
    }
}

/* Buckets of one histogram label set: cumulative, +Inf equal to _count. */
static void assert_histogram(cJSON *fams, const char *name, const char *labels) {
    static const char *const le[] = {"0.001", "0.005", "0.01", "0.025", "0.05", "0.1",
                                     "0.25",  "0.5",   "1",    "2.5",   "5",    "10",
                                     "30",    "60",    "300",  "900",   "3600", "+Inf"};
    char bucket[128], l[256];
    double prev = 0, count;
    snprintf(bucket, sizeof(bucket), "%s_bucket", name);
    for (size_t i = 0; i < sizeof(le) / sizeof(le[0]); i++) {
        double v;
        snprintf(l, sizeof(l), "%s,le=%s", labels, le[i]);
        v = th_metrics_value(fams, bucket, l);
        ck_assert_msg(!isnan(v), "no %s{%s}", bucket, l);
        ck_assert_msg(v >= prev, "%s{%s} = %g < the bucket before, %g", bucket, l, v, prev);
        prev = v;
    }
    snprintf(l, sizeof(l), "%s_count", name);
    count = th_metrics_value(fams, l, labels);
    ck_assert_msg(count == prev, "%s{%s} is %g, +Inf bucket %g", l, labels, count, prev);
}

START_TEST(test_metrics) {
    th_daemon d;
    int port = th_free_port();
    char *body;
    cJSON *fams;
    char l[256];
    /* Three tasks wait 1.2 s before any worker runs: their wait is above 1 s. */
    th_enqueue(C, "default", "ok1", "ok", "{}", NULL);
    th_enqueue(C, "default", "ok2", "ok", "{}", NULL);
    th_enqueue(C, "default", "ok3", "ok", "{}", NULL);
    th_sleep_ms(1200);
    start(&d, "w-metrics", port, "");
    th_enqueue(C, "default", "flaky1", "flaky", "{\"succeed_on\": 2}", NULL);
    th_enqueue(C, "default", "fail1", "fail", "{\"message\": \"no\"}", NULL);
    th_enqueue(C, "default", "slow1", "slow", "{\"ms\": 5000}", NULL);
    th_enqueue(C, "default", "mystery1", "mystery", "{}", NULL);
    th_expect_status(C, "flaky1", "succeeded", 10000);
    th_expect_status(C, "fail1", "dead_lettered", 10000);
    th_expect_status(C, "slow1", "dead_lettered", 10000);
    th_expect_status(C, "mystery1", "dead_lettered", 10000);
    th_expect_status(C, "ok3", "succeeded", 10000);

    /* 8 attempts: 3 ok, 2 flaky (a retry, then a success), fail, slow, mystery. */
    fams = scrape_until_total(port, "dtq_tasks_total", 8);
    assert_conventions(fams);
    assert_value(fams, "dtq_tasks_total", "queue=default,task_type=ok,outcome=succeeded", 3);
    assert_value(fams, "dtq_tasks_total", "queue=default,task_type=flaky,outcome=retried", 1);
    assert_value(fams, "dtq_tasks_total", "queue=default,task_type=flaky,outcome=succeeded", 1);
    assert_value(fams, "dtq_tasks_total", "queue=default,task_type=fail,outcome=dead_lettered", 1);
    assert_value(fams, "dtq_tasks_total", "queue=default,task_type=slow,outcome=dead_lettered", 1);
    assert_value(fams, "dtq_tasks_total", "queue=default,task_type=_other,outcome=dead_lettered",
                 1);
    assert_value(fams, "dtq_tasks_total", "queue=default,task_type=ok,outcome=dead_lettered", 0);
    /* a configured handler nothing ran for is there from the start, at zero */
    assert_value(fams, "dtq_tasks_total", "queue=default,task_type=nap,outcome=succeeded", 0);
    assert_value(fams, "dtq_task_failures_total", "queue=default,task_type=flaky,class=retryable",
                 1);
    assert_value(fams, "dtq_task_failures_total", "queue=default,task_type=fail,class=permanent",
                 1);
    assert_value(fams, "dtq_task_failures_total", "queue=default,task_type=slow,class=timeout", 1);
    assert_value(fams, "dtq_task_failures_total",
                 "queue=default,task_type=_other,class=unknown_task_type", 1);
    assert_value(fams, "dtq_task_failures_total", "queue=default,task_type=ok,class=permanent", 0);
    ck_assert_str_eq(cJSON_GetObjectItem(family(fams, "dtq_tasks"), "type")->valuestring,
                     "counter");

    /* Handler run time: the timeout stopped slow1 after 300 ms. */
    ck_assert_str_eq(
        cJSON_GetObjectItem(family(fams, "dtq_task_duration_seconds"), "type")->valuestring,
        "histogram");
    assert_histogram(fams, "dtq_task_duration_seconds", "queue=default,task_type=ok");
    assert_histogram(fams, "dtq_task_duration_seconds", "queue=default,task_type=slow");
    assert_value(fams, "dtq_task_duration_seconds_count", "queue=default,task_type=ok", 3);
    assert_value(fams, "dtq_task_duration_seconds_count", "queue=default,task_type=flaky", 2);
    assert_value(fams, "dtq_task_duration_seconds_count", "queue=default,task_type=slow", 1);
    assert_value(fams, "dtq_task_duration_seconds_bucket", "queue=default,task_type=slow,le=0.25",
                 0);
    ck_assert(th_metrics_value(fams, "dtq_task_duration_seconds_sum",
                               "queue=default,task_type=slow") >= 0.29);
    /* an unknown type's handler never ran: no run time */
    assert_value(fams, "dtq_task_duration_seconds_count", "queue=default,task_type=_other", 0);

    /* Wait: 8 starts in the queue, the first three after more than a second. */
    ck_assert_str_eq(
        cJSON_GetObjectItem(family(fams, "dtq_task_wait_seconds"), "type")->valuestring,
        "histogram");
    assert_histogram(fams, "dtq_task_wait_seconds", "queue=default");
    assert_value(fams, "dtq_task_wait_seconds_count", "queue=default", 8);
    ck_assert(th_metrics_value(fams, "dtq_task_wait_seconds_bucket", "queue=default,le=1") <= 5);
    ck_assert(th_metrics_value(fams, "dtq_task_wait_seconds_sum", "queue=default") >= 3 * 1.2);

    /* The series reference.md documented before stay, with the same meaning. */
    assert_value(fams, "dtq_tasks_processed_total", "", 8);
    assert_value(fams, "dtq_tasks_succeeded_total", "", 4);
    assert_value(fams, "dtq_tasks_failed_total", "", 3);
    assert_value(fams, "dtq_tasks_retried_total", "", 1);
    assert_value(fams, "dtq_concurrency", "", 16);
    assert_value(fams, "dtq_redis_connected", "", 1);
    ck_assert(!isnan(th_metrics_value(fams, "dtq_finish_batches_total", "")));
    ck_assert(!isnan(th_metrics_value(fams, "dtq_active_tasks", "")));
    ck_assert(!isnan(th_metrics_value(fams, "dtq_scheduler_leader", "")));
    ck_assert(!isnan(th_metrics_value(fams, "dtq_scheduler_scheduled", "")));
    ck_assert(!isnan(th_metrics_value(fams, "dtq_scheduler_claimed", "")));
    ck_assert(!isnan(th_metrics_value(fams, "dtq_scheduler_promoted_total", "")));
    cJSON_Delete(fams);

    /* The task's own type name never becomes a label value. */
    body = scrape(port);
    ck_assert_ptr_null(strstr(body, "mystery"));
    free(body);

    /* A reload that adds a handler adds its series; the counts stay. */
    snprintf(l, sizeof(l), "[handler:late]\nbuiltin = noop\n");
    {
        FILE *f = fopen(d.cfg, "a");
        ck_assert_ptr_nonnull(f);
        fputs(l, f);
        fclose(f);
    }
    kill(d.pid, SIGHUP);
    ck_assert(th_wait_log(d.log, "SIGHUP: configuration reloaded", 1, 5000));
    body = scrape(port);
    fams = th_metrics_parse(&R, body);
    free(body);
    assert_value(fams, "dtq_tasks_total", "queue=default,task_type=late,outcome=succeeded", 0);
    assert_value(fams, "dtq_tasks_total", "queue=default,task_type=ok,outcome=succeeded", 3);
    cJSON_Delete(fams);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* ---- log lines ---- */

/* The lines of a JSON log, each parsed (the test fails on a line that is not JSON), as an
 * array. */
static cJSON *json_lines(const char *path) {
    char *text = th_read_file(path), *save = NULL, *line;
    cJSON *all = cJSON_CreateArray();
    for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        cJSON *j = cJSON_Parse(line);
        ck_assert_msg(j && cJSON_IsObject(j), "not a JSON object: %s", line);
        cJSON_AddItemToArray(all, j);
    }
    free(text);
    return all;
}

static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItem(o, k);
    ck_assert_msg(cJSON_IsString(v), "field %s is not a string", k);
    return v->valuestring;
}

static double jnum(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItem(o, k);
    ck_assert_msg(cJSON_IsNumber(v), "field %s is not a number", k);
    return v->valuedouble;
}

/* The one line with this msg and task_id (and attempt, when > 0); fails when not one. */
static const cJSON *find_line(const cJSON *lines, const char *msg, const char *task_id,
                              int attempt) {
    const cJSON *l, *found = NULL;
    int n = 0;
    cJSON_ArrayForEach(l, lines) {
        const cJSON *m = cJSON_GetObjectItem(l, "msg"), *t = cJSON_GetObjectItem(l, "task_id");
        const cJSON *a = cJSON_GetObjectItem(l, "attempt");
        if (!cJSON_IsString(m) || strcmp(m->valuestring, msg) || !cJSON_IsString(t) ||
            strcmp(t->valuestring, task_id))
            continue;
        if (attempt > 0 && (!cJSON_IsNumber(a) || a->valueint != attempt)) continue;
        found = l;
        n++;
    }
    ck_assert_msg(n == 1, "%d lines '%s' for task %s attempt %d", n, msg, task_id, attempt);
    return found;
}

static void assert_task_line(const cJSON *l, const char *level, const char *type, int attempt,
                             int max_attempts, const char *cls, const char *outcome) {
    ck_assert_str_eq(jstr(l, "level"), level);
    ck_assert_str_eq(jstr(l, "queue"), "default");
    ck_assert_str_eq(jstr(l, "task_type"), type);
    ck_assert_int_eq((int)jnum(l, "attempt"), attempt);
    ck_assert_int_eq((int)jnum(l, "max_attempts"), max_attempts);
    ck_assert_str_eq(jstr(l, "class"), cls);
    ck_assert_str_eq(jstr(l, "outcome"), outcome);
    ck_assert_str_eq(jstr(l, "worker"), "w-json");
    ck_assert(jnum(l, "duration_ms") >= 0);
    ck_assert(strlen(jstr(l, "ts")) > 0);
}

START_TEST(test_json_lines) {
    th_daemon d;
    cJSON *lines;
    const cJSON *l;
    redisReply *r;
    char *text;
    start(&d, "w-json", 0, "[log]\nformat = json\n");
    /* a retry, then a dead letter; the error's first line only */
    th_enqueue(C, "default", "j-fail", "fail",
               "{\"message\": \"boom \\\"quoted\\\"\\nsecond line\", \"retryable\": true}",
               "max_attempts 2");
    th_enqueue(C, "default", "j-slow", "slow", "{\"ms\": 5000}", NULL);
    th_enqueue(C, "default", "j-ok", "ok", "{}", NULL);
    th_enqueue(C, "default", "j-nap", "nap", "{\"ms\": 60000}", NULL);
    th_enqueue(C, "default", "j-last", "nap", "{\"ms\": 60000}", NULL);
    th_expect_status(C, "j-fail", "dead_lettered", 10000);
    th_expect_status(C, "j-slow", "dead_lettered", 10000);
    th_expect_status(C, "j-ok", "succeeded", 10000);
    th_expect_status(C, "j-nap", "running", 10000);
    r = th_cmd(C, "FCALL dtq_cancel 0 j-nap");
    freeReplyObject(r);
    th_expect_status(C, "j-nap", "cancelled", 10000);
    ck_assert(th_wait_log(d.log, "\"msg\":\"task cancelled\"", 1, 5000));
    th_expect_status(C, "j-last", "running", 10000);
    /* the drain runs out of time (1 s) and hands j-last back */
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);

    lines = json_lines(d.log);
    l = find_line(lines, "task attempt failed; retry scheduled", "j-fail", 1);
    assert_task_line(l, "info", "fail", 1, 2, "retryable", "retried");
    ck_assert_str_eq(jstr(l, "error"), "boom \"quoted\"");
    l = find_line(lines, "task dead-lettered", "j-fail", 2);
    assert_task_line(l, "warn", "fail", 2, 2, "retryable", "dead_lettered");
    ck_assert_str_eq(jstr(l, "error"), "boom \"quoted\"");
    l = find_line(lines, "task dead-lettered", "j-slow", 1);
    assert_task_line(l, "warn", "slow", 1, 1, "timeout", "dead_lettered");
    ck_assert_str_eq(jstr(l, "error"), "timeout: attempt exceeded 300 ms");
    ck_assert(jnum(l, "duration_ms") >= 290);
    l = find_line(lines, "task cancelled", "j-nap", 1);
    assert_task_line(l, "info", "nap", 1, 5, "cancelled", "cancelled");
    l = find_line(lines, "task attempt interrupted; handed back", "j-last", 1);
    assert_task_line(l, "info", "nap", 1, 5, "interrupted", "handed_back");
    ck_assert(jnum(l, "duration_ms") >= 500);
    cJSON_Delete(lines);
    /* a success is logged at debug only */
    text = th_read_file(d.log);
    ck_assert_ptr_null(strstr(text, "j-ok"));
    free(text);
}
END_TEST

/* The value of key=value in a text line (unquoted, or quoted with \" and \\ escapes);
 * NULL when the key is absent. Caller frees. */
static char *text_field(const char *line, const char *key) {
    char needle[64], *out, *o;
    const char *p;
    snprintf(needle, sizeof(needle), " %s=", key);
    p = strstr(line, needle);
    if (!p) return NULL;
    p += strlen(needle);
    out = o = calloc(1, strlen(p) + 1);
    if (*p == '"') {
        for (p++; *p && *p != '"'; p++) {
            if (*p == '\\' && p[1]) p++;
            *o++ = *p;
        }
        ck_assert_msg(*p == '"', "unterminated quoted value of %s in: %s", key, line);
    } else {
        while (*p && *p != ' ' && *p != '\n') *o++ = *p++;
    }
    return out;
}

/* The one line of the file holding `needle`, as a caller-owned string. */
static char *text_line(const char *path, const char *needle) {
    char *text = th_read_file(path), *save = NULL, *line, *found = NULL;
    int n = 0;
    for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
        if (strstr(line, needle)) {
            free(found);
            found = strdup(line);
            n++;
        }
    free(text);
    ck_assert_msg(n == 1, "%d lines hold '%s' in %s", n, needle, path);
    return found;
}

static void assert_text_field(const char *line, const char *key, const char *want) {
    char *v = text_field(line, key);
    ck_assert_msg(v && !strcmp(v, want), "%s is '%s', want '%s' in: %s", key, v ? v : "(none)",
                  want, line);
    free(v);
}

START_TEST(test_text_lines) {
    th_daemon d;
    char *line;
    start(&d, "w-text", 0, "[log]\nlevel = debug\n");
    th_enqueue(C, "default", "t-ok", "ok", "{}", NULL);
    th_enqueue(C, "default", "t-fail", "fail", "{\"message\": \"no = good\\nmore\"}", NULL);
    th_expect_status(C, "t-ok", "succeeded", 10000);
    th_expect_status(C, "t-fail", "dead_lettered", 10000);
    ck_assert(th_wait_log(d.log, "task_id=t-fail", 1, 5000));
    ck_assert(th_wait_log(d.log, "task_id=t-ok", 1, 5000));
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);

    line = text_line(d.log, "task_id=t-ok");
    ck_assert_msg(strstr(line, " debug task succeeded "), "not a debug success: %s", line);
    assert_text_field(line, "queue", "default");
    assert_text_field(line, "task_type", "ok");
    assert_text_field(line, "attempt", "1");
    assert_text_field(line, "max_attempts", "5");
    assert_text_field(line, "worker", "w-text");
    assert_text_field(line, "outcome", "succeeded");
    ck_assert_ptr_null(text_field(line, "class"));
    free(line);
    line = text_line(d.log, "task_id=t-fail");
    ck_assert_msg(strstr(line, " warn  task dead-lettered "), "not a warn dead letter: %s", line);
    assert_text_field(line, "task_type", "fail");
    assert_text_field(line, "attempt", "1");
    assert_text_field(line, "class", "permanent");
    assert_text_field(line, "error", "no = good");
    assert_text_field(line, "outcome", "dead_lettered");
    ck_assert_msg(strstr(line, " error=\"no = good\""), "error not quoted: %s", line);
    free(line);
}
END_TEST

START_TEST(test_rate_limit) {
    enum { N = 40, R_N = 10 };
    th_daemon d;
    int64_t t0;
    cJSON *lines;
    const cJSON *l;
    int logged = 0, summaries = 0, retry_dead = 0;
    double suppressed = 0, elapsed_s;
    char id[32];
    /* A poisoned burst: N tasks that all fail the same way, there before the worker is. */
    for (int i = 0; i < N; i++) {
        snprintf(id, sizeof(id), "p%d", i);
        th_enqueue(C, "default", id, "fail", "{\"message\": \"poison\"}", NULL);
    }
    /* and R that fail twice, retryable: their retries must not hide their dead letters */
    for (int i = 0; i < R_N; i++) {
        snprintf(id, sizeof(id), "r%d", i);
        th_enqueue(C, "default", id, "fail", "{\"message\": \"again\", \"retryable\": true}",
                   "max_attempts 2");
    }
    t0 = th_now_ms();
    start(&d, "w-burst", 0, "[log]\nformat = json\ntask_lines_per_s = 3\n");
    for (int i = 0; i < N; i++) {
        snprintf(id, sizeof(id), "p%d", i);
        th_expect_status(C, id, "dead_lettered", 10000);
    }
    for (int i = 0; i < R_N; i++) {
        snprintf(id, sizeof(id), "r%d", i);
        th_expect_status(C, id, "dead_lettered", 10000);
    }
    elapsed_s = (double)(th_now_ms() - t0) / 1000.0;
    ck_assert_msg(th_wait_log(d.log, "task lines suppressed by the rate limit", 1, 5000),
                  "no summary line");
    th_sleep_ms(1500); /* any later window's summary too */
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
    lines = json_lines(d.log);
    cJSON_ArrayForEach(l, lines) {
        const char *msg = jstr(l, "msg");
        const cJSON *cls = cJSON_GetObjectItem(l, "class");
        if (!strcmp(msg, "task dead-lettered") && !strcmp(cls->valuestring, "retryable"))
            retry_dead++;
        if (!strcmp(msg, "task dead-lettered") && !strcmp(cls->valuestring, "permanent")) logged++;
        if (!strcmp(msg, "task lines suppressed by the rate limit") &&
            !strcmp(cls->valuestring, "permanent")) {
            ck_assert_str_eq(jstr(l, "queue"), "default");
            ck_assert_str_eq(jstr(l, "task_type"), "fail");
            ck_assert_str_eq(jstr(l, "class"), "permanent");
            ck_assert_str_eq(jstr(l, "outcome"), "permanent");
            ck_assert_str_eq(jstr(l, "level"), "warn");
            suppressed += jnum(l, "suppressed");
            summaries++;
        }
    }
    cJSON_Delete(lines);
    /* at most 3 a second, and every dead letter is either a line or in a summary's count */
    ck_assert_msg(logged <= 3 * (int)(elapsed_s + 2), "%d lines in %.1f s", logged, elapsed_s);
    ck_assert_int_ge(logged, 3);
    ck_assert_int_ge(summaries, 1);
    ck_assert_int_eq(logged + (int)suppressed, N);
    ck_assert_msg(retry_dead >= 3, "%d dead-letter lines after a burst of retries", retry_dead);
}
END_TEST

/* The scheduler's pass is one call per pass (<ns>_sched_claim): its reply sets the gauges
 * and the next wake-up. A delayed task is promoted at its due time, not an interval later;
 * the gauges are the sizes of the schedule and the claimed set as a pass found them. */
START_TEST(test_scheduler_pass) {
    th_daemon d;
    int port = th_free_port();
    char ini[2048], *v;
    long long created, started;
    cJSON *fams;
    th_enqueue(C, "default", "far1", "ok", "{}", "delay_ms 600000");
    th_enqueue(C, "default", "far2", "ok", "{}", "delay_ms 600000");
    th_enqueue(C, "default", "soon", "ok", "{}", "delay_ms 1500");
    snprintf(ini, sizeof(ini),
             "[worker]\nworker_id = w-sched\nheartbeat_interval_s = 1\nvisibility_timeout_s = 5\n"
             "drain_timeout_s = 1\n[http]\nlisten = 127.0.0.1:%d\n"
             "[scheduler]\ninterval_ms = 5000\nleader_lock_ms = 20000\n" HANDLERS,
             port);
    th_daemon_start(&d, &R, ini);
    th_daemon_wait_ready(C, "w-sched", 10000);
    th_expect_status(C, "soon", "succeeded", 10000);
    v = th_task_field(C, "soon", "created_at");
    created = atoll(v);
    free(v);
    v = th_task_field(C, "soon", "started_at");
    started = atoll(v);
    free(v);
    /* the first pass armed the next at soon's due time; without that the next pass comes
     * 4 to 6 s after the first, itself after the enqueue */
    ck_assert_int_ge(started - created, 1500);
    ck_assert_msg(started - created < 3900, "soon started %lld ms after its enqueue",
                  started - created);
    fams = scrape_until_total(port, "dtq_scheduler_promoted_total", 1);
    assert_value(fams, "dtq_scheduler_leader", "", 1);
    assert_value(fams, "dtq_scheduler_promoted_total", "", 1);
    cJSON_Delete(fams);
    /* a claim a pass finds (not stale: claim_timeout_ms is a minute) is in the claimed
     * gauge, and the schedule's gauge is its size then: far1 and far2 */
    freeReplyObject(th_cmd(C, "ZADD dtq:retry:claimed %lld ghost", (long long)th_redis_ms(C)));
    fams = scrape_until_total(port, "dtq_scheduler_claimed", 1);
    assert_value(fams, "dtq_scheduler_claimed", "", 1);
    assert_value(fams, "dtq_scheduler_scheduled", "", 2);
    cJSON_Delete(fams);
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD dtq:retry:schedule")), 2);
    ck_assert_int_eq(th_int(th_cmd(C, "ZCARD dtq:retry:claimed")), 1);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("obs");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_metrics);
    tcase_add_test(tc, test_json_lines);
    tcase_add_test(tc, test_text_lines);
    tcase_add_test(tc, test_rate_limit);
    tcase_add_test(tc, test_scheduler_pass);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
