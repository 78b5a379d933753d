/* ctl_cron.c: dtqctl's periodic-task verbs, each one Function of reference 5.8 with dtqctl
 * as the actor. `cron add` checks the spec and the zone here first (cron.c, the parser the
 * scheduler leader plans with), so that a bad one is refused at once, naming the field. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cron.h"
#include "ctl.h"
#include "reply_class.h"
#include "util.h"
#include "view_merge.h"

/* A flag of cron add and the <ns>_cron_set option it becomes. */
static const struct {
    const char *flag, *opt;
} add_opts[] = {{"--tz", "tz"},
                {"--catch-up", "catch_up"},
                {"--priority", "priority"},
                {"--max-attempts", "max_attempts"},
                {"--timeout-ms", "timeout_ms"},
                {"--ttl-seconds", "ttl_seconds"}};
#define NADD_OPTS (sizeof(add_opts) / sizeof(add_opts[0]))

/* cron add NAME SPEC QUEUE TASK_TYPE PAYLOAD [--tz ZONE] [--catch-up skip|none|all]
 * [--priority N] [--max-attempts N] [--timeout-ms N] [--ttl-seconds N] [--paused]. */
int ctl_cron_add(ctl *x, const ctl_verb *v, int argc, char **argv) {
    /* the actor, the five positionals, then option pairs */
    const char *a[6 + 2 * (NADD_OPTS + 1)], *tz = "UTC";
    int n = 6, npos = 0;
    char why[256];
    dtq_cron spec;
    redisReply *r;
    DTQ_UNUSED(v);
    a[0] = CTL_ACTOR;
    unsigned seen = 0; /* bit j: add_opts[j] given; bit NADD_OPTS: --paused */
    for (int i = 0; i < argc; i++) {
        size_t j;
        if (!strcmp(argv[i], "--paused")) {
            if (seen & (1u << NADD_OPTS)) ctl_usage_error("cron add: --paused given twice");
            seen |= 1u << NADD_OPTS;
            a[n++] = "paused";
            a[n++] = "1";
            continue;
        }
        for (j = 0; j < NADD_OPTS; j++)
            if (!strcmp(argv[i], add_opts[j].flag)) break;
        if (j < NADD_OPTS) {
            if (seen & (1u << j)) ctl_usage_error("cron add: %s given twice", argv[i]);
            seen |= 1u << j;
            if (i + 1 >= argc) ctl_usage_error("cron add: %s needs a value", argv[i]);
            if (!strcmp(add_opts[j].opt, "tz")) tz = argv[i + 1];
            a[n++] = add_opts[j].opt;
            a[n++] = argv[++i];
        } else if (strncmp(argv[i], "--", 2) && npos < 5) {
            a[1 + npos++] = argv[i];
        } else {
            ctl_usage_error("cron add: bad argument '%s'", argv[i]);
        }
    }
    if (npos != 5)
        ctl_usage_error("usage: dtqctl cron add NAME SPEC QUEUE TASK_TYPE PAYLOAD [options]");
    if (dtq_cron_parse(a[2], &spec, why, sizeof(why)) != 0)
        ctl_refused("INVALID_ARGUMENT spec '%s': %s", a[2], why);
    if (dtq_cron_zone_valid(tz, why, sizeof(why)) != 0)
        ctl_refused("INVALID_ARGUMENT tz '%s': %s", tz, why);
    if (dtq_cron_fires(&spec, tz, dtq_now_ms(), why, sizeof(why)) != 0)
        ctl_refused("INVALID_ARGUMENT spec '%s': %s", a[2], why);
    r = ctl_fcall(x, 0, a[3], "cron_set", n, a);
    ctl_queue_index_add(x, a[3]); /* so that cron list (over the index's queues) finds it */
    if (x->json) {
        cJSON *s = cJSON_CreateString(r->str ? r->str : "");
        ctl_print_json(s);
        cJSON_Delete(s);
    } else {
        printf("%s\n", r->str ? r->str : "");
    }
    freeReplyObject(r);
    return 0;
}

/* The cluster layout: the queue whose schedules hold `name`, asking each queue of the index
 * (<ns>_cron_list with the name); none is NOT_FOUND and two or more ask for --queue (exit
 * 1). Caller-owned. */
