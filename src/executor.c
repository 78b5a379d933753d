/* executor.c: one `run` per attempt in progress. A run ends exactly once, through
 * run_end(), whichever of handler completion, timeout or abandonment comes first; the
 * decision it produces is queued as a finish record and the slot is free at once. */
#include "executor.h"

#include <cjson/cJSON.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "consumer.h"
#include "events.h"
#include "handler_exec.h"
#include "log.h"
#include "retry.h"
#include "util.h"

#define FINISH_BATCH_MAX 256
#define FINISH_RECORD_ARGS 11

typedef struct finish_rec {
    struct finish_rec *next;
    char *task_id;
    int64_t attempt;
    char outcome; /* s r d f c, or 'h' for a handback */
    char *stream;
    char *entry_id;
    char *result;
    size_t result_len;
    char result_flag; /* n r t */
    char *error;
    const char *error_class;
    int64_t delay_ms;
    char *event;
} finish_rec;

typedef struct run {
    struct run *prev, *next;
    dtq_executor *ex;
    dtq_task *task;
    dtq_handler_call call;
    struct event *timeout_ev;
    int in_handler; /* the handler function is on the stack */
    int completed;  /* complete() was called */
    int status;
    char *result;
    size_t result_len;
    char *error;
    int timed_out;
    int cancelled; /* stopped because of dtq_cancel */
    char *config;  /* the handler's target, owned: a reload may free the registry */
} run;

struct dtq_executor {
    dtq_worker *w;
    run *running;
    int nrunning;
    finish_rec *pending, *pending_tail;
    int npending;
    int inflight; /* finish or handback batches awaiting replies */
    struct event *retry_ev;
};

static void run_end(run *r);

/* ----------------------------------------------------------------- records */

static void rec_free(finish_rec *rec) {
    free(rec->task_id);
    free(rec->stream);
    free(rec->entry_id);
    free(rec->result);
    free(rec->error);
    free(rec->event);
    free(rec);
}

static void rec_append(dtq_executor *ex, finish_rec *rec) {
    rec->next = NULL;
    if (ex->pending_tail)
        ex->pending_tail->next = rec;
    else
        ex->pending = rec;
    ex->pending_tail = rec;
    ex->npending++;
}

/* Puts a batch that did not make it back at the head of the queue, keeping order. */
static void rec_prepend_list(dtq_executor *ex, finish_rec *list) {
    finish_rec *tail = list;
    int n = 1;
    if (!list) return;
    while (tail->next) {
        tail = tail->next;
        n++;
    }
    tail->next = ex->pending;
    if (!ex->pending) ex->pending_tail = tail;
    ex->pending = list;
    ex->npending += n;
}

/* Keeps the last `max` bytes of an error: the end of a message says what finally broke. */
static char *error_tail(const char *err, int64_t max) {
    size_t n;
    if (!err) return dtq_xstrdup("");
    n = strlen(err);
    if ((int64_t)n <= max) return dtq_xstrdup(err);
    return dtq_xstrdup(err + n - (size_t)max);
}

typedef struct batch_ctx {
    dtq_executor *ex;
    finish_rec *list;
    int handback;
} batch_ctx;

static void retry_cb(evutil_socket_t fd, short what, void *arg) {
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    dtq_executor_flush(arg);
}

