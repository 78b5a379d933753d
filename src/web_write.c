/* web_write.c: the API's writes: the admin Functions (docs/reference.md 5.3), called like
 * redis-cli and dtqctl call them, with the token's actor, so that every write is audited.
 * Their error replies are answered as web_core.c maps them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "log.h"
#include "util.h"
#include "web_api.h"

typedef struct wr {
    dtq_web_job h;
    char *name; /* task id or queue; NULL for the dead-letter writes */
    char *action;
    char *actor;
    const char *target_field; /* "task_id" or "queue" in the answer */
    char *cls;                /* requeue-all: the class filter */
    char *cursor;             /* requeue-all: the cursor of the next call; NULL: done */
    long long requeued, skipped;
    char *error; /* the Function's error reply */
    cJSON *result;
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

/* Answers the Function's error, or {"ok": true, "action", "<target>", "actor", "result"}. */
static void wr_answer(dtq_rsteps *j) {
    wr *s = dtq_rsteps_state(j);
    cJSON *o;
    if (s->error) {
        dtq_web_reply_redis_error(s->h.req, s->error);
        dtq_rsteps_end(j);
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
    dtq_web_reply_json(s->h.req, 200, o);
    dtq_rsteps_end(j);
}

/* ================================================================= tasks */

void dtq_web_api_task_write(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    static const char *const none[] = {NULL};
    dtq_rsteps *j;
    const char *fn;
    if (body_fields(req, a->body, none) != 0) return;
    if (!dtq_web_valid_task_id(a->arg)) {
        dtq_web_reply_error(req, 400, "bad_request", "a task id matches [A-Za-z0-9._:-]{1,256}");
        return;
    }
    if (!dtq_web_redis_up(w, req)) return;
    fn = !strcmp(a->action, "requeue")   ? w->fn.requeue
         : !strcmp(a->action, "discard") ? w->fn.discard
                                         : w->fn.cancel;
    j = wr_new(w, req, a, "task_id");
    dtq_rsteps_sendl(j, wr_fcall, 0, 0, "FCALL", fn, "0", a->arg, a->actor, NULL);
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
    dtq_rsteps_sendl(j, wr_fcall, 0, 0, "FCALL",
                     !strcmp(s->action, "pause") ? w->fn.pause : w->fn.resume, "0", s->name,
                     s->actor, NULL);
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

/* ================================================================= dead letters */

void dtq_web_api_dlq_purge(dtq_web *w, struct evhttp_request *req, const dtq_web_args *a) {
    static const char *const none[] = {NULL};
    dtq_rsteps *j;
    if (body_fields(req, a->body, none) != 0) return;
    if (!dtq_web_redis_up(w, req)) return;
    j = wr_new(w, req, a, NULL);
    dtq_rsteps_sendl(j, wr_fcall, 0, 0, "FCALL", w->fn.purge_dlq, "0", a->actor, NULL);
    dtq_rsteps_wait(j, wr_answer);
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

static void ra_loop(dtq_rsteps *j) {
    wr *s = dtq_rsteps_state(j);
    if (s->error || !s->cursor) {
        ra_answer(j);
        return;
    }
    dtq_rsteps_sendl(j, ra_chunk, 0, 0, "FCALL", s->h.w->fn.requeue_dlq, "0", "", s->actor,
                     s->cursor, s->cls ? s->cls : "", NULL);
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
    ra_loop(j);
}
