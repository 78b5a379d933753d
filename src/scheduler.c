/* scheduler.c: leader election and passes. Each step is one pipelined command; state
 * moves tick -> (lock) -> claim -> promote -> tick. All due-time comparisons happen in
 * the Functions against the Redis clock. */
#include "scheduler.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "calls.h"
#include "keys.h"
#include "log.h"
#include "retry.h"
#include "util.h"

struct dtq_scheduler {
    dtq_ctx *ctx;
    struct event *tick_ev;
    int running;
    int busy;           /* a step is in flight */
    int batch_full;     /* the last claim filled its batch */
    int new_leader;     /* the first pass since taking the lock: no claim can be in use */
    int promoting;      /* this pass sent a promote: its reply ends the pass */
    int claim_failed;   /* this pass's claim was refused: the next one after an interval */
    int64_t next_score; /* the schedule's soonest due time after the claim, -1: empty */
    int64_t next_in_ms; /* ... as a wait on Redis's clock (TIME), -1: none */
    char *lock_key, *schedule_key, *claimed_key;
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

static void lose_leadership(dtq_scheduler *s, const char *why) {
    if (s->ctx->gauges.scheduler_leader) dtq_warn("scheduler: no longer leader (%s)", why);
    s->ctx->gauges.scheduler_leader = 0;
}

static void scheduled_gauge_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_scheduler *s = priv;
    redisReply *reply = r;
    DTQ_UNUSED(ac);
    if (reply && reply->type == REDIS_REPLY_INTEGER) s->ctx->gauges.scheduled = reply->integer;
}

static void claimed_gauge_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_scheduler *s = priv;
    redisReply *reply = r;
    DTQ_UNUSED(ac);
    if (reply && reply->type == REDIS_REPLY_INTEGER) s->ctx->gauges.claimed = reply->integer;
}

static void promote_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_scheduler *s = priv;
    redisReply *reply = r;
    DTQ_UNUSED(ac);
    s->busy = 0;
    s->promoting = 0;
    if (!reply) return;
    if (reply->type == REDIS_REPLY_ERROR) {
        dtq_error("scheduler: promote failed: %s", reply->str);
        arm_interval(s);
        return;
    }
    s->ctx->gauges.promoted += (uint64_t)reply->integer;
    arm_next(s);
}

/* ZRANGE <schedule> 0 0 WITHSCORES, sent right after the claim: the soonest due time left. */
static void next_due_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_scheduler *s = priv;
    redisReply *reply = r;
    DTQ_UNUSED(ac);
    s->next_score = -1;
    if (reply && reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
        reply->element[1]->type == REDIS_REPLY_STRING)
        s->next_score = (int64_t)strtod(reply->element[1]->str, NULL);
}

/* TIME, the pass's last reply but a promote's: the wait until the soonest due time. */
static void time_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_scheduler *s = priv;
    redisReply *reply = r;
    DTQ_UNUSED(ac);
    if (!reply) return;
    s->next_in_ms = -1;
    if (s->next_score >= 0 && reply->type == REDIS_REPLY_ARRAY && reply->elements == 2) {
        int64_t now = strtoll(reply->element[0]->str, NULL, 10) * 1000 +
                      strtoll(reply->element[1]->str, NULL, 10) / 1000;
        s->next_in_ms = s->next_score > now ? s->next_score - now : 0;
    }
    if (!s->promoting) {
        s->busy = 0;
        if (s->claim_failed)
            arm_interval(s);
        else
            arm_next(s);
    }
}

static void claim_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_scheduler *s = priv;
    dtq_ctx *ctx = s->ctx;
    redisReply *reply = r;
    dtq_argv a;
    DTQ_UNUSED(ac);
    if (!reply) return;
    s->batch_full = 0;
    if (reply->type != REDIS_REPLY_ARRAY) {
        dtq_error("scheduler: claim failed: %s",
                  reply->type == REDIS_REPLY_ERROR ? reply->str : "?");
        s->claim_failed = 1; /* time_cb ends the pass, an interval away: no 10 ms loop */
        return;
    }
    if (reply->elements == 0) return;
    dtq_call_sched_promote(&a, ctx->fn.sched_promote, s->claimed_key, ctx->cfg->worker_id, reply);
    s->batch_full = (int64_t)reply->elements >= ctx->cfg->scheduler_batch;
    if (dtq_ctx_command(ctx, promote_cb, s, &a) == DTQ_OK) s->promoting = 1;
    dtq_argv_deinit(&a);
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
    for (int i = 0; i < 2; i++) {
        dtq_argv g;
        dtq_argv_init(&g);
        dtq_argv_adds(&g, "ZCARD");
        dtq_argv_adds(&g, i ? s->claimed_key : s->schedule_key);
        dtq_ctx_command(ctx, i ? claimed_gauge_cb : scheduled_gauge_cb, s, &g);
        dtq_argv_deinit(&g);
    }
    s->promoting = 0;
    s->claim_failed = 0;
    if (sched_send(s, claim_cb, &a) != DTQ_OK) return;
    {
        dtq_argv n, t;
        dtq_argv_init(&n);
        dtq_argv_adds(&n, "ZRANGE");
        dtq_argv_adds(&n, s->schedule_key);
        dtq_argv_adds(&n, "0");
        dtq_argv_adds(&n, "0");
        dtq_argv_adds(&n, "WITHSCORES");
        dtq_ctx_command(ctx, next_due_cb, s, &n);
        dtq_argv_deinit(&n);
        dtq_argv_init(&t);
        dtq_argv_adds(&t, "TIME");
        if (dtq_ctx_command(ctx, time_cb, s, &t) != DTQ_OK) {
            s->busy = 0;
            arm_interval(s);
        }
        dtq_argv_deinit(&t);
    }
}

