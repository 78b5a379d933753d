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

#include "util.h"
#include "web_api.h"

/* ================================================================= one read Function */

/* Adds dtq-web's own fields to a Function's answer; arg is the handler's (the queue). */
typedef void finish_fn(dtq_web *w, cJSON *body, const char *arg);

typedef struct rd {
    dtq_web_job h;
    const char *fn; /* borrowed from w->fn */
    finish_fn *finish;
    dtq_web_read_answer_fn *answer; /* instead of the JSON answer (GET /metrics) */
    const char *wrap;               /* the Function answers an array: answered as {wrap: [...]} */
    char *arg;
    char *error; /* the Function's error reply */
    cJSON *body; /* its JSON; NULL when it was not JSON */
} rd;

static void rd_free(void *p) {
    rd *s = p;
    free(s->arg);
    free(s->error);
    cJSON_Delete(s->body);
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
    if (s->wrap && cJSON_IsArray(s->body)) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, s->wrap, s->body);
        s->body = o;
    } else if (s->wrap) { /* not the array it should be */
        cJSON_Delete(s->body);
        s->body = NULL;
    }
    if (s->error) {
        dtq_web_reply_redis_error(s->h.req, s->error);
    } else if (!cJSON_IsObject(s->body)) {
        dtq_web_reply_error(s->h.req, 502, "redis_error", "%s did not answer a JSON %s", s->fn,
                            s->wrap ? "array" : "object");
    } else if (s->answer) {
        s->answer(s->h.w, s->h.req, s->body);
    } else {
        if (s->finish) s->finish(s->h.w, s->body, s->arg);
        dtq_web_reply_json(s->h.req, 200, s->body);
        s->body = NULL;
    }
    dtq_rsteps_end(j);
}

static void read_callv(dtq_web *w, struct evhttp_request *req, const char *fn, finish_fn *finish,
                       dtq_web_read_answer_fn *answer, const char *wrap, const char *arg,
                       va_list ap) {
    rd *s = dtq_xcalloc(1, sizeof(*s));
    dtq_rsteps *j;
    dtq_argv argv;
    const char *v;
    s->h.w = w;
    s->h.req = req;
    s->fn = fn;
    s->finish = finish;
    s->answer = answer;
    s->wrap = wrap;
    s->arg = arg ? dtq_xstrdup(arg) : NULL;
    dtq_argv_init(&argv);
    dtq_argv_adds(&argv, "FCALL_RO");
    dtq_argv_adds(&argv, fn);
    dtq_argv_adds(&argv, "0");
    while ((v = va_arg(ap, const char *)) != NULL) dtq_argv_adds(&argv, v);
    j = dtq_web_job_new(&s->h, s, rd_free);
    dtq_rsteps_send(j, rd_reply, 0, 0, &argv);
    dtq_argv_deinit(&argv);
    dtq_rsteps_wait(j, rd_answer);
}

/* FCALL_RO fn 0 <args...> (NULL-terminated; an empty string takes the Function's default),
 * then finish(w, answer, arg) and the answer. */
static void read_call(dtq_web *w, struct evhttp_request *req, const char *fn, finish_fn *finish,
                      const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    read_callv(w, req, fn, finish, NULL, NULL, arg, ap);
    va_end(ap);
}

/* FCALL_RO fn 0 <args...> (NULL-terminated) of a Function that answers a JSON array:
 * answered as {"<key>": [...]}. */
static void read_array(dtq_web *w, struct evhttp_request *req, const char *fn, const char *key,
                       ...) {
    va_list ap;
    va_start(ap, key);
    read_callv(w, req, fn, NULL, NULL, key, NULL, ap);
    va_end(ap);
}

void dtq_web_read_function(dtq_web *w, struct evhttp_request *req, const char *fn,
                           dtq_web_read_answer_fn *answer, ...) {
    va_list ap;
    va_start(ap, answer);
    read_callv(w, req, fn, NULL, answer, NULL, NULL, ap);
    va_end(ap);
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
    DTQ_UNUSED(a);
    if (!dtq_web_redis_up(w, req)) return;
    read_call(w, req, w->fn.overview, overview_finish, NULL, NULL);
}

/* ================================================================= GET /api/history */

void dtq_web_api_history(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    const char *queue = dtq_web_query(a, "queue");
    cJSON *o, *arr;
    int n = dtq_web_history_len(w->history);
    if (queue && !*queue) queue = NULL;
    if (queue && !dtq_valid_queue_name(queue)) {
        dtq_web_reply_error(req, 400, "bad_request", "queue must match [A-Za-z0-9._:-]{1,128}");
        return;
    }
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
    read_call(w, req, w->fn.queue_view, queue_finish, a->arg, a->arg, count, NULL);
}

/* ================================================================= GET /api/tasks/<id> */

void dtq_web_api_task(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    if (!dtq_web_valid_task_id(a->arg)) {
        dtq_web_reply_error(req, 400, "bad_request", "a task id matches [A-Za-z0-9._:-]{1,256}");
        return;
    }
    if (!dtq_web_redis_up(w, req)) return;
    read_call(w, req, w->fn.task_view, NULL, NULL, a->arg, NULL);
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
    int64_t count;
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
    if (!dtq_web_redis_up(w, req)) return;
    snprintf(count_s, sizeof(count_s), "%lld", (long long)count);
    snprintf(cap, sizeof(cap), "%d", DTQ_WEB_FIELD_MAX);
    read_call(w, req, fn, NULL, NULL, cursor && *cursor ? cursor : "-", count_s, order ? order : "",
              value ? value : "", cap, NULL);
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
    read_call(w, req, w->fn.scheduled, NULL, NULL, cursor && *cursor ? cursor : "-", count_s,
              "kind", kind ? kind : "", "queue", v[0], "id_prefix", v[1], "task_type", v[2],
              "class", v[3], NULL);
}

/* ================================================================= GET /api/cron */

/* <ns>_cron_list 0 [name]: every periodic schedule, or the one named (404 when there is
 * none), as the Function answers. */
void dtq_web_api_cron(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    if (a->arg && !dtq_web_valid_cron_name(a->arg)) {
        dtq_web_reply_error(req, 400, "bad_request",
                            "a schedule name matches [A-Za-z0-9._-]{1,64}");
        return;
    }
    if (!dtq_web_redis_up(w, req)) return;
    read_call(w, req, w->fn.cron_list, NULL, NULL, a->arg ? a->arg : "", NULL);
}

/* ================================================================= GET /api/limits */

/* <ns>_limit_list 0: every rate and concurrency limit with its use, the Function's array
 * as it is under "limits" (every list of the API is a field of an object). */
void dtq_web_api_limits(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    DTQ_UNUSED(a);
    if (!dtq_web_redis_up(w, req)) return;
    read_array(w, req, w->fn.limit_list, "limits", NULL);
}
