/* scheduler.c: the passes. Each step is one pipelined command; state moves tick -> (the
 * leader lock's try, leader.c) -> claim -> promote -> tick. All due-time comparisons happen in
 * the Functions against the Redis clock; the claim's reply also carries what the pass
 * renders (the gauges, the soonest due time and the Redis time it was read at). */
#include "scheduler.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "calls.h"
#include "keys.h"
#include "log.h"
#include "retry.h"
#include "scope.h"
#include "util.h"

struct dtq_scheduler {
    dtq_ctx *ctx;
    dtq_leader *leader;
    struct event *tick_ev;
    int running;
    int busy;           /* a step is in flight */
    int batch_full;     /* the last claim filled its batch */
    int new_leader;     /* the first pass since taking the lock: no claim can be in use */
    int claim_failed;   /* this pass's claim was refused: the next one after an interval */
    int64_t next_in_ms; /* the schedule's soonest due time after the claim, as a wait on
                         * Redis's clock, -1: none (empty) */
    char *schedule_key, *claimed_key;
    /* The cluster layout's pass: replies still to come, and the sums so far. */
    int cl_pending;
    unsigned cl_pass; /* the pass's number: replies of an older one are ignored */
    int64_t cl_scheduled, cl_claimed;
};

static void arm(dtq_scheduler *s, int64_t ms) {
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    if (s->running) evtimer_add(s->tick_ev, &tv);
}

/* About interval_ms, +-20%, so passes of many daemons do not line up. */
static void arm_interval(dtq_scheduler *s) {
    int64_t iv = s->ctx->cfg->scheduler_interval_ms;
    arm(s, (int64_t)((double)iv * (0.8 + 0.4 * dtq_retry_uniform())));
}

/* The next pass: at once after a full batch; at the schedule's soonest due time when that
 * comes before the interval (a delayed task, a retry or a limited task's turn is promoted
 * on time, not up to an interval late); otherwise about the interval. */
#define SCHED_MIN_WAKE_MS 10
static void arm_next(dtq_scheduler *s) {
    if (s->batch_full) {
        arm(s, 0);
    } else if (s->next_in_ms >= 0 && s->next_in_ms < s->ctx->cfg->scheduler_interval_ms) {
        arm(s, s->next_in_ms < SCHED_MIN_WAKE_MS ? SCHED_MIN_WAKE_MS : s->next_in_ms);
    } else {
        arm_interval(s);
    }
}

static int sched_send(dtq_scheduler *s, redisCallbackFn *cb, dtq_argv *a) {
    int rc = dtq_ctx_command(s->ctx, cb, s, a);
    dtq_argv_deinit(a);
    if (rc == DTQ_OK)
        s->busy = 1;
    else
        arm_interval(s);
    return rc;
}

/* The wait from the claim's Redis time to the schedule's soonest due time, -1: empty. */
static int64_t claim_wait_ms(const dtq_sched_claim_reply *cr) {
    if (!cr->has_next) return -1;
    return cr->next_due_ms > cr->now_ms ? cr->next_due_ms - cr->now_ms : 0;
}

static void promote_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_scheduler *s = priv;
    redisReply *reply = r;
    DTQ_UNUSED(ac);
    s->busy = 0;
    if (!reply) return;
    if (reply->type == REDIS_REPLY_ERROR) {
        dtq_error("scheduler: promote failed: %s", reply->str);
        arm_interval(s);
        return;
    }
    s->ctx->gauges.promoted += (uint64_t)reply->integer;
    arm_next(s);
}

/* The pass's claim: its reply sets the gauges and the next wake-up, and a claim that took
 * entries is followed by the promote, whose reply ends the pass. */
static void claim_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_scheduler *s = priv;
    dtq_ctx *ctx = s->ctx;
    redisReply *reply = r;
    dtq_sched_claim_reply cr;
    dtq_argv a;
    DTQ_UNUSED(ac);
    s->busy = 0;
    if (!reply) return;
    s->batch_full = 0;
    if (!dtq_sched_claim_reply_parse(reply, &cr)) {
        dtq_error("scheduler: claim failed: %s",
                  reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
        arm_interval(s); /* no 10 ms loop */
        return;
    }
    ctx->gauges.scheduled = cr.scheduled;
    ctx->gauges.claimed = cr.claimed;
    s->next_in_ms = claim_wait_ms(&cr);
    if (cr.nids > 0) {
        dtq_call_sched_promote(&a, ctx->fn.sched_promote, s->claimed_key, ctx->cfg->worker_id,
                               reply, cr.nids);
        s->batch_full = (int64_t)cr.nids >= ctx->cfg->scheduler_batch;
        sched_send(s, promote_cb, &a); /* its reply ends the pass */
        return;
    }
    arm_next(s);
}

