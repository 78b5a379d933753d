/* web_read.c: the API's reads. Each endpoint that needs Redis checks its parameters, calls
 * one read Function of the library with FCALL_RO (docs/reference.md 5.5: the read model,
 * one JSON text), parses that text, adds what only dtq-web knows (rates and totals from
 * the history, the namespace, the sample interval) and answers it. The Function's error
 * replies are answered as web_core.c maps them. /api/info and /api/history answer from
 * memory. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "keys.h"
#include "rcluster.h"
#include "reply_class.h"
#include "scope.h"
#include "task.h"
#include "util.h"
#include "view_merge.h"
#include "web_api.h"

/* ================================================================= one read Function */

/* Adds dtq-web's own fields to a Function's answer; arg is the handler's (the queue). */
typedef void finish_fn(dtq_web *w, cJSON *body, const char *arg);

/* The cluster layout's ways to put the parts of a read over every queue together
 * (view_merge.h). */
typedef enum merge_kind {
    MERGE_NONE, /* one call: the single layout, or one slot (a queue's, or {ns}'s) */
    MERGE_OVERVIEW,
    MERGE_METRICS,
    MERGE_STREAM_PAGES,
    MERGE_SCHEDULED,
    MERGE_CRON,
    MERGE_LIMITS,
    MERGE_BATCHES
} merge_kind;

/* What a read calls and how it answers. */
typedef struct read_spec {
    const char *fn; /* borrowed from w->fn */
    finish_fn *finish;
    dtq_web_read_answer_fn *answer; /* instead of the JSON answer (GET /metrics) */
    const char *wrap;               /* the Function answers an array: answered as {wrap: [...]} */
    const char *arg;                /* finish's */
    const char *queue;              /* cluster: the call goes to this queue's slot */
    int global;                     /* cluster: the call goes to {ns}'s slot */
    merge_kind merge; /* cluster, neither of the above: every queue of the index and {ns} */
    int count;        /* merged pages: the page's count */
    int oldest;       /* merged stream pages: oldest first */
    int named;        /* MERGE_CRON of one name: a queue's NOT_FOUND is no error */
} read_spec;

typedef struct rd {
    dtq_web_job h;
    read_spec sp; /* its strings borrowed from w->fn, or below */
    char *arg;
    char *name;    /* MERGE_CRON of one name */
    char *error;   /* the Function's error reply */
    cJSON *body;   /* its JSON; NULL when it was not JSON */
    dtq_argv args; /* the Function's arguments, after its keys */
    char **queues; /* the index, for a read over every queue */
    int nq;
    cJSON **parts; /* each queue's answer, then {ns}'s (nq + 1) */
    int not_json;  /* a part was not JSON */
    /* the overview and the scrape answer with the live shards: the parts whose slot's
     * primary is down are not asked, and named here (queue names; the shared slot as its
     * tag {ns}) */
    cJSON *unreachable;
} rd;

static void rd_free(void *p) {
    rd *s = p;
    free(s->arg);
    free(s->name);
    free(s->error);
    cJSON_Delete(s->body);
    dtq_argv_deinit(&s->args);
    for (int i = 0; i < s->nq; i++) free(s->queues[i]);
    free(s->queues);
    for (int i = 0; s->parts && i <= s->nq; i++) cJSON_Delete(s->parts[i]);
    free(s->parts);
    cJSON_Delete(s->unreachable);
    free(s);
}

static void rd_reply(dtq_rsteps *j, redisReply *r, int a, int b) {
    rd *s = dtq_rsteps_state(j);
    DTQ_UNUSED(a);
    DTQ_UNUSED(b);
    if (r->type == REDIS_REPLY_ERROR)
        s->error = dtq_xstrndup(r->str, r->len);
    else if (r->type == REDIS_REPLY_STRING)
        s->body = cJSON_ParseWithLength(r->str, r->len);
}

