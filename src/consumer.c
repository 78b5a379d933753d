/* consumer.c: the fetch loop. */
#include "consumer.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "calls.h"
#include "log.h"
#include "task.h"
#include "util.h"

#define BLOCK_MS 1000
#define POLL_MS 200

struct dtq_consumer {
    dtq_ctx *ctx;
    dtq_executor *ex;
    const dtq_finisher *fin;
    int started;
    int stopped;
    int fetch_inflight;
    int block_inflight;
    int idle;       /* the last fetch found nothing: wait for the block or the poll timer */
    int processing; /* inside fetch_cb: kicks are folded into one fetch at its end */
    struct event *poll_ev;
};

static void maybe_fetch(dtq_consumer *c);

static void arm_poll(dtq_consumer *c, int ms) {
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(c->poll_ev, &tv);
}

static void block_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_consumer *c = priv;
    DTQ_UNUSED(ac);
    DTQ_UNUSED(r);
    c->block_inflight = 0;
    c->idle = 0;
    maybe_fetch(c);
}

/* Waits on `blk` for an entry newer than the last one seen in each served stream. */
static void start_block(dtq_consumer *c, const redisReply *pairs) {
    dtq_argv a;
    if (pairs->elements == 0 || !dtq_rconn_is_up(c->ctx->blk)) {
        arm_poll(c, pairs->elements == 0 ? BLOCK_MS : POLL_MS);
        return;
    }
    dtq_argv_init(&a);
    dtq_argv_adds(&a, "XREAD");
    dtq_argv_adds(&a, "BLOCK");
    dtq_argv_addll(&a, BLOCK_MS);
    dtq_argv_adds(&a, "COUNT");
    dtq_argv_adds(&a, "1");
    dtq_argv_adds(&a, "STREAMS");
    for (size_t i = 0; i + 1 < pairs->elements; i += 2)
        dtq_argv_add(&a, pairs->element[i]->str, pairs->element[i]->len);
    for (size_t i = 1; i < pairs->elements; i += 2)
        dtq_argv_add(&a, pairs->element[i]->str, pairs->element[i]->len);
    if (dtq_rconn_command(c->ctx->blk, block_cb, c, a.argc, (const char **)a.argv, a.lens) ==
        DTQ_OK)
        c->block_inflight = 1;
    else
        arm_poll(c, POLL_MS);
    dtq_argv_deinit(&a);
}

static void fetch_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_consumer *c = priv;
    redisReply *reply = r;
    DTQ_UNUSED(ac);
    c->fetch_inflight = 0;
    if (!reply || !dtq_fetch_reply_ok(reply)) {
        if (reply) { /* without a reply the connection is gone and the reconnect kicks us */
            dtq_error("fetch failed: %s",
                      reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
            c->idle = 1;
            arm_poll(c, BLOCK_MS);
        }
        if (c->stopped) dtq_ctx_settled(c->ctx);
        return;
    }
    c->processing = 1;
    dtq_executor_run_claimed(c->ex, reply->element[0]);
    c->processing = 0;
    if (c->stopped) { /* draining: what was claimed runs, nothing more is read */
        dtq_ctx_settled(c->ctx);
        return;
    }
    if (reply->element[2]->integer == 0) {
        c->idle = 1;
        start_block(c, reply->element[1]);
        return;
    }
    c->idle = 0;
    maybe_fetch(c);
}

static void maybe_fetch(dtq_consumer *c) {
    dtq_ctx *ctx = c->ctx;
    const dtq_config *cfg = ctx->cfg;
    dtq_argv a;
    int free_slots;
    if (!c->started || c->stopped || c->processing || c->fetch_inflight || !dtq_ctx_is_up(ctx))
        return;
    if (c->idle) return;                      /* the block or poll timer ends idleness */
    if (dtq_finisher_refused(c->fin)) return; /* resumed by slots_freed once accepted */
    free_slots = dtq_executor_free_slots(c->ex);
    if (free_slots <= 0) return;

    dtq_call_fetch(&a, ctx->fn.fetch, &ctx->streams, cfg->worker_id, free_slots, ctx->policy_json);
    if (dtq_ctx_command(ctx, fetch_cb, c, &a) == DTQ_OK) c->fetch_inflight = 1;
    dtq_argv_deinit(&a);
}

static void poll_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_consumer *c = arg;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    c->idle = 0;
    maybe_fetch(c);
}

dtq_consumer *dtq_consumer_new(dtq_ctx *ctx, dtq_executor *ex, const dtq_finisher *fin) {
    dtq_consumer *c = dtq_xcalloc(1, sizeof(*c));
    c->ctx = ctx;
    c->ex = ex;
    c->fin = fin;
    c->poll_ev = evtimer_new(ctx->base, poll_cb, c);
    return c;
}

void dtq_consumer_start(dtq_consumer *c) {
    c->started = 1;
    c->idle = 0;
    maybe_fetch(c);
}

void dtq_consumer_stop(dtq_consumer *c) {
    c->stopped = 1;
    evtimer_del(c->poll_ev);
}

void dtq_consumer_kick(dtq_consumer *c) {
    if (c) maybe_fetch(c);
}

void dtq_consumer_reset(dtq_consumer *c) {
    c->idle = 0;
    maybe_fetch(c);
}

int dtq_consumer_busy(const dtq_consumer *c) {
    return c->fetch_inflight;
}

void dtq_consumer_free(dtq_consumer *c) {
    if (!c) return;
    event_free(c->poll_ev);
    free(c);
}