static void batch_cb(redisAsyncContext *ac, void *r, void *priv) {
    batch_ctx *b = priv;
    dtq_executor *ex = b->ex;
    redisReply *reply = r;
    DTQ_UNUSED(ac);
    ex->inflight--;
    if (!reply || reply->type == REDIS_REPLY_ERROR) {
        /* Not applied, or unknown: resend. The Functions guard on the attempt, so a batch
         * that did land once answers 'stale' the second time and acknowledges nothing. */
        if (reply) {
            struct timeval tv = {1, 0};
            dtq_error("finalize batch refused by Redis, retrying in 1s: %s", reply->str);
            evtimer_add(ex->retry_ev, &tv);
        }
        rec_prepend_list(ex, b->list);
        free(b);
        return; /* sent again after the reconnect (flush from setup) or the retry timer */
    }
    if (reply->type == REDIS_REPLY_ARRAY) {
        finish_rec *rec = b->list;
        for (size_t i = 0; i < reply->elements && rec; i++, rec = rec->next) {
            const redisReply *v = reply->element[i];
            if (v->type == REDIS_REPLY_STRING && !strcmp(v->str, "stale"))
                dtq_warn("task %s attempt %lld: finished after its task moved on (adopted by "
                         "another worker?); result not recorded",
                         rec->task_id, (long long)rec->attempt);
        }
    }
    while (b->list) {
        finish_rec *next = b->list->next;
        rec_free(b->list);
        b->list = next;
    }
    free(b);
    ex->w->counters.finish_batches++;
    dtq_executor_flush(ex);
    dtq_worker_check_drained(ex->w);
}

static void add_finish_args(dtq_argv *a, const finish_rec *rec) {
    char outcome[2] = {rec->outcome, 0}, flag[2] = {rec->result_flag, 0};
    dtq_argv_adds(a, rec->task_id);
    dtq_argv_addll(a, rec->attempt);
    dtq_argv_adds(a, outcome);
    dtq_argv_adds(a, rec->stream);
    dtq_argv_adds(a, rec->entry_id);
    dtq_argv_add(a, rec->result ? rec->result : "", rec->result ? rec->result_len : 0);
    dtq_argv_adds(a, flag);
    dtq_argv_adds(a, rec->error ? rec->error : "");
    dtq_argv_adds(a, rec->error_class ? rec->error_class : "");
    dtq_argv_addll(a, rec->delay_ms);
    dtq_argv_adds(a, rec->event ? rec->event : "");
}

/* Sends one batch of records of one kind (finish or handback) from the queue head. */
static int send_batch(dtq_executor *ex) {
    dtq_worker *w = ex->w;
    int handback = ex->pending->outcome == 'h', n = 0;
    finish_rec *list = NULL, **tailp = &list;
    dtq_argv a;
    char *fn = dtq_worker_fn(w, handback ? "handback" : "finish");
    batch_ctx *b;

    while (ex->pending && n < FINISH_BATCH_MAX && (ex->pending->outcome == 'h') == handback) {
        finish_rec *rec = ex->pending;
        ex->pending = rec->next;
        rec->next = NULL;
        *tailp = rec;
        tailp = &rec->next;
        n++;
    }
    if (!ex->pending) ex->pending_tail = NULL;
    ex->npending -= n;

    dtq_argv_init(&a);
    dtq_argv_adds(&a, "FCALL");
    dtq_argv_adds(&a, fn);
    dtq_argv_adds(&a, "0");
    dtq_argv_adds(&a, w->cfg->worker_id);
    dtq_argv_addll(&a, n);
    for (finish_rec *rec = list; rec; rec = rec->next) {
        if (handback) {
            dtq_argv_adds(&a, rec->task_id);
            dtq_argv_addll(&a, rec->attempt);
            dtq_argv_adds(&a, rec->stream);
            dtq_argv_adds(&a, rec->entry_id);
            dtq_argv_adds(&a, rec->error);
        } else {
            add_finish_args(&a, rec);
        }
    }
    free(fn);
    b = dtq_xcalloc(1, sizeof(*b));
    b->ex = ex;
    b->list = list;
    b->handback = handback;
    if (dtq_worker_command(w, batch_cb, b, a.argc, a.argv, a.lens) != DTQ_OK) {
        rec_prepend_list(ex, list);
        free(b);
        dtq_argv_deinit(&a);
        return DTQ_ERR;
    }
    ex->inflight++;
    dtq_argv_deinit(&a);
    return DTQ_OK;
}

void dtq_executor_flush(dtq_executor *ex) {
    /* One batch in flight at a time: completions that arrive meanwhile join the next
     * batch, which is what makes the batches grow under load and stay small when idle. */
    if (!dtq_worker_is_up(ex->w)) return;
    while (ex->inflight == 0 && ex->pending)
        if (send_batch(ex) != DTQ_OK) break;
}

