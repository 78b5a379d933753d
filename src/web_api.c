/* web_api.c: the API's handlers and the sampler. Each request that needs Redis is a `job`:
 * a step sends its commands (pipelined on the one connection), and the next step runs
 * once every reply of the step is in, reading what the reply callbacks stored in the
 * job's state. A NULL reply (the connection dropped) ends the job with 503. The request
 * may have been closed by its client meanwhile: evhttp keeps it until it is answered. */
#include "web_api.h"

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <hiredis/hiredis.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "log.h"
#include "util.h"

#define BANDS 10
#define DLQ_REQUEUE_CHUNK "1000" /* <ns>_requeue_dlq's own cap per call */
#define CLASS_PAGE 500           /* DLQ entries read per page by a class filter */
#define EVENTS_PAGE 1000         /* events read per page for a task's history */

/* ================================================================= jobs */

typedef struct job job;
typedef void step_fn(job *j);
typedef void reply_fn(job *j, redisReply *r, int a, int b);

struct job {
    dtq_web *w;
    struct evhttp_request *req; /* NULL for the sampler */
    int outstanding;            /* replies of the current step not yet in */
    int lost;                   /* a reply was NULL, or a command could not be sent */
    step_fn *next;
    void *st; /* the handler's state */
    void (*st_free)(void *st);
};

typedef struct call {
    job *j;
    reply_fn *fn;
    int a, b;
} call;

static void job_continue(job *j);

static job *job_new(dtq_web *w, struct evhttp_request *req, void *st, void (*st_free)(void *)) {
    job *j = dtq_xcalloc(1, sizeof(*j));
    j->w = w;
    j->req = req;
    j->st = st;
    j->st_free = st_free;
    return j;
}

static void job_free(job *j) {
    if (j->st_free) j->st_free(j->st);
    free(j);
}

/* Ends the job with an answer (body taken). */
static void job_reply(job *j, int code, cJSON *body) {
    if (j->req)
        dtq_web_reply_json(j->req, code, body);
    else
        cJSON_Delete(body);
    job_free(j);
}

static void job_cb(redisAsyncContext *ac, void *reply, void *priv) {
    call *c = priv;
    job *j = c->j;
    DTQ_UNUSED(ac);
    if (!reply)
        j->lost = 1;
    else if (c->fn && !j->lost)
        c->fn(j, reply, c->a, c->b);
    free(c);
    if (--j->outstanding == 0) job_continue(j);
}

/* Sends one command of the current step; fn(j, reply, a, b) runs with its reply. */
static void job_sendv(job *j, reply_fn *fn, int a, int b, const dtq_argv *argv) {
    call *c;
    if (j->lost) return;
    c = dtq_xcalloc(1, sizeof(*c));
    c->j = j;
    c->fn = fn;
    c->a = a;
    c->b = b;
    j->outstanding++;
    if (dtq_rconn_command(j->w->redis, job_cb, c, argv->argc, (const char **)argv->argv,
                          argv->lens) != DTQ_OK) {
        j->outstanding--;
        j->lost = 1;
        free(c);
    }
}

/* job_sendv with the arguments as NULL-terminated strings. */
static void job_send(job *j, reply_fn *fn, int a, int b, ...) {
    dtq_argv argv;
    va_list ap;
    const char *s;
    dtq_argv_init(&argv);
    va_start(ap, b);
    while ((s = va_arg(ap, const char *)) != NULL) dtq_argv_adds(&argv, s);
    va_end(ap);
    job_sendv(j, fn, a, b, &argv);
    dtq_argv_deinit(&argv);
}

/* Ends a step: `next` runs once the replies of what it sent are in (at once if none). */
static void job_wait(job *j, step_fn *next) {
    j->next = next;
    if (j->outstanding == 0) job_continue(j);
}

static void job_continue(job *j) {
    step_fn *next = j->next;
    j->next = NULL;
    if (j->lost || !next) {
        if (j->req)
            dtq_web_reply_error(j->req, 503, "redis_unavailable",
                                "the connection to Redis was lost; try again");
        if (!j->req) j->w->sampling = 0;
        job_free(j);
        return;
    }
    next(j);
}

/* ================================================================= helpers */

static int redis_up_or_503(dtq_web *w, struct evhttp_request *req) {
    if (w->redis_up) return 1;
    dtq_web_reply_error(req, 503, "redis_unavailable", "not connected to Redis; retrying");
    return 0;
}

static long long reply_int(const redisReply *r) {
    if (r->type == REDIS_REPLY_INTEGER) return r->integer;
    if (r->type == REDIS_REPLY_STRING) return strtoll(r->str, NULL, 10);
    return 0;
}

static char *reply_str(const redisReply *r) {
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS)
        return dtq_xstrndup(r->str, r->len);
    return NULL;
}

/* A reply's string as a JSON string item; NUL bytes (binary data) end it. */
static cJSON *json_str(const redisReply *r) {
    char *s = reply_str(r);
    cJSON *o = s ? cJSON_CreateString(s) : cJSON_CreateNull();
    free(s);
    return o;
}

/* ms of a stream id "<ms>-<seq>". */
static double id_ms(const char *id) {
    return (double)strtoll(id, NULL, 10);
}

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

static int valid_task_id(const char *s) {
    return s && dtq_valid_name(s, strlen(s), 256);
}

static const char *query_get(const dtq_web_args *a, const char *name) {
    return evhttp_find_header(a->query, name);
}

/* The integer parameter `name` (default def when absent or empty) in [min, max]; 0, or -1
 * after answering 400. */
static int query_int(struct evhttp_request *req, const dtq_web_args *a, const char *name,
                     int64_t def, int64_t min, int64_t max, int64_t *out) {
    const char *v = query_get(a, name);
    if (!v || !*v) {
        *out = def;
        return 0;
    }
    if (dtq_parse_int64(v, min, max, out) != DTQ_OK) {
        dtq_web_reply_error(req, 400, "bad_request", "%s must be an integer in [%lld, %lld]", name,
                            (long long)min, (long long)max);
        return -1;
    }
    return 0;
}

/* A flat field/value reply (HGETALL, a stream entry's fields) as an object of strings;
 * values longer than `cap` bytes (0: no cap) are cut, and <field>_truncated set. */
static cJSON *fields_object(const redisReply *r, size_t cap) {
    cJSON *o = cJSON_CreateObject();
    if (r->type != REDIS_REPLY_ARRAY) return o;
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const redisReply *k = r->element[i], *v = r->element[i + 1];
        char *key, *val;
        if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING) continue;
        key = dtq_xstrndup(k->str, k->len);
        if (cap && v->len > cap) {
            char *tkey = dtq_xasprintf("%s_truncated", key);
            val = dtq_xstrndup(v->str, cap);
            cJSON_AddBoolToObject(o, tkey, 1);
            free(tkey);
        } else {
            val = dtq_xstrndup(v->str, v->len);
        }
        if (!cJSON_GetObjectItemCaseSensitive(o, key)) cJSON_AddStringToObject(o, key, val);
        free(key);
        free(val);
    }
    return o;
}

/* The value of `field` in a flat field/value reply, borrowed; NULL when absent. */
static const redisReply *flat_get(const redisReply *r, const char *field) {
    if (!r || r->type != REDIS_REPLY_ARRAY) return NULL;
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (r->element[i]->type == REDIS_REPLY_STRING && !strcmp(r->element[i]->str, field))
            return r->element[i + 1];
    return NULL;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A set reply as a sorted array of at most max names (caller-owned); *more when cut. */
static char **sorted_members(const redisReply *r, int max, int *n, int *more) {
    char **v;
    *n = 0;
    *more = 0;
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) return NULL;
    v = dtq_xcalloc(r->elements, sizeof(char *));
    for (size_t i = 0; i < r->elements; i++)
        if (r->element[i]->type == REDIS_REPLY_STRING)
            v[(*n)++] = dtq_xstrndup(r->element[i]->str, r->element[i]->len);
    qsort(v, (size_t)*n, sizeof(char *), cmp_str);
    if (*n > max) {
        for (int i = max; i < *n; i++) free(v[i]);
        *n = max;
        *more = 1;
    }
    return v;
}

