/* consumer.c: the fetch loop. */
#include "consumer.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "calls.h"
#include "log.h"
#include "scope.h"
#include "task.h"
#include "util.h"

#define BLOCK_MS 1000
#define POLL_MS 200

/* The cluster layout cannot wait in XREAD BLOCK: one XREAD cannot name streams of several
 * slots, and a blocking link per node would hold one queue's XREAD at a time. So an idle
 * daemon polls: once every shard's sweep found nothing it fetches again after IDLE_MIN_MS,
 * doubling up to IDLE_MAX_MS while they stay empty; work resets the wait. A shard whose
 * sweep found nothing while another's has work is fetched again after IDLE_MIN_MS. */
#define IDLE_MIN_MS 5
#define IDLE_MAX_MS 100

/* The cluster layout fetches each shard (the primary of a served queue's slot, by the
 * router's number for it) on its own lane, the lanes concurrently: a lane sweeps its
 * shard's queues in serving order with at most one fetch in flight, going on to its next
 * queue when one comes back short and starting again at its first when one fills its
 * count. A sweep that read nothing parks the lane until the poll timer. */
typedef struct lane {
    int inflight;   /* a fetch of this shard is out */
    int parked;     /* its last sweep read nothing: waits for the poll timer */
    int sweep_q;    /* where its sweep goes on (an index into the served queues) */
    int sweep_read; /* entries were read in its current sweep */
    unsigned seen;  /* scratch: the pass of cluster_fetch that last saw it */
} lane;

/* One fetch in flight (cluster layout). */
typedef struct fetch_call {
    struct dtq_consumer *c;
    int node;     /* its lane */
    int q;        /* the queue's index ... */
    unsigned gen; /* ... in this generation of the served table */
    char *name;   /* the queue by name (a reload may renumber the queues) */
    int count;    /* the slots it asked for, reserved in the executor until its reply */
} fetch_call;

struct dtq_consumer {
    dtq_ctx *ctx;
    dtq_executor *ex;
    const dtq_finisher *fin;
    int started;
    int stopped;
    int fetch_inflight; /* the single layout's fetch */
    int block_inflight;
    int idle;       /* single layout: the last fetch found nothing: wait for the block or the
                     * poll timer; cluster layout: every lane is parked */
    int processing; /* inside a fetch callback: kicks are folded into one fetch at its end */
    struct event *poll_ev;
    struct event *batch_ev; /* a few free slots wait this long for more (BATCH_WAIT_US) */
    int batch_due;          /* batch_ev fired: fetch for the free slots there are */
    /* The cluster layout. */
    lane *lanes; /* by the router's node number */
    int nlanes;
    int nflight;             /* fetches in flight, over all lanes */
    int round_read;          /* entries were read since every lane was last parked */
    unsigned pass;           /* numbers the passes of cluster_fetch (lane.seen) */
    int *ready;              /* scratch: the lanes a pass fetches, as node numbers */
    int *ready_q;            /* ... and the queue each fetches */
    int nready_cap;          /* their size */
    unsigned gen;            /* ctx->streams_gen the lanes' sweeps are over */
    int idle_ms;             /* the current poll wait */
    int64_t error_logged_ms; /* when a fetch error was last logged (one line per 10 s) */
};

static void maybe_fetch(dtq_consumer *c);

/* While tasks run, a fetch waits for a batch of free slots (an eighth of concurrency) or
 * BATCH_WAIT_US, whichever comes first: handlers that answer one at a time (pool
 * processes) would otherwise cost a fetch, a finish and their wake-ups per task. */
#define BATCH_WAIT_US 2000

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

static lane *lane_get(dtq_consumer *c, int node) {
    if (node >= c->nlanes) {
        c->lanes = dtq_xrealloc(c->lanes, sizeof(*c->lanes) * (size_t)(node + 1));
        memset(c->lanes + c->nlanes, 0, sizeof(*c->lanes) * (size_t)(node + 1 - c->nlanes));
        c->nlanes = node + 1;
    }
    return &c->lanes[node];
}

static void unpark_all(dtq_consumer *c) {
    for (int i = 0; i < c->nlanes; i++) c->lanes[i].parked = 0;
}

/* A lane's sweep is over: it starts again at once after work, else it parks. */
static void lane_end(dtq_consumer *c, lane *l) {
    l->sweep_q = 0;
    if (l->sweep_read) {
        l->sweep_read = 0;
        c->round_read = 1;
    } else {
        l->parked = 1;
    }
}

/* The next queue of node's lane to fetch, -1 when none. Queues whose slot cannot be
 * reached, or that wait for their recovery, are skipped: a command for a node that is down
 * would hold the lane for the router's max wait. So is a queue with a fetch out (after a
 * map change, on another lane): a queue has one fetch in flight at most. */
