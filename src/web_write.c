/* web_write.c: the API's writes: the admin Functions (docs/reference.md 5.3), called like
 * redis-cli and dtqctl call them, with the token's actor, so that every write is audited.
 * Their error replies are answered as web_core.c maps them. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "log.h"
#include "scope.h"
#include "util.h"
#include "web_api.h"

typedef struct wr {
    dtq_web_job h;
    char *name; /* task id, queue, schedule or limit target; NULL for the dead-letter writes */
    char *action;
    char *actor;
    const char *target_field; /* "task_id", "queue" or "name" in the answer */
    int result_is_task;       /* the result is a new task's id: answered as task_id too */
    char *cls;                /* requeue-all: the class filter */
    char *cursor;             /* requeue-all: the cursor of the next call; NULL: done */
    long long requeued, skipped;
    char *error; /* the Function's error reply */
    cJSON *result;
    char *queue;   /* the cluster layout: the queue whose slot the call goes to */
    char **queues; /* the cluster layout, a write over every queue: the index, then NULL ({ns}) */
    int nq, qi;    /* their number (without {ns}'s), the one being written */
} wr;

static void wr_free(void *p) {
    wr *s = p;
    free(s->name);
    free(s->action);
    free(s->actor);
    free(s->cls);
    free(s->cursor);
    free(s->error);
    cJSON_Delete(s->result);
    free(s->queue);
    for (int i = 0; i < s->nq; i++) free(s->queues[i]);
    free(s->queues);
    free(s);
}

static dtq_rsteps *wr_new(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a,
                          const char *target_field) {
    wr *s = dtq_xcalloc(1, sizeof(*s));
    s->h.w = w;
    s->h.req = req;
    s->name = target_field && a->arg ? dtq_xstrdup(a->arg) : NULL;
    s->target_field = target_field;
    s->action = dtq_xstrdup(a->action);
    s->actor = dtq_xstrdup(a->actor);
    return dtq_web_job_new(&s->h, s, wr_free);
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

/* The reply of one admin Function call: kept as the result, or as the error. */
static void wr_fcall(dtq_rsteps *j, redisReply *r, int a, int b) {
    wr *s = dtq_rsteps_state(j);
    DTQ_UNUSED(a);
    DTQ_UNUSED(b);
    if (r->type == REDIS_REPLY_ERROR) {
        s->error = dtq_xstrndup(r->str, r->len);
    } else if (r->type == REDIS_REPLY_INTEGER) {
        s->result = cJSON_CreateNumber((double)r->integer);
    } else if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) {
        char *v = dtq_xstrndup(r->str, r->len);
        s->result = cJSON_CreateString(v);
        free(v);
    }
}

/* FCALL fn with the keys of `queue` (the single layout: none; the cluster layout: its tag,
 * NULL: {ns}) and the arguments (NULL-terminated); the reply goes to cb with a. */
static void wr_send(dtq_rsteps *j, dtq_rsteps_reply_fn *cb, int a, const char *fn,
                    const char *queue, ...) __attribute__((sentinel));
static void wr_sendv(dtq_rsteps *j, dtq_rsteps_reply_fn *cb, int a, const char *fn,
                     const char *queue, va_list ap) {
    dtq_web_job *h = dtq_rsteps_state(j);
    dtq_argv argv;
    const char *v;
    dtq_web_fcall_argv(h->w, &argv, 0, fn, queue);
    while ((v = va_arg(ap, const char *)) != NULL) dtq_argv_adds(&argv, v);
    dtq_rsteps_send(j, cb, a, 0, &argv);
    dtq_argv_deinit(&argv);
}

static void wr_send(dtq_rsteps *j, dtq_rsteps_reply_fn *cb, int a, const char *fn,
                    const char *queue, ...) {
    va_list ap;
    va_start(ap, queue);
    wr_sendv(j, cb, a, fn, queue, ap);
    va_end(ap);
}

/* wr_send with the reply kept by wr_fcall. */
static void wr_call(dtq_rsteps *j, const char *fn, const char *queue, ...)
    __attribute__((sentinel));
