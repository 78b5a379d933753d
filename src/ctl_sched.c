/* ctl_sched.c: dtqctl's verbs for delayed and retrying tasks and for a queue as a whole.
 * The list renders <ns>_scheduled page by page (its cursor); the actions are the admin
 * Functions of reference 5.6 with dtqctl as the actor. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "util.h"
#include "view_merge.h"

#define SCHEDULED_PAGE_MAX 500 /* <ns>_scheduled's count bound */

static const cJSON *member(const cJSON *o, const char *name) {
    return cJSON_GetObjectItemCaseSensitive(o, name);
}

static const char *str_or(const cJSON *o, const char *name, const char *dflt) {
    const cJSON *v = member(o, name);
    return cJSON_IsString(v) ? v->valuestring : dflt;
}

static long long num_or(const cJSON *o, const char *name, long long dflt) {
    const cJSON *v = member(o, name);
    return cJSON_IsNumber(v) ? (long long)v->valuedouble : dflt;
}

/* One scheduled task on a line: id, queue, type, why it waits, due time, attempt, last
 * error. */
static void print_item(const cJSON *e) {
    char ms[32], when[80];
    const char *err = str_or(e, "last_error", ""), *cls = str_or(e, "last_error_class", "");
    snprintf(ms, sizeof(ms), "%lld", num_or(e, "due_ms", -1));
    if (!ctl_iso_time(ms, when, sizeof(when))) snprintf(when, sizeof(when), "?");
    *strchrnul(when, ' ') = '\0'; /* the ISO time alone */
    printf("%s  %s  %s  %s  due=%s  attempt=%lld/%lld", str_or(e, "task_id", "?"),
           str_or(e, "queue", "?"), str_or(e, "task_type", "?"),
           str_or(e, "reason", str_or(e, "kind", "?")), when,
           num_or(e, "next_attempt", num_or(e, "attempt", 0)), num_or(e, "max_attempts", 0));
    if (*str_or(e, "limited_by", "")) printf("  limited_by=%s", str_or(e, "limited_by", ""));
    if (*cls || *err) printf("  %s%s%s", cls, *cls && *err ? ": " : "", err);
    printf("\n");
}

static void scheduled_entry(ctl *x, cJSON *e, void *arg) {
    DTQ_UNUSED(arg);
    if (x->json) {
        char *out = cJSON_PrintUnformatted(e);
        printf("%s", out);
        free(out);
    } else {
        print_item(e);
    }
}

/* scheduled list [--queue Q] [--kind delayed|retrying|all] [--count N]: the tasks waiting
 * in the schedule, soonest due first (N: 100 unless given). */
int ctl_scheduled_list(ctl *x, const ctl_verb *v, int argc, char **argv) {
    const char *queue = "", *kind = "all";
    long long want = 100;
    DTQ_UNUSED(v);
    for (int i = 0; i < argc; i++) {
        int64_t n;
        if (!strcmp(argv[i], "--queue") && i + 1 < argc) {
            queue = argv[++i];
        } else if (!strcmp(argv[i], "--kind") && i + 1 < argc) {
            kind = argv[++i];
        } else if (!strcmp(argv[i], "--count") && i + 1 < argc &&
                   dtq_parse_int64(argv[i + 1], 1, 1000000, &n) == DTQ_OK) {
            want = n;
            i++;
        } else {
            ctl_usage_error("scheduled list: bad argument '%s'", argv[i]);
        }
    }
    {
        const char *a[6] = {NULL, NULL, "queue", queue, "kind", kind};
        char *one[1] = {(char *)queue};
        int n = 1;
        /* the cluster layout with --queue: that queue's schedule alone (its slot) */
        char **scopes = *queue && x->cluster ? one : ctl_scopes(x, &n);
        ctl_list_merged(x, scopes, n, "scheduled", 6, a, want, SCHEDULED_PAGE_MAX,
                        dtq_view_merge_scheduled, scheduled_entry, NULL);
        if (scopes != one) dtq_scope_names_free(scopes, n);
    }
    return 0;
}

/* scheduled run-now|delete <id> [--queue Q]: the Function's word for the id; a task that is
 * not in the schedule (not_found, not_scheduled) is exit 1. */