static int lane_next(dtq_consumer *c, int node, lane *l) {
    const dtq_ctx *ctx = c->ctx;
    for (; l->sweep_q < ctx->streams.nqueues; l->sweep_q++) {
        int q = l->sweep_q;
        if (dtq_ctx_queue_node(ctx, q) == node && dtq_ctx_queue_fetchable(ctx, q) &&
            !ctx->qstate[q].fetching)
            return q;
    }
    return -1;
}

static void cluster_fetch_cb(redisAsyncContext *ac, void *r, void *priv) {
    fetch_call *fc = priv;
    dtq_consumer *c = fc->c;
    dtq_ctx *ctx = c->ctx;
    redisReply *reply = r;
    long long read = 0;
    lane *l = lane_get(c, fc->node);
    dtq_qstate *st = dtq_ctx_qstate(ctx, fc->name);
    DTQ_UNUSED(ac);
    l->inflight = 0;
    c->nflight--;
    if (st) st->fetching = 0;
    dtq_executor_reserve(c->ex, -fc->count); /* the claimed tasks take their slots now */
    if (!reply || !dtq_fetch_reply_ok(reply)) {
        /* A lost link (NULL) or an error (a node down, a refused write): the lane goes on
         * with its next queue; this one is tried again at its next sweep. */
        int64_t now = dtq_monotonic_ms();
        if (reply && now - c->error_logged_ms >= 10000) {
            dtq_error("fetch of queue %s failed: %s", fc->name,
                      reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
            c->error_logged_ms = now;
        }
    } else {
        c->processing = 1;
        dtq_executor_run_fetched(c->ex, reply);
        c->processing = 0;
        read = reply->element[2]->integer;
    }
    dtq_ctx_queue_quiet(ctx); /* its recovery may go now */
    if (c->stopped) {         /* draining: what was claimed runs, nothing more is read */
        if (c->nflight == 0) dtq_ctx_settled(ctx);
    } else {
        if (read != 0) {
            l->sweep_read = 1;
            c->idle_ms = 0;
        }
        if (fc->gen != ctx->streams_gen) { /* a reload: the lanes start new sweeps */
        } else if (read < 0) {             /* a group was made: the same queue again at once */
            l->sweep_q = fc->q;
        } else if (read >= fc->count) {
            lane_end(c, l); /* its count was filled: its next sweep starts at its first queue */
        } else {
            l->sweep_q = fc->q + 1; /* came back short: its next queue */
        }
    }
    free(fc->name);
    free(fc);
    if (!c->stopped) maybe_fetch(c);
}

static int cluster_send(dtq_consumer *c, int node, int q, int count) {
    dtq_ctx *ctx = c->ctx;
    dtq_streams one = dtq_streams_one(&ctx->streams, q);
    fetch_call *fc = dtq_xcalloc(1, sizeof(*fc));
    dtq_argv a;
    int rc;
    fc->c = c;
    fc->node = node;
    fc->q = q;
    fc->gen = ctx->streams_gen;
    fc->name = dtq_xstrdup(ctx->streams.queues[q]);
    fc->count = count;
    dtq_call_fetch(&a, ctx->fn.fetch, &one, ctx->cfg->worker_id, count, ctx->policy_json);
    dtq_scope_tag_call(&a, dtq_ctx_qtag(ctx, q));
    rc = dtq_ctx_command(ctx, cluster_fetch_cb, fc, &a);
    dtq_argv_deinit(&a);
    if (rc != DTQ_OK) {
        free(fc->name);
        free(fc);
        return DTQ_ERR;
    }
    lane_get(c, node)->inflight = 1;
    c->nflight++;
    dtq_executor_reserve(c->ex, count);
    ctx->qstate[q].fetching = 1;
    return DTQ_OK;
}

/* One pass: every lane without a fetch out and not parked sends one for its next queue,
 * the free slots split evenly between them (the lane of the queue served first gets the
 * remainder); a fetch holds its count reserved until its reply. No fetch asks for more than
 * its shard's share of the concurrency (over the shards of the served queues), so a shard
 * that stalls with a fetch out cannot hold every slot while another has work. */
static void cluster_fetch(dtq_consumer *c, int free_slots) {
    dtq_ctx *ctx = c->ctx;
    int n = ctx->streams.nqueues, nready = 0, nlanes = 0, share;
    if (c->gen != ctx->streams_gen) { /* a reload: new sweeps over the new table */
        c->gen = ctx->streams_gen;
        for (int i = 0; i < c->nlanes; i++) {
            c->lanes[i].sweep_q = 0;
            c->lanes[i].sweep_read = 0;
            c->lanes[i].parked = 0;
        }
    }
    if (n > c->nready_cap) {
        c->ready = dtq_xrealloc(c->ready, sizeof(*c->ready) * (size_t)n);
        c->ready_q = dtq_xrealloc(c->ready_q, sizeof(*c->ready_q) * (size_t)n);
        c->nready_cap = n;
    }
    c->pass++;
    for (int q = 0; q < n; q++) { /* the lanes, met in serving order */
        int node = dtq_ctx_queue_node(ctx, q), next, at;
        lane *l;
        if (node < 0) continue;
        l = lane_get(c, node);
        if (l->seen == c->pass) continue;
        l->seen = c->pass;
        nlanes++;
        if (l->inflight || l->parked) continue;
        next = lane_next(c, node, l);
        if (next < 0) { /* its sweep is over: another at once after work, else it parks */
            lane_end(c, l);
            if (!l->parked) next = lane_next(c, node, l);
            if (next < 0) {
                l->sweep_read = 0;
                l->parked = 1;
                continue;
            }
        }
        /* in the order of the queues they fetch */
        for (at = nready; at > 0 && c->ready_q[at - 1] > next; at--) {
            c->ready[at] = c->ready[at - 1];
            c->ready_q[at] = c->ready_q[at - 1];
        }
        c->ready[at] = node;
        c->ready_q[at] = next;
        nready++;
    }
    share = nlanes ? ((int)ctx->cfg->concurrency + nlanes - 1) / nlanes : 0;
    for (int i = 0; i < nready; i++) {
        int count = free_slots / nready + (i < free_slots % nready);
        if (count > share) count = share;
        if (count <= 0) break;
        if (cluster_send(c, c->ready[i], c->ready_q[i], count) != DTQ_OK) {
            /* the gate closed or the map names no primary: poll (soon when other lanes
             * have fetches out: their replies do not fetch while the consumer is idle) */
            c->idle = 1;
            arm_poll(c, c->nflight ? IDLE_MIN_MS : POLL_MS);
            return;
        }
    }
    if (nready || c->nflight) {
        /* a lane parked while another has work: it is fetched again soon */
        if (!evtimer_pending(c->poll_ev, NULL)) {
            for (int i = 0; i < c->nlanes; i++)
                if (c->lanes[i].parked) {
                    arm_poll(c, IDLE_MIN_MS);
                    break;
                }
        }
        return;
    }
    /* every lane is parked */
    if (c->round_read) { /* work was found since they last were: new sweeps at once */
        c->round_read = 0;
        c->idle_ms = 0;
        unpark_all(c);
        for (int q = 0; q < n; q++)
            if (dtq_ctx_queue_fetchable(ctx, q)) {
                cluster_fetch(c, free_slots);
                return;
            }
    }
    c->idle = 1;
    c->idle_ms = c->idle_ms ? c->idle_ms * 2 : IDLE_MIN_MS;
    if (c->idle_ms > IDLE_MAX_MS) c->idle_ms = IDLE_MAX_MS;
    arm_poll(c, c->idle_ms);
}

static void batch_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_consumer *c = arg;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    c->batch_due = 1;
    maybe_fetch(c);
    c->batch_due = 0;
}