static void free_names(char **v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

/* The pending count of an XPENDING summary reply; 0 for an error (no stream, no group). */
static long long xpending_count(const redisReply *r) {
    if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
        r->element[0]->type == REDIS_REPLY_INTEGER)
        return r->element[0]->integer;
    return 0;
}

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

/* "rates" (per minute over 1 and 5 minutes) and "totals" (since dtq-web started). */
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

/* The body of a write may name only `allowed` fields (NULL-terminated); 0, or -1 after
 * answering 400. */
static int body_fields(struct evhttp_request *req, const cJSON *body, const char *const *allowed) {
    const cJSON *it;
    if (!body) return 0;
    cJSON_ArrayForEach(it, body) {
        int ok = 0;
        for (const char *const *f = allowed; *f; f++) ok |= !strcmp(*f, it->string);
        if (!ok) {
            char *name = dtq_log_escape(it->string);
            dtq_web_reply_error(req, 400, "bad_request", "unknown field '%s' in the body", name);
            free(name);
            return -1;
        }
    }
    return 0;
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

typedef struct ov {
    char **queues;
    int nq, queues_more;
    char **workers;
    int nw, workers_more;
    char *leader;
    long long scheduled, claimed, dlq;
    int events_stream;
    char *events_level;
    long long *len, *pend; /* [queue * BANDS + band] */
    int *paused;
    cJSON *wjson; /* live workers */
    int workers_gone;
} ov;

static void ov_free(void *p) {
    ov *s = p;
    free_names(s->queues, s->nq);
    free_names(s->workers, s->nw);
    free(s->leader);
    free(s->events_level);
    free(s->len);
    free(s->pend);
    free(s->paused);
    cJSON_Delete(s->wjson);
    free(s);
}

static void ov_queues(job *j, redisReply *r, int a, int b) {
    ov *s = j->st;
    DTQ_UNUSED(a);
    DTQ_UNUSED(b);
    s->queues = sorted_members(r, DTQ_WEB_QUEUES_MAX, &s->nq, &s->queues_more);
}

static void ov_workers(job *j, redisReply *r, int a, int b) {
    ov *s = j->st;
    DTQ_UNUSED(a);
    DTQ_UNUSED(b);
    s->workers = sorted_members(r, DTQ_WEB_QUEUES_MAX, &s->nw, &s->workers_more);
}

static void ov_scalar(job *j, redisReply *r, int a, int b) {
    ov *s = j->st;
    DTQ_UNUSED(b);
    switch (a) {
    case 0: s->leader = reply_str(r); break;
    case 1: s->scheduled = reply_int(r); break;
    case 2: s->claimed = reply_int(r); break;
    case 3: s->dlq = reply_int(r); break;
    case 4: s->events_stream = reply_int(r) > 0; break;
    case 5:
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
            s->events_level = reply_str(r->element[0]);
            if (reply_int(r->element[1]) > 0) s->events_stream = 1;
        }
        break;
    }
}

static void ov_band(job *j, redisReply *r, int a, int b) {
    ov *s = j->st;
    if (b < 0)
        s->paused[a] = reply_int(r) > 0;
    else if (b < BANDS)
        s->len[a * BANDS + b] = r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
    else
        s->pend[a * BANDS + b - BANDS] = xpending_count(r);
}

/* A worker hash as the API shows it: typed fields, per-queue counters under "queues". */
static cJSON *worker_json(const char *id, const redisReply *r, int64_t now) {
    static const char *const nums[] = {"pid",          "started_at",    "last_heartbeat",
                                       "active_tasks", "concurrency",   "tasks_processed",
                                       "tasks_failed", "tasks_retried", NULL};
    cJSON *o = cJSON_CreateObject(), *queues = cJSON_CreateObject();
    const redisReply *hb;
    cJSON_AddStringToObject(o, "id", id);
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const redisReply *k = r->element[i], *v = r->element[i + 1];
        int is_num = 0;
        if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING) continue;
        if (!strncmp(k->str, "q:", 2)) {
            const char *kind = strrchr(k->str, ':');
            char *q;
            cJSON *qo;
            if (kind == k->str + 1) continue;
            q = dtq_xstrndup(k->str + 2, (size_t)(kind - k->str - 2));
            qo = cJSON_GetObjectItemCaseSensitive(queues, q);
            if (!qo) qo = cJSON_AddObjectToObject(queues, q);
            cJSON_AddNumberToObject(qo, kind + 1, (double)strtoll(v->str, NULL, 10));
            free(q);
            continue;
        }
        if (!strcmp(k->str, "worker_id")) continue;
        for (const char *const *n = nums; *n; n++) is_num |= !strcmp(*n, k->str);
        if (is_num)
            cJSON_AddNumberToObject(o, k->str, (double)strtoll(v->str, NULL, 10));
        else
            cJSON_AddStringToObject(o, k->str, v->str);
    }
    hb = flat_get(r, "last_heartbeat");
    if (hb) cJSON_AddNumberToObject(o, "heartbeat_age_ms", (double)(now - reply_int(hb)));
    cJSON_AddItemToObject(o, "queues", queues);
    return o;
}

static void ov_worker(job *j, redisReply *r, int a, int b) {
    ov *s = j->st;
    DTQ_UNUSED(b);
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) { /* expired: the worker is gone */
        s->workers_gone++;
        return;
    }
    cJSON_AddItemToArray(s->wjson, worker_json(s->workers[a], r, dtq_now_ms()));
}

static void ov_answer(job *j) {
    ov *s = j->st;
    dtq_web *w = j->w;
    cJSON *o = cJSON_CreateObject(), *qs, *sched, *dlq, *ev;
    cJSON_AddNumberToObject(o, "time_ms", (double)dtq_now_ms());
    cJSON_AddStringToObject(o, "namespace", w->cfg->ns);
    qs = cJSON_AddArrayToObject(o, "queues");
    for (int q = 0; q < s->nq; q++) {
        cJSON *qo = cJSON_CreateObject();
        cJSON *depths = cJSON_CreateArray(), *pends = cJSON_CreateArray();
        long long depth = 0, pending = 0, length = 0;
        for (int b = 0; b < BANDS; b++) {
            long long l = s->len[q * BANDS + b], p = s->pend[q * BANDS + b];
            long long d = l - p > 0 ? l - p : 0;
            length += l;
            pending += p;
            depth += d;
            cJSON_AddItemToArray(depths, cJSON_CreateNumber((double)d));
            cJSON_AddItemToArray(pends, cJSON_CreateNumber((double)p));
        }
        cJSON_AddStringToObject(qo, "name", s->queues[q]);
        cJSON_AddBoolToObject(qo, "paused", s->paused[q]);
        cJSON_AddNumberToObject(qo, "depth", (double)depth);
        cJSON_AddNumberToObject(qo, "pending", (double)pending);
        cJSON_AddNumberToObject(qo, "length", (double)length);
        cJSON_AddItemToObject(qo, "depth_by_band", depths);
        cJSON_AddItemToObject(qo, "pending_by_band", pends);
        add_rates(qo, w, s->queues[q]);
        cJSON_AddItemToArray(qs, qo);
    }
    cJSON_AddBoolToObject(o, "queues_truncated", s->queues_more);
    cJSON_AddItemToObject(o, "workers", s->wjson);
    s->wjson = NULL;
    cJSON_AddBoolToObject(o, "workers_truncated", s->workers_more);
    cJSON_AddNumberToObject(o, "workers_gone", s->workers_gone);
    sched = cJSON_AddObjectToObject(o, "scheduler");
    if (s->leader)
        cJSON_AddStringToObject(sched, "leader", s->leader);
    else
        cJSON_AddNullToObject(sched, "leader");
    cJSON_AddNumberToObject(sched, "scheduled", (double)s->scheduled);
    cJSON_AddNumberToObject(sched, "claimed", (double)s->claimed);
    dlq = cJSON_AddObjectToObject(o, "dlq");
    cJSON_AddNumberToObject(dlq, "length", (double)s->dlq);
    ev = cJSON_AddObjectToObject(o, "events");
    cJSON_AddStringToObject(ev, "level", s->events_level ? s->events_level : "all");
    cJSON_AddBoolToObject(ev, "stream", s->events_stream);
    add_rates(o, w, NULL);
    cJSON_AddNumberToObject(o, "sample_interval_s", (double)w->cfg->web_sample_interval_s);
    job_reply(j, 200, o);
}

