/* ctx.h: what every subsystem of the daemon shares, and nothing that decides anything:
 * the config and handler registry in force, the event base, the two Redis connections
 * with the command gate, key and Function names, the stream table, counters and gauges,
 * and the hooks through which subsystems tell the lifecycle (worker.c) what happened.
 * Dependencies flow one way: subsystems include this, worker.c includes them.
 *
 * Two connections: `cmd` carries every command, pipelined; `blk` only ever waits in
 * XREAD BLOCK while the served streams are empty, so waiting never stalls the pipeline.
 * In the cluster layout (a redis-cluster:// URL) one router, `rc` (rcluster.h), replaces
 * both: every command goes to the primary of its first key's slot, so each call is keyed
 * by its tag ("{ns:q}" for a queue's, "{ns}", ctx->gtag, for global state). */
#ifndef DTQ_CTX_H
#define DTQ_CTX_H

#include <stdint.h>

#include "config.h"
#include "rconn.h"
#include "registry.h"
#include "streams.h"

struct event_base;
struct dtq_metrics;
struct dtq_rcluster;

typedef struct dtq_counters {
    uint64_t processed; /* attempts finished, any outcome */
    uint64_t succeeded;
    uint64_t failed;  /* dead-lettered or failed */
    uint64_t retried; /* retries scheduled */
    uint64_t finish_batches;
} dtq_counters;

/* The outcomes of one queue's attempts in this process, for dashboards' per-queue rates:
 * the heartbeat writes them as fields q:<queue>:succeeded|failed|retried of the worker
 * hash, so they cost nothing in Redis per task. An entry is added the first time an attempt
 * of the queue ends here and kept for the life of the process (a reload that stops serving
 * the queue keeps its counts). */
typedef struct dtq_queue_counters {
    char *queue;
    uint64_t succeeded;
    uint64_t failed;  /* dead-lettered or failed */
    uint64_t retried; /* retries scheduled */
} dtq_queue_counters;

/* Written by the subsystem named in each comment, read by heartbeat and HTTP. */
typedef struct dtq_gauges {
    int active_tasks;     /* executor */
    int scheduler_leader; /* leader.c, for /metrics (subsystems ask dtq_leader_leads) */
    int64_t scheduled;    /* scheduler: ZCARD of the schedule at its last pass */
    int64_t claimed;      /* scheduler: ZCARD of the claimed set at its last pass */
    uint64_t promoted;    /* scheduler: entries written by this daemon's passes */
} dtq_gauges;

/* The cluster layout: what is in flight per served queue, so that a queue's recovery
 * (reaper.c) is never sent while a fetch or reap of it may still hand over claims (the
 * recovery would take them as lost: run twice), and no fetch or reap of it goes out
 * while its recovery is wanted or in flight. */
typedef struct dtq_qstate {
    char *queue;
    int fetching, reaping, recovering, need_recover;
    int recover_crashed; /* the wanted recovery is the first after a start (reaper.c) */
} dtq_qstate;

/* Set by worker.c; every hook may be NULL. */
typedef struct dtq_hooks {
    void (*slots_freed)(void *arg); /* an execution slot became free */
    void (*settled)(void *arg);     /* work that a drain waits for may have ended */
    void (*queue_quiet)(void *arg); /* a queue's fetch or reap is over (cluster layout) */
    void *arg;
} dtq_hooks;

/* Function names "<ns>_<name>", built once (the namespace never changes on reload). */
typedef struct dtq_functions {
    char *fetch, *reap, *recover, *deregister, *finish, *handback, *worker_event, *progress;
    char *sched_claim, *sched_promote, *lock_refresh, *lock_release;
    char *cron_due, *cron_fire, *cron_set, *cron_sync;
} dtq_functions;

typedef struct dtq_ctx {
    dtq_config *cfg; /* swapped whole on SIGHUP, with the registry */
    dtq_handler_registry *handlers;
    struct event_base *base;
    dtq_rconn *cmd;
    dtq_rconn *blk;
    struct dtq_rcluster *rc; /* the cluster layout: replaces cmd and blk (NULL otherwise) */
    int ready;               /* the command gate: setup done on the current `cmd` connection */
    char *prefix;            /* key prefix: ns or {ns}, for the dtq_key_* constructors (keys.h);
                              * in the cluster layout {ns}, the global keys' */
    char *gtag;              /* the cluster layout: "{ns}", the tag of global calls; else NULL */
    char *policy_json;       /* claim-time max_attempts/timeout_ms table for the Functions */
    dtq_streams streams;
    unsigned streams_gen; /* bumped whenever the stream table is rebuilt (reload) */
    dtq_qstate *qstate;   /* the cluster layout: per served queue, as streams (kept by name
                           * across a reload) */
    dtq_functions fn;
    dtq_counters counters;
    dtq_queue_counters *qcounters; /* per queue, in the order they were first counted */
    int nqcounters;
    struct dtq_metrics *metrics; /* labelled task metrics for /metrics (metrics.h) */
    struct dtq_pools *pools;     /* the executor's [pool:*] (pool.h), for /metrics, /readyz and
                                  * the heartbeat */
    dtq_gauges gauges;
    dtq_hooks hooks;
    char hostname[256];
    int64_t started_at_ms;
} dtq_ctx;

