/* reaper.c: the reap timer and its Function call. */
#include "reaper.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "calls.h"
#include "log.h"
#include "scope.h"
#include "task.h"
#include "util.h"

/* Entries examined per call even when no slot is free; those beyond the free slots are
 * requeued rather than kept, so recovery never waits for this worker to have room. */
#define REAP_MIN 16

struct dtq_reaper {
    dtq_ctx *ctx;
    dtq_executor *ex;
    const dtq_finisher *fin;
    int started;
    int stopped;
    int inflight;
    int recovering;        /* recover replies outstanding */
    int reap_q;            /* the cluster layout: the queue reaped next in this round */
    int64_t hold_until_ms; /* no reap before this (monotonic): visibility after a reconnect */
    struct event *tick_ev;
    char **cursors; /* XAUTOCLAIM cursor per served stream, carried across calls */
    int ncursors;
    unsigned cursors_gen; /* the ctx->streams_gen they belong to */
};

static void reset_cursors(dtq_reaper *rp) {
    rp->reap_q = 0; /* the cluster layout's round starts over with the new queue table */
    for (int i = 0; i < rp->ncursors; i++) free(rp->cursors[i]);
    free(rp->cursors);
    rp->ncursors = dtq_streams_count(&rp->ctx->streams);
    rp->cursors = dtq_xcalloc((size_t)rp->ncursors, sizeof(char *));
    for (int i = 0; i < rp->ncursors; i++) rp->cursors[i] = dtq_xstrdup("0-0");
    rp->cursors_gen = rp->ctx->streams_gen;
}

/* The cursors of the streams from index `first` on, as a reap answered them. */
static void save_cursors(dtq_reaper *rp, const redisReply *list, int first) {
    if (rp->cursors_gen != rp->ctx->streams_gen) return; /* a reload came in between */
    for (size_t i = 0; i < list->elements && first + (int)i < rp->ncursors; i++) {
        if (list->element[i]->type != REDIS_REPLY_STRING) continue;
        free(rp->cursors[first + i]);
        rp->cursors[first + i] = dtq_xstrndup(list->element[i]->str, list->element[i]->len);
    }
}

static void reap(dtq_reaper *rp);

static void reap_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_reaper *rp = priv;
    redisReply *reply = r;
    DTQ_UNUSED(ac);
    rp->inflight = 0;
    if (reply && !dtq_reap_reply_ok(reply))
        dtq_error("reaper failed: %s", reply->type == REDIS_REPLY_ERROR ? reply->str : "bad reply");
    else if (reply) {
        const redisReply *claimed = reply->element[0];
        if (claimed->elements)
            dtq_info("reaper: adopted %zu task(s) of lost workers", claimed->elements);
        save_cursors(rp, reply->element[1], 0);
        dtq_executor_run_claimed(rp->ex, claimed);
    }
    if (rp->stopped) dtq_ctx_settled(rp->ctx);
}

/* The cluster layout: one reap per queue, one at a time (each for the slots still free,
 * so that the round never claims more than this daemon can run), in serving order. */
typedef struct queue_call {
    dtq_reaper *rp;
    char *queue;
    int first; /* its first stream's index in the table */
    unsigned gen;
    int crashed; /* a recovery sent for a predecessor that crashed */
} queue_call;

static queue_call *queue_call_new(dtq_reaper *rp, int q) {
    queue_call *qc = dtq_xcalloc(1, sizeof(*qc));
    qc->rp = rp;
    qc->queue = dtq_xstrdup(rp->ctx->streams.queues[q]);
    qc->first = q * DTQ_BANDS;
    qc->gen = rp->ctx->streams_gen;
    return qc;
}

static void queue_call_free(queue_call *qc) {
    free(qc->queue);
    free(qc);
}

static void cluster_reap_cb(redisAsyncContext *ac, void *r, void *priv) {
    queue_call *qc = priv;
    dtq_reaper *rp = qc->rp;
    redisReply *reply = r;
    dtq_qstate *st = dtq_ctx_qstate(rp->ctx, qc->queue);
    DTQ_UNUSED(ac);
    rp->inflight = 0;
    if (st) st->reaping = 0;
    if (reply && !dtq_reap_reply_ok(reply)) {
        dtq_error("reaper failed on queue %s: %s", qc->queue,
                  reply->type == REDIS_REPLY_ERROR ? reply->str : "bad reply");
    } else if (reply) {
        const redisReply *claimed = reply->element[0];
        if (claimed->elements)
            dtq_info("reaper: adopted %zu task(s) of lost workers from queue %s", claimed->elements,
                     qc->queue);
        if (qc->gen == rp->ctx->streams_gen) save_cursors(rp, reply->element[1], qc->first);
        dtq_executor_run_claimed(rp->ex, claimed);
    }
    queue_call_free(qc);
    dtq_ctx_queue_quiet(rp->ctx);
    if (rp->stopped) {
        dtq_ctx_settled(rp->ctx);
        return;
    }
    reap(rp); /* the round goes on with the next queue */
}