static void ov_step2(job *j) {
    ov *s = j->st;
    dtq_web *w = j->w;
    s->len = dtq_xcalloc((size_t)s->nq * BANDS + 1, sizeof(long long));
    s->pend = dtq_xcalloc((size_t)s->nq * BANDS + 1, sizeof(long long));
    s->paused = dtq_xcalloc((size_t)s->nq + 1, sizeof(int));
    s->wjson = cJSON_CreateArray();
    for (int q = 0; q < s->nq; q++) {
        char *pk = dtq_web_key(w, "queue:%s:paused", s->queues[q]);
        job_send(j, ov_band, q, -1, "EXISTS", pk, NULL);
        free(pk);
        for (int b = 0; b < BANDS; b++) {
            char *sk = dtq_web_key(w, "stream:%s:p%d", s->queues[q], b);
            job_send(j, ov_band, q, b, "XLEN", sk, NULL);
            job_send(j, ov_band, q, BANDS + b, "XPENDING", sk, "workers", NULL);
            free(sk);
        }
    }
    for (int i = 0; i < s->nw; i++) {
        char *wk = dtq_web_key(w, "worker:%s", s->workers[i]);
        job_send(j, ov_worker, i, 0, "HGETALL", wk, NULL);
        free(wk);
    }
    job_wait(j, ov_answer);
}

void dtq_web_api_overview(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    job *j;
    char *k;
    DTQ_UNUSED(a);
    if (!redis_up_or_503(w, req)) return;
    j = job_new(w, req, dtq_xcalloc(1, sizeof(ov)), ov_free);
    k = dtq_web_key(w, "queues");
    job_send(j, ov_queues, 0, 0, "SMEMBERS", k, NULL);
    free(k);
    k = dtq_web_key(w, "workers");
    job_send(j, ov_workers, 0, 0, "SMEMBERS", k, NULL);
    free(k);
    k = dtq_web_key(w, "lock:scheduler");
    job_send(j, ov_scalar, 0, 0, "GET", k, NULL);
    free(k);
    k = dtq_web_key(w, "retry:schedule");
    job_send(j, ov_scalar, 1, 0, "ZCARD", k, NULL);
    free(k);
    k = dtq_web_key(w, "retry:claimed");
    job_send(j, ov_scalar, 2, 0, "ZCARD", k, NULL);
    free(k);
    k = dtq_web_key(w, "stream:dead-letter");
    job_send(j, ov_scalar, 3, 0, "XLEN", k, NULL);
    free(k);
    k = dtq_web_key(w, "stream:events");
    job_send(j, ov_scalar, 4, 0, "EXISTS", k, NULL);
    free(k);
    k = dtq_web_key(w, "config");
    job_send(j, ov_scalar, 5, 0, "HMGET", k, "events", "events_stream_maxlen", NULL);
    free(k);
    job_wait(j, ov_step2);
}

/* ================================================================= GET /api/history */

void dtq_web_api_history(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    const char *queue = query_get(a, "queue");
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

typedef struct qv {
    char *queue;
    int64_t limit;
    int member, paused;
    long long len[BANDS], pend[BANDS];
    char *delivered[BANDS]; /* the group's last-delivered-id; NULL: no group yet */
    cJSON *waiting, *running;
    int nwaiting;
} qv;

static void qv_free(void *p) {
    qv *s = p;
    free(s->queue);
    for (int b = 0; b < BANDS; b++) free(s->delivered[b]);
    cJSON_Delete(s->waiting);
    cJSON_Delete(s->running);
    free(s);
}

static void qv_head(job *j, redisReply *r, int a, int b) {
    qv *s = j->st;
    if (a == 0) {
        s->member = reply_int(r) > 0;
    } else if (a == 1) {
        s->paused = reply_int(r) > 0;
    } else if (a == 2) {
        s->len[b] = r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
    } else if (a == 3) {
        s->pend[b] = xpending_count(r);
    } else if (a == 4 && r->type == REDIS_REPLY_ARRAY) { /* XINFO GROUPS */
        for (size_t g = 0; g < r->elements; g++) {
            const redisReply *name = flat_get(r->element[g], "name");
            const redisReply *last = flat_get(r->element[g], "last-delivered-id");
            if (name && last && !strcmp(name->str, "workers")) s->delivered[b] = reply_str(last);
        }
    }
}

/* One entry of a stream as the queue view lists it: the task it carries. */
static cJSON *entry_item(const qv *s, int band, const redisReply *e) {
    cJSON *o = cJSON_CreateObject();
    const redisReply *f = e->element[1];
    const redisReply *tid = flat_get(f, "task_id"), *tt = flat_get(f, "task_type");
    const redisReply *att = flat_get(f, "attempt");
    int raw = tt != NULL || !att || !tid;
    cJSON_AddNumberToObject(o, "band", band);
    cJSON_AddStringToObject(o, "entry_id", e->element[0]->str);
    cJSON_AddNumberToObject(o, "enqueued_ms", id_ms(e->element[0]->str));
    if (tid && tid->type == REDIS_REPLY_STRING && dtq_valid_task_id(tid->str)) {
        cJSON_AddStringToObject(o, "task_id", tid->str);
    } else {
        char *derived = dtq_xasprintf("%s:p%d:%s", s->queue, band, e->element[0]->str);
        cJSON_AddStringToObject(o, "task_id", derived);
        free(derived);
    }
    if (att && att->type == REDIS_REPLY_STRING)
        cJSON_AddNumberToObject(o, "attempt", (double)strtoll(att->str, NULL, 10));
    if (tt && tt->type == REDIS_REPLY_STRING) cJSON_AddStringToObject(o, "task_type", tt->str);
    cJSON_AddBoolToObject(o, "raw", raw);
    return o;
}

static int valid_entry(const redisReply *e) {
    return e->type == REDIS_REPLY_ARRAY && e->elements == 2 &&
           e->element[0]->type == REDIS_REPLY_STRING && e->element[1]->type == REDIS_REPLY_ARRAY;
}

static void qv_waiting(job *j, redisReply *r, int band, int b) {
    qv *s = j->st;
    DTQ_UNUSED(b);
    if (r->type != REDIS_REPLY_ARRAY) return;
    for (size_t i = 0; i < r->elements && s->nwaiting < s->limit; i++) {
        if (!valid_entry(r->element[i])) continue;
        cJSON_AddItemToArray(s->waiting, entry_item(s, band, r->element[i]));
        s->nwaiting++;
    }
}

static void qv_pending(job *j, redisReply *r, int band, int b) {
    qv *s = j->st;
    DTQ_UNUSED(b);
    if (r->type != REDIS_REPLY_ARRAY) return;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        cJSON *o;
        if (cJSON_GetArraySize(s->running) >= s->limit) break;
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 4) continue;
        o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "band", band);
        cJSON_AddItemToObject(o, "entry_id", json_str(e->element[0]));
        cJSON_AddItemToObject(o, "worker_id", json_str(e->element[1]));
        cJSON_AddNumberToObject(o, "idle_ms", (double)reply_int(e->element[2]));
        cJSON_AddNumberToObject(o, "deliveries", (double)reply_int(e->element[3]));
        cJSON_AddItemToArray(s->running, o);
    }
}