/* ----------------------------------------------------------------- runs */

static void call_complete(dtq_handler_call *call, int status, const char *result, size_t result_len,
                          const char *error) {
    run *r = call->daemon_private;
    if (r->completed) {
        dtq_warn("task %s: handler reported an outcome twice; ignoring the second", r->task->id);
        return;
    }
    r->completed = 1;
    r->status = status;
    if (result && result_len) {
        r->result = dtq_xstrndup(result, result_len);
        r->result_len = result_len;
    }
    if (error) r->error = dtq_xstrdup(error);
    if (!r->in_handler) run_end(r);
}

static void timeout_cb(evutil_socket_t fd, short what, void *arg) {
    run *r = arg;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (r->completed) return;
    if (r->call.cancel) r->call.cancel(&r->call);
    r->completed = 1;
    r->timed_out = 1;
    r->status = DTQ_HANDLER_RETRY;
    r->error = dtq_xasprintf("timeout: attempt exceeded %lld ms", (long long)r->task->timeout_ms);
    run_end(r);
}

static void run_unlink(run *r) {
    dtq_executor *ex = r->ex;
    if (r->prev)
        r->prev->next = r->next;
    else
        ex->running = r->next;
    if (r->next) r->next->prev = r->prev;
    ex->nrunning--;
}

static void run_free(run *r) {
    if (r->timeout_ev) event_free(r->timeout_ev);
    dtq_task_free(r->task);
    free(r->result);
    free(r->error);
    free(r->config);
    free(r);
}

/* The decision of SPEC 7 for one finished attempt, queued as a finish record. */
static void run_end(run *r) {
    dtq_executor *ex = r->ex;
    dtq_worker *w = ex->w;
    const dtq_config *cfg = w->cfg;
    dtq_task *t = r->task;
    const dtq_handler_conf *hc = dtq_config_handler(cfg, t->task_type);
    finish_rec *rec = dtq_xcalloc(1, sizeof(*rec));
    enum dtq_failure_class cls = DTQ_FAIL_HANDLER;
    int64_t now = dtq_now_ms();
    int ok = r->status == DTQ_HANDLER_OK;

    rec->task_id = dtq_xstrdup(t->id);
    rec->attempt = t->attempt;
    rec->stream = dtq_xstrdup(t->stream);
    rec->entry_id = dtq_xstrdup(t->entry_id);
    rec->result_flag = 'n';

    if (r->timed_out)
        cls = DTQ_FAIL_TIMEOUT;
    else if (r->status == DTQ_HANDLER_RETRY)
        cls = DTQ_FAIL_HANDLER_RETRY;
    else if (r->status == DTQ_HANDLER_FAIL_SIGNAL)
        cls = DTQ_FAIL_SIGNAL;
    else if (!dtq_handler_lookup(w->handlers, t->task_type))
        cls = DTQ_FAIL_UNKNOWN_TYPE;

    if (ok && r->result) {
        cJSON *parsed = cJSON_ParseWithLength(r->result, r->result_len);
        if (!parsed) {
            ok = 0;
            cls = DTQ_FAIL_BAD_RESULT;
            free(r->error);
            r->error = dtq_xstrdup("result is not valid JSON");
        } else if (!cJSON_IsNull(parsed)) {
            rec->result_flag = 'r';
            rec->result_len = r->result_len;
            if ((int64_t)rec->result_len > cfg->result_max_bytes) {
                rec->result_len = (size_t)cfg->result_max_bytes;
                rec->result_flag = 't';
            }
            rec->result = dtq_xstrndup(r->result, rec->result_len);
        }
        cJSON_Delete(parsed);
    }

    w->counters.processed++;
    if (r->cancelled) {
        rec->outcome = 'c';
        rec->error = dtq_xstrdup("cancelled");
    } else if (ok) {
        rec->outcome = 's';
        rec->event = dtq_events_build(cfg->events, now, "TASK_SUCCEEDED", t->id, t->queue,
                                      t->task_type, t->attempt, cfg->worker_id, NULL);
        w->counters.succeeded++;
    } else {
        /* max_attempts and the backoff are read now, so a reload reaches tasks in flight. */
        int64_t max = t->own_max_attempts        ? t->max_attempts
                      : (hc && hc->max_attempts) ? hc->max_attempts
                                                 : cfg->default_max_attempts;
        rec->error = error_tail(r->error ? r->error : "handler failed", cfg->error_max_bytes);
        rec->error_class = dtq_retry_class_to_string(cls);
        if (dtq_retry_should_retry(cls, t->attempt, max)) {
            char *meta;
            rec->outcome = 'r';
            rec->delay_ms =
                dtq_retry_delay_ms(hc ? &hc->retry : &cfg->retry, t->attempt, dtq_retry_uniform());
            meta = dtq_xasprintf("{\"delay_ms\":%lld}", (long long)rec->delay_ms);
            rec->event = dtq_events_build(cfg->events, now, "TASK_RETRY_SCHEDULED", t->id, t->queue,
                                          t->task_type, t->attempt, cfg->worker_id, meta);
            free(meta);
            w->counters.retried++;
        } else {
            rec->outcome = cfg->dlq_enabled ? 'd' : 'f';
            if (!cfg->dlq_enabled)
                dtq_warn("task %s failed permanently; dlq_enabled = false, so it ends 'failed' "
                         "without a dead-letter entry",
                         t->id);
            w->counters.failed++;
        }
        dtq_debug("task %s attempt %lld failed (%s): %s", t->id, (long long)t->attempt,
                  rec->error_class, rec->error);
    }
    rec_append(ex, rec);
    run_unlink(r);
    run_free(r);
    dtq_executor_flush(ex);
    dtq_consumer_kick(w->cons);
}

