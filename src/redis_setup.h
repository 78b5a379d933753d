/* redis_setup.h: what Redis must hold before the daemon serves, set up after every
 * (re)connect, in both layouts: the Functions library (FCALL_RO <ns>_version, then
 * FUNCTION LOAD REPLACE unless this build's library is installed, or a wait for `dtqctl
 * functions install` when the ACL refuses the load), the eviction policy (allkeys-* keeps
 * the daemon from serving), the namespace's layout marker (<ns>_layout: a wrong layout
 * stops the daemon), the published config (<prefix>:config, the [queue:NAME] modes), the
 * queue index and the consumer groups. A single Redis: one round of pipelined steps on
 * `cmd`. The cluster layout: the library and policy on every primary first, then the rest
 * through the router; a primary whose link comes up later gets its own library check
 * (dtq_redis_setup_check_node). A round that fails tries again 5 s later. */
#ifndef DTQ_REDIS_SETUP_H
#define DTQ_REDIS_SETUP_H

#include "ctx.h"

typedef struct dtq_redis_setup dtq_redis_setup;

/* What the lifecycle is told. */
typedef struct dtq_redis_setup_hooks {
    void (*done)(void *arg); /* the round is complete: the gate may open */
    /* the namespace's marker names another layout (`why`: the Function's message): 1 when
     * the daemon serves on (it has served: the marker was changed behind it), 0 when it
     * stops (it is starting) */
    int (*wrong_layout)(void *arg, const char *why);
    void *arg;
} dtq_redis_setup_hooks;

dtq_redis_setup *dtq_redis_setup_new(dtq_ctx *ctx, const dtq_redis_setup_hooks *hooks);
/* After the connections (their pending callbacks may still reach it). */
void dtq_redis_setup_free(dtq_redis_setup *rs);
/* A new round (closes the gate, ctx->ready = 0); a round still in flight is ignored. */
void dtq_redis_setup_start(dtq_redis_setup *rs);
/* SIGHUP: the config and the queues' modes published again, outside any round. */
void dtq_redis_setup_publish(dtq_redis_setup *rs);
/* The cluster layout: the library check of the primary serving slot, whose link came up
 * after the first setup (rcluster's node hook). */
void dtq_redis_setup_check_node(dtq_redis_setup *rs, int slot);

#endif
