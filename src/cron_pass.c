/* cron_pass.c: periodic tasks in the daemon. Every daemon writes the schedules of its
 * config file ([cron:NAME]) into Redis when its connection is set up and after SIGHUP;
 * the scheduler leader alone fires them. A leader's step: <ns>_cron_due (Redis's clock and
 * the schedules to plan or fire), the fire times of each computed here (cron.c: the
 * Functions have no time-zone database), one <ns>_cron_fire per schedule, which decides
 * what runs and enqueues each fire time at most once. The timer then wakes at the soonest
 * planned fire time, so a fire is late by a round trip, not by a scheduler interval. */
#include "cron_pass.h"

#include <event2/event.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calls.h"
#include "cron.h"
#include "keys.h"
#include "log.h"
#include "scope.h"
#include "util.h"

/* What a ring of fire times may hold, whatever cron_due says it takes. */
#define CRON_FIRES_CAP 1000
/* Fire times walked per schedule and step, at most: a second-by-second schedule after
 * eleven days of downtime. Beyond it the walk goes on at the next step. */
#define CRON_WALK_MAX 1000000
#define CRON_MIN_WAKE_MS 5

struct dtq_cron_pass {
    dtq_ctx *ctx;
    const dtq_leader *leader; /* fires only while it leads */
    struct event *tick_ev;
    int running;
    int inflight;           /* replies awaited in this step (due, then fires) */
    int synced;             /* the config's schedules are written on this connection */
    int sync_pending;       /* replies awaited by the sync */
    int resync;             /* the config changed while a sync was in flight: sync again */
    int64_t zone_warned_at; /* host ms of the last "zone unknown here" line */
    int64_t soonest;        /* earliest next fire time this step saw (Redis ms), 0 = none */
    int64_t now;            /* Redis's clock at this step's cron_due */
    int full;               /* cron_due had more due schedules than it handed out */
    int fires_max;          /* fire times one <ns>_cron_fire takes (cron_due says) */
    unsigned gen;           /* the cluster layout: bumped when the connection is lost, so
                             * that the replies of the step in flight are ignored */
};

/* The cluster layout: schedules live per queue ({ns:q}:crons), so every call is scoped to
 * one queue (tagged "{ns:q}"); a step reads the queue index first, then calls
 * <ns>_cron_due per queue, and <ns>_cron_fire with the tag of each schedule's queue. A
 * reply lost with its node's link counts as given up (the next step tries again).
 * A cl_call goes with every command, in both layouts: the step it belongs to. */
typedef struct cl_call {
    dtq_cron_pass *cp;
    unsigned gen;
} cl_call;

static cl_call *cl_call_new(dtq_cron_pass *cp) {
    cl_call *c = dtq_xcalloc(1, sizeof(*c));
    c->cp = cp;
    c->gen = cp->gen;
    return c;
}

/* Tags a call in `a` with queue's tag in the cluster layout. */
static void tag_queue(const dtq_ctx *ctx, dtq_argv *a, const char *queue) {
    char *tag;
    if (!dtq_ctx_cluster(ctx)) return;
    tag = dtq_ctx_queue_prefix(ctx, queue);
    dtq_scope_tag_call(a, tag);
    free(tag);
}

/* Every callback gets a cl_call (freed here): its pass, or NULL when the step it belonged
 * to was given up. */
static dtq_cron_pass *cl_unwrap(void *priv) {
    cl_call *c = priv;
    dtq_cron_pass *cp = c->gen == c->cp->gen ? c->cp : NULL;
    free(c);
    return cp;
}

static void arm(dtq_cron_pass *cp, int64_t ms) {
    struct timeval tv;
    if (!cp->running) return;
    if (ms < 0) ms = 0;
    tv.tv_sec = ms / 1000;
    tv.tv_usec = (ms % 1000) * 1000;
    evtimer_add(cp->tick_ev, &tv);
}

/* The next step: at the soonest fire time when it comes before the scheduler's interval
 * (which bounds how late a new schedule or a new leader is seen). */