static void rd_answer(dtq_rsteps *j) {
    rd *s = dtq_rsteps_state(j);
    if (s->sp.wrap && cJSON_IsArray(s->body)) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, s->sp.wrap, s->body);
        s->body = o;
    } else if (s->sp.wrap) { /* not the array it should be */
        cJSON_Delete(s->body);
        s->body = NULL;
    }
    if (s->error) {
        dtq_web_reply_redis_error(s->h.req, s->error);
    } else if (!cJSON_IsObject(s->body)) {
        dtq_web_reply_error(s->h.req, 502, "redis_error", "%s did not answer a JSON %s", s->sp.fn,
                            s->sp.wrap ? "array" : "object");
    } else if (s->sp.answer) {
        s->sp.answer(s->h.w, s->h.req, s->body);
    } else {
        if (s->sp.finish) s->sp.finish(s->h.w, s->body, s->arg);
        dtq_web_reply_json(s->h.req, 200, s->body);
        s->body = NULL;
    }
    dtq_rsteps_end(j);
}

/* Sends FCALL_RO fn with the keys of `queue` (NULL: {ns}; the single layout: none) and the
 * read's arguments. */
static void rd_send(dtq_rsteps *j, const char *queue, dtq_rsteps_reply_fn *fn, int a) {
    rd *s = dtq_rsteps_state(j);
    dtq_argv argv;
    dtq_web_fcall_argv(s->h.w, &argv, 1, s->sp.fn, queue);
    for (int i = 0; i < s->args.argc; i++) dtq_argv_add(&argv, s->args.argv[i], s->args.lens[i]);
    dtq_rsteps_send(j, fn, a, 0, &argv);
    dtq_argv_deinit(&argv);
}

/* ---- a read over every queue (the cluster layout) */

/* SMEMBERS {ns}:queues: the queues, sorted (also kept as w's index, for /readyz). */
static void fan_index(dtq_rsteps *j, redisReply *r, int a, int b) {
    rd *s = dtq_rsteps_state(j);
    char **copy;
    DTQ_UNUSED(a);
    DTQ_UNUSED(b);
    s->queues = dtq_scope_index_names(r, &s->nq, &s->error);
    if (!s->queues) return;
    copy = dtq_xcalloc((size_t)s->nq + 1, sizeof(char *));
    for (int i = 0; i < s->nq; i++) copy[i] = dtq_xstrdup(s->queues[i]);
    dtq_web_set_index(s->h.w, copy, s->nq);
}

/* One part's answer (a: its index; nq: {ns}'s). */
static void fan_part(dtq_rsteps *j, redisReply *r, int a, int b) {
    rd *s = dtq_rsteps_state(j);
    DTQ_UNUSED(b);
    if (r->type == REDIS_REPLY_ERROR) {
        /* one name's schedule: the queues that have none say NOT_FOUND */
        if (s->sp.named && dtq_reply_class_of(r->str) == DTQ_REPLY_NOT_FOUND) return;
        if (!s->error) s->error = dtq_xstrndup(r->str, r->len);
        return;
    }
    if (r->type == REDIS_REPLY_STRING) s->parts[a] = cJSON_ParseWithLength(r->str, r->len);
    if (!s->parts[a]) s->not_json = 1;
}

static void fan_merge(dtq_rsteps *j) {
    rd *s = dtq_rsteps_state(j);
    cJSON *const *p = s->parts;
    cJSON **have = dtq_xcalloc((size_t)s->nq + 1, sizeof(cJSON *));
    int n = 0;
    for (int i = 0; i <= s->nq; i++)
        if (s->parts[i]) have[n++] = s->parts[i];
    p = have;
    if (!s->error && s->not_json) {
        free(have);
        s->body = NULL; /* answered as not JSON */
        rd_answer(j);
        return;
    }
    if (!s->error) {
        switch (s->sp.merge) {
        case MERGE_OVERVIEW: s->body = dtq_view_merge_overview(p, n, DTQ_WEB_QUEUES_MAX); break;
        case MERGE_METRICS: s->body = dtq_view_merge_metrics(p, n, DTQ_WEB_QUEUES_MAX); break;
        case MERGE_STREAM_PAGES:
            s->body = dtq_view_merge_stream_pages(p, n, s->sp.count, s->sp.oldest);
            break;
        case MERGE_SCHEDULED: s->body = dtq_view_merge_scheduled(p, n, s->sp.count); break;
        case MERGE_CRON: s->body = dtq_view_merge_cron(p, n); break;
        case MERGE_LIMITS: s->body = dtq_view_merge_limits(p, n); break;
        case MERGE_BATCHES: s->body = dtq_view_merge_batches(p, n, s->sp.count); break;
        case MERGE_NONE: break;
        }
    }
    free(have);
    if (s->body && s->unreachable) { /* what was not asked, named */
        cJSON_AddItemToObject(s->body, "unreachable", s->unreachable);
        s->unreachable = NULL;
    }
    if (!s->error && s->sp.named &&
        cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(s->body, "schedules")) == 0)
        s->error = dtq_xasprintf("NOT_FOUND no periodic schedule named %s", s->name);
    rd_answer(j);
}