static void maybe_fetch(dtq_consumer *c) {
    dtq_ctx *ctx = c->ctx;
    const dtq_config *cfg = ctx->cfg;
    dtq_argv a;
    int free_slots;
    if (!c->started || c->stopped || c->processing || !dtq_ctx_is_up(ctx)) return;
    if (!dtq_ctx_cluster(ctx) && c->fetch_inflight) return;
    if (c->idle) return;                      /* the block or poll timer ends idleness */
    if (dtq_finisher_refused(c->fin)) return; /* resumed by slots_freed once accepted */
    free_slots = dtq_executor_free_slots(c->ex);
    if (free_slots <= 0) return;
    if (free_slots < cfg->concurrency / 8 && dtq_executor_running(c->ex) > 0 && !c->batch_due) {
        struct timeval tv = {0, BATCH_WAIT_US};
        if (!evtimer_pending(c->batch_ev, NULL)) evtimer_add(c->batch_ev, &tv);
        return;
    }
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
    unpark_all(c);
    maybe_fetch(c);
}

dtq_consumer *dtq_consumer_new(dtq_ctx *ctx, dtq_executor *ex, const dtq_finisher *fin) {
    dtq_consumer *c = dtq_xcalloc(1, sizeof(*c));
    c->ctx = ctx;
    c->ex = ex;
    c->fin = fin;
    c->poll_ev = evtimer_new(ctx->base, poll_cb, c);
    c->batch_ev = evtimer_new(ctx->base, batch_cb, c);
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
    unpark_all(c);
    maybe_fetch(c);
}

int dtq_consumer_busy(const dtq_consumer *c) {
    return c->fetch_inflight || c->nflight > 0;
}

void dtq_consumer_free(dtq_consumer *c) {
    if (!c) return;
    event_free(c->poll_ev);
    event_free(c->batch_ev);
    free(c->lanes);
    free(c->ready);
    free(c->ready_q);
    free(c);
}