static void pass(dtq_scheduler *s) {
    dtq_ctx *ctx = s->ctx;
    dtq_argv a;
    /* A new leader (also the old one after a reconnect) returns every claim to the
     * schedule at once: the leader that made them no longer holds the lock, so none can
     * be in anyone's hands, and waiting claim_timeout_ms would delay those retries by a
     * minute. A late promote by the old leader is harmless: promote moves a task only
     * from retrying/pending, so the second of two promotes writes nothing. */
    dtq_call_sched_claim(&a, ctx->fn.sched_claim, s->schedule_key, s->claimed_key,
                         ctx->cfg->scheduler_batch, s->new_leader ? 0 : ctx->cfg->claim_timeout_ms);
    s->new_leader = 0;
    sched_send(s, claim_cb, &a);
}

/* ----------------------------------------------------------------- the cluster layout
 * A pass reads the queue index ({ns}:queues) and then, per queue, pipelined and routed by
 * its tag: <ns>_sched_claim with T(q) (its reply carries the queue's two sizes and its
 * soonest due time as a wait on that node's clock); a claim that took entries is followed
 * by <ns>_sched_promote with T(q). The pass ends with its last reply: the next one at the
 * soonest due time over the queues (or at once after a full batch). */
typedef struct cl_queue {
    dtq_scheduler *s;
    int refs; /* its replies to come, and cl_pass_queue while it sends */
    unsigned pass;
    char *tag, *schedule_key, *claimed_key;
} cl_queue;

static void cl_queue_unref(cl_queue *cq);

typedef struct cl_reply {
    cl_queue *cq;
    int kind;
} cl_reply;

enum { CL_CLAIM, CL_PROMOTE };

static void cl_pass_reply_done(dtq_scheduler *s) {
    if (--s->cl_pending > 0) return;
    s->busy = 0;
    s->ctx->gauges.scheduled = s->cl_scheduled;
    s->ctx->gauges.claimed = s->cl_claimed;
    if (s->claim_failed)
        arm_interval(s);
    else
        arm_next(s);
}

static int cl_send(dtq_scheduler *s, cl_queue *cq, int kind, dtq_argv *a);

static void cl_reply_cb(redisAsyncContext *ac, void *r, void *priv) {
    cl_reply *cr = priv;
    cl_queue *cq = cr->cq;
    dtq_scheduler *s = cq->s;
    dtq_ctx *ctx = s->ctx;
    redisReply *reply = r;
    int kind = cr->kind;
    DTQ_UNUSED(ac);
    free(cr);
    if (cq->pass != s->cl_pass) { /* a pass given up (connection lost) */
        cl_queue_unref(cq);
        return;
    }
    if (reply && kind == CL_CLAIM) {
        dtq_sched_claim_reply c;
        if (!dtq_sched_claim_reply_parse(reply, &c)) {
            dtq_error("scheduler: claim failed for %s: %s", cq->tag,
                      reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
            s->claim_failed = 1;
        } else {
            s->cl_scheduled += c.scheduled;
            s->cl_claimed += c.claimed;
            int64_t in = claim_wait_ms(&c);
            if (in >= 0 && (s->next_in_ms < 0 || in < s->next_in_ms)) s->next_in_ms = in;
            if (c.nids > 0) {
                dtq_argv a;
                dtq_call_sched_promote(&a, ctx->fn.sched_promote, cq->claimed_key,
                                       ctx->cfg->worker_id, reply, c.nids);
                dtq_scope_tag_call(&a, cq->tag);
                if ((int64_t)c.nids >= ctx->cfg->scheduler_batch) s->batch_full = 1;
                cl_send(s, cq, CL_PROMOTE, &a);
            }
        }
    } else if (reply) { /* CL_PROMOTE */
        if (reply->type == REDIS_REPLY_ERROR)
            dtq_error("scheduler: promote failed for %s: %s", cq->tag, reply->str);
        else if (reply->type == REDIS_REPLY_INTEGER)
            s->ctx->gauges.promoted += (uint64_t)reply->integer;
    }
    /* a reply lost with its node's link (NULL) counts as given up: the next pass tries */
    cl_queue_unref(cq);
    cl_pass_reply_done(s);
}

static void cl_queue_unref(cl_queue *cq) {
    if (--cq->refs > 0) return;
    free(cq->tag);
    free(cq->schedule_key);
    free(cq->claimed_key);
    free(cq);
}

static int cl_send(dtq_scheduler *s, cl_queue *cq, int kind, dtq_argv *a) {
    cl_reply *cr = dtq_xcalloc(1, sizeof(*cr));
    int rc;
    cr->cq = cq;
    cr->kind = kind;
    rc = dtq_ctx_command_at(s->ctx, cq->tag, cl_reply_cb, cr, a);
    dtq_argv_deinit(a);
    if (rc != DTQ_OK) {
        free(cr);
        return rc;
    }
    cq->refs++;
    s->cl_pending++;
    return DTQ_OK;
}

static void cl_pass_queue(dtq_scheduler *s, const char *queue) {
    dtq_ctx *ctx = s->ctx;
    cl_queue *cq = dtq_xcalloc(1, sizeof(*cq));
    dtq_argv a;
    cq->refs = 1; /* this function's, dropped at its end */
    cq->s = s;
    cq->pass = s->cl_pass;
    cq->tag = dtq_ctx_queue_prefix(ctx, queue);
    if (!dtq_ctx_key_up(ctx, cq->tag)) { /* a shard down: the next pass tries it again */
        free(cq->tag);
        free(cq);
        return;
    }
    cq->schedule_key = dtq_key_retry_schedule(cq->tag);
    cq->claimed_key = dtq_key_retry_claimed(cq->tag);
    dtq_call_sched_claim(&a, ctx->fn.sched_claim, cq->schedule_key, cq->claimed_key,
                         ctx->cfg->scheduler_batch, s->new_leader ? 0 : ctx->cfg->claim_timeout_ms);
    dtq_scope_tag_call(&a, cq->tag);
    cl_send(s, cq, CL_CLAIM, &a);
    cl_queue_unref(cq);
}

static void cl_queues_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_scheduler *s = priv;
    redisReply *reply = r;
    char **queues, *error = NULL;
    int nq = 0;
    DTQ_UNUSED(ac);
    s->busy = 0;
    if (!s->running) return;
    if (!reply) {
        arm_interval(s);
        return;
    }
    queues = dtq_scope_index_names(reply, &nq, &error);
    if (!queues) {
        dtq_error("scheduler: reading the queue index failed: %s",
                  error ? error : "unexpected reply");
        free(error);
        arm_interval(s);
        return;
    }
    s->cl_pass++;
    s->cl_pending = 1; /* held while the pass's commands leave */
    s->cl_scheduled = s->cl_claimed = 0;
    s->next_in_ms = -1;
    s->batch_full = 0;
    s->claim_failed = 0;
    s->busy = 1;
    for (int i = 0; i < nq; i++) cl_pass_queue(s, queues[i]);
    dtq_scope_names_free(queues, nq);
    s->new_leader = 0;
    cl_pass_reply_done(s);
}