/* Whether the read may answer with the live shards (the overview and the scrape: what an
 * operator looks at when a shard is down). */
static int partial_ok(const rd *s) {
    return s->sp.merge == MERGE_OVERVIEW || s->sp.merge == MERGE_METRICS;
}

/* Whether the primary of the slot of `queue`'s calls (NULL: {ns}'s) is up (rcluster.h). */
static int part_up(const dtq_web *w, const char *queue) {
    char *tag = dtq_scope_tag(w->cfg->ns, 1, queue);
    int up = dtq_rcluster_slot_up(w->rc, dtq_cluster_keyslot(tag, strlen(tag)));
    free(tag);
    return up;
}

static void fan_calls(dtq_rsteps *j) {
    rd *s = dtq_rsteps_state(j);
    if (s->error) {
        rd_answer(j);
        return;
    }
    s->parts = dtq_xcalloc((size_t)s->nq + 1, sizeof(cJSON *));
    for (int i = 0; i <= s->nq; i++) {
        const char *q = i < s->nq ? s->queues[i] : NULL;
        if (partial_ok(s) && !part_up(s->h.w, q)) {
            char *tag = q ? NULL : dtq_scope_tag(s->h.w->cfg->ns, 1, NULL);
            if (!s->unreachable) s->unreachable = cJSON_CreateArray();
            cJSON_AddItemToArray(s->unreachable, cJSON_CreateString(q ? q : tag));
            free(tag);
            continue;
        }
        rd_send(j, q, fan_part, i);
    }
    dtq_rsteps_wait(j, fan_merge);
}

/* FCALL_RO of sp->fn with args (NULL-terminated; an empty string takes the Function's
 * default), then sp->finish and the answer. The single layout: one call with no keys. The
 * cluster layout: one call in sp->queue's slot, or {ns}'s (sp->global), or one per queue of
 * the index {ns}:queues and one with {ns}, merged as sp->merge says. */
static void read_start(dtq_web *w, struct evhttp_request *req, const read_spec *sp,
                       const char *const *args) {
    rd *s = dtq_xcalloc(1, sizeof(*s));
    dtq_rsteps *j;
    s->h.w = w;
    s->h.req = req;
    s->sp = *sp;
    s->arg = sp->arg ? dtq_xstrdup(sp->arg) : NULL;
    s->sp.arg = NULL;
    s->sp.queue = NULL; /* borrowed from the request: used here only */
    dtq_argv_init(&s->args);
    for (; args && *args; args++) dtq_argv_adds(&s->args, *args);
    if (sp->named && s->args.argc > 0) s->name = dtq_xstrdup(s->args.argv[0]);
    j = dtq_web_job_new(&s->h, s, rd_free);
    if (!w->rc || sp->queue || sp->global || sp->merge == MERGE_NONE) {
        rd_send(j, sp->queue, rd_reply, 0);
        dtq_rsteps_wait(j, rd_answer);
        return;
    }
    if (partial_ok(s) && w->nindex > 0 && !part_up(w, NULL)) {
        /* the shared slot ({ns}, which holds the index) is down: the index as last read */
        s->nq = w->nindex;
        s->queues = dtq_xcalloc((size_t)s->nq + 1, sizeof(char *));
        for (int i = 0; i < s->nq; i++) s->queues[i] = dtq_xstrdup(w->index[i]);
    } else {
        dtq_web_index_read(w, j, fan_index);
    }
    dtq_rsteps_wait(j, fan_calls);
}

