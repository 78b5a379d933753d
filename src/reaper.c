/* reaper.c: the reap timer and its Function call. */
#include "reaper.h"

#include <event2/event.h>
#include <stdlib.h>

#include "log.h"
#include "util.h"

struct dtq_reaper {
    dtq_ctx *ctx;
    dtq_executor *ex;
    int started;
    int stopped;
    int inflight;
    struct event *tick_ev;
};

static void reap_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_reaper *rp = priv;
    redisReply *reply = r;
    DTQ_UNUSED(ac);
    rp->inflight = 0;
    if (reply && reply->type != REDIS_REPLY_ARRAY)
        dtq_error("reaper failed: %s", reply->type == REDIS_REPLY_ERROR ? reply->str : "bad reply");
    if (reply && reply->type == REDIS_REPLY_ARRAY) {
        if (reply->elements)
            dtq_info("reaper: adopted %zu task(s) of lost workers", reply->elements);
        dtq_executor_run_claimed(rp->ex, reply);
    }
    if (rp->stopped) dtq_ctx_settled(rp->ctx);
}

static void reap(dtq_reaper *rp) {
    dtq_ctx *ctx = rp->ctx;
    const dtq_streams *st = &ctx->streams;
    int free_slots = dtq_executor_free_slots(rp->ex);
    dtq_argv a;
    if (rp->inflight || free_slots <= 0 || !dtq_ctx_is_up(ctx)) return;
    dtq_argv_init(&a);
    dtq_argv_adds(&a, "FCALL");
    dtq_argv_adds(&a, ctx->fn.reap);
    dtq_argv_addll(&a, dtq_streams_count(st));
    for (int i = 0; i < dtq_streams_count(st); i++) dtq_argv_adds(&a, st->keys[i]);
    dtq_argv_adds(&a, ctx->cfg->worker_id);
    dtq_argv_addll(&a, (long long)ctx->cfg->visibility_timeout_s * 1000);
    dtq_argv_addll(&a, free_slots);
    dtq_argv_adds(&a, ctx->policy_json);
    for (int i = 0; i < dtq_streams_count(st); i++) {
        dtq_argv_adds(&a, st->queues[dtq_streams_queue_of(i)]);
        dtq_argv_addll(&a, dtq_streams_band_of(i));
    }
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

dtq_reaper *dtq_reaper_new(dtq_ctx *ctx, dtq_executor *ex) {
    dtq_reaper *rp = dtq_xcalloc(1, sizeof(*rp));
    rp->ctx = ctx;
    rp->ex = ex;
    rp->tick_ev = evtimer_new(ctx->base, tick_cb, rp);
    return rp;
}

void dtq_reaper_start(dtq_reaper *rp) {
    struct timeval tv = {1, 0};
    if (rp->started || rp->stopped) return;
    rp->started = 1;
    evtimer_add(rp->tick_ev, &tv);
}

void dtq_reaper_stop(dtq_reaper *rp) {
    rp->stopped = 1;
    evtimer_del(rp->tick_ev);
}

int dtq_reaper_busy(const dtq_reaper *rp) {
    return rp->inflight;
}

void dtq_reaper_free(dtq_reaper *rp) {
    if (!rp) return;
    event_free(rp->tick_ev);
    free(rp);
}