static void cluster_pass(dtq_scheduler *s) {
    dtq_argv a;
    dtq_scope_index_read(&a, s->ctx->cfg->ns);
    sched_send(s, cl_queues_cb, &a);
}

/* The leader lock's try answered: a pass while leading. */
static void lock_done(void *arg, enum dtq_leader_outcome out) {
    dtq_scheduler *s = arg;
    s->busy = 0;
    if (out == DTQ_LEADER_NO_REPLY) {
        /* the cluster layout: a node lost does not take the router down (no
         * connection_lost to re-arm): the next try after an interval */
        if (dtq_ctx_cluster(s->ctx)) arm_interval(s);
        return;
    }
    if (!s->running) return;
    if (out != DTQ_LEADER_LEADS) {
        arm_interval(s);
        return;
    }
    if (dtq_ctx_cluster(s->ctx))
        cluster_pass(s);
    else
        pass(s);
}

/* A change of leadership: a new leader (also the old one after a reconnect) returns every
 * claim to the schedule at its first pass (see pass). */
static void leadership_changed(void *arg, int leading) {
    dtq_scheduler *s = arg;
    if (leading) s->new_leader = 1;
}

static void tick_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_scheduler *s = arg;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (!s->running || s->busy) return;
    if (!dtq_ctx_is_up(s->ctx)) {
        arm_interval(s);
        return;
    }
    if (dtq_leader_try(s->leader, lock_done, s) == DTQ_OK)
        s->busy = 1;
    else
        arm_interval(s);
}

dtq_scheduler *dtq_scheduler_new(dtq_ctx *ctx, dtq_leader *leader) {
    dtq_scheduler *s = dtq_xcalloc(1, sizeof(*s));
    s->ctx = ctx;
    s->leader = leader;
    s->tick_ev = evtimer_new(ctx->base, tick_cb, s);
    dtq_leader_subscribe(leader, leadership_changed, s);
    s->schedule_key = dtq_key_retry_schedule(ctx->prefix);
    s->claimed_key = dtq_key_retry_claimed(ctx->prefix);
    s->next_in_ms = -1;
    return s;
}

void dtq_scheduler_start(dtq_scheduler *s) {
    if (!s->ctx->cfg->scheduler_enabled || s->running) return;
    s->running = 1;
    arm(s, 0);
}

void dtq_scheduler_stop(dtq_scheduler *s) {
    s->running = 0;
    evtimer_del(s->tick_ev);
    dtq_leader_release(s->leader);
}

void dtq_scheduler_connection_lost(dtq_scheduler *s) {
    s->busy = 0;
    s->cl_pass++; /* the cluster layout: replies of the pass in flight are ignored */
    dtq_leader_lost(s->leader, "connection lost");
    arm_interval(s);
}

void dtq_scheduler_free(dtq_scheduler *s) {
    if (!s) return;
    event_free(s->tick_ev);
    free(s->schedule_key);
    free(s->claimed_key);
    free(s);
}
