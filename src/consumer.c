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

/* The cluster layout cannot wait in XREAD BLOCK: one XREAD cannot name streams of several
 * slots, and a blocking link per node would hold one queue's XREAD at a time. So an idle
 * daemon polls: after a sweep over the queues that found nothing it fetches again after
 * IDLE_MIN_MS, doubling up to IDLE_MAX_MS while they stay empty; work resets the wait. */
#define IDLE_MIN_MS 5
#define IDLE_MAX_MS 100

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
    /* The cluster layout: a sweep fetches queue by queue in serving order, one fetch at a
     * time, each for the slots still free, going on to the next queue when one comes back
     * short; a sweep that read nothing makes the consumer idle for idle_ms. */
    int sweep_q;             /* the queue fetched next in this sweep */
    int sweep_read;          /* entries read in this sweep */
    int fetch_q;             /* the queue of the fetch in flight */
    char *fetch_name;        /* ... by name (a reload may renumber the queues) */
    int fetch_count;         /* ... and the count it asked for */
    unsigned gen;            /* ctx->streams_gen of sweep_q */
    int idle_ms;             /* the current poll wait */
    int64_t error_logged_ms; /* when a fetch error was last logged (one line per 10 s) */
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
    dtq_executor_run_fetched(c->ex, reply);
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

/* The cluster layout's sweep is over: another at once after work, else idle a while. */
static void sweep_end(dtq_consumer *c) {
    c->sweep_q = 0;
    if (c->sweep_read != 0) {
        c->idle_ms = 0;
        c->sweep_read = 0;
        return;
    }
    c->idle = 1;
    c->idle_ms = c->idle_ms ? c->idle_ms * 2 : IDLE_MIN_MS;
    if (c->idle_ms > IDLE_MAX_MS) c->idle_ms = IDLE_MAX_MS;
    arm_poll(c, c->idle_ms);
}

static void cluster_fetch_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_consumer *c = priv;
    redisReply *reply = r;
    long long read = 0;
    dtq_qstate *st = dtq_ctx_qstate(c->ctx, c->fetch_name);
    DTQ_UNUSED(ac);
    c->fetch_inflight = 0;
    if (st) st->fetching = 0;
    if (!reply || !dtq_fetch_reply_ok(reply)) {
        /* A lost link (NULL) or an error (a node down, a refused write): the sweep goes on
         * with the next queue; this one is tried again at the next sweep. */
        int64_t now = dtq_monotonic_ms();
        if (reply && now - c->error_logged_ms >= 10000) {
            dtq_error("fetch of queue %s failed: %s", c->fetch_name,
                      reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
            c->error_logged_ms = now;
        }
    } else {
        c->processing = 1;
        dtq_executor_run_fetched(c->ex, reply);
        c->processing = 0;
        read = reply->element[2]->integer;
    }
    dtq_ctx_queue_quiet(c->ctx); /* its recovery may go now */
    if (c->stopped) {            /* draining: what was claimed runs, nothing more is read */
        dtq_ctx_settled(c->ctx);
        return;
    }
    if (read != 0) c->sweep_read = 1;
    if (read < 0) { /* a group was made: the same queue again at once */
    } else if (read >= c->fetch_count) {
        sweep_end(c); /* the slots are full: the next sweep starts at the first queue */
    } else {
        c->sweep_q = c->fetch_q + 1; /* came back short: the next queue */
    }
    maybe_fetch(c);
}

static void cluster_fetch(dtq_consumer *c, int free_slots) {
    dtq_ctx *ctx = c->ctx;
    int n = ctx->streams.nqueues;
    if (c->gen != ctx->streams_gen) { /* a reload: a new sweep over the new table */
        c->gen = ctx->streams_gen;
        c->sweep_q = 0;
    }
    /* Queues whose slot cannot be reached, or that wait for their recovery, are skipped:
     * a command for a node that is down would hold the sweep for the router's max wait. */
    while (c->sweep_q < n && !dtq_ctx_queue_fetchable(ctx, c->sweep_q)) c->sweep_q++;
    if (c->sweep_q >= n) {
        sweep_end(c);
        if (!c->idle) { /* work was found: a new sweep from the first queue, unless no
                         * queue can be fetched (then poll) */
            for (int q = 0; q < n; q++)
                if (dtq_ctx_queue_fetchable(ctx, q)) {
                    cluster_fetch(c, free_slots);
                    return;
                }
            c->sweep_read = 0;
            sweep_end(c);
        }
        return;
    }
    {
        dtq_streams one = dtq_streams_one(&ctx->streams, c->sweep_q);
        dtq_argv a;
        dtq_call_fetch(&a, ctx->fn.fetch, &one, ctx->cfg->worker_id, free_slots, ctx->policy_json);
        dtq_call_tag(&a, dtq_ctx_qtag(ctx, c->sweep_q));
        if (dtq_ctx_command(ctx, cluster_fetch_cb, c, &a) == DTQ_OK) {
            c->fetch_inflight = 1;
            c->fetch_q = c->sweep_q;
            c->fetch_count = free_slots;
            free(c->fetch_name);
            c->fetch_name = dtq_xstrdup(ctx->streams.queues[c->sweep_q]);
            ctx->qstate[c->sweep_q].fetching = 1;
        } else {
            arm_poll(c, POLL_MS);
            c->idle = 1;
        }
        dtq_argv_deinit(&a);
    }
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
    if (dtq_ctx_cluster(ctx)) {
        cluster_fetch(c, free_slots);
        return;
    }

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
    c->idle_ms = 0;
    maybe_fetch(c);
}

int dtq_consumer_busy(const dtq_consumer *c) {
    return c->fetch_inflight;
}

void dtq_consumer_free(dtq_consumer *c) {
    if (!c) return;
    event_free(c->poll_ev);
    free(c->fetch_name);
    free(c);
}