static void lock_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_scheduler *s = priv;
    redisReply *reply = r;
    DTQ_UNUSED(ac);
    s->busy = 0;
    if (!reply) return;
    if (!s->running) return;
    if (reply->type == REDIS_REPLY_ERROR) {
        dtq_error("scheduler: lock command failed: %s", reply->str);
        lose_leadership(s, "lock error");
        arm_interval(s);
        return;
    }
    /* SET NX answers OK or nil; the refresh Function answers 1 or 0. */
    if ((reply->type == REDIS_REPLY_STATUS && !strcmp(reply->str, "OK")) ||
        (reply->type == REDIS_REPLY_INTEGER && reply->integer == 1)) {
        if (!s->ctx->gauges.scheduler_leader) {
            dtq_info("scheduler: this worker is now the leader");
            s->new_leader = 1;
        }
        s->ctx->gauges.scheduler_leader = 1;
        pass(s);
        return;
    }
    lose_leadership(s, "lock held by another worker");
    arm_interval(s);
}

static void tick_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_scheduler *s = arg;
    dtq_ctx *ctx = s->ctx;
    dtq_argv a;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (!s->running || s->busy) return;
    if (!dtq_ctx_is_up(ctx)) {
        arm_interval(s);
        return;
    }
    if (s->ctx->gauges.scheduler_leader) {
        dtq_call_lock_refresh(&a, ctx->fn.lock_refresh, s->lock_key, ctx->cfg->worker_id,
                              ctx->cfg->leader_lock_ms);
    } else {
        dtq_argv_init(&a);
        dtq_argv_adds(&a, "SET");
        dtq_argv_adds(&a, s->lock_key);
        dtq_argv_adds(&a, ctx->cfg->worker_id);
        dtq_argv_adds(&a, "NX");
        dtq_argv_adds(&a, "PX");
        dtq_argv_addll(&a, ctx->cfg->leader_lock_ms);
    }
    sched_send(s, lock_cb, &a);
}

dtq_scheduler *dtq_scheduler_new(dtq_ctx *ctx) {
    dtq_scheduler *s = dtq_xcalloc(1, sizeof(*s));
    s->ctx = ctx;
    s->tick_ev = evtimer_new(ctx->base, tick_cb, s);
    s->lock_key = dtq_key_scheduler_lock(ctx->prefix);
    s->schedule_key = dtq_key_retry_schedule(ctx->prefix);
    s->claimed_key = dtq_key_retry_claimed(ctx->prefix);
    s->next_score = s->next_in_ms = -1;
    return s;
}

void dtq_scheduler_start(dtq_scheduler *s) {
    if (!s->ctx->cfg->scheduler_enabled || s->running) return;
    s->running = 1;
    arm(s, 0);
}

void dtq_scheduler_stop(dtq_scheduler *s) {
    dtq_ctx *ctx = s->ctx;
    s->running = 0;
    evtimer_del(s->tick_ev);
    if (s->ctx->gauges.scheduler_leader && dtq_ctx_is_up(ctx)) {
        dtq_argv a;
        dtq_call_lock_release(&a, ctx->fn.lock_release, s->lock_key, ctx->cfg->worker_id);
        dtq_ctx_command(ctx, NULL, NULL, &a);
        dtq_argv_deinit(&a);
        dtq_info("scheduler: leader lock released");
    }
    s->ctx->gauges.scheduler_leader = 0;
}

void dtq_scheduler_connection_lost(dtq_scheduler *s) {
    s->busy = 0;
    s->promoting = 0;
    lose_leadership(s, "connection lost");
    arm_interval(s);
}

void dtq_scheduler_free(dtq_scheduler *s) {
    if (!s) return;
    event_free(s->tick_ev);
    free(s->lock_key);
    free(s->schedule_key);
    free(s->claimed_key);
    free(s);
}