void dtq_web_read_function(dtq_web *w, struct evhttp_request *req, const char *fn,
                           dtq_web_read_answer_fn *answer, ...) {
    read_spec sp = {0};
    const char *args[16];
    int n = 0;
    va_list ap;
    va_start(ap, answer);
    while (n < 15 && (args[n] = va_arg(ap, const char *)) != NULL) n++;
    va_end(ap);
    args[n] = NULL;
    sp.fn = fn;
    sp.answer = answer;
    sp.merge = fn == w->fn.metrics ? MERGE_METRICS : MERGE_NONE;
    read_start(w, req, &sp, args);
}

/* ================================================================= dtq-web's own fields */

static cJSON *rates_json(const dtq_web *w, const char *queue, int64_t window_ms) {
    double s, f, r;
    int64_t span;
    cJSON *o;
    if (dtq_web_history_rate(w->history, queue, window_ms, &s, &f, &r, &span) != 0)
        return cJSON_CreateNull();
    o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "span_s", (double)span / 1000.0);
    cJSON_AddNumberToObject(o, "succeeded", s);
    cJSON_AddNumberToObject(o, "failed", f);
    cJSON_AddNumberToObject(o, "retried", r);
    return o;
}

/* "rates" (per minute over 1 and 5 minutes) and "totals" (since dtq-web started) of a
 * queue, or of every queue with NULL. */
static void add_rates(cJSON *o, const dtq_web *w, const char *queue) {
    cJSON *rates = cJSON_AddObjectToObject(o, "rates");
    dtq_web_counts t;
    cJSON *totals;
    cJSON_AddItemToObject(rates, "1m", rates_json(w, queue, 60000));
    cJSON_AddItemToObject(rates, "5m", rates_json(w, queue, 300000));
    dtq_web_history_total(w->history, queue, &t);
    totals = cJSON_AddObjectToObject(o, "totals");
    cJSON_AddNumberToObject(totals, "succeeded", (double)t.succeeded);
    cJSON_AddNumberToObject(totals, "failed", (double)t.failed);
    cJSON_AddNumberToObject(totals, "retried", (double)t.retried);
}

/* ================================================================= GET /api/info */

void dtq_web_api_info(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    cJSON *o = cJSON_CreateObject(), *lim;
    DTQ_UNUSED(a);
    cJSON_AddStringToObject(o, "name", "dtq-web");
    cJSON_AddStringToObject(o, "version", DTQ_VERSION);
    cJSON_AddStringToObject(o, "namespace", w->cfg->ns);
    cJSON_AddStringToObject(o, "prefix", w->prefix);
    cJSON_AddBoolToObject(o, "writable", w->tokens != NULL);
    cJSON_AddBoolToObject(o, "redis_connected", w->redis_up);
    cJSON_AddStringToObject(o, "redis_transport",
                            w->url.is_unix ? "unix" : (w->url.tls ? "tls" : "tcp"));
    cJSON_AddStringToObject(o, "layout", w->rc ? "cluster" : "single");
    cJSON_AddNumberToObject(o, "sample_interval_s", (double)w->cfg->web_sample_interval_s);
    cJSON_AddNumberToObject(o, "started_at", (double)w->started_ms);
    cJSON_AddNumberToObject(o, "time_ms", (double)dtq_now_ms());
    lim = cJSON_AddObjectToObject(o, "limits");
    cJSON_AddNumberToObject(lim, "page_max", DTQ_WEB_PAGE_MAX);
    cJSON_AddNumberToObject(lim, "list_max", DTQ_WEB_LIST_MAX);
    cJSON_AddNumberToObject(lim, "scan_max", DTQ_WEB_SCAN_MAX);
    cJSON_AddNumberToObject(lim, "queues_max", DTQ_WEB_QUEUES_MAX);
    dtq_web_reply_json(req, 200, o);
}

/* ================================================================= GET /api/overview */

