/* executor.c: one `run` per attempt in progress. A run ends exactly once, through
 * run_end(), whichever of handler completion, timeout, cancellation or abandonment comes
 * first. */
#include "executor.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "calls.h"
#include "handler_exec.h"
#include "pool.h"
#include "scope.h"
#include "spawn.h"
#include "log.h"
#include "metrics.h"
#include "outcome.h"
#include "util.h"

/* Where a run is in its life. It starts in CALLING (or goes straight to NO_HANDLER or
 * ABANDONED in dtq_executor_run); CALLING becomes RUNNING when the handler function returns
 * without an outcome; CALLING or RUNNING becomes one of the four ends below exactly once
 * (call_complete, timeout_cb, dtq_executor_cancel, dtq_executor_abandon_all). A run in an
 * end state is ended by run_end or run_handback, except a COMPLETED reported from inside
 * the handler function, which dtq_executor_run ends once that function has returned. */
enum run_state {
    RUN_CALLING,    /* the handler function is on the stack, no outcome yet */
    RUN_RUNNING,    /* the handler function returned; the outcome is still to come */
    RUN_COMPLETED,  /* the handler reported its outcome through complete() */
    RUN_TIMED_OUT,  /* stopped by its timeout */
    RUN_CANCELLED,  /* stopped because of dtq_cancel */
    RUN_ABANDONED,  /* stopped (or never started) to be handed back */
    RUN_NO_HANDLER, /* the task type had no handler when the run started: never called */
    RUN_GATED,      /* claimed before the pools announced their types: not started yet */
};

typedef struct run {
    struct run *prev, *next;
    dtq_executor *ex;
    dtq_task *task;
    dtq_handler_call call;
    struct event *timeout_ev;
    enum run_state state;
    int status;
    char *result;
    size_t result_len;
    char *error;
    int is_exec;            /* an exec job: its result is read as the section's `result` says */
    dtq_pool *pool;         /* a pool's task; NULL for the other handlers */
    char *config;           /* the handler's target, owned: a reload may free the registry */
    dtq_metrics_cell *cell; /* the task's (queue, task_type) metrics, found at claim */
    int64_t started_us;     /* monotonic, when the handler was called; 0: never called */
    /* progress reports (pools): at most one <ns>_progress per PROGRESS_EVERY_MS, the last
     * report of an interval sent at its end */
    int64_t progress_sent_ms;
    double progress_fraction;
    char *progress_message;
    int progress_waiting; /* a report waits for progress_ev */
    struct event *progress_ev;
} run;

#define PROGRESS_EVERY_MS 1000

struct dtq_executor {
    dtq_ctx *ctx;
    dtq_finisher *fin;
    dtq_spawner *spawner;
    dtq_exec *children; /* exec handler processes */
    dtq_pools *pools;   /* [pool:*] processes */
    run *running;
    int nrunning;
    int reserved;         /* slots promised to fetches in flight (dtq_executor_reserve) */
    int draining;         /* the daemon is stopping: see dtq_executor_drain */
    char *abandon_reason; /* the drain ran out of time: new runs go straight back */
};

static void run_end(run *r);

/* The handler may still report: no outcome yet and not stopped. */
static int run_live(const run *r) {
    return r->state == RUN_CALLING || r->state == RUN_RUNNING;
}

static void run_link(dtq_executor *ex, run *r) {
    r->next = ex->running;
    if (ex->running) ex->running->prev = r;
    ex->running = r;
    ex->ctx->gauges.active_tasks = ++ex->nrunning;
}

static void run_unlink(run *r) {
    dtq_executor *ex = r->ex;
    if (r->prev)
        r->prev->next = r->next;
    else
        ex->running = r->next;
    if (r->next) r->next->prev = r->prev;
    ex->ctx->gauges.active_tasks = --ex->nrunning;
}

static void run_free(run *r) {
    if (r->timeout_ev) event_free(r->timeout_ev);
    if (r->progress_ev) event_free(r->progress_ev);
    free(r->progress_message);
    dtq_task_free(r->task);
    free(r->result);
    free(r->error);
    free(r->config);
    free(r);
}

static int64_t monotonic_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The handler's run time so far, -1 when it was never called. */
static int64_t run_duration_us(const run *r) {
    return r->started_us ? monotonic_us() - r->started_us : -1;
}

/* Moves what tasklog.c needs once Redis answered into the record: the task (without its
 * payload, which can be large and is never logged), its cell, the handler's run time. */