/* The entry behind a running item: which task it carries. */
static void qv_running_entry(job *j, redisReply *r, int idx, int b) {
    qv *s = j->st;
    cJSON *o = cJSON_GetArrayItem(s->running, idx), *item;
    DTQ_UNUSED(b);
    if (!o || r->type != REDIS_REPLY_ARRAY || r->elements == 0 || !valid_entry(r->element[0]))
        return;
    item = entry_item(s, (int)cJSON_GetObjectItem(o, "band")->valuedouble, r->element[0]);
    cJSON_AddItemToObject(o, "task_id", cJSON_Duplicate(cJSON_GetObjectItem(item, "task_id"), 1));
    cJSON_AddNumberToObject(o, "enqueued_ms",
                            cJSON_GetObjectItem(item, "enqueued_ms")->valuedouble);
    cJSON_Delete(item);
}

/* HMGET status task_type attempt of a listed task: a = 0 waiting, 1 running; b = index. */
static void qv_task(job *j, redisReply *r, int a, int b) {
    qv *s = j->st;
    cJSON *o = cJSON_GetArrayItem(a ? s->running : s->waiting, b);
    static const char *const names[] = {"status", "task_type", "attempt"};
    if (!o || r->type != REDIS_REPLY_ARRAY || r->elements != 3) return;
    for (int i = 0; i < 3; i++) {
        const redisReply *v = r->element[i];
        if (v->type != REDIS_REPLY_STRING) continue;
        cJSON_DeleteItemFromObject(o, names[i]);
        if (i == 2)
            cJSON_AddNumberToObject(o, names[i], (double)strtoll(v->str, NULL, 10));
        else
            cJSON_AddStringToObject(o, names[i], v->str);
    }
}

static void qv_answer(job *j) {
    qv *s = j->st;
    cJSON *o = cJSON_CreateObject(), *bands;
    long long length = 0, pending = 0, depth = 0;
    cJSON_AddStringToObject(o, "name", s->queue);
    cJSON_AddBoolToObject(o, "paused", s->paused);
    bands = cJSON_CreateArray();
    for (int b = BANDS - 1; b >= 0; b--) {
        cJSON *bo = cJSON_CreateObject();
        long long d = s->len[b] - s->pend[b] > 0 ? s->len[b] - s->pend[b] : 0;
        length += s->len[b];
        pending += s->pend[b];
        depth += d;
        cJSON_AddNumberToObject(bo, "band", b);
        cJSON_AddNumberToObject(bo, "length", (double)s->len[b]);
        cJSON_AddNumberToObject(bo, "pending", (double)s->pend[b]);
        cJSON_AddNumberToObject(bo, "depth", (double)d);
        cJSON_AddItemToArray(bands, bo);
    }
    cJSON_AddNumberToObject(o, "length", (double)length);
    cJSON_AddNumberToObject(o, "depth", (double)depth);
    cJSON_AddNumberToObject(o, "pending", (double)pending);
    cJSON_AddItemToObject(o, "bands", bands);
    cJSON_AddNumberToObject(o, "count", (double)s->limit);
    cJSON_AddItemToObject(o, "waiting", s->waiting);
    cJSON_AddItemToObject(o, "running", s->running);
    s->waiting = s->running = NULL;
    add_rates(o, j->w, s->queue);
    job_reply(j, 200, o);
}

static void qv_step4(job *j) {
    qv *s = j->st;
    for (int a = 0; a < 2; a++) {
        cJSON *list = a ? s->running : s->waiting;
        for (int i = 0; i < cJSON_GetArraySize(list); i++) {
            const cJSON *tid = cJSON_GetObjectItem(cJSON_GetArrayItem(list, i), "task_id");
            char *tk;
            if (!cJSON_IsString(tid)) continue;
            tk = dtq_web_key(j->w, "task:%s", tid->valuestring);
            job_send(j, qv_task, a, i, "HMGET", tk, "status", "task_type", "attempt", NULL);
            free(tk);
        }
    }
    job_wait(j, qv_answer);
}

static void qv_step3(job *j) {
    qv *s = j->st;
    for (int i = 0; i < cJSON_GetArraySize(s->running); i++) {
        cJSON *o = cJSON_GetArrayItem(s->running, i);
        const char *id = cJSON_GetObjectItem(o, "entry_id")->valuestring;
        char *sk;
        if (!id) continue;
        sk = dtq_web_key(j->w, "stream:%s:p%d", s->queue,
                         (int)cJSON_GetObjectItem(o, "band")->valuedouble);
        job_send(j, qv_running_entry, i, 0, "XRANGE", sk, id, id, "COUNT", "1", NULL);
        free(sk);
    }
    job_wait(j, qv_step4);
}

static void qv_step2(job *j) {
    qv *s = j->st;
    char count[32];
    if (!s->member) {
        dtq_web_reply_error(j->req, 404, "not_found", "no queue '%s' in %s:queues", s->queue,
                            j->w->prefix);
        job_free(j);
        return;
    }
    snprintf(count, sizeof(count), "%lld", (long long)s->limit);
    s->waiting = cJSON_CreateArray();
    s->running = cJSON_CreateArray();
    for (int b = BANDS - 1; b >= 0; b--) { /* p9 first, as workers read them */
        char *sk = dtq_web_key(j->w, "stream:%s:p%d", s->queue, b);
        if (s->len[b] - s->pend[b] > 0) {
            char *from = s->delivered[b] ? dtq_xasprintf("(%s", s->delivered[b]) : dtq_xstrdup("-");
            job_send(j, qv_waiting, b, 0, "XRANGE", sk, from, "+", "COUNT", count, NULL);
            free(from);
        }
        if (s->pend[b] > 0)
            job_send(j, qv_pending, b, 0, "XPENDING", sk, "workers", "-", "+", count, NULL);
        free(sk);
    }
    job_wait(j, qv_step3);
}

void dtq_web_api_queue(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    qv *s;
    job *j;
    int64_t limit;
    char *k;
    if (!dtq_valid_queue_name(a->arg)) {
        dtq_web_reply_error(req, 400, "bad_request", "a queue name matches [A-Za-z0-9._:-]{1,128}");
        return;
    }
    if (query_int(req, a, "count", 20, 1, DTQ_WEB_LIST_MAX, &limit) != 0) return;
    if (!redis_up_or_503(w, req)) return;
    s = dtq_xcalloc(1, sizeof(*s));
    s->queue = dtq_xstrdup(a->arg);
    s->limit = limit;
    j = job_new(w, req, s, qv_free);
    k = dtq_web_key(w, "queues");
    job_send(j, qv_head, 0, 0, "SISMEMBER", k, s->queue, NULL);
    free(k);
    k = dtq_web_key(w, "queue:%s:paused", s->queue);
    job_send(j, qv_head, 1, 0, "EXISTS", k, NULL);
    free(k);
    for (int b = 0; b < BANDS; b++) {
        k = dtq_web_key(w, "stream:%s:p%d", s->queue, b);
        job_send(j, qv_head, 2, b, "XLEN", k, NULL);
        job_send(j, qv_head, 3, b, "XPENDING", k, "workers", NULL);
        job_send(j, qv_head, 4, b, "XINFO", "GROUPS", k, NULL);
        free(k);
    }
    job_wait(j, qv_step2);
}