/* Takes ownership of cfg and reg; the connections are attached by the caller. cluster: the
 * cluster layout's keys (the router is attached by the caller too). */
dtq_ctx *dtq_ctx_new(dtq_config *cfg, dtq_handler_registry *reg, struct event_base *base,
                     int cluster);
/* Frees the connections too (pending callbacks run with NULL replies first). */
void dtq_ctx_free(dtq_ctx *ctx);
/* Swaps in a reloaded config and registry (owned from now on) and rebuilds what derives
 * from them. Plugins of the old registry stay mapped: calls may still run in them. */
void dtq_ctx_set_config(dtq_ctx *ctx, dtq_config *cfg, dtq_handler_registry *reg);

/* The counters of `queue`, added (all zero) the first time. Borrowed: valid until the
 * next call (the table may move) or dtq_ctx_free. */
dtq_queue_counters *dtq_ctx_queue_counters(dtq_ctx *ctx, const char *queue);
/* True when the gate is open: connected and set up. */
int dtq_ctx_is_up(const dtq_ctx *ctx);
/* Sends a command on `cmd` through the gate; DTQ_ERR (cb not called) when it is closed.
 * In the cluster layout it goes to the primary of its key's slot (rcluster.h). */
int dtq_ctx_command(dtq_ctx *ctx, redisCallbackFn *cb, void *priv, const dtq_argv *a);
/* The same, routed by the slot of `key` in the cluster layout (a keyless command that
 * must reach a given queue's node: WAIT, TIME); on `cmd` otherwise. */
int dtq_ctx_command_at(dtq_ctx *ctx, const char *key, redisCallbackFn *cb, void *priv,
                       const dtq_argv *a);
static inline int dtq_ctx_cluster(const dtq_ctx *ctx) {
    return ctx->rc != NULL;
}
/* The prefix of queue's keys: "{ns:q}" in the cluster layout, ctx->prefix otherwise.
 * Caller-owned. */
char *dtq_ctx_queue_prefix(const dtq_ctx *ctx, const char *queue);
/* The tag of served queue q's calls ("{ns:q}"), NULL in the single layout. */
static inline const char *dtq_ctx_qtag(const dtq_ctx *ctx, int q) {
    return ctx->streams.tags ? ctx->streams.tags[q] : NULL;
}
/* 1 when served queue q can be reached: always in the single layout; in the cluster one
 * when its slot has a primary whose link is up (dtq_rcluster_slot_up). */
int dtq_ctx_queue_up(const dtq_ctx *ctx, int q);
/* The shard of served queue q in the cluster layout: the router's number for the primary
 * of its slot (dtq_rcluster_slot_node), -1 when it has none; 0 in the single layout. */
int dtq_ctx_queue_node(const dtq_ctx *ctx, int q);
/* 1 when the slot of key (a tag, or any key with one) can be reached: always in the
 * single layout; in the cluster one when its primary's link is up. The passes over every
 * queue of the index skip the queues it says no for, so that a shard down does not hold up
 * the others (a command for it would wait for its link, rcluster.h). */
int dtq_ctx_key_up(const dtq_ctx *ctx, const char *key);
/* The state of served queue `queue` (cluster layout), NULL when not served. */
dtq_qstate *dtq_ctx_qstate(dtq_ctx *ctx, const char *queue);
/* Served queue q may be fetched or reaped: up, and no recovery wanted or in flight. */
int dtq_ctx_queue_fetchable(const dtq_ctx *ctx, int q);
/* The served queues whose slot cannot be reached, as "q (slot s), ..." into buf; returns
 * how many (0 in the single layout). */
int dtq_ctx_unreachable(const dtq_ctx *ctx, char *buf, size_t size);

static inline void dtq_ctx_slots_freed(dtq_ctx *ctx) {
    if (ctx->hooks.slots_freed) ctx->hooks.slots_freed(ctx->hooks.arg);
}
static inline void dtq_ctx_settled(dtq_ctx *ctx) {
    if (ctx->hooks.settled) ctx->hooks.settled(ctx->hooks.arg);
}
static inline void dtq_ctx_queue_quiet(dtq_ctx *ctx) {
    if (ctx->hooks.queue_quiet) ctx->hooks.queue_quiet(ctx->hooks.arg);
}

#endif