static void wr_call(dtq_rsteps *j, const char *fn, const char *queue, ...) {
    va_list ap;
    va_start(ap, queue);
    wr_sendv(j, wr_fcall, 0, fn, queue, ap);
    va_end(ap);
}

/* SMEMBERS {ns}:queues (a write over every queue, the cluster layout): s->queues, sorted. */
static void wr_index(dtq_rsteps *j, redisReply *r, int a, int b) {
    wr *s = dtq_rsteps_state(j);
    DTQ_UNUSED(a);
    DTQ_UNUSED(b);
    s->queues = dtq_scope_index_names(r, &s->nq, &s->error);
}

/* `next` runs with s->queues read (the cluster layout), or at once (the single layout: one
 * call covers the namespace, nq 0). */
static void wr_over_queues(dtq_rsteps *j, dtq_rsteps_step_fn *next) {
    wr *s = dtq_rsteps_state(j);
    if (s->h.w->rc) dtq_web_index_read(s->h.w, j, wr_index);
    dtq_rsteps_wait(j, next);
}

/* What every write answers first: the Function's error kept (answered here; NULL back, the
 * job ended), or a new {"ok": true, "action", ...} for the caller to fill, answer and end. */
static cJSON *answer_start(dtq_rsteps *j, struct evhttp_request *req, const char *error,
                           const char *action) {
    cJSON *o;
    if (error) {
        dtq_web_reply_redis_error(req, error);
        dtq_rsteps_end(j);
        return NULL;
    }
    o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "ok", 1);
    cJSON_AddStringToObject(o, "action", action);
    return o;
}

/* Answers the Function's error, or {"ok": true, "action", "<target>", "actor", "result"},
 * with "task_id" too when the result is a new task's id (POST /api/cron/<name>/run). */
static void wr_answer(dtq_rsteps *j) {
    wr *s = dtq_rsteps_state(j);
    cJSON *o = answer_start(j, s->h.req, s->error, s->action);
    if (!o) return;
    if (s->name) cJSON_AddStringToObject(o, s->target_field, s->name);
    cJSON_AddStringToObject(o, "actor", s->actor);
    if (s->result_is_task && cJSON_IsString(s->result))
        cJSON_AddStringToObject(o, "task_id", s->result->valuestring);
    cJSON_AddItemToObject(o, "result", s->result ? s->result : cJSON_CreateNull());
    s->result = NULL;
    dtq_log(DTQ_LOG_INFO, "web: %s %s by %s", s->action, s->name ? s->name : "", s->actor);
    dtq_web_reply_json(s->h.req, 200, o);
    dtq_rsteps_end(j);
}

/* ================================================================= tasks */

/* ?queue=Q: the task's queue, required in the cluster layout. */
void dtq_web_api_task_write(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    static const char *const none[] = {NULL};
    dtq_rsteps *j;
    const char *fn, *queue;
    int bad;
    if (body_fields(req, a->body, none) != 0) return;
    if (!dtq_web_valid_task_id(a->arg)) {
        dtq_web_reply_error(req, 400, "bad_request", "a task id matches [A-Za-z0-9._:-]{1,256}");
        return;
    }
    queue = dtq_web_call_queue(w, req, a, &bad);
    if (bad || !dtq_web_redis_up(w, req)) return;
    fn = !strcmp(a->action, "requeue")   ? w->fn.requeue
         : !strcmp(a->action, "discard") ? w->fn.discard
                                         : w->fn.cancel;
    j = wr_new(w, req, a, "task_id");
    wr_call(j, fn, queue, a->arg, a->actor, NULL);
    dtq_rsteps_wait(j, wr_answer);
}

/* ================================================================= queues */

/* SISMEMBER <p>:queues <q>: a = 1 when it is a member. */
static void qw_member(dtq_rsteps *j, redisReply *r, int a, int b) {
    wr *s = dtq_rsteps_state(j);
    DTQ_UNUSED(a);
    DTQ_UNUSED(b);
    if (r->type == REDIS_REPLY_ERROR)
        s->error = dtq_xstrndup(r->str, r->len);
    else if (r->type == REDIS_REPLY_INTEGER && r->integer > 0)
        s->result = cJSON_CreateTrue();
}