static void arm_next(dtq_cron_pass *cp) {
    int64_t iv = cp->ctx->cfg->scheduler_interval_ms, wait = iv;
    if (cp->full)
        wait = 0;
    else if (cp->soonest > 0 && cp->soonest - cp->now < iv)
        wait = cp->soonest - cp->now;
    if (wait < CRON_MIN_WAKE_MS && !cp->full) wait = CRON_MIN_WAKE_MS;
    arm(cp, wait);
}

/* How late a fire time may run and still be on time: longer than a leader failover takes,
 * so a change of leader is not downtime: the lock's lifetime, then up to 1.2 intervals
 * until a daemon's lock attempt, then up to one until its cron step, and a round trip. */
static int64_t grace_ms(const dtq_config *cfg) {
    return cfg->leader_lock_ms + 3 * cfg->scheduler_interval_ms;
}

static void step_reply_done(dtq_cron_pass *cp) {
    if (--cp->inflight == 0) arm_next(cp);
}

static void fire_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_cron_pass *cp = cl_unwrap(priv);
    redisReply *reply = r;
    DTQ_UNUSED(ac);
    if (!cp) return;
    if (!reply) {
        if (dtq_ctx_cluster(cp->ctx)) step_reply_done(cp);
        return; /* the connection went: connection_lost re-arms */
    }
    if (reply->type == REDIS_REPLY_ERROR) {
        dtq_error("cron: fire failed: %s", reply->str);
    } else if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 4) {
        long long fired = reply->element[0]->integer, dropped = reply->element[1]->integer,
                  refused = reply->element[2]->integer;
        if (dropped) dtq_info("cron: %lld missed fire time(s) dropped by catch-up", dropped);
        if (refused)
            dtq_warn("cron: %lld fire time(s) not enqueued (refused: see last_refusal in "
                     "cron list)",
                     refused);
        DTQ_UNUSED(fired);
    }
    step_reply_done(cp);
}

/* One schedule of the cron_due reply: its fire times up to now and the first one after,
 * handed to <ns>_cron_fire. */
static void plan_one(dtq_cron_pass *cp, const redisReply *item) {
    dtq_ctx *ctx = cp->ctx;
    const char *name, *queue, *gen, *spec, *tz, *anchor_s, *next_s;
    char why[300] = "", msg[256];
    dtq_cron cron;
    int64_t anchor = 0, next = 0, fires[CRON_FIRES_CAP];
    int nfires = 0, first = 0, planned = 0;
    dtq_argv a;
    if (item->type != REDIS_REPLY_ARRAY || item->elements != 7) return;
    for (size_t i = 0; i < 7; i++)
        if (item->element[i]->type != REDIS_REPLY_STRING) return;
    name = item->element[0]->str;
    queue = item->element[1]->str;
    gen = item->element[2]->str;
    spec = item->element[3]->str;
    tz = item->element[4]->str;
    anchor_s = item->element[5]->str;
    next_s = item->element[6]->str;
    dtq_parse_int64(anchor_s, 0, INT64_MAX, &anchor);
    if (dtq_cron_parse(spec, &cron, msg, sizeof(msg)) != 0) {
        snprintf(why, sizeof(why), "spec: %s", msg);
    } else if (dtq_cron_zone_valid(tz, msg, sizeof(msg)) != 0) {
        /* This host's tzdata lacks the zone (a slim image, an older tzdata): the schedule
         * is not at fault, so nothing is recorded; it waits for a leader that knows it. */
        int64_t now = dtq_now_ms();
        if (now - cp->zone_warned_at >= 60000) {
            dtq_warn("cron: schedule %s: this host does not know its zone (%s); it fires "
                     "when a daemon that does leads",
                     name, msg);
            cp->zone_warned_at = now;
        }
        return;
    } else if (!*next_s || dtq_parse_int64(next_s, 0, INT64_MAX, &next) != DTQ_OK) {
        /* Unplanned (new, changed, resumed): its first fire time after now. */
        if (dtq_cron_next(&cron, tz, anchor, cp->now, &next) != 0)
            snprintf(why, sizeof(why), "spec: no fire time after now");
        planned = 1;
    } else {
        /* Every fire time from the planned one up to now; the newest fires_max kept
         * (in a ring: `first` is the oldest kept), the Function decides which run. */
        int64_t walked = 0;
        while (next <= cp->now) {
            if (walked == CRON_WALK_MAX) {
                /* Ages down: the ring keeps the newest missed ones walked so far; go on
                 * from just before the on-time window, which is all that still matters. */
                int64_t from = cp->now - grace_ms(ctx->cfg) - 1;
                if (next < from && dtq_cron_next(&cron, tz, anchor, from, &next) != 0) {
                    next = -1;
                    break;
                }
                walked++;
                continue;
            }
            if (nfires < cp->fires_max) {
                fires[nfires++] = next;
            } else {
                fires[first] = next;
                first = (first + 1) % cp->fires_max;
            }
            walked++;
            if (dtq_cron_next(&cron, tz, anchor, next, &next) != 0) {
                next = -1;
                break;
            }
        }
        planned = 1;
    }
    if (*why) dtq_warn("cron: schedule %s cannot be planned: %s", name, why);
    dtq_call_cron_fire(&a, ctx->fn.cron_fire, ctx->cfg->worker_id, name, queue, gen,
                       grace_ms(ctx->cfg), (*why || next < 0) ? -1 : next, why);
    for (int i = 0; i < nfires; i++) dtq_argv_addll(&a, fires[(first + i) % nfires]);
    tag_queue(ctx, &a, queue);
    if (planned && !*why && next > 0 && (cp->soonest == 0 || next < cp->soonest))
        cp->soonest = next;
    {
        cl_call *c = cl_call_new(cp);
        if (dtq_ctx_command(ctx, fire_cb, c, &a) == DTQ_OK)
            cp->inflight++;
        else
            free(c);
    }
    dtq_argv_deinit(&a);
}