int ctl_scheduled_act(ctl *x, const ctl_verb *v, int argc, char **argv) {
    const char *queue = ctl_take_queue("scheduled", &argc, argv), *a[2] = {CTL_ACTOR, NULL};
    const char *word;
    redisReply *r;
    int rc = 0;
    if (argc != 1) ctl_verb_usage(v);
    a[1] = argv[0];
    r = ctl_fcall(x, 0, ctl_id_queue(x, queue), v->fn, 2, a);
    word = r->type == REDIS_REPLY_ARRAY && r->elements == 1 && r->element[0]->str
               ? r->element[0]->str
               : NULL;
    if (!word) ctl_refused("unexpected reply to %s_%s", x->ns, v->fn);
    if (!strcmp(word, "not_found") || !strcmp(word, "not_scheduled")) {
        fprintf(stderr, "dtqctl: task %s: %s\n", argv[0],
                !strcmp(word, "not_found") ? "no such task" : "not in the schedule");
        rc = CTL_EXIT_REFUSED;
    }
    if (x->json)
        printf("{\"task_id\":\"%s\",\"result\":\"%s\"}\n", argv[0], word);
    else if (!rc)
        printf("%s %s\n", argv[0], word);
    freeReplyObject(r);
    return rc;
}

/* queue clear <queue> [--delete]: <ns>_queue_clear until it says no more is waiting. */
int ctl_queue_clear(ctl *x, const ctl_verb *v, int argc, char **argv) {
    const char *queue = NULL, *a[3] = {CTL_ACTOR, NULL, "delete"};
    int del = 0;
    long long cleared = 0, dropped = 0, more = 1;
    DTQ_UNUSED(v);
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--delete"))
            del = 1;
        else if (!queue && argv[i][0] != '-')
            queue = argv[i];
        else
            ctl_usage_error("queue clear: bad argument '%s'", argv[i]);
    }
    if (!queue) ctl_usage_error("usage: dtqctl queue clear <queue> [--delete]");
    a[1] = queue;
    while (more) {
        redisReply *r = ctl_fcall(x, 0, queue, "queue_clear", del ? 3 : 2, a);
        long long c, d;
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 3)
            ctl_refused("unexpected reply to %s_queue_clear", x->ns);
        c = r->element[0]->integer;
        d = r->element[1]->integer;
        more = r->element[2]->integer;
        freeReplyObject(r);
        cleared += c;
        dropped += d;
        if (c + d == 0) break; /* nothing taken: what is left is not for clearing */
    }
    if (x->json)
        printf("{\"queue\":\"%s\",\"%s\":%lld,\"dropped\":%lld}\n", queue,
               del ? "deleted" : "dead_lettered", cleared, dropped);
    else
        printf("%lld %s\n", cleared, del ? "deleted" : "dead-lettered (class cleared)");
    return 0;
}

/* queue remove <queue>: <ns>_queue_remove; a queue that holds anything is exit 1. */
int ctl_queue_remove(ctl *x, const ctl_verb *v, int argc, char **argv) {
    const char *a[2] = {CTL_ACTOR, argv[0]};
    redisReply *r = ctl_fcall(x, 0, argv[0], "queue_remove", 2, a);
    DTQ_UNUSED(v);
    DTQ_UNUSED(argc);
    if (r->type == REDIS_REPLY_STRING && !strcmp(r->str, "removed"))
        ctl_queue_index_remove(x, argv[0]);
    if (x->json)
        printf("{\"queue\":\"%s\",\"result\":\"%s\"}\n", argv[0], r->str ? r->str : "");
    else
        printf("%s %s\n", argv[0], r->str ? r->str : "");
    freeReplyObject(r);
    return 0;
}

/* queue mode <queue> lean|full: <ns>_queue_mode with the actor (reference 4.3). */
int ctl_queue_mode(ctl *x, const ctl_verb *v, int argc, char **argv) {
    const char *a[3] = {CTL_ACTOR, argv[0], argv[1]};
    redisReply *r;
    DTQ_UNUSED(v);
    DTQ_UNUSED(argc);
    if (strcmp(argv[1], "lean") && strcmp(argv[1], "full"))
        ctl_usage_error("queue mode: the mode is lean or full, not '%s'", argv[1]);
    r = ctl_fcall(x, 0, argv[0], "queue_mode", 3, a);
    ctl_queue_index_add(x, argv[0]);
    if (x->json)
        printf("{\"queue\":\"%s\",\"mode\":\"%s\"}\n", argv[0], r->str ? r->str : "");
    else
        printf("%s %s\n", argv[0], r->str ? r->str : "");
    freeReplyObject(r);
    return 0;
}