static void overview_finish(dtq_web *w, cJSON *o, const char *arg) {
    cJSON *q;
    DTQ_UNUSED(arg);
    cJSON_AddStringToObject(o, "namespace", w->cfg->ns);
    cJSON_ArrayForEach(q, cJSON_GetObjectItemCaseSensitive(o, "queues")) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(q, "name");
        if (cJSON_IsString(name)) add_rates(q, w, name->valuestring);
    }
    add_rates(o, w, NULL);
    cJSON_AddNumberToObject(o, "sample_interval_s", (double)w->cfg->web_sample_interval_s);
}

void dtq_web_api_overview(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    read_spec sp = {0};
    DTQ_UNUSED(a);
    if (!dtq_web_redis_up(w, req)) return;
    sp.fn = w->fn.overview;
    sp.finish = overview_finish;
    sp.merge = MERGE_OVERVIEW;
    read_start(w, req, &sp, NULL);
}

/* ================================================================= GET /api/history */

void dtq_web_api_history(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    int bad;
    const char *queue = dtq_web_query_queue(req, a, &bad);
    cJSON *o, *arr;
    int n = dtq_web_history_len(w->history);
    if (bad) return;
    o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "interval_s", (double)w->cfg->web_sample_interval_s);
    if (queue)
        cJSON_AddStringToObject(o, "queue", queue);
    else
        cJSON_AddNullToObject(o, "queue");
    arr = cJSON_AddArrayToObject(o, "samples");
    for (int i = 0; i < n; i++) {
        int64_t ts, depth, pending;
        dtq_web_counts d;
        cJSON *p;
        dtq_web_history_point(w->history, i, queue, &ts, &depth, &pending, &d);
        p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "ts", (double)ts);
        if (depth >= 0) {
            cJSON_AddNumberToObject(p, "depth", (double)depth);
            cJSON_AddNumberToObject(p, "pending", (double)pending);
        } else {
            cJSON_AddNullToObject(p, "depth");
            cJSON_AddNullToObject(p, "pending");
        }
        cJSON_AddNumberToObject(p, "succeeded", (double)d.succeeded);
        cJSON_AddNumberToObject(p, "failed", (double)d.failed);
        cJSON_AddNumberToObject(p, "retried", (double)d.retried);
        cJSON_AddItemToArray(arr, p);
    }
    dtq_web_reply_json(req, 200, o);
}

/* ================================================================= GET /api/queues/<q> */

static void queue_finish(dtq_web *w, cJSON *o, const char *queue) {
    add_rates(o, w, queue);
}

void dtq_web_api_queue(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    int64_t limit;
    char count[32];
    if (!dtq_valid_queue_name(a->arg)) {
        dtq_web_reply_error(req, 400, "bad_request", "a queue name matches [A-Za-z0-9._:-]{1,128}");
        return;
    }
    if (dtq_web_query_int(req, a, "count", 20, 1, DTQ_WEB_LIST_MAX, &limit) != 0) return;
    if (!dtq_web_redis_up(w, req)) return;
    snprintf(count, sizeof(count), "%lld", (long long)limit);
    {
        read_spec sp = {0};
        const char *args[] = {a->arg, count, NULL};
        sp.fn = w->fn.queue_view;
        sp.finish = queue_finish;
        sp.arg = a->arg;
        sp.queue = a->arg;
        read_start(w, req, &sp, args);
    }
}

/* ================================================================= GET /api/tasks/<id> */

/* ?queue=Q: the task's queue, required in the cluster layout (ids are unique per queue). */
void dtq_web_api_task(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    read_spec sp = {0};
    const char *args[] = {a->arg, NULL};
    int bad;
    if (!dtq_web_valid_task_id(a->arg)) {
        dtq_web_reply_error(req, 400, "bad_request", "a task id matches [A-Za-z0-9._:-]{1,256}");
        return;
    }
    sp.queue = dtq_web_call_queue(w, req, a, &bad);
    if (bad || !dtq_web_redis_up(w, req)) return;
    sp.fn = w->fn.task_view;
    read_start(w, req, &sp, args);
}

/* ================================================================= GET /api/batches */

/* ?count=N (1-DTQ_BATCH_LIST_MAX, default 50). The cluster layout: every queue's slot holds its own
 * batches, merged (the newest count of them all), or ?queue=Q's alone. */