static void due_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_cron_pass *cp = cl_unwrap(priv);
    redisReply *reply = r;
    int cluster, full;
    int64_t soonest = 0;
    DTQ_UNUSED(ac);
    if (!cp) return;
    cluster = dtq_ctx_cluster(cp->ctx);
    if (!reply) {
        if (cluster) step_reply_done(cp);
        return;
    }
    if (reply->type == REDIS_REPLY_ERROR || reply->type != REDIS_REPLY_ARRAY ||
        reply->elements < 4) {
        dtq_error("cron: cron_due failed: %s",
                  reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
        if (!cluster) {
            cp->full = 0; /* the next step after an interval, not at once */
            cp->soonest = 0;
        }
        step_reply_done(cp);
        return;
    }
    cp->now = 0;
    if (reply->element[0]->type == REDIS_REPLY_STRING)
        dtq_parse_int64(reply->element[0]->str, 0, INT64_MAX, &cp->now);
    if (reply->element[1]->type == REDIS_REPLY_STRING && *reply->element[1]->str)
        dtq_parse_int64(reply->element[1]->str, 0, INT64_MAX, &soonest);
    full = reply->element[2]->type == REDIS_REPLY_INTEGER && reply->element[2]->integer;
    if (!cluster) {
        cp->soonest = soonest;
        cp->full = full;
    } else { /* one queue's answer: the step's soonest and fullness over them all */
        if (soonest > 0 && (cp->soonest == 0 || soonest < cp->soonest)) cp->soonest = soonest;
        cp->full |= full;
    }
    cp->fires_max =
        reply->element[3]->type == REDIS_REPLY_INTEGER ? (int)reply->element[3]->integer : 1;
    if (cp->fires_max < 1 || cp->fires_max > CRON_FIRES_CAP) cp->fires_max = CRON_FIRES_CAP;
    if (cp->now > 0)
        for (size_t i = 4; i < reply->elements; i++) plan_one(cp, reply->element[i]);
    step_reply_done(cp);
}

static void sync_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_cron_pass *cp = cl_unwrap(priv);
    redisReply *reply = r;
    DTQ_UNUSED(ac);
    if (!cp) return;
    if (!reply && dtq_ctx_cluster(cp->ctx)) {
        if (--cp->sync_pending == 0) cp->resync = 0; /* not synced: the next step again */
        return;
    }
    if (!reply) return;
    if (reply->type == REDIS_REPLY_ERROR) {
        dtq_error("cron: config schedule refused: %s", reply->str);
    } else if (reply->type == REDIS_REPLY_STRING && strcmp(reply->str, "unchanged")) {
        dtq_info("cron: config schedule %s", reply->str);
    }
    if (--cp->sync_pending == 0) {
        cp->synced = !cp->resync; /* a SIGHUP meanwhile: its file is written next tick */
        cp->resync = 0;
    }
}

