/* lease.h: keeps the claims of the attempts running here, and of those whose results
 * wait in the finisher. Every heartbeat interval it re-claims their entries (XCLAIM ... IDLE 0
 * JUSTID, one call per stream), so that other daemons' reapers leave live long tasks alone, and
 * asks whether any was cancelled (cancel_requested set by <ns>_cancel), which the executor then
 * stops. */
#ifndef DTQ_LEASE_H
#define DTQ_LEASE_H

#include "ctx.h"
#include "executor.h"
#include "finisher.h"

typedef struct dtq_lease dtq_lease;

dtq_lease *dtq_lease_new(dtq_ctx *ctx, dtq_executor *ex, dtq_finisher *fin);
void dtq_lease_free(dtq_lease *l);
/* Starts the periodic renewal, renewing at once; called after every (re)connect, so that
 * claims left idle while Redis was away are renewed as soon as it is back. */
void dtq_lease_start(dtq_lease *l);

#endif
