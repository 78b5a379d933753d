/* reaper.h: recovery of lost workers' attempts. Every visibility_timeout_s / 2 (and one
 * second after start, to recover a crash quickly) one FCALL <ns>_reap takes entries idle
 * longer than visibility_timeout_s from other consumers (XAUTOCLAIM) and adopts them
 * (attempt + 1) or settles them; adopted tasks run here. */
#ifndef DTQ_REAPER_H
#define DTQ_REAPER_H

#include "ctx.h"
#include "executor.h"
#include "finisher.h"

typedef struct dtq_reaper dtq_reaper;

/* While `fin` reports refused finishes, nothing is reaped. */
dtq_reaper *dtq_reaper_new(dtq_ctx *ctx, dtq_executor *ex, const dtq_finisher *fin);
void dtq_reaper_free(dtq_reaper *r);
void dtq_reaper_start(dtq_reaper *r);
void dtq_reaper_stop(dtq_reaper *r);
/* After a reconnect: reap nothing for visibility_timeout_s. While Redis was away no worker
 * could renew its claims, so idle entries say nothing about whether their workers live;
 * the live ones renew once they are back (they may reconnect later than this one). */
void dtq_reaper_reconnected(dtq_reaper *r);
/* Entries pending for this worker that it neither runs nor holds a result for: after a
 * reconnect they were claimed by a fetch or reap whose reply was lost, and run here at the
 * same attempt (they never started); at the first connect of a process they belong to a
 * crashed predecessor with the same worker_id, and are adopted at once as a lost
 * worker's. Must be sent before the first fetch on the connection. */
void dtq_reaper_recover_own(dtq_reaper *r, int predecessor_crashed);
/* The cluster layout: recovery is per queue. dtq_reaper_recover_own wants it for every
 * served queue, dtq_reaper_recover_queue for one (its node's link came up again); it is
 * sent by dtq_reaper_recover_pending for each queue that wants it once no fetch or reap of
 * the queue is in flight and its slot is up (ctx.h dtq_qstate). */
void dtq_reaper_recover_queue(dtq_reaper *r, int q, int predecessor_crashed);
void dtq_reaper_recover_pending(dtq_reaper *r);
/* True while a reap or recover reply is outstanding: it may still hand over tasks. */
int dtq_reaper_busy(const dtq_reaper *r);

#endif