/* "config:<path>": the origin of this file's schedules, so that a sync removes the
 * sections this file no longer has and nothing dtqctl or a file of another path defined.
 * No host name in it: the daemons of a fleet share one file path, and a section deleted
 * from it must go whichever host wrote it last. */
static void config_origin(const dtq_config *cfg, char *buf, size_t size) {
    snprintf(buf, size, "config:%s", cfg->path ? cfg->path : "(none)");
}

static void sync_send(dtq_cron_pass *cp, dtq_argv *a) {
    cl_call *c = cl_call_new(cp);
    if (dtq_ctx_command(cp->ctx, sync_cb, c, a) == DTQ_OK)
        cp->sync_pending++;
    else
        free(c);
    dtq_argv_deinit(a);
}

/* The config's schedules written; <ns>_cron_sync removes this file's others. In the
 * cluster layout per queue: each section with its queue's tag, and one <ns>_cron_sync
 * per queue of the index (`index`, nindex queues, dtq_scope_index_names) and of the
 * sections, naming the sections of that queue. */
static void sync_config(dtq_cron_pass *cp, char *const *index, int nindex) {
    dtq_ctx *ctx = cp->ctx;
    const dtq_config *cfg = ctx->cfg;
    char origin[600];
    dtq_argv a;
    if (!cfg->path && cfg->ncrons == 0) {
        cp->synced = 1; /* no file: nothing of ours can be in Redis */
        return;
    }
    config_origin(cfg, origin, sizeof(origin));
    for (int i = 0; i < cfg->ncrons; i++) {
        dtq_call_cron_set(&a, ctx->fn.cron_set, cfg->worker_id, &cfg->crons[i], origin);
        tag_queue(ctx, &a, cfg->crons[i].queue);
        sync_send(cp, &a);
    }
    if (!dtq_ctx_cluster(ctx)) {
        dtq_call_cron_sync(&a, ctx->fn.cron_sync, cfg->worker_id, origin, cfg, NULL);
        sync_send(cp, &a);
        return;
    }
    for (int i = 0; i < nindex; i++) {
        const char *q = index[i];
        dtq_call_cron_sync(&a, ctx->fn.cron_sync, cfg->worker_id, origin, cfg, q);
        tag_queue(ctx, &a, q);
        sync_send(cp, &a);
    }
    for (int i = 0; i < cfg->ncrons; i++) {
        const char *q = cfg->crons[i].queue;
        int seen = 0;
        for (int j = 0; j < nindex && !seen; j++) seen = !strcmp(index[j], q);
        for (int j = 0; j < i && !seen; j++) seen = !strcmp(cfg->crons[j].queue, q);
        if (seen) continue;
        dtq_call_cron_sync(&a, ctx->fn.cron_sync, cfg->worker_id, origin, cfg, q);
        tag_queue(ctx, &a, q);
        sync_send(cp, &a);
    }
}

/* The cluster layout's step, once the queue index is read: the sync if due, and when
 * leading one <ns>_cron_due per queue. */