/* ================================================================= GET /api/tasks/<id> */

typedef struct tv {
    char *id;
    cJSON *fields;
    int found, wrong_type;
    char *result;
    size_t result_len;
    int has_result;
    long long pttl;
    int events_stream;
    int64_t created_at;
    cJSON *events; /* newest first while scanning */
    int scanned;
    char *cursor; /* the oldest event id read */
    int page_full;
    cJSON *dead_letter;
} tv;

static void tv_free(void *p) {
    tv *s = p;
    free(s->id);
    cJSON_Delete(s->fields);
    free(s->result);
    cJSON_Delete(s->events);
    free(s->cursor);
    cJSON_Delete(s->dead_letter);
    free(s);
}

static void tv_head(job *j, redisReply *r, int a, int b) {
    tv *s = j->st;
    DTQ_UNUSED(b);
    switch (a) {
    case 0:
        if (r->type == REDIS_REPLY_ERROR) {
            s->wrong_type = 1;
        } else if (r->type == REDIS_REPLY_ARRAY && r->elements > 0) {
            const redisReply *c = flat_get(r, "created_at");
            s->found = 1;
            s->fields = fields_object(r, 0);
            s->created_at = c ? reply_int(c) : 0;
        }
        break;
    case 1:
        if (r->type == REDIS_REPLY_STRING) {
            s->has_result = 1;
            s->result = dtq_xstrndup(r->str, r->len);
            s->result_len = r->len;
        }
        break;
    case 2: s->pttl = reply_int(r); break;
    case 3: s->events_stream = reply_int(r) > 0; break;
    }
}

static void tv_dead_letter(job *j, redisReply *r, int a, int b) {
    tv *s = j->st;
    DTQ_UNUSED(a);
    DTQ_UNUSED(b);
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 && valid_entry(r->element[0])) {
        s->dead_letter = fields_object(r->element[0]->element[1], 0);
        cJSON_AddStringToObject(s->dead_letter, "entry_id", r->element[0]->element[0]->str);
    }
}

/* A page of <p>:stream:events, newest first: keeps this task's events. */
static void tv_events(job *j, redisReply *r, int a, int b) {
    tv *s = j->st;
    char needle[300];
    DTQ_UNUSED(a);
    DTQ_UNUSED(b);
    s->page_full = 0;
    if (r->type != REDIS_REPLY_ARRAY) return;
    s->page_full = r->elements == EVENTS_PAGE;
    snprintf(needle, sizeof(needle), "\"task_id\":\"%s\"", s->id);
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i], *ev;
        cJSON *parsed;
        if (!valid_entry(e)) continue;
        s->scanned++;
        free(s->cursor);
        s->cursor = dtq_xstrdup(e->element[0]->str);
        ev = flat_get(e->element[1], "event");
        if (!ev || ev->type != REDIS_REPLY_STRING || !strstr(ev->str, needle)) continue;
        parsed = cJSON_Parse(ev->str);
        if (!parsed) continue;
        {
            const cJSON *tid = cJSON_GetObjectItem(parsed, "task_id");
            if (!cJSON_IsString(tid) || strcmp(tid->valuestring, s->id)) {
                cJSON_Delete(parsed);
                continue;
            }
        }
        cJSON_AddStringToObject(parsed, "stream_id", e->element[0]->str);
        cJSON_AddItemToArray(s->events, parsed);
    }
}

static void tv_answer(job *j) {
    tv *s = j->st;
    cJSON *o = cJSON_CreateObject(), *status, *chrono = cJSON_CreateArray();
    int complete;
    cJSON_AddStringToObject(o, "id", s->id);
    status = cJSON_GetObjectItem(s->fields, "status");
    cJSON_AddStringToObject(o, "status", cJSON_IsString(status) ? status->valuestring : "");
    cJSON_AddItemToObject(o, "fields", s->fields);
    s->fields = NULL;
    if (s->has_result) {
        cJSON *parsed = cJSON_ParseWithOpts(s->result, NULL, 1);
        if (parsed && strlen(s->result) == s->result_len) {
            cJSON_AddItemToObject(o, "result", parsed);
            cJSON_AddBoolToObject(o, "result_is_json", 1);
        } else {
            cJSON_Delete(parsed);
            cJSON_AddStringToObject(o, "result", s->result);
            cJSON_AddBoolToObject(o, "result_is_json", 0);
        }
    } else {
        cJSON_AddNullToObject(o, "result");
    }
    cJSON_AddNumberToObject(o, "ttl_ms", (double)s->pttl);
    if (s->dead_letter) {
        cJSON_AddItemToObject(o, "dead_letter", s->dead_letter);
        s->dead_letter = NULL;
    } else {
        cJSON_AddNullToObject(o, "dead_letter");
    }
    while (cJSON_GetArraySize(s->events) > 0) /* oldest first */
        cJSON_AddItemToArray(
            chrono, cJSON_DetachItemFromArray(s->events, cJSON_GetArraySize(s->events) - 1));
    cJSON_AddItemToObject(o, "events", chrono);
    cJSON_AddBoolToObject(o, "events_stream", s->events_stream);
    cJSON_AddNumberToObject(o, "events_scanned", s->scanned);
    complete = !s->events_stream || !s->page_full ||
               (s->cursor && id_ms(s->cursor) < (double)s->created_at);
    cJSON_AddBoolToObject(o, "events_complete", complete);
    job_reply(j, 200, o);
}

static void tv_more_events(job *j) {
    tv *s = j->st;
    /* further back while pages are full, newer than the task, and within the scan cap */
    if (s->page_full && s->cursor && id_ms(s->cursor) >= (double)s->created_at &&
        s->scanned < DTQ_WEB_SCAN_MAX) {
        char *ek = dtq_web_key(j->w, "stream:events"), *from = dtq_xasprintf("(%s", s->cursor);
        char count[16];
        snprintf(count, sizeof(count), "%d", EVENTS_PAGE);
        job_send(j, tv_events, 0, 0, "XREVRANGE", ek, from, "-", "COUNT", count, NULL);
        free(ek);
        free(from);
        job_wait(j, tv_more_events);
        return;
    }
    tv_answer(j);
}

static void tv_step2(job *j) {
    tv *s = j->st;
    const cJSON *dlq;
    if (!s->found) {
        if (s->wrong_type)
            dtq_web_reply_error(j->req, 404, "not_found",
                                "%s:task:%s holds another type than a hash", j->w->prefix, s->id);
        else
            dtq_web_reply_error(j->req, 404, "not_found", "no task %s", s->id);
        job_free(j);
        return;
    }
    dlq = cJSON_GetObjectItem(s->fields, "dlq_entry");
    if (cJSON_IsString(dlq) && valid_stream_id(dlq->valuestring)) {
        char *k = dtq_web_key(j->w, "stream:dead-letter");
        job_send(j, tv_dead_letter, 0, 0, "XRANGE", k, dlq->valuestring, dlq->valuestring, NULL);
        free(k);
    }
    if (s->events_stream) {
        char *k = dtq_web_key(j->w, "stream:events");
        char count[16];
        snprintf(count, sizeof(count), "%d", EVENTS_PAGE);
        job_send(j, tv_events, 0, 0, "XREVRANGE", k, "+", "-", "COUNT", count, NULL);
        free(k);
    }
    job_wait(j, tv_more_events);
}