static char *cron_queue(ctl *x, const char *name) {
    const char *a[1] = {name};
    char *found = NULL;
    int n, hits = 0;
    char **scopes = ctl_scopes(x, &n);
    for (int i = 0; i < n; i++) {
        redisReply *r = ctl_fcall_reply(x, 1, scopes[i], "cron_list", 1, a);
        if (r->type == REDIS_REPLY_ERROR && dtq_reply_class_of(r->str) != DTQ_REPLY_NOT_FOUND)
            ctl_refused("%s", r->str);
        if (r->type != REDIS_REPLY_ERROR && hits++ == 0) found = dtq_xstrdup(scopes[i]);
        freeReplyObject(r);
    }
    if (hits > 1)
        ctl_refused("INVALID_ARGUMENT %d queues have a periodic schedule named %s: name its "
                    "queue with --queue Q",
                    hits, name);
    if (!found) ctl_refused("NOT_FOUND no periodic schedule named %s", name);
    dtq_scope_names_free(scopes, n);
    return found;
}

/* cron remove|pause|resume|run NAME [--queue Q]: what the Function did, in words (`paused
 * nightly`, `nightly was paused already`; run: the task id), or under --json {"name": NAME,
 * "changed": true|false} (run: {"name": NAME, "task_id": ID}). The single layout ignores Q;
 * the cluster layout calls in Q's slot, or finds the queue. */
int ctl_cron_act(ctl *x, const ctl_verb *v, int argc, char **argv) {
    const char *queue = ctl_take_queue("cron", &argc, argv), *a[2] = {CTL_ACTOR, NULL};
    char *found = NULL;
    redisReply *r;
    if (argc != 1) ctl_verb_usage(v);
    a[1] = argv[0];
    if (!x->cluster)
        queue = NULL;
    else if (!queue)
        queue = found = cron_queue(x, argv[0]);
    r = ctl_fcall(x, 0, queue, v->fn, 2, a);
    free(found);
    if (x->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", argv[0]);
        if (r->type == REDIS_REPLY_INTEGER)
            cJSON_AddBoolToObject(o, "changed", r->integer != 0);
        else
            cJSON_AddStringToObject(o, "task_id", r->str ? r->str : "");
        ctl_print_json(o);
        cJSON_Delete(o);
    } else if (r->type == REDIS_REPLY_INTEGER) {
        /* the sub-verb's past: removed, paused, resumed */
        const char *done = !strcmp(v->sub, "remove")  ? "removed"
                           : !strcmp(v->sub, "pause") ? "paused"
                                                      : "resumed";
        if (r->integer)
            printf("%s %s\n", done, argv[0]);
        else
            printf("%s was %s already\n", argv[0], done);
    } else {
        printf("%s\n", r->str ? r->str : "");
    }
    freeReplyObject(r);
    return 0;
}

static const char *str_or(const cJSON *o, const char *name, const char *dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsString(v) ? v->valuestring : dflt;
}

/* An epoch-ms member as an ISO time, "-" when null. */
static const char *when(const cJSON *o, const char *name, char *buf, size_t size) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    char ms[32];
    if (!cJSON_IsNumber(v)) return "-";
    snprintf(ms, sizeof(ms), "%.0f", v->valuedouble);
    if (!ctl_iso_time(ms, buf, size)) return "-";
    *strchrnul(buf, ' ') = '\0';
    return buf;
}

/* <ns>_cron_list over the queues (the cluster layout: one call per queue of the index),
 * merged as dtq-web merges them (view_merge.h: by name, then queue): {"schedules": [...]}. */
static cJSON *cron_list_all(ctl *x) {
    return ctl_read_merged(x, "cron_list", 0, NULL, 0, NULL, dtq_view_merge_cron);
}

/* cron list [--json]: every schedule with its next and last fire time, last task, state. */
int ctl_cron_list(ctl *x, const ctl_verb *v, int argc, char **argv) {
    cJSON *list, *e;
    DTQ_UNUSED(v);
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            x->json = 1;
        else
            ctl_usage_error("cron list: bad argument '%s'", argv[i]);
    }
    list = cron_list_all(x);
    e = cJSON_GetObjectItemCaseSensitive(list, "schedules");
    if (x->json) {
        ctl_print_json(e);
        cJSON_Delete(list);
        return 0;
    }
    if (!cJSON_GetArraySize(e)) printf("no periodic schedules\n");
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(list, "schedules")) {
        char next[80], last[80];
        const char *err = str_or(e, "error", NULL);
        printf("%s  '%s'  %s  %s  %s  next=%s  last=%s  last_task=%s%s", str_or(e, "name", "?"),
               str_or(e, "spec", "?"), str_or(e, "tz", "?"), str_or(e, "queue", "?"),
               str_or(e, "task_type", "?"), when(e, "next_fire_ms", next, sizeof(next)),
               when(e, "last_fire_ms", last, sizeof(last)), str_or(e, "last_task_id", "-"),
               cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "paused")) ? "  paused" : "");
        if (err) printf("  error: %s", err);
        printf("\n");
    }
    cJSON_Delete(list);
    return 0;
}