static void qw_call(dtq_rsteps *j) {
    wr *s = dtq_rsteps_state(j);
    dtq_web *w = s->h.w;
    if (s->error) {
        wr_answer(j);
        return;
    }
    if (!s->result) {
        char *k = dtq_key_queues(w->prefix);
        dtq_web_reply_error(s->h.req, 404, "not_found", "no queue '%s' in %s", s->name, k);
        free(k);
        dtq_rsteps_end(j);
        return;
    }
    cJSON_Delete(s->result);
    s->result = NULL;
    wr_call(j, !strcmp(s->action, "pause") ? w->fn.pause : w->fn.resume, s->name, s->name, s->actor,
            NULL);
    dtq_rsteps_wait(j, wr_answer);
}

/* <ns>_pause and <ns>_resume take any name: only the queues of <p>:queues are offered. */
void dtq_web_api_queue_write(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    static const char *const none[] = {NULL};
    dtq_rsteps *j;
    char *k;
    if (body_fields(req, a->body, none) != 0) return;
    if (!dtq_valid_queue_name(a->arg)) {
        dtq_web_reply_error(req, 400, "bad_request", "a queue name matches [A-Za-z0-9._:-]{1,128}");
        return;
    }
    if (!dtq_web_redis_up(w, req)) return;
    j = wr_new(w, req, a, "queue");
    k = dtq_key_queues(w->prefix);
    dtq_rsteps_sendl(j, qw_member, 0, 0, "SISMEMBER", k, a->arg, NULL);
    free(k);
    dtq_rsteps_wait(j, qw_call);
}

/* ================================================================= periodic schedules */

/* <ns>_cron_pause|_cron_resume 0 <actor> <name> (result 1: changed, 0: it was so already)
 * and <ns>_cron_run (result and task_id: the new task's id); NOT_FOUND is 404. */
void dtq_web_api_cron_write(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    static const char *const none[] = {NULL};
    dtq_rsteps *j;
    const char *fn, *queue;
    int bad;
    if (body_fields(req, a->body, none) != 0) return;
    if (!dtq_web_valid_cron_name(a->arg)) {
        dtq_web_reply_error(req, 400, "bad_request",
                            "a schedule name matches [A-Za-z0-9._-]{1,64}");
        return;
    }
    queue = dtq_web_call_queue(w, req, a, &bad);
    if (bad || !dtq_web_redis_up(w, req)) return;
    fn = !strcmp(a->action, "pause")    ? w->fn.cron_pause
         : !strcmp(a->action, "resume") ? w->fn.cron_resume
                                        : w->fn.cron_run;
    j = wr_new(w, req, a, "name");
    ((wr *)dtq_rsteps_state(j))->result_is_task = fn == w->fn.cron_run;
    wr_call(j, fn, queue, a->actor, a->arg, NULL);
    dtq_rsteps_wait(j, wr_answer);
}

/* ================================================================= limits */

/* <ns>_limit_remove 0 <actor> <queue> <task_type or ''>: the queue-wide limit, or the
 * task type's of the body's "task_type". Answered with "target" as <ns>_limit_list names
 * it (<queue> or <queue>:<task_type>) and result "removed"; NOT_FOUND is 404. */
void dtq_web_api_limit_remove(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    static const char *const allowed[] = {"task_type", NULL};
    const cJSON *tt = a->body ? cJSON_GetObjectItemCaseSensitive(a->body, "task_type") : NULL;
    const char *type = "";
    dtq_rsteps *j;
    wr *s;
    if (body_fields(req, a->body, allowed) != 0) return;
    if (!dtq_valid_queue_name(a->arg)) {
        dtq_web_reply_error(req, 400, "bad_request", "a queue name matches [A-Za-z0-9._:-]{1,128}");
        return;
    }
    if (tt && !cJSON_IsNull(tt)) {
        if (!cJSON_IsString(tt) || !dtq_valid_name(tt->valuestring, strlen(tt->valuestring), 128)) {
            dtq_web_reply_error(req, 400, "bad_request",
                                "task_type must match [A-Za-z0-9._:-]{1,128}, or be null");
            return;
        }
        type = tt->valuestring;
    }
    if (!dtq_web_redis_up(w, req)) return;
    j = wr_new(w, req, a, "target");
    s = dtq_rsteps_state(j);
    if (*type) {
        free(s->name);
        s->name = dtq_xasprintf("%s:%s", a->arg, type);
    }
    wr_call(j, w->fn.limit_remove, a->arg, a->actor, a->arg, type, NULL);
    dtq_rsteps_wait(j, wr_answer);
}