void dtq_web_api_task(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    tv *s;
    job *j;
    char *k;
    if (!valid_task_id(a->arg)) {
        dtq_web_reply_error(req, 400, "bad_request", "a task id matches [A-Za-z0-9._:-]{1,256}");
        return;
    }
    if (!redis_up_or_503(w, req)) return;
    s = dtq_xcalloc(1, sizeof(*s));
    s->id = dtq_xstrdup(a->arg);
    s->events = cJSON_CreateArray();
    s->pttl = -2;
    j = job_new(w, req, s, tv_free);
    k = dtq_web_key(w, "task:%s", s->id);
    job_send(j, tv_head, 0, 0, "HGETALL", k, NULL);
    job_send(j, tv_head, 2, 0, "PTTL", k, NULL);
    free(k);
    k = dtq_web_key(w, "result:%s", s->id);
    job_send(j, tv_head, 1, 0, "GET", k, NULL);
    free(k);
    k = dtq_web_key(w, "stream:events");
    job_send(j, tv_head, 3, 0, "EXISTS", k, NULL);
    free(k);
    job_wait(j, tv_step2);
}

/* ================================================================= GET /api/dlq, /api/audit */

/* A page of a stream, newest or oldest first, optionally only the entries whose `field`
 * equals `value`: pages of the stream are read until `count` entries matched, the stream
 * ended, or DTQ_WEB_SCAN_MAX entries were examined. */
typedef struct pg {
    char *key;
    int64_t count;
    int newest_first;
    const char *field; /* static: "last_error_class" or "task_id" */
    char *value;       /* NULL: no filter */
    char *cursor;      /* exclusive start; NULL: the first page */
    long long total;
    cJSON *entries;
    int matched, scanned, page_size, page_len, done;
    char *last;       /* the last entry examined */
    char *next;       /* next_cursor of the answer */
    size_t field_cap; /* bytes of a value shown */
} pg;

static void pg_free(void *p) {
    pg *s = p;
    free(s->key);
    free(s->value);
    free(s->cursor);
    cJSON_Delete(s->entries);
    free(s->last);
    free(s->next);
    free(s);
}

static void pg_total(job *j, redisReply *r, int a, int b) {
    pg *s = j->st;
    DTQ_UNUSED(a);
    DTQ_UNUSED(b);
    s->total = r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
}

static void pg_page(job *j, redisReply *r, int a, int b) {
    pg *s = j->st;
    DTQ_UNUSED(a);
    DTQ_UNUSED(b);
    s->page_len = r->type == REDIS_REPLY_ARRAY ? (int)r->elements : 0;
    for (int i = 0; i < s->page_len; i++) {
        const redisReply *e = r->element[i], *v;
        cJSON *o;
        if (!valid_entry(e)) continue;
        if (s->matched == s->count) { /* one more exists: the answer has a next page */
            s->done = 1;
            s->next = s->last ? dtq_xstrdup(s->last) : NULL;
            return;
        }
        s->scanned++;
        free(s->last);
        s->last = dtq_xstrdup(e->element[0]->str);
        if (s->value) {
            v = flat_get(e->element[1], s->field);
            if (!v || v->type != REDIS_REPLY_STRING || strcmp(v->str, s->value)) continue;
        }
        o = fields_object(e->element[1], s->field_cap);
        cJSON_AddStringToObject(o, "entry_id", e->element[0]->str);
        cJSON_AddNumberToObject(o, "entry_ms", id_ms(e->element[0]->str));
        cJSON_AddItemToArray(s->entries, o);
        s->matched++;
    }
}

static void pg_answer(job *j) {
    pg *s = j->st;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "total", (double)s->total);
    cJSON_AddNumberToObject(o, "count", (double)s->count);
    cJSON_AddStringToObject(o, "order", s->newest_first ? "newest" : "oldest");
    if (s->value)
        cJSON_AddStringToObject(o, "filter", s->value);
    else
        cJSON_AddNullToObject(o, "filter");
    cJSON_AddNumberToObject(o, "scanned", s->scanned);
    cJSON_AddItemToObject(o, "entries", s->entries);
    s->entries = NULL;
    if (s->next)
        cJSON_AddStringToObject(o, "next_cursor", s->next);
    else
        cJSON_AddNullToObject(o, "next_cursor");
    job_reply(j, 200, o);
}

static void pg_read(job *j);

static void pg_step(job *j) {
    pg *s = j->st;
    if (s->done) {
        pg_answer(j);
        return;
    }
    if (s->page_len < s->page_size) { /* the stream ended */
        pg_answer(j);
        return;
    }
    if (s->scanned >= DTQ_WEB_SCAN_MAX) { /* the scan cap: the client goes on from here */
        s->next = s->last ? dtq_xstrdup(s->last) : NULL;
        pg_answer(j);
        return;
    }
    pg_read(j);
}

static void pg_read(job *j) {
    pg *s = j->st;
    const char *from = s->last ? s->last : s->cursor;
    char *start = from ? dtq_xasprintf("(%s", from) : dtq_xstrdup(s->newest_first ? "+" : "-");
    char count[32];
    snprintf(count, sizeof(count), "%d", s->page_size);
    if (s->newest_first)
        job_send(j, pg_page, 0, 0, "XREVRANGE", s->key, start, "-", "COUNT", count, NULL);
    else
        job_send(j, pg_page, 0, 0, "XRANGE", s->key, start, "+", "COUNT", count, NULL);
    free(start);
    job_wait(j, pg_step);
}

static void page_stream(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a,
                        const char *suffix, const char *filter_param, const char *field) {
    const char *cursor = query_get(a, "cursor"), *order = query_get(a, "order");
    const char *value = query_get(a, filter_param);
    int64_t count;
    pg *s;
    job *j;
    if (query_int(req, a, "count", 50, 1, DTQ_WEB_PAGE_MAX, &count) != 0) return;
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
    if (!redis_up_or_503(w, req)) return;
    s = dtq_xcalloc(1, sizeof(*s));
    s->key = dtq_web_key(w, "%s", suffix);
    s->count = count;
    s->newest_first = !order || !*order || !strcmp(order, "newest");
    s->field = field;
    s->value = value && *value ? dtq_xstrdup(value) : NULL;
    s->cursor = cursor && *cursor ? dtq_xstrdup(cursor) : NULL;
    s->entries = cJSON_CreateArray();
    /* one more than asked tells whether a next page exists; a filter reads bigger pages */
    s->page_size = s->value ? CLASS_PAGE : (int)count + 1;
    s->field_cap = DTQ_WEB_FIELD_MAX;
    j = job_new(w, req, s, pg_free);
    job_send(j, pg_total, 0, 0, "XLEN", s->key, NULL);
    pg_read(j);
}

void dtq_web_api_dlq(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    page_stream(w, req, a, "stream:dead-letter", "class", "last_error_class");
}

void dtq_web_api_audit(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    page_stream(w, req, a, "stream:audit", "task", "task_id");
}

/* ================================================================= writes */

typedef struct wr {
    char *name; /* task id or queue */
    char *action;
    char *actor;
    const char *target_field; /* "task_id" or "queue" in the answer */
    int member;
    char *cls;            /* requeue-all: the class filter */
    long long initial;    /* requeue-all: XLEN at the start */
    char *upto;           /* requeue-all by class: the newest entry at the start */
    char *from;           /* requeue-all by class: the last entry examined */
    int page_len, rounds; /* requeue-all */
    long long requeued, skipped;
    int replied; /* an error reply was sent */
    char *error; /* the Function's error reply */
    cJSON *result;
} wr;

static void wr_free(void *p) {
    wr *s = p;
    free(s->name);
    free(s->action);
    free(s->actor);
    free(s->cls);
    free(s->upto);
    free(s->from);
    free(s->error);
    cJSON_Delete(s->result);
    free(s);
}