void dtq_executor_run(dtq_executor *ex, dtq_task *t) {
    dtq_worker *w = ex->w;
    run *r = dtq_xcalloc(1, sizeof(*r));
    const dtq_handler_entry *h = dtq_handler_lookup(w->handlers, t->task_type);
    struct timeval tv;

    r->ex = ex;
    r->task = t;
    r->next = ex->running;
    if (ex->running) ex->running->prev = r;
    ex->running = r;
    ex->nrunning++;

    dtq_worker_publish(w, dtq_events_build(w->cfg->events, dtq_now_ms(), "TASK_STARTED", t->id,
                                           t->queue, t->task_type, t->attempt, w->cfg->worker_id,
                                           NULL));
    if (!h) {
        r->completed = 1;
        r->status = DTQ_HANDLER_FAIL;
        r->error = dtq_xasprintf("unknown_task_type:%s", t->task_type);
        run_end(r);
        return;
    }
    r->call.abi_version = DTQ_HANDLER_ABI_VERSION;
    r->call.task_id = t->id;
    r->call.queue = t->queue;
    r->call.task_type = t->task_type;
    r->call.payload = t->payload;
    r->call.payload_len = t->payload_len;
    r->call.attempt = t->attempt;
    r->call.max_attempts = t->max_attempts;
    r->call.timeout_ms = t->timeout_ms;
    r->call.base = w->base;
    r->config = dtq_xstrdup(h->target);
    r->call.config = r->config;
    r->call.complete = call_complete;
    r->call.daemon_private = r;
    r->timeout_ev = evtimer_new(w->base, timeout_cb, r);
    tv.tv_sec = t->timeout_ms / 1000;
    tv.tv_usec = (t->timeout_ms % 1000) * 1000;
    evtimer_add(r->timeout_ev, &tv);

    r->in_handler = 1;
    if (h->exec_spec)
        dtq_exec_start(w->execs, h->exec_spec, &r->call);
    else
        h->fn(&r->call);
    r->in_handler = 0;
    if (r->completed) run_end(r);
}

typedef struct cancel_probe {
    dtq_executor *ex;
    char *task_id;
    int64_t attempt;
} cancel_probe;

