/* ctl_limit.c: dtqctl's verbs for rate and concurrency limits (docs/reference.md 5.7):
 * limit set, list and remove, each one Function (<ns>_limit_set, <ns>_limit_list,
 * <ns>_limit_remove) with dtqctl as the actor. A target is a queue or queue:task_type,
 * split at the first ':' (a queue name with a ':' needs redis-cli and the Functions). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "util.h"
#include "view_merge.h"

#define PERIOD_MAX_MS 31536000000LL /* <ns>_limit_set's bound on period_ms: a year */

/* The target split into its queue and task type (a copy; "" for a queue-wide limit). */
static void split_target(const char *verb, const char *target, char *queue, size_t qsize,
                         const char **ttype) {
    const char *colon = strchr(target, ':');
    size_t qlen = colon ? (size_t)(colon - target) : strlen(target);
    if (qlen == 0 || qlen >= qsize || (colon && !colon[1]))
        ctl_usage_error("limit %s: bad target '%s' (queue or queue:task_type)", verb, target);
    memcpy(queue, target, qlen);
    queue[qlen] = '\0';
    *ttype = colon ? colon + 1 : "";
}

/* A PERIOD of --rate N/PERIOD in ms: a unit (ms, s, m, h, d) after an optional count
 * ("s", "10s", "500ms"); -1 when it is not one or not in [1 ms, a year]. */
static long long period_ms(const char *s) {
    static const struct {
        const char *unit;
        long long ms;
    } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
    long long n = 1;
    const char *p = s;
    if (*p >= '0' && *p <= '9') {
        n = 0;
        for (; *p >= '0' && *p <= '9'; p++) {
            n = n * 10 + (*p - '0');
            if (n > PERIOD_MAX_MS) return -1;
        }
    }
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (!strcmp(p, units[i].unit))
            return n >= 1 && n <= PERIOD_MAX_MS / units[i].ms ? n * units[i].ms : -1;
    return -1;
}

/* limit set <target> [--rate N/PERIOD] [--burst N] [--concurrency N] [--per-key] */
int ctl_limit_set(ctl *x, const ctl_verb *v, int argc, char **argv) {
    const char *a[16], *ttype;
    char queue[256], rate[32] = "", period[32] = "", *target = NULL;
    const char *burst = NULL, *conc = NULL;
    int n = 0, per_key = 0;
    redisReply *r;
    DTQ_UNUSED(v);
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--per-key")) {
            per_key = 1;
        } else if (!strcmp(argv[i], "--rate") && i + 1 < argc) {
            const char *slash = strchr(argv[++i], '/');
            int64_t nn;
            long long p = slash ? period_ms(slash + 1) : -1;
            if (slash && (size_t)(slash - argv[i]) < sizeof(rate)) {
                memcpy(rate, argv[i], (size_t)(slash - argv[i]));
                rate[slash - argv[i]] = '\0';
            }
            if (!slash || p < 0 || dtq_parse_int64(rate, 1, 1000000000, &nn) != DTQ_OK)
                ctl_usage_error("limit set: --rate needs N/PERIOD (N in [1, 1000000000]; "
                                "PERIOD s, m, h, d, or a duration such as 10s or 500ms), "
                                "not '%s'",
                                argv[i]);
            snprintf(period, sizeof(period), "%lld", p);
        } else if (!strcmp(argv[i], "--burst") && i + 1 < argc) {
            burst = argv[++i];
        } else if (!strcmp(argv[i], "--concurrency") && i + 1 < argc) {
            conc = argv[++i];
        } else if (!target && argv[i][0] != '-') {
            target = argv[i];
        } else {
            ctl_usage_error("limit set: bad argument '%s'", argv[i]);
        }
    }
    if (!target) ctl_usage_error("usage: dtqctl limit set <target> [options]");
    if (!*rate && !conc) ctl_usage_error("limit set: give --rate N/PERIOD or --concurrency N");
    split_target("set", target, queue, sizeof(queue), &ttype);
    a[n++] = CTL_ACTOR;
    a[n++] = queue;
    a[n++] = ttype;
    if (*rate) {
        a[n++] = "rate";
        a[n++] = rate;
        a[n++] = "period_ms";
        a[n++] = period;
    }
    if (burst) {
        a[n++] = "burst";
        a[n++] = burst;
    }
    if (conc) {
        a[n++] = "concurrency";
        a[n++] = conc;
    }
    a[n++] = "per_key";
    a[n++] = per_key ? "1" : "0";
    r = ctl_fcall(x, 0, queue, "limit_set", n, a);
    ctl_queue_index_add(x, queue); /* so that limit list (over the index's queues) finds it */
    printf("%s\n", r->str ? r->str : "");
    freeReplyObject(r);
    return 0;
}