/* ================================================================= dead letters */

/* The entries one <ns>_purge_dlq removed, added up (the cluster layout: one per queue). */
static void purge_part(dtq_rsteps *j, redisReply *r, int a, int b) {
    wr *s = dtq_rsteps_state(j);
    DTQ_UNUSED(a);
    DTQ_UNUSED(b);
    if (r->type == REDIS_REPLY_ERROR && !s->error)
        s->error = dtq_xstrndup(r->str, r->len);
    else if (r->type == REDIS_REPLY_INTEGER)
        s->requeued += r->integer;
}

static void purge_answer(dtq_rsteps *j) {
    wr *s = dtq_rsteps_state(j);
    if (!s->error) s->result = cJSON_CreateNumber((double)s->requeued);
    wr_answer(j);
}

static void purge_calls(dtq_rsteps *j) {
    wr *s = dtq_rsteps_state(j);
    if (s->error) {
        wr_answer(j);
        return;
    }
    for (int i = 0; i < s->nq; i++)
        wr_send(j, purge_part, 0, s->h.w->fn.purge_dlq, s->queues[i], s->actor, NULL);
    wr_send(j, purge_part, 0, s->h.w->fn.purge_dlq, NULL, s->actor, NULL);
    dtq_rsteps_wait(j, purge_answer);
}

/* <ns>_purge_dlq; in the cluster layout one per queue of the index and one with {ns}, the
 * result their sum. */
void dtq_web_api_dlq_purge(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    static const char *const none[] = {NULL};
    dtq_rsteps *j;
    if (body_fields(req, a->body, none) != 0) return;
    if (!dtq_web_redis_up(w, req)) return;
    j = wr_new(w, req, a, NULL);
    wr_over_queues(j, purge_calls);
}

/* ---- POST /api/dlq/requeue-all: <ns>_requeue_dlq's cursor form, from "-" until the cursor
 * it returns is nil: the dead letters there were at the first call, of the class alone when
 * one is given. */

/* [requeued, next cursor or nil, skipped] */
static void ra_chunk(dtq_rsteps *j, redisReply *r, int a, int b) {
    wr *s = dtq_rsteps_state(j);
    char *next = NULL;
    DTQ_UNUSED(a);
    DTQ_UNUSED(b);
    if (r->type == REDIS_REPLY_ERROR) {
        s->error = dtq_xstrndup(r->str, r->len);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[2]->type != REDIS_REPLY_INTEGER) {
        s->error = dtq_xasprintf("%s: unexpected reply", s->h.w->fn.requeue_dlq);
        return;
    }
    s->requeued += r->element[0]->integer;
    s->skipped += r->element[2]->integer;
    if (r->element[1]->type == REDIS_REPLY_STRING)
        next = dtq_xstrndup(r->element[1]->str, r->element[1]->len);
    if (next && s->cursor && !strcmp(next, s->cursor)) { /* it must move on */
        free(next);
        s->error = dtq_xasprintf("%s: the cursor did not move", s->h.w->fn.requeue_dlq);
        return;
    }
    free(s->cursor);
    s->cursor = next;
}

static void ra_answer(dtq_rsteps *j) {
    wr *s = dtq_rsteps_state(j);
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
    dtq_web_reply_json(s->h.req, 200, o);
    dtq_rsteps_end(j);
}

/* The calls one after another; in the cluster layout each queue of the index in turn, from
 * cursor "-" until its cursor is nil. */
static void ra_loop(dtq_rsteps *j) {
    wr *s = dtq_rsteps_state(j);
    if (!s->error && !s->cursor && s->h.w->rc && s->qi + 1 < s->nq) {
        s->qi++;
        s->cursor = dtq_xstrdup("-");
    }
    if (s->error || !s->cursor || (s->h.w->rc && s->qi >= s->nq)) {
        ra_answer(j);
        return;
    }
    wr_send(j, ra_chunk, 0, s->h.w->fn.requeue_dlq, s->h.w->rc ? s->queues[s->qi] : NULL, "",
            s->actor, s->cursor, s->cls ? s->cls : "", NULL);
    dtq_rsteps_wait(j, ra_loop);
}

