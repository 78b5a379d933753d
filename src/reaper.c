/* reaper.c: the reap timer and its Function call. */
#include "reaper.h"

#include <event2/event.h>
#include <stdlib.h>

#include "calls.h"
#include "log.h"
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
    int recovering;        /* a recover reply is outstanding */
    int64_t hold_until_ms; /* no reap before this (monotonic): visibility after a reconnect */
    struct event *tick_ev;
    char **cursors; /* XAUTOCLAIM cursor per served stream, carried across calls */
    int ncursors;
    unsigned cursors_gen; /* the ctx->streams_gen they belong to */
};

static void reset_cursors(dtq_reaper *rp) {
    for (int i = 0; i < rp->ncursors; i++) free(rp->cursors[i]);
    free(rp->cursors);
    rp->ncursors = dtq_streams_count(&rp->ctx->streams);
    rp->cursors = dtq_xcalloc((size_t)rp->ncursors, sizeof(char *));
    for (int i = 0; i < rp->ncursors; i++) rp->cursors[i] = dtq_xstrdup("0-0");
    rp->cursors_gen = rp->ctx->streams_gen;
}

static void save_cursors(dtq_reaper *rp, const redisReply *list) {
    if (rp->cursors_gen != rp->ctx->streams_gen) return; /* a reload came in between */
    for (size_t i = 0; i < list->elements && (int)i < rp->ncursors; i++) {
        if (list->element[i]->type != REDIS_REPLY_STRING) continue;
        free(rp->cursors[i]);
        rp->cursors[i] = dtq_xstrndup(list->element[i]->str, list->element[i]->len);
    }
}

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
        save_cursors(rp, reply->element[1]);
        dtq_executor_run_claimed(rp->ex, claimed);
    }
    if (rp->stopped) dtq_ctx_settled(rp->ctx);
}

static void reap(dtq_reaper *rp) {
    dtq_ctx *ctx = rp->ctx;
    int free_slots = dtq_executor_free_slots(rp->ex);
    dtq_argv a;
    if (rp->inflight || !dtq_ctx_is_up(ctx) || dtq_finisher_refused(rp->fin)) return;
    if (dtq_monotonic_ms() < rp->hold_until_ms) return;
    if (rp->cursors_gen != ctx->streams_gen) reset_cursors(rp);
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
    reap(rp);
}

static void recover_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_reaper *rp = priv;
    redisReply *reply = r;
    DTQ_UNUSED(ac);
    rp->recovering = 0;
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

void dtq_reaper_recover_own(dtq_reaper *rp, int predecessor_crashed) {
    dtq_ctx *ctx = rp->ctx;
    dtq_argv a, known;
    if (rp->recovering || !dtq_ctx_is_up(ctx)) return;
    dtq_argv_init(&known);
    dtq_executor_each_task(rp->ex, add_known_task, &known);
    dtq_finisher_each_entry(rp->fin, add_known_entry, &known);
    dtq_call_recover(&a, ctx->fn.recover, &ctx->streams, ctx->cfg->worker_id, predecessor_crashed,
                     ctx->policy_json, &known);
    if (dtq_ctx_command(ctx, recover_cb, rp, &a) == DTQ_OK) rp->recovering = 1;
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