/* limit remove <target> */
int ctl_limit_remove(ctl *x, const ctl_verb *v, int argc, char **argv) {
    const char *a[3], *ttype;
    char queue[256];
    redisReply *r;
    DTQ_UNUSED(v);
    DTQ_UNUSED(argc);
    split_target("remove", argv[0], queue, sizeof(queue), &ttype);
    a[0] = CTL_ACTOR;
    a[1] = queue;
    a[2] = ttype;
    r = ctl_fcall(x, 0, queue, "limit_remove", 3, a);
    printf("%s\n", r->str ? r->str : "");
    freeReplyObject(r);
    return 0;
}

/* A number of the JSON, or "-" for null. */
static const char *num_text(const cJSON *o, const char *name, char *buf, size_t size) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsNumber(v)) return "-";
    snprintf(buf, size, "%.0f", v->valuedouble);
    return buf;
}

/* "20/s", "100/10s", "5/1500ms": the rate as --rate takes it. */
static void rate_text(const cJSON *l, char *buf, size_t size) {
    const cJSON *rate = cJSON_GetObjectItemCaseSensitive(l, "rate");
    const cJSON *per = cJSON_GetObjectItemCaseSensitive(l, "period_ms");
    static const struct {
        const char *unit;
        long long ms;
    } units[] = {{"d", 86400000}, {"h", 3600000}, {"m", 60000}, {"s", 1000}, {"ms", 1}};
    long long p;
    if (!cJSON_IsNumber(rate) || !cJSON_IsNumber(per)) {
        snprintf(buf, size, "-");
        return;
    }
    p = (long long)per->valuedouble;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (p % units[i].ms) continue;
        if (p == units[i].ms)
            snprintf(buf, size, "%.0f/%s", rate->valuedouble, units[i].unit);
        else
            snprintf(buf, size, "%.0f/%lld%s", rate->valuedouble, p / units[i].ms, units[i].unit);
        return;
    }
}

/* One <ns>_limit_list answer, which must be an array. */
static cJSON *limit_list_part(ctl *x, const char *queue, const char *fn, int argc,
                              const char **args) {
    cJSON *list = ctl_read_model(x, queue, fn, argc, args);
    if (!cJSON_IsArray(list)) ctl_refused("unexpected reply to %s_%s", x->ns, fn);
    return list;
}

/* <ns>_limit_list's array; the cluster layout's one call per queue of the index merged by
 * view_merge.c's rule (by queue). */
static cJSON *limit_list_all(ctl *x) {
    return ctl_read_merged(x, "limit_list", 0, NULL, 0, limit_list_part, dtq_view_merge_limits);
}

/* limit list [--json]: <ns>_limit_list, one line per limit (or its JSON array). */
int ctl_limit_list(ctl *x, const ctl_verb *v, int argc, char **argv) {
    cJSON *list, *l;
    DTQ_UNUSED(v);
    if (argc == 1 && strcmp(argv[0], "--json"))
        ctl_usage_error("limit list: bad argument '%s'", argv[0]);
    if (argc == 1) x->json = 1;
    list = limit_list_all(x);
    if (x->json) {
        ctl_print_json(list);
        cJSON_Delete(list);
        return 0;
    }
    printf("%-32s %-12s %-6s %-12s %-8s %-8s %-7s %s\n", "TARGET", "RATE", "BURST", "CONCURRENCY",
           "PER_KEY", "RUNNING", "TOKENS", "KEYS");
    cJSON_ArrayForEach(l, list) {
        const cJSON *use = cJSON_GetObjectItemCaseSensitive(l, "use");
        const cJSON *target = cJSON_GetObjectItemCaseSensitive(l, "target");
        char rate[48], b1[32], b2[32], b3[32], b4[32], b5[32];
        rate_text(l, rate, sizeof(rate));
        printf("%-32s %-12s %-6s %-12s %-8s %-8s %-7s %s\n",
               cJSON_IsString(target) ? target->valuestring : "?", rate,
               num_text(l, "burst", b1, sizeof(b1)), num_text(l, "concurrency", b2, sizeof(b2)),
               cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(l, "per_key")) ? "yes" : "no",
               num_text(use, "running", b3, sizeof(b3)),
               num_text(use, "tokens_left", b4, sizeof(b4)), num_text(use, "keys", b5, sizeof(b5)));
    }
    cJSON_Delete(list);
    return 0;
}