void dtq_web_api_dlq_requeue_all(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    static const char *const allowed[] = {"class", NULL};
    const cJSON *cls = a->body ? cJSON_GetObjectItemCaseSensitive(a->body, "class") : NULL;
    dtq_rsteps *j;
    wr *s;
    if (body_fields(req, a->body, allowed) != 0) return;
    if (cls && !cJSON_IsNull(cls) &&
        (!cJSON_IsString(cls) || !dtq_valid_name(cls->valuestring, strlen(cls->valuestring), 64))) {
        dtq_web_reply_error(req, 400, "bad_request",
                            "class must be a failure class such as \"timeout\" "
                            "([A-Za-z0-9._:-]{1,64}), or null");
        return;
    }
    if (!dtq_web_redis_up(w, req)) return;
    j = wr_new(w, req, a, NULL);
    s = dtq_rsteps_state(j);
    if (cls && cJSON_IsString(cls)) s->cls = dtq_xstrdup(cls->valuestring);
    s->cursor = dtq_xstrdup("-");
    wr_over_queues(j, ra_loop);
}

/* ================================================================= bulk writes */

/* A bulk write: its ids and, once the replies are in, one word per id. */
typedef struct bk {
    dtq_web_job h;
    char *action;
    char *actor;
    char **ids;
    char **words; /* per id: the Function's word, or the error word of its error reply */
    size_t n;
    char *error; /* an error reply that is not about one task: answered for the request */
    char *queue; /* the cluster layout: the tasks' queue (?queue=) */
} bk;

static void bk_free(void *p) {
    bk *s = p;
    for (size_t i = 0; i < s->n; i++) {
        free(s->ids[i]);
        free(s->words[i]);
    }
    free(s->ids);
    free(s->words);
    free(s->action);
    free(s->actor);
    free(s->error);
    free(s->queue);
    free(s);
}

/* The body {"ids": [...]}: 1 to DTQ_WEB_IDS_MAX task ids. A job with them, or NULL after
 * answering 400 (or 503). */
static dtq_rsteps *bk_new(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    static const char *const allowed[] = {"ids", NULL};
    const cJSON *ids = a->body ? cJSON_GetObjectItemCaseSensitive(a->body, "ids") : NULL;
    const cJSON *it;
    const char *queue;
    int n, bad;
    bk *s;
    if (body_fields(req, a->body, allowed) != 0) return NULL;
    n = dtq_web_body_ids(a->body, DTQ_WEB_IDS_MAX);
    if (n == -1) {
        dtq_web_reply_error(req, 400, "bad_request",
                            "the body must be {\"ids\": [...]} with 1 to %d task ids",
                            DTQ_WEB_IDS_MAX);
        return NULL;
    }
    if (n < 0) {
        dtq_web_reply_error(req, 400, "bad_request",
                            "every id must be a task id ([A-Za-z0-9._:-]{1,256})");
        return NULL;
    }
    queue = dtq_web_call_queue(w, req, a, &bad);
    if (bad || !dtq_web_redis_up(w, req)) return NULL;
    s = dtq_xcalloc(1, sizeof(*s));
    s->queue = queue ? dtq_xstrdup(queue) : NULL;
    s->h.w = w;
    s->h.req = req;
    s->action = dtq_xstrdup(a->action);
    s->actor = dtq_xstrdup(a->actor);
    s->ids = dtq_xcalloc((size_t)n, sizeof(char *));
    s->words = dtq_xcalloc((size_t)n, sizeof(char *));
    cJSON_ArrayForEach(it, ids) {
        s->ids[s->n++] = dtq_xstrdup(it->valuestring);
    }
    return dtq_web_job_new(&s->h, s, bk_free);
}

/* Answers the error kept, or {ok, action, actor, results: {id: word}, counts: {word: n}}
 * (an id given twice keeps the word of its first call). */