static void cancel_probe_cb(redisAsyncContext *ac, void *reply_ptr, void *priv) {
    cancel_probe *p = priv;
    redisReply *reply = reply_ptr;
    DTQ_UNUSED(ac);
    if (reply && reply->type == REDIS_REPLY_STRING && !strcmp(reply->str, "1")) {
        for (run *r = p->ex->running; r; r = r->next) {
            if (r->completed || strcmp(r->task->id, p->task_id) || r->task->attempt != p->attempt)
                continue;
            dtq_info("task %s: cancel requested; stopping its handler", r->task->id);
            if (r->call.cancel) r->call.cancel(&r->call);
            r->completed = 1;
            r->cancelled = 1;
            run_end(r);
            break;
        }
    }
    free(p->task_id);
    free(p);
}

void dtq_executor_check_cancels(dtq_executor *ex) {
    for (run *r = ex->running; r; r = r->next) {
        cancel_probe *p;
        dtq_argv a;
        char *key;
        if (r->completed) continue;
        p = dtq_xcalloc(1, sizeof(*p));
        p->ex = ex;
        p->task_id = dtq_xstrdup(r->task->id);
        p->attempt = r->task->attempt;
        key = dtq_worker_key(ex->w, "task:%s", r->task->id);
        dtq_argv_init(&a);
        dtq_argv_adds(&a, "HGET");
        dtq_argv_adds(&a, key);
        dtq_argv_adds(&a, "cancel_requested");
        if (dtq_worker_command(ex->w, cancel_probe_cb, p, a.argc, a.argv, a.lens) != DTQ_OK) {
            free(p->task_id);
            free(p);
        }
        dtq_argv_deinit(&a);
        free(key);
    }
}

void dtq_executor_abandon_all(dtq_executor *ex, const char *reason) {
    while (ex->running) {
        run *r = ex->running;
        finish_rec *rec = dtq_xcalloc(1, sizeof(*rec));
        if (!r->completed && r->call.cancel) r->call.cancel(&r->call);
        rec->outcome = 'h';
        rec->task_id = dtq_xstrdup(r->task->id);
        rec->attempt = r->task->attempt;
        rec->stream = dtq_xstrdup(r->task->stream);
        rec->entry_id = dtq_xstrdup(r->task->entry_id);
        rec->error = dtq_xstrdup(reason);
        rec_append(ex, rec);
        dtq_warn("task %s attempt %lld: interrupted (%s), handed back", r->task->id,
                 (long long)r->task->attempt, reason);
        run_unlink(r);
        run_free(r);
    }
    dtq_executor_flush(ex);
}

dtq_executor *dtq_executor_new(dtq_worker *w) {
    dtq_executor *ex = dtq_xcalloc(1, sizeof(*ex));
    ex->w = w;
    ex->retry_ev = evtimer_new(w->base, retry_cb, ex);
    return ex;
}

void dtq_executor_free(dtq_executor *ex) {
    if (!ex) return;
    while (ex->running) {
        run *r = ex->running;
        if (!r->completed && r->call.cancel) r->call.cancel(&r->call);
        run_unlink(r);
        run_free(r);
    }
    while (ex->pending) {
        finish_rec *next = ex->pending->next;
        rec_free(ex->pending);
        ex->pending = next;
    }
    event_free(ex->retry_ev);
    free(ex);
}

int dtq_executor_free_slots(const dtq_executor *ex) {
    int free_slots = (int)ex->w->cfg->concurrency - ex->nrunning;
    return free_slots > 0 ? free_slots : 0;
}

int dtq_executor_running(const dtq_executor *ex) {
    return ex->nrunning;
}

int dtq_executor_idle(const dtq_executor *ex) {
    return ex->nrunning == 0 && ex->npending == 0 && ex->inflight == 0;
}

void dtq_executor_each_entry(const dtq_executor *ex,
                             void (*fn)(const char *stream, const char *entry_id, void *arg),
                             void *arg) {
    for (const run *r = ex->running; r; r = r->next) fn(r->task->stream, r->task->entry_id, arg);
}