static void cl_index_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_cron_pass *cp = cl_unwrap(priv);
    dtq_ctx *ctx;
    redisReply *reply = r;
    char **queues = NULL, *error = NULL;
    int nq = 0;
    DTQ_UNUSED(ac);
    if (!cp) return;
    ctx = cp->ctx;
    if (reply) queues = dtq_scope_index_names(reply, &nq, &error);
    if (!queues) {
        if (reply)
            dtq_error("cron: reading the queue index failed: %s",
                      error ? error : "unexpected reply");
        free(error);
        cp->inflight = 0;
        cp->full = 0;
        cp->soonest = 0;
        arm(cp, ctx->cfg->scheduler_interval_ms);
        return;
    }
    if (!cp->synced && cp->sync_pending == 0) sync_config(cp, queues, nq);
    cp->full = 0;
    cp->soonest = 0;
    if (!dtq_leader_leads(cp->leader) || nq == 0) {
        dtq_scope_names_free(queues, nq);
        cp->inflight = 0;
        arm(cp, ctx->cfg->scheduler_interval_ms);
        return;
    }
    cp->inflight = 1; /* held while the calls leave */
    for (int i = 0; i < nq; i++) {
        dtq_argv a;
        cl_call *c;
        char *tag = dtq_ctx_queue_prefix(ctx, queues[i]);
        if (!dtq_ctx_key_up(ctx, tag)) { /* a shard down: the next step tries it again */
            free(tag);
            continue;
        }
        free(tag);
        dtq_call_cron_due(&a, ctx->fn.cron_due);
        tag_queue(ctx, &a, queues[i]);
        c = cl_call_new(cp);
        if (dtq_ctx_command(ctx, due_cb, c, &a) == DTQ_OK)
            cp->inflight++;
        else
            free(c);
        dtq_argv_deinit(&a);
    }
    dtq_scope_names_free(queues, nq);
    step_reply_done(cp);
}

static void tick_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_cron_pass *cp = arg;
    dtq_ctx *ctx = cp->ctx;
    dtq_argv a;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (!cp->running || cp->inflight) return;
    if (!dtq_ctx_is_up(ctx)) {
        arm(cp, ctx->cfg->scheduler_interval_ms);
        return;
    }
    if (dtq_ctx_cluster(ctx)) {
        cl_call *c = cl_call_new(cp);
        dtq_scope_index_read(&a, ctx->cfg->ns);
        if (dtq_ctx_command(ctx, cl_index_cb, c, &a) == DTQ_OK) {
            cp->inflight = 1;
        } else {
            free(c);
            arm(cp, ctx->cfg->scheduler_interval_ms);
        }
        dtq_argv_deinit(&a);
        return;
    }
    if (!cp->synced && cp->sync_pending == 0) sync_config(cp, NULL, 0);
    if (!dtq_leader_leads(cp->leader)) {
        cp->full = 0;
        cp->soonest = 0;
        arm(cp, ctx->cfg->scheduler_interval_ms);
        return;
    }
    dtq_call_cron_due(&a, ctx->fn.cron_due);
    {
        cl_call *c = cl_call_new(cp);
        if (dtq_ctx_command(ctx, due_cb, c, &a) == DTQ_OK) {
            cp->inflight = 1;
        } else {
            free(c);
            arm(cp, ctx->cfg->scheduler_interval_ms);
        }
    }
    dtq_argv_deinit(&a);
}

dtq_cron_pass *dtq_cron_pass_new(dtq_ctx *ctx, const dtq_leader *leader) {
    dtq_cron_pass *cp = dtq_xcalloc(1, sizeof(*cp));
    cp->ctx = ctx;
    cp->leader = leader;
    cp->tick_ev = evtimer_new(ctx->base, tick_cb, cp);
    return cp;
}

void dtq_cron_pass_start(dtq_cron_pass *cp) {
    if (cp->running) return;
    cp->running = 1;
    arm(cp, 0);
}

void dtq_cron_pass_stop(dtq_cron_pass *cp) {
    cp->running = 0;
    evtimer_del(cp->tick_ev);
}

void dtq_cron_pass_connection_lost(dtq_cron_pass *cp) {
    /* Replies in flight never come (their callbacks get NULL): start over on the next
     * connection, the config's schedules written again (Redis may be a new one). */
    cp->gen++; /* the replies still to come (cluster layout) are ignored */
    cp->inflight = 0;
    cp->sync_pending = 0;
    cp->resync = 0;
    cp->synced = 0;
    evtimer_del(cp->tick_ev);
    arm(cp, cp->ctx->cfg->scheduler_interval_ms);
}

void dtq_cron_pass_config_changed(dtq_cron_pass *cp) {
    cp->synced = 0;
    if (cp->sync_pending) cp->resync = 1;
    if (cp->running && !cp->inflight) {
        evtimer_del(cp->tick_ev);
        arm(cp, 0);
    }
}

void dtq_cron_pass_free(dtq_cron_pass *cp) {
    if (!cp) return;
    event_free(cp->tick_ev);
    free(cp);
}
