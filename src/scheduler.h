/* scheduler.h: the retry/delay scheduler. Runs in every daemon, acts only while holding
 * the leader lock (leader.h), which it tries (takes or refreshes) before every pass and
 * releases on stop. A pass claims due members
 * (schedule -> claimed) and promotes them into their streams; a full batch is followed at
 * once by another pass. */
#ifndef DTQ_SCHEDULER_H
#define DTQ_SCHEDULER_H

#include <stdint.h>

#include "ctx.h"
#include "leader.h"

typedef struct dtq_scheduler dtq_scheduler;

/* Its gauges live in ctx->gauges. leader: borrowed, outlives the scheduler. */
dtq_scheduler *dtq_scheduler_new(dtq_ctx *ctx, dtq_leader *leader);
void dtq_scheduler_free(dtq_scheduler *s);
void dtq_scheduler_start(dtq_scheduler *s);
/* Stops passes and releases the lock if held. */
void dtq_scheduler_stop(dtq_scheduler *s);
/* The connection dropped: leadership is lost (a leader must not act on a lock it can no
 * longer refresh) and the pass in flight forgotten. */
void dtq_scheduler_connection_lost(dtq_scheduler *s);

#endif