void dtq_web_api_batches(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    read_spec sp = {0};
    char count_s[32];
    const char *args[] = {count_s, NULL};
    int bad = 0;
    int64_t count;
    if (dtq_web_query_int(req, a, "count", 50, 1, DTQ_BATCH_LIST_MAX, &count) != 0) return;
    if (w->rc) sp.queue = dtq_web_query_queue(req, a, &bad); /* cluster: one queue's */
    if (bad || !dtq_web_redis_up(w, req)) return;
    snprintf(count_s, sizeof(count_s), "%lld", (long long)count);
    sp.fn = w->fn.batch_list;
    sp.merge = MERGE_BATCHES;
    sp.count = (int)count;
    read_start(w, req, &sp, args);
}

/* ================================================================= GET /api/batches/<id> */

/* ?queue=Q: the batch's queue, required in the cluster layout (the batch lives in its slot). */
void dtq_web_api_batch(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    read_spec sp = {0};
    const char *args[] = {a->arg, NULL};
    int bad;
    if (!a->arg || !dtq_valid_name(a->arg, strlen(a->arg), 64)) {
        dtq_web_reply_error(req, 400, "bad_request", "a batch id matches [A-Za-z0-9._:-]{1,64}");
        return;
    }
    sp.queue = dtq_web_call_queue(w, req, a, &bad);
    if (bad || !dtq_web_redis_up(w, req)) return;
    sp.fn = w->fn.batch_show;
    read_start(w, req, &sp, args);
}

/* ================================================================= GET /api/dlq, /api/audit */

/* A stream id, or just its ms part. */
static int valid_stream_id(const char *s) {
    size_t n = strspn(s, "0123456789");
    if (n == 0 || n > 20) return 0;
    if (!s[n]) return 1;
    if (s[n] != '-') return 0;
    s += n + 1;
    n = strspn(s, "0123456789");
    return n > 0 && n <= 20 && !s[n];
}

/* A page of the dead letters or the audit: <fn> 0 <cursor|-> <count> <order> <filter>
 * <field_max>, the filter being the query parameter filter_param. */
static void page_stream(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a,
                        const char *fn, const char *filter_param) {
    const char *cursor = dtq_web_query(a, "cursor"), *order = dtq_web_query(a, "order");
    const char *value = dtq_web_query(a, filter_param);
    const char *queue = NULL;
    int64_t count;
    int bad = 0;
    char count_s[32], cap[32];
    if (dtq_web_query_int(req, a, "count", 50, 1, DTQ_WEB_PAGE_MAX, &count) != 0) return;
    if (cursor && *cursor && !valid_stream_id(cursor)) {
        dtq_web_reply_error(req, 400, "bad_request",
                            "cursor must be a stream id (<ms>-<seq>) from next_cursor");
        return;
    }
    if (order && *order && strcmp(order, "newest") && strcmp(order, "oldest")) {
        dtq_web_reply_error(req, 400, "bad_request", "order must be newest or oldest");
        return;
    }
    if (value && *value && !dtq_valid_name(value, strlen(value), 256)) {
        dtq_web_reply_error(req, 400, "bad_request", "%s must match [A-Za-z0-9._:-]{1,256}",
                            filter_param);
        return;
    }
    if (w->rc) queue = dtq_web_query_queue(req, a, &bad); /* cluster: one queue's */
    if (bad || !dtq_web_redis_up(w, req)) return;
    snprintf(count_s, sizeof(count_s), "%lld", (long long)count);
    snprintf(cap, sizeof(cap), "%d", DTQ_WEB_FIELD_MAX);
    {
        read_spec sp = {0};
        const char *args[] = {cursor && *cursor ? cursor : "-",
                              count_s,
                              order ? order : "",
                              value ? value : "",
                              cap,
                              NULL};
        sp.fn = fn;
        sp.queue = queue;
        sp.merge = MERGE_STREAM_PAGES;
        sp.count = (int)count;
        sp.oldest = order && !strcmp(order, "oldest");
        read_start(w, req, &sp, args);
    }
}

void dtq_web_api_dlq(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    page_stream(w, req, a, w->fn.dead_letters, "class");
}

void dtq_web_api_audit(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    page_stream(w, req, a, w->fn.audit_page, "task");
}

/* ================================================================= GET /api/scheduled */