static wr *wr_new(const dtq_web_args *a) {
    wr *s = dtq_xcalloc(1, sizeof(*s));
    s->name = a->arg ? dtq_xstrdup(a->arg) : NULL;
    s->action = dtq_xstrdup(a->action);
    s->actor = dtq_xstrdup(a->actor);
    return s;
}

/* The reply of one admin Function call: kept as the result, or as the error. */
static void wr_fcall(job *j, redisReply *r, int a, int b) {
    wr *s = j->st;
    DTQ_UNUSED(a);
    DTQ_UNUSED(b);
    if (r->type == REDIS_REPLY_ERROR)
        s->error = dtq_xstrndup(r->str, r->len);
    else if (r->type == REDIS_REPLY_INTEGER)
        s->result = cJSON_CreateNumber((double)r->integer);
    else
        s->result = json_str(r);
}

/* Answers the Function's error, or {"ok": true, "action", "result", ...}. */
static void wr_answer(job *j) {
    wr *s = j->st;
    cJSON *o;
    if (s->error) {
        const char *word;
        int code = dtq_web_function_error(s->error, &word);
        dtq_web_reply_error(j->req, code, word, "%s", s->error);
        job_free(j);
        return;
    }
    o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "ok", 1);
    cJSON_AddStringToObject(o, "action", s->action);
    if (s->name) cJSON_AddStringToObject(o, s->target_field, s->name);
    cJSON_AddStringToObject(o, "actor", s->actor);
    cJSON_AddItemToObject(o, "result", s->result ? s->result : cJSON_CreateNull());
    s->result = NULL;
    dtq_log(DTQ_LOG_INFO, "web: %s %s by %s", s->action, s->name ? s->name : "", s->actor);
    job_reply(j, 200, o);
}

void dtq_web_api_task_write(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    static const char *const none[] = {NULL};
    wr *s;
    job *j;
    const char *fn;
    if (body_fields(req, a->body, none) != 0) return;
    if (!valid_task_id(a->arg)) {
        dtq_web_reply_error(req, 400, "bad_request", "a task id matches [A-Za-z0-9._:-]{1,256}");
        return;
    }
    if (!redis_up_or_503(w, req)) return;
    fn = !strcmp(a->action, "requeue")   ? w->fn.requeue
         : !strcmp(a->action, "discard") ? w->fn.discard
                                         : w->fn.cancel;
    s = wr_new(a);
    s->target_field = "task_id";
    j = job_new(w, req, s, wr_free);
    job_send(j, wr_fcall, 0, 0, "FCALL", fn, "0", s->name, s->actor, NULL);
    job_wait(j, wr_answer);
}

static void qw_member(job *j, redisReply *r, int a, int b) {
    wr *s = j->st;
    DTQ_UNUSED(a);
    DTQ_UNUSED(b);
    s->member = reply_int(r) > 0;
}

static void qw_step2(job *j) {
    wr *s = j->st;
    if (!s->member) {
        dtq_web_reply_error(j->req, 404, "not_found", "no queue '%s' in %s:queues", s->name,
                            j->w->prefix);
        job_free(j);
        return;
    }
    job_send(j, wr_fcall, 0, 0, "FCALL",
             !strcmp(s->action, "pause") ? j->w->fn.pause : j->w->fn.resume, "0", s->name, s->actor,
             NULL);
    job_wait(j, wr_answer);
}

void dtq_web_api_queue_write(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    static const char *const none[] = {NULL};
    wr *s;
    job *j;
    char *k;
    if (body_fields(req, a->body, none) != 0) return;
    if (!dtq_valid_queue_name(a->arg)) {
        dtq_web_reply_error(req, 400, "bad_request", "a queue name matches [A-Za-z0-9._:-]{1,128}");
        return;
    }
    if (!redis_up_or_503(w, req)) return;
    s = wr_new(a);
    s->target_field = "queue";
    j = job_new(w, req, s, wr_free);
    k = dtq_web_key(w, "queues");
    job_send(j, qw_member, 0, 0, "SISMEMBER", k, s->name, NULL);
    free(k);
    job_wait(j, qw_step2);
}

void dtq_web_api_dlq_purge(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    static const char *const none[] = {NULL};
    wr *s;
    job *j;
    if (body_fields(req, a->body, none) != 0) return;
    if (!redis_up_or_503(w, req)) return;
    s = wr_new(a);
    free(s->name);
    s->name = NULL;
    j = job_new(w, req, s, wr_free);
    job_send(j, wr_fcall, 0, 0, "FCALL", w->fn.purge_dlq, "0", s->actor, NULL);
    job_wait(j, wr_answer);
}

/* ---- POST /api/dlq/requeue-all: <ns>_requeue_dlq in chunks, or <ns>_requeue per entry of
 * a class, up to the entries there were at the start. */

static void ra_answer(job *j) {
    wr *s = j->st;
    cJSON *o;
    if (s->error) {
        wr_answer(j);
        return;
    }
    o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "ok", 1);
    cJSON_AddStringToObject(o, "action", "requeue-all");
    cJSON_AddStringToObject(o, "actor", s->actor);
    if (s->cls)
        cJSON_AddStringToObject(o, "class", s->cls);
    else
        cJSON_AddNullToObject(o, "class");
    cJSON_AddNumberToObject(o, "requeued", (double)s->requeued);
    cJSON_AddNumberToObject(o, "skipped", (double)s->skipped);
    dtq_log(DTQ_LOG_INFO, "web: requeue-all%s%s: %lld requeued by %s", s->cls ? " class " : "",
            s->cls ? s->cls : "", s->requeued, s->actor);
    job_reply(j, 200, o);
}

static void ra_chunk(job *j, redisReply *r, int a, int b) {
    wr *s = j->st;
    DTQ_UNUSED(a);
    DTQ_UNUSED(b);
    if (r->type == REDIS_REPLY_ERROR) {
        s->error = dtq_xstrndup(r->str, r->len);
        return;
    }
    s->page_len = (int)reply_int(r);
    s->requeued += s->page_len;
}

static void ra_loop(job *j) {
    wr *s = j->st;
    /* until a chunk requeues nothing, or as many as the stream held (new ones can come) */
    if (s->error || (s->rounds > 0 && (s->page_len == 0 || s->requeued >= s->initial)) ||
        s->rounds > s->initial / 1000 + 10) {
        ra_answer(j);
        return;
    }
    s->rounds++;
    job_send(j, ra_chunk, 0, 0, "FCALL", j->w->fn.requeue_dlq, "0", DLQ_REQUEUE_CHUNK, s->actor,
             NULL);
    job_wait(j, ra_loop);
}

static void ra_initial(job *j, redisReply *r, int a, int b) {
    wr *s = j->st;
    DTQ_UNUSED(a);
    DTQ_UNUSED(b);
    if (r->type == REDIS_REPLY_INTEGER) s->initial = r->integer;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 && valid_entry(r->element[0]))
        s->upto = dtq_xstrdup(r->element[0]->element[0]->str);
}

static void ra_one(job *j, redisReply *r, int a, int b) {
    wr *s = j->st;
    DTQ_UNUSED(a);
    DTQ_UNUSED(b);
    if (r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING) {
        if (!strcmp(r->str, "queued"))
            s->requeued++;
        else
            s->skipped++; /* poisoned: dead-lettered again */
    } else if (r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "ERR Function", 12)) {
        free(s->error);
        s->error = dtq_xstrndup(r->str, r->len);
    } else {
        s->skipped++; /* gone or moved on since it was read */
    }
}