static void record_task(run *r, dtq_finish_record *rec, int64_t duration_us) {
    rec->task = r->task;
    r->task = NULL;
    free(rec->task->payload);
    rec->task->payload = NULL;
    rec->task->payload_len = 0;
    rec->cell = r->cell;
    rec->duration_us = duration_us;
}

/* The time from the entry's creation (its id's milliseconds, Redis's clock: the enqueue,
 * or the promotion of a delayed task or retry once due) to now, on this host's clock. */
static void observe_wait(dtq_metrics_cell *c, const char *entry_id) {
    int64_t entry_ms = strtoll(entry_id, NULL, 10), wait_ms = dtq_now_ms() - entry_ms;
    if (entry_ms > 0) dtq_histogram_observe(c->wait, (wait_ms > 0 ? wait_ms : 0) * 1000);
}

/* The process's counters and the queue's (written by the heartbeat, never per task). */
static void count_outcome(dtq_ctx *ctx, const char *queue, enum dtq_outcome_kind kind) {
    dtq_counters *c = &ctx->counters;
    dtq_queue_counters *q;
    if (kind == DTQ_OUTCOME_DEFER) return; /* not run: nothing was processed */
    q = dtq_ctx_queue_counters(ctx, queue);
    c->processed++;
    if (kind == DTQ_OUTCOME_SUCCEEDED) c->succeeded++, q->succeeded++;
    if (kind == DTQ_OUTCOME_RETRY) c->retried++, q->retried++;
    if (kind == DTQ_OUTCOME_DEAD_LETTER) c->failed++, q->failed++;
}

/* Gives the attempt of a stopped or interrupted run back for another worker. */
static void run_handback(run *r, const char *reason) {
    dtq_executor *ex = r->ex;
    dtq_finish_record *rec = dtq_xcalloc(1, sizeof(*rec));
    rec->handback = 1;
    rec->task_id = dtq_xstrdup(r->task->id);
    rec->attempt = r->task->attempt;
    rec->stream = dtq_xstrdup(r->task->stream);
    rec->entry_id = dtq_xstrdup(r->task->entry_id);
    rec->error = dtq_xstrdup(reason);
    record_task(r, rec, run_duration_us(r));
    run_unlink(r);
    run_free(r);
    dtq_finisher_add(ex->fin, rec);
}

/* Decides the ended attempt and queues its finish record. */
static void run_end(run *r) {
    dtq_executor *ex = r->ex;
    dtq_ctx *ctx = ex->ctx;
    const dtq_config *cfg = ctx->cfg;
    dtq_task *t = r->task;
    const dtq_handler_conf *hc = dtq_config_handler(cfg, t->task_type);
    dtq_attempt_end end = {r->status,
                           r->state == RUN_TIMED_OUT,
                           r->state == RUN_CANCELLED,
                           r->state != RUN_NO_HANDLER,
                           r->result,
                           r->result_len,
                           r->error,
                           t->attempt,
                           t->max_attempts,
                           r->is_exec && hc ? hc->result_mode : DTQ_RESULT_MODE_JSON};
    dtq_outcome_limits lim = {hc ? &hc->retry : &cfg->retry, cfg->result_max_bytes,
                              cfg->error_max_bytes, cfg->unknown_hand_back,
                              cfg->unknown_task_type_grace_s * 1000};
    dtq_outcome o;
    dtq_finish_record *rec;
    int64_t duration_us = run_duration_us(r);

    /* A child killed by a signal we did not send while the daemon stops: the stop of the
     * whole unit killed it (systemd's KillMode=control-group, a container runtime), not its
     * own doing. It goes back like an attempt the drain ran out of time for. */
    if (ex->draining && r->status == DTQ_HANDLER_FAIL_SIGNAL && r->state == RUN_COMPLETED) {
        char *reason =
            dtq_xasprintf("interrupted: worker shut down (%s)", r->error ? r->error : "signal");
        run_handback(r, reason);
        free(reason);
        return;
    }
    rec = dtq_xcalloc(1, sizeof(*rec));
    dtq_outcome_decide(&end, &lim, dtq_retry_uniform(), &o);
    rec->task_id = dtq_xstrdup(t->id);
    rec->attempt = t->attempt;
    rec->stream = dtq_xstrdup(t->stream);
    rec->entry_id = dtq_xstrdup(t->entry_id);
    rec->outcome = o.kind;
    rec->lean = t->lean && o.kind == DTQ_OUTCOME_SUCCEEDED; /* an acknowledgement alone */
    rec->result_state = o.result_state;
    if (o.result_state != DTQ_RESULT_NONE) {
        /* o.result: made from the output (result = text); NULL output: cut to a
         * result_max_bytes of 0 */
        rec->result = o.result ? o.result : dtq_xstrndup(r->result ? r->result : "", o.result_len);
        rec->result_len = o.result_len;
        o.result = NULL;
    }
    rec->error = o.error; /* ownership moves to the record */
    rec->error_class = o.error_class;
    rec->delay_ms = o.delay_ms;
    rec->grace_ms = o.grace_ms;
    free(o.result); /* a text result with nothing to record */
    count_outcome(ctx, t->queue, o.kind);
    if (duration_us >= 0) dtq_histogram_observe(&r->cell->duration, duration_us);
    record_task(r, rec, duration_us);
    run_unlink(r);
    run_free(r);
    dtq_finisher_add(ex->fin, rec);
    dtq_ctx_slots_freed(ctx);
}