static void bk_answer(dtq_rsteps *j) {
    bk *s = dtq_rsteps_state(j);
    cJSON *o = answer_start(j, s->h.req, s->error, s->action), *results, *counts;
    if (!o) return;
    cJSON_AddStringToObject(o, "actor", s->actor);
    results = cJSON_AddObjectToObject(o, "results");
    counts = cJSON_AddObjectToObject(o, "counts");
    for (size_t i = 0; i < s->n; i++) {
        const char *word = s->words[i] ? s->words[i] : "error";
        cJSON *c;
        if (cJSON_GetObjectItemCaseSensitive(results, s->ids[i])) continue;
        cJSON_AddStringToObject(results, s->ids[i], word);
        c = cJSON_GetObjectItemCaseSensitive(counts, word);
        if (c)
            cJSON_SetNumberValue(c, c->valuedouble + 1);
        else
            cJSON_AddNumberToObject(counts, word, 1);
    }
    dtq_log(DTQ_LOG_INFO, "web: %s of %zu task(s) by %s", s->action, s->n, s->actor);
    dtq_web_reply_json(s->h.req, 200, o);
    dtq_rsteps_end(j);
}

/* <ns>_sched_run_now / _sched_delete's reply: one word per id, in order. */
static void bk_words(dtq_rsteps *j, redisReply *r, int a, int b) {
    bk *s = dtq_rsteps_state(j);
    DTQ_UNUSED(a);
    DTQ_UNUSED(b);
    if (r->type == REDIS_REPLY_ERROR) {
        s->error = dtq_xstrndup(r->str, r->len);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != s->n) {
        s->error = dtq_xstrdup("ERR unexpected reply to a bulk schedule call");
        return;
    }
    for (size_t i = 0; i < s->n; i++) {
        const redisReply *e = r->element[i];
        if (e->type == REDIS_REPLY_STRING || e->type == REDIS_REPLY_STATUS)
            s->words[i] = dtq_xstrndup(e->str, e->len);
    }
}

void dtq_web_api_sched_write(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    dtq_rsteps *j = bk_new(w, req, a);
    bk *s;
    dtq_argv argv;
    if (!j) return;
    s = dtq_rsteps_state(j);
    dtq_web_fcall_argv(w, &argv, 0,
                       !strcmp(a->action, "run-now") ? w->fn.sched_run_now : w->fn.sched_delete,
                       s->queue);
    dtq_argv_adds(&argv, s->actor);
    for (size_t i = 0; i < s->n; i++) dtq_argv_adds(&argv, s->ids[i]);
    dtq_rsteps_send(j, bk_words, 0, 0, &argv);
    dtq_argv_deinit(&argv);
    dtq_rsteps_wait(j, bk_answer);
}

/* The reply of <ns>_requeue or <ns>_discard for the id at index a: its word, or the error
 * word of a refusal about that task (not_found, wrong_state, bad_request); any other error
 * (no Functions, an ACL refusal) is the request's. */
static void bk_one(dtq_rsteps *j, redisReply *r, int a, int b) {
    bk *s = dtq_rsteps_state(j);
    DTQ_UNUSED(b);
    if (r->type == REDIS_REPLY_ERROR) {
        char *err = dtq_xstrndup(r->str, r->len);
        const char *word;
        int code = dtq_web_function_error(err, &word);
        if (code == 404 || code == 409 || code == 400) {
            s->words[a] = dtq_xstrdup(word);
            free(err);
        } else if (!s->error) {
            s->error = err;
        } else {
            free(err);
        }
    } else if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) {
        s->words[a] = dtq_xstrndup(r->str, r->len);
    }
}

void dtq_web_api_dlq_bulk(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    dtq_rsteps *j = bk_new(w, req, a);
    const char *fn = !strcmp(a->action, "requeue") ? w->fn.requeue : w->fn.discard;
    bk *s;
    if (!j) return;
    s = dtq_rsteps_state(j);
    for (size_t i = 0; i < s->n; i++)
        wr_send(j, bk_one, (int)i, fn, s->queue, s->ids[i], s->actor, NULL);
    dtq_rsteps_wait(j, bk_answer);
}