static void cluster_reap(dtq_reaper *rp) {
    dtq_ctx *ctx = rp->ctx;
    while (rp->reap_q < ctx->streams.nqueues && !dtq_ctx_queue_fetchable(ctx, rp->reap_q))
        rp->reap_q++;
    if (rp->reap_q < ctx->streams.nqueues) {
        int q = rp->reap_q++;
        dtq_streams one = dtq_streams_one(&ctx->streams, q);
        queue_call *qc = queue_call_new(rp, q);
        dtq_argv a;
        dtq_call_reap(&a, ctx->fn.reap, &one, ctx->cfg->worker_id,
                      ctx->cfg->visibility_timeout_s * 1000, dtq_executor_free_slots(rp->ex),
                      REAP_MIN, ctx->policy_json, rp->cursors + q * DTQ_BANDS);
        dtq_scope_tag_call(&a, dtq_ctx_qtag(ctx, q));
        if (dtq_ctx_command(ctx, cluster_reap_cb, qc, &a) == DTQ_OK) {
            rp->inflight = 1;
            ctx->qstate[q].reaping = 1;
        } else {
            queue_call_free(qc);
        }
        dtq_argv_deinit(&a);
    }
}

static void reap(dtq_reaper *rp) {
    dtq_ctx *ctx = rp->ctx;
    int free_slots = dtq_executor_free_slots(rp->ex);
    dtq_argv a;
    if (rp->inflight || !dtq_ctx_is_up(ctx) || dtq_finisher_refused(rp->fin)) return;
    if (dtq_monotonic_ms() < rp->hold_until_ms) return;
    if (rp->cursors_gen != ctx->streams_gen) reset_cursors(rp);
    if (dtq_ctx_cluster(ctx)) {
        cluster_reap(rp);
        return;
    }
    dtq_call_reap(&a, ctx->fn.reap, &ctx->streams, ctx->cfg->worker_id,
                  ctx->cfg->visibility_timeout_s * 1000, free_slots, REAP_MIN, ctx->policy_json,
                  rp->cursors);
    if (dtq_ctx_command(ctx, reap_cb, rp, &a) == DTQ_OK) rp->inflight = 1;
    dtq_argv_deinit(&a);
}

static void tick_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_reaper *rp = arg;
    int64_t vis = rp->ctx->cfg->visibility_timeout_s;
    struct timeval tv = {vis / 2, (vis % 2) * 500000};
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (rp->stopped) return;
    evtimer_add(rp->tick_ev, &tv);
    if (!rp->inflight) rp->reap_q = 0; /* a new round (cluster layout) */
    reap(rp);
}

static void recover_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_reaper *rp = priv;
    redisReply *reply = r;
    DTQ_UNUSED(ac);
    rp->recovering--;
    if (reply && reply->type == REDIS_REPLY_ARRAY) {
        if (reply->elements)
            dtq_warn("recovered %zu task(s) claimed by a fetch or reap whose reply was lost; "
                     "running them at the same attempt",
                     reply->elements);
        dtq_executor_run_claimed(rp->ex, reply);
    } else if (reply) {
        dtq_error("recovering this worker's pending entries failed: %s",
                  reply->type == REDIS_REPLY_ERROR ? reply->str : "bad reply");
    }
    dtq_ctx_settled(rp->ctx);
}

static void add_known_task(const dtq_task *t, void *arg) {
    dtq_argv_addf(arg, "%s/%s", t->stream, t->entry_id);
}

static void add_known_entry(const char *stream, const char *entry_id, void *arg) {
    dtq_argv_addf(arg, "%s/%s", stream, entry_id);
}

typedef struct known_filter {
    dtq_argv *out;
    const char *tag; /* only the entries of streams with this prefix */
} known_filter;

static void add_known_task_of(const dtq_task *t, void *arg) {
    known_filter *k = arg;
    if (!strncmp(t->stream, k->tag, strlen(k->tag))) add_known_task(t, k->out);
}

static void add_known_entry_of(const char *stream, const char *entry_id, void *arg) {
    known_filter *k = arg;
    if (!strncmp(stream, k->tag, strlen(k->tag))) add_known_entry(stream, entry_id, k->out);
}

static void cluster_recover_cb(redisAsyncContext *ac, void *r, void *priv) {
    queue_call *qc = priv;
    dtq_reaper *rp = qc->rp;
    redisReply *reply = r;
    dtq_qstate *st = dtq_ctx_qstate(rp->ctx, qc->queue);
    DTQ_UNUSED(ac);
    rp->recovering--;
    if (st) st->recovering = 0;
    if (reply && reply->type == REDIS_REPLY_ARRAY) {
        if (reply->elements)
            dtq_warn("recovered %zu task(s) of queue %s claimed by a fetch or reap whose "
                     "reply was lost; running them at the same attempt",
                     reply->elements, qc->queue);
        dtq_executor_run_claimed(rp->ex, reply);
    } else {
        /* Refused, or its link lost (it may have run): wanted again, sent once the queue
         * is quiet and up. */
        if (reply)
            dtq_error("recovering this worker's pending entries of queue %s failed: %s", qc->queue,
                      reply->type == REDIS_REPLY_ERROR ? reply->str : "bad reply");
        if (st) {
            st->need_recover = 1;
            st->recover_crashed |= qc->crashed; /* the retry adopts at once too */
        }
    }
    queue_call_free(qc);
    dtq_ctx_settled(rp->ctx);
    dtq_ctx_slots_freed(rp->ctx); /* the queue may be fetched again */
}