static void call_complete(dtq_handler_call *call, int status, const char *result, size_t result_len,
                          const char *error) {
    run *r = call->daemon_private;
    int in_handler = r->state == RUN_CALLING;
    if (!run_live(r)) {
        dtq_warn("task %s: handler reported an outcome twice; ignoring the second", r->task->id);
        return;
    }
    r->state = RUN_COMPLETED; /* CALLING or RUNNING -> COMPLETED */
    /* A plugin has no business with the private statuses of exec jobs and pools: per the
     * ABI, any status but OK and RETRY is a permanent failure. */
    if (!r->is_exec && !r->pool && status != DTQ_HANDLER_OK && status != DTQ_HANDLER_RETRY)
        status = DTQ_HANDLER_FAIL;
    r->status = status;
    if (result && result_len) {
        r->result = dtq_xstrndup(result, result_len);
        r->result_len = result_len;
    }
    if (error) r->error = dtq_xstrdup(error);
    if (!in_handler) run_end(r); /* else dtq_executor_run ends it when the call returns */
}

/* Stops a handler that is still running and records why: `why` is one of the stopped
 * end states (CALLING or RUNNING -> TIMED_OUT, CANCELLED or ABANDONED). */
static void run_stop(run *r, enum run_state why) {
    if (r->pool)
        dtq_pool_cancel(&r->call, why == RUN_TIMED_OUT   ? "timeout"
                                  : why == RUN_CANCELLED ? "cancelled"
                                                         : "shutdown");
    else if (r->call.cancel)
        r->call.cancel(&r->call);
    r->state = why;
}

static void timeout_cb(evutil_socket_t fd, short what, void *arg) {
    run *r = arg;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (!run_live(r)) return;
    run_stop(r, RUN_TIMED_OUT);
    r->status = DTQ_HANDLER_RETRY;
    r->error = dtq_xasprintf("timeout: attempt exceeded %lld ms", (long long)r->task->timeout_ms);
    run_end(r);
}

/* Calls the handler of a run: a [handler:X] section's, else a pool's. */
static void call_progress(dtq_handler_call *call, double fraction, const char *message);