/* A cursor of <ns>_scheduled: <due ms>:<task id>. */
static int valid_sched_cursor(const char *s) {
    size_t n = strspn(s, "0123456789");
    return n > 0 && n <= 20 && s[n] == ':' && dtq_web_valid_task_id(s + n + 1);
}

/* <ns>_scheduled 0 <cursor|-> <count> kind <k> queue <q> id_prefix <p> task_type <t>
 * class <c>: an empty value is no filter. */
void dtq_web_api_scheduled(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    static const struct {
        const char *name;
        size_t max;
    } filters[] = {{"queue", 128}, {"id_prefix", 256}, {"task_type", 128}, {"class", 64}};
    const char *cursor = dtq_web_query(a, "cursor"), *kind = dtq_web_query(a, "kind");
    const char *v[4];
    int64_t count;
    char count_s[32];
    if (dtq_web_query_int(req, a, "count", 50, 1, DTQ_WEB_PAGE_MAX, &count) != 0) return;
    if (cursor && *cursor && strcmp(cursor, "-") && !valid_sched_cursor(cursor)) {
        dtq_web_reply_error(req, 400, "bad_request",
                            "cursor must be <due_ms>:<task_id> from next_cursor");
        return;
    }
    if (kind && *kind && strcmp(kind, "delayed") && strcmp(kind, "retrying") &&
        strcmp(kind, "all")) {
        dtq_web_reply_error(req, 400, "bad_request", "kind must be delayed, retrying or all");
        return;
    }
    for (size_t i = 0; i < 4; i++) {
        v[i] = dtq_web_query(a, filters[i].name);
        if (!v[i]) v[i] = "";
        if (*v[i] && !dtq_valid_name(v[i], strlen(v[i]), filters[i].max)) {
            dtq_web_reply_error(req, 400, "bad_request", "%s must match [A-Za-z0-9._:-]{1,%zu}",
                                filters[i].name, filters[i].max);
            return;
        }
    }
    if (!dtq_web_redis_up(w, req)) return;
    snprintf(count_s, sizeof(count_s), "%lld", (long long)count);
    {
        read_spec sp = {0};
        const char *args[] = {cursor && *cursor ? cursor : "-",
                              count_s,
                              "kind",
                              kind ? kind : "",
                              "queue",
                              v[0],
                              "id_prefix",
                              v[1],
                              "task_type",
                              v[2],
                              "class",
                              v[3],
                              NULL};
        sp.fn = w->fn.scheduled;
        sp.queue = *v[0] ? v[0] : NULL; /* cluster: that queue's schedule alone */
        sp.merge = MERGE_SCHEDULED;
        sp.count = (int)count;
        read_start(w, req, &sp, args);
    }
}

/* ================================================================= GET /api/cron */

/* <ns>_cron_list 0 [name]: every periodic schedule, or the one named (404 when there is
 * none), as the Function answers. */
void dtq_web_api_cron(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    read_spec sp = {0};
    const char *args[] = {a->arg ? a->arg : "", NULL};
    int bad = 0;
    if (a->arg && !dtq_web_valid_cron_name(a->arg)) {
        dtq_web_reply_error(req, 400, "bad_request",
                            "a schedule name matches [A-Za-z0-9._-]{1,64}");
        return;
    }
    if (w->rc) sp.queue = dtq_web_query_queue(req, a, &bad); /* cluster: one queue's */
    if (bad || !dtq_web_redis_up(w, req)) return;
    sp.fn = w->fn.cron_list;
    sp.merge = MERGE_CRON;
    sp.named = a->arg != NULL;
    read_start(w, req, &sp, args);
}

/* ================================================================= GET /api/limits */

/* <ns>_limit_list 0: every rate and concurrency limit with its use, the Function's array
 * as it is under "limits" (every list of the API is a field of an object). */
void dtq_web_api_limits(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    read_spec sp = {0};
    DTQ_UNUSED(a);
    if (!dtq_web_redis_up(w, req)) return;
    sp.fn = w->fn.limit_list;
    sp.wrap = "limits";
    sp.merge = MERGE_LIMITS;
    read_start(w, req, &sp, NULL);
}