/* A page of the class's entries: one <ns>_requeue per match, pipelined. */
static void ra_class_page(job *j, redisReply *r, int a, int b) {
    wr *s = j->st;
    DTQ_UNUSED(a);
    DTQ_UNUSED(b);
    s->page_len = r->type == REDIS_REPLY_ARRAY ? (int)r->elements : 0;
    for (int i = 0; i < s->page_len; i++) {
        const redisReply *e = r->element[i], *c, *tid;
        if (!valid_entry(e)) continue;
        free(s->from);
        s->from = dtq_xstrdup(e->element[0]->str);
        c = flat_get(e->element[1], "last_error_class");
        tid = flat_get(e->element[1], "task_id");
        if (!c || c->type != REDIS_REPLY_STRING || strcmp(c->str, s->cls)) continue;
        if (!tid || tid->type != REDIS_REPLY_STRING || !*tid->str) continue;
        job_send(j, ra_one, 0, 0, "FCALL", j->w->fn.requeue, "0", tid->str, s->actor, NULL);
    }
}

static void ra_class_loop(job *j) {
    wr *s = j->st;
    char *k, *start;
    if (s->error || !s->upto || (s->rounds > 0 && s->page_len < CLASS_PAGE) ||
        (s->from && !strcmp(s->from, s->upto))) {
        ra_answer(j);
        return;
    }
    s->rounds++;
    k = dtq_web_key(j->w, "stream:dead-letter");
    start = s->from ? dtq_xasprintf("(%s", s->from) : dtq_xstrdup("-");
    {
        char count[16];
        snprintf(count, sizeof(count), "%d", CLASS_PAGE);
        job_send(j, ra_class_page, 0, 0, "XRANGE", k, start, s->upto, "COUNT", count, NULL);
    }
    free(k);
    free(start);
    job_wait(j, ra_class_loop);
}

void dtq_web_api_dlq_requeue_all(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    static const char *const allowed[] = {"class", NULL};
    const cJSON *cls = a->body ? cJSON_GetObjectItemCaseSensitive(a->body, "class") : NULL;
    wr *s;
    job *j;
    char *k;
    if (body_fields(req, a->body, allowed) != 0) return;
    if (cls && !cJSON_IsNull(cls) &&
        (!cJSON_IsString(cls) || !dtq_valid_name(cls->valuestring, strlen(cls->valuestring), 64))) {
        dtq_web_reply_error(req, 400, "bad_request",
                            "class must be a failure class such as \"timeout\" "
                            "([A-Za-z0-9._:-]{1,64}), or null");
        return;
    }
    if (!redis_up_or_503(w, req)) return;
    s = wr_new(a);
    free(s->name);
    s->name = NULL;
    if (cJSON_IsString(cls)) s->cls = dtq_xstrdup(cls->valuestring);
    j = job_new(w, req, s, wr_free);
    k = dtq_web_key(w, "stream:dead-letter");
    if (s->cls) {
        job_send(j, ra_initial, 0, 0, "XREVRANGE", k, "+", "-", "COUNT", "1", NULL);
        free(k);
        job_wait(j, ra_class_loop);
    } else {
        job_send(j, ra_initial, 0, 0, "XLEN", k, NULL);
        free(k);
        job_wait(j, ra_loop);
    }
}

/* ================================================================= the sampler */

typedef struct smp {
    int64_t ts;
    char **workers;
    int nw, more;
    cJSON *stats; /* {queue: [depth, pending]} */
} smp;

static void smp_free(void *p) {
    smp *s = p;
    free_names(s->workers, s->nw);
    cJSON_Delete(s->stats);
    free(s);
}

static void smp_stats(job *j, redisReply *r, int a, int b) {
    smp *s = j->st;
    DTQ_UNUSED(a);
    DTQ_UNUSED(b);
    if (r->type != REDIS_REPLY_ARRAY) return; /* no Functions yet: no gauges */
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const redisReply *k = r->element[i];
        const char *last;
        char *q;
        cJSON *pair;
        int which;
        if (k->type != REDIS_REPLY_STRING || strncmp(k->str, "queue:", 6)) continue;
        last = strrchr(k->str, ':');
        if (!strcmp(last, ":depth"))
            which = 0;
        else if (!strcmp(last, ":pending"))
            which = 1;
        else
            continue;
        q = dtq_xstrndup(k->str + 6, (size_t)(last - k->str - 6));
        pair = cJSON_GetObjectItemCaseSensitive(s->stats, q);
        if (!pair) {
            pair = cJSON_CreateIntArray((const int[]){0, 0}, 2);
            cJSON_AddItemToObject(s->stats, q, pair);
        }
        cJSON_ReplaceItemInArray(pair, which,
                                 cJSON_CreateNumber((double)reply_int(r->element[i + 1])));
        free(q);
    }
}

static void smp_members(job *j, redisReply *r, int a, int b) {
    smp *s = j->st;
    DTQ_UNUSED(a);
    DTQ_UNUSED(b);
    s->workers = sorted_members(r, DTQ_WEB_QUEUES_MAX, &s->nw, &s->more);
}

/* One worker's hash: its per-queue counters into the history. */
static void smp_worker(job *j, redisReply *r, int idx, int b) {
    smp *s = j->st;
    const redisReply *started;
    int64_t started_at;
    DTQ_UNUSED(b);
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) return;
    started = flat_get(r, "started_at");
    started_at = started ? reply_int(started) : 0;
    dtq_web_history_worker(j->w->history, s->workers[idx], started_at, NULL, NULL);
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const redisReply *k = r->element[i];
        const char *kind;
        char *q, *field;
        dtq_web_counts c;
        const redisReply *v;
        if (k->type != REDIS_REPLY_STRING || strncmp(k->str, "q:", 2)) continue;
        kind = strrchr(k->str, ':');
        if (strcmp(kind, ":succeeded")) continue; /* one call per queue, at its first field */
        q = dtq_xstrndup(k->str + 2, (size_t)(kind - k->str - 2));
        c.succeeded = reply_int(r->element[i + 1]);
        field = dtq_xasprintf("q:%s:failed", q);
        v = flat_get(r, field);
        c.failed = v ? reply_int(v) : 0;
        free(field);
        field = dtq_xasprintf("q:%s:retried", q);
        v = flat_get(r, field);
        c.retried = v ? reply_int(v) : 0;
        free(field);
        dtq_web_history_worker(j->w->history, s->workers[idx], started_at, q, &c);
        free(q);
    }
}

static void smp_commit(job *j) {
    dtq_web *w = j->w;
    job_free(j);
    dtq_web_history_end(w->history);
    w->sampling = 0;
}

static void smp_step2(job *j) {
    smp *s = j->st;
    const cJSON *it;
    dtq_web_history_begin(j->w->history, s->ts);
    cJSON_ArrayForEach(it, s->stats) {
        dtq_web_history_gauge(j->w->history, it->string,
                              (int64_t)cJSON_GetArrayItem(it, 0)->valuedouble,
                              (int64_t)cJSON_GetArrayItem(it, 1)->valuedouble);
    }
    for (int i = 0; i < s->nw; i++) {
        char *k = dtq_web_key(j->w, "worker:%s", s->workers[i]);
        job_send(j, smp_worker, i, 0, "HGETALL", k, NULL);
        free(k);
    }
    job_wait(j, smp_commit);
}

void dtq_web_api_sample(dtq_web *w) {
    smp *s = dtq_xcalloc(1, sizeof(*s));
    job *j;
    char *k;
    if (!w->redis_up || w->sampling) {
        free(s);
        return;
    }
    s->ts = dtq_now_ms();
    s->stats = cJSON_CreateObject();
    w->sampling = 1;
    j = job_new(w, NULL, s, smp_free);
    job_send(j, smp_stats, 0, 0, "FCALL_RO", w->fn.stats, "0", NULL);
    k = dtq_web_key(w, "workers");
    job_send(j, smp_members, 0, 0, "SMEMBERS", k, NULL);
    free(k);
    job_wait(j, smp_step2);
}