static void run_start(run *r) {
    dtq_executor *ex = r->ex;
    dtq_ctx *ctx = ex->ctx;
    dtq_task *t = r->task;
    const dtq_handler_entry *h = dtq_handler_lookup(ctx->handlers, t->task_type);
    dtq_pool *pool = h ? NULL : dtq_pools_route(ex->pools, t->task_type);
    struct timeval tv;

    r->cell = h ? dtq_metrics_cell_for(ctx->metrics, t->queue, (int)(h - ctx->handlers->entries))
              : pool ? dtq_metrics_cell_for_type(ctx->metrics, t->queue, t->task_type)
                     : dtq_metrics_cell_for(ctx->metrics, t->queue, -1);
    observe_wait(r->cell, t->entry_id);
    if (!h && !pool) {
        r->state = RUN_NO_HANDLER;
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
    r->call.progress = call_progress;
    r->call.parent_results = t->parent_results;
    r->call.parent_results_len = t->parent_results_len;
    r->call.attempt = t->attempt;
    r->call.max_attempts = t->max_attempts;
    r->call.timeout_ms = t->timeout_ms;
    r->call.base = ctx->base;
    r->config = dtq_xstrdup(h ? h->target : "");
    r->call.config = r->config;
    r->call.complete = call_complete;
    r->call.daemon_private = r;
    r->timeout_ev = evtimer_new(ctx->base, timeout_cb, r);
    tv.tv_sec = t->timeout_ms / 1000;
    tv.tv_usec = (t->timeout_ms % 1000) * 1000;
    evtimer_add(r->timeout_ev, &tv);

    r->state = RUN_CALLING;
    r->is_exec = h && h->exec_spec != NULL;
    r->pool = pool;
    r->started_us = monotonic_us();
    if (pool)
        dtq_pool_run(pool, &r->call, dtq_now_ms() + t->timeout_ms);
    else if (h->exec_spec)
        dtq_exec_start(ex->children, h->exec_spec, &r->call);
    else
        h->fn(&r->call);
    if (r->state == RUN_CALLING)
        r->state = RUN_RUNNING; /* CALLING -> RUNNING: the outcome comes later */
    else
        run_end(r); /* COMPLETED from inside the call */
}

void dtq_executor_run(dtq_executor *ex, dtq_task *t) {
    run *r = dtq_xcalloc(1, sizeof(*r));
    r->ex = ex;
    r->task = t;
    r->cell = dtq_metrics_cell_for(ex->ctx->metrics, t->queue, -1); /* until run_start's */
    run_link(ex, r);
    if (ex->abandon_reason) { /* handed over by a fetch whose reply came after the drain */
        r->state = RUN_ABANDONED;
        run_handback(r, ex->abandon_reason);
        return;
    }
    /* A type no section names may be one a pool is about to announce: it waits for the
     * pools' first hellos (at most their start_timeout_ms) rather than fail unknown. */
    if (!dtq_pools_settled(ex->pools) && !dtq_handler_lookup(ex->ctx->handlers, t->task_type)) {
        r->state = RUN_GATED;
        return;
    }
    run_start(r);
}

/* Sends the run's last progress report: <ns>_progress in its queue's scope. */
static void progress_send(run *r) {
    dtq_ctx *ctx = r->ex->ctx;
    dtq_argv a;
    char *tag = dtq_scope_tag(ctx->cfg->ns, dtq_ctx_cluster(ctx), r->task->queue);
    r->progress_waiting = 0;
    r->progress_sent_ms = dtq_monotonic_ms();
    dtq_call_progress(&a, ctx->fn.progress, ctx->cfg->worker_id, r->task->id, r->task->attempt,
                      r->progress_fraction, r->progress_message);
    dtq_scope_tag_call(&a, tag);
    dtq_ctx_command(ctx, NULL, NULL, &a); /* a lost report is not worth a retry */
    dtq_argv_deinit(&a);
    free(tag);
}

static void progress_timer_cb(evutil_socket_t fd, short what, void *arg) {
    run *r = arg;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (r->progress_waiting && run_live(r)) progress_send(r);
}

/* A pool process's progress report: kept as the run's last, sent at once or when the
 * interval since the last one sent has passed. */
static void on_progress(dtq_handler_call *call, double fraction, const char *message, void *arg) {
    run *r = call->daemon_private;
    int64_t now = dtq_monotonic_ms(), wait = r->progress_sent_ms + PROGRESS_EVERY_MS - now;
    DTQ_UNUSED(arg);
    if (!run_live(r)) return;
    r->progress_fraction = fraction;
    free(r->progress_message);
    r->progress_message = message ? dtq_xstrdup(message) : NULL;
    if (!r->progress_sent_ms || wait <= 0) {
        progress_send(r);
        return;
    }
    if (!r->progress_waiting) {
        struct timeval tv = {(time_t)(wait / 1000), (suseconds_t)((wait % 1000) * 1000)};
        if (!r->progress_ev) r->progress_ev = evtimer_new(r->ex->ctx->base, progress_timer_cb, r);
        evtimer_add(r->progress_ev, &tv);
        r->progress_waiting = 1;
    }
}

/* A handler's own report (exec's progress descriptor, a plugin): as a pool's. */
static void call_progress(dtq_handler_call *call, double fraction, const char *message) {
    on_progress(call, fraction, message, NULL);
}

/* The pools have announced their types: the runs that waited start, oldest first. */
static void pools_settled(void *arg) {
    dtq_executor *ex = arg;
    run *last = NULL;
    for (run *r = ex->running; r; r = r->next) last = r;
    for (run *r = last; r;) {
        run *prev = r->prev;
        if (r->state == RUN_GATED) run_start(r);
        r = prev;
    }
}

void dtq_executor_run_claimed(dtq_executor *ex, const redisReply *list) {
    char err[128];
    for (size_t i = 0; i < list->elements; i++) {
        dtq_task *t = dtq_task_from_reply(list->element[i], err, sizeof(err));
        if (!t) {
            dtq_error("ignoring a malformed claimed task: %s", err);
            continue;
        }
        dtq_executor_run(ex, t);
    }
}

static void run_one(dtq_task *t, void *arg) {
    dtq_executor_run(arg, t);
}

void dtq_executor_run_fetched(dtq_executor *ex, const redisReply *reply) {
    char err[128];
    dtq_executor_run_claimed(ex, reply->element[0]);
    if (reply->elements > 3 &&
        dtq_lean_claims_decode(reply->element[3], run_one, ex, err, sizeof(err)) < 0)
        dtq_error("ignoring malformed lean claims: %s", err);
    if (reply->elements > 4 &&
        dtq_full_claims_decode(reply->element[4], run_one, ex, err, sizeof(err)) < 0)
        dtq_error("ignoring malformed full claims: %s", err);
}

void dtq_executor_cancel(dtq_executor *ex, const char *task_id, int64_t attempt) {
    for (run *r = ex->running; r; r = r->next) {
        if (!run_live(r) || strcmp(r->task->id, task_id) || r->task->attempt != attempt) continue;
        dtq_info("task %s: cancel requested; stopping its handler", r->task->id);
        run_stop(r, RUN_CANCELLED);
        run_end(r);
        return;
    }
}

void dtq_executor_abandon_all(dtq_executor *ex, const char *reason) {
    free(ex->abandon_reason);
    ex->abandon_reason = dtq_xstrdup(reason);
    while (ex->running) {
        run *r = ex->running;
        if (run_live(r)) run_stop(r, RUN_ABANDONED);
        run_handback(r, reason);
    }
}

void dtq_executor_drain(dtq_executor *ex) {
    ex->draining = 1;
}

void dtq_executor_each_task(const dtq_executor *ex, void (*fn)(const dtq_task *t, void *arg),
                            void *arg) {
    /* gated runs too: their claims are renewed while they wait */
    for (const run *r = ex->running; r; r = r->next)
        if (run_live(r) || r->state == RUN_GATED) fn(r->task, arg);
}

void dtq_executor_reap_children(dtq_executor *ex) {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
        if (!dtq_exec_reaped(ex->children, pid, status)) dtq_pools_reaped(ex->pools, pid, status);
}

void dtq_executor_config_changed(dtq_executor *ex) {
    dtq_exec_set_limits(ex->children, ex->ctx->cfg->error_max_bytes,
                        ex->ctx->cfg->result_max_bytes);
    dtq_pools_configure(ex->pools, ex->ctx->cfg);
}

void dtq_executor_stop_pools(dtq_executor *ex, void (*done)(void *arg), void *arg) {
    dtq_pools_stop(ex->pools, done, arg);
}

dtq_executor *dtq_executor_new(dtq_ctx *ctx, dtq_finisher *fin) {
    dtq_executor *ex = dtq_xcalloc(1, sizeof(*ex));
    ex->ctx = ctx;
    ex->fin = fin;
    ex->spawner = dtq_spawner_new();
    ex->children =
        dtq_exec_new(ctx->base, ex->spawner, ctx->cfg->error_max_bytes, ctx->cfg->result_max_bytes);
    ex->pools = dtq_pools_new(ctx->base, ex->spawner);
    ctx->pools = ex->pools;
    dtq_pools_on_settled(ex->pools, pools_settled, ex);
    dtq_pools_on_progress(ex->pools, on_progress, ex);
    dtq_pools_configure(ex->pools, ctx->cfg);
    return ex;
}

void dtq_executor_free(dtq_executor *ex) {
    if (!ex) return;
    while (ex->running) {
        run *r = ex->running;
        if (run_live(r) && r->call.cancel) r->call.cancel(&r->call);
        run_unlink(r);
        run_free(r);
    }
    dtq_exec_free(ex->children);
    dtq_pools_free(ex->pools);
    ex->ctx->pools = NULL;
    dtq_spawner_free(ex->spawner);
    free(ex->abandon_reason);
    free(ex);
}

int dtq_executor_free_slots(const dtq_executor *ex) {
    int free_slots = (int)ex->ctx->cfg->concurrency - ex->nrunning - ex->reserved;
    return free_slots > 0 ? free_slots : 0;
}

void dtq_executor_reserve(dtq_executor *ex, int n) {
    ex->reserved += n;
    if (ex->reserved < 0) ex->reserved = 0;
}

int dtq_executor_running(const dtq_executor *ex) {
    return ex->nrunning;
}