static void cluster_recover(dtq_reaper *rp, int q) {
    dtq_ctx *ctx = rp->ctx;
    dtq_qstate *st = &ctx->qstate[q];
    dtq_streams one = dtq_streams_one(&ctx->streams, q);
    known_filter k;
    dtq_argv a, known;
    queue_call *qc;
    dtq_argv_init(&known);
    k.out = &known;
    k.tag = dtq_ctx_qtag(ctx, q);
    dtq_executor_each_task(rp->ex, add_known_task_of, &k);
    dtq_finisher_each_entry(rp->fin, add_known_entry_of, &k);
    dtq_call_recover(&a, ctx->fn.recover, &one, ctx->cfg->worker_id, st->recover_crashed,
                     ctx->policy_json, &known);
    dtq_scope_tag_call(&a, k.tag);
    qc = queue_call_new(rp, q);
    qc->crashed = st->recover_crashed;
    if (dtq_ctx_command(ctx, cluster_recover_cb, qc, &a) == DTQ_OK) {
        rp->recovering++;
        st->recovering = 1;
        st->need_recover = 0;
        st->recover_crashed = 0;
    } else {
        queue_call_free(qc);
    }
    dtq_argv_deinit(&a);
    dtq_argv_deinit(&known);
}

void dtq_reaper_recover_pending(dtq_reaper *rp) {
    dtq_ctx *ctx = rp->ctx;
    if (!dtq_ctx_cluster(ctx) || !dtq_ctx_is_up(ctx)) return;
    for (int q = 0; q < ctx->streams.nqueues; q++) {
        const dtq_qstate *st = &ctx->qstate[q];
        if (st->need_recover && !st->recovering && !st->fetching && !st->reaping &&
            dtq_ctx_queue_up(ctx, q))
            cluster_recover(rp, q);
    }
}

void dtq_reaper_recover_queue(dtq_reaper *rp, int q, int predecessor_crashed) {
    dtq_qstate *st = &rp->ctx->qstate[q];
    st->need_recover = 1;
    if (predecessor_crashed) st->recover_crashed = 1;
    dtq_reaper_recover_pending(rp);
}

void dtq_reaper_recover_own(dtq_reaper *rp, int predecessor_crashed) {
    dtq_ctx *ctx = rp->ctx;
    dtq_argv a, known;
    if (dtq_ctx_cluster(ctx)) {
        for (int q = 0; q < ctx->streams.nqueues; q++) {
            ctx->qstate[q].need_recover = 1;
            if (predecessor_crashed) ctx->qstate[q].recover_crashed = 1;
        }
        dtq_reaper_recover_pending(rp);
        return;
    }
    if (rp->recovering || !dtq_ctx_is_up(ctx)) return;
    dtq_argv_init(&known);
    dtq_executor_each_task(rp->ex, add_known_task, &known);
    dtq_finisher_each_entry(rp->fin, add_known_entry, &known);
    dtq_call_recover(&a, ctx->fn.recover, &ctx->streams, ctx->cfg->worker_id, predecessor_crashed,
                     ctx->policy_json, &known);
    if (dtq_ctx_command(ctx, recover_cb, rp, &a) == DTQ_OK) rp->recovering++;
    dtq_argv_deinit(&a);
    dtq_argv_deinit(&known);
}

dtq_reaper *dtq_reaper_new(dtq_ctx *ctx, dtq_executor *ex, const dtq_finisher *fin) {
    dtq_reaper *rp = dtq_xcalloc(1, sizeof(*rp));
    rp->ctx = ctx;
    rp->ex = ex;
    rp->fin = fin;
    rp->tick_ev = evtimer_new(ctx->base, tick_cb, rp);
    return rp;
}

void dtq_reaper_start(dtq_reaper *rp) {
    struct timeval tv = {1, 0};
    if (rp->started || rp->stopped) return;
    rp->started = 1;
    evtimer_add(rp->tick_ev, &tv);
}

void dtq_reaper_reconnected(dtq_reaper *rp) {
    rp->hold_until_ms = dtq_monotonic_ms() + rp->ctx->cfg->visibility_timeout_s * 1000;
}

void dtq_reaper_stop(dtq_reaper *rp) {
    rp->stopped = 1;
    evtimer_del(rp->tick_ev);
}

int dtq_reaper_busy(const dtq_reaper *rp) {
    return rp->inflight || rp->recovering;
}

void dtq_reaper_free(dtq_reaper *rp) {
    if (!rp) return;
    for (int i = 0; i < rp->ncursors; i++) free(rp->cursors[i]);
    free(rp->cursors);
    event_free(rp->tick_ev);
    free(rp);
}
