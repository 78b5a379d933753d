/* heartbeat.h: the worker hash <prefix>:worker:<id> (EXPIRE 3x the interval) and
 * membership in <prefix>:workers. The lifecycle pushes the status down. */
#ifndef DTQ_HEARTBEAT_H
#define DTQ_HEARTBEAT_H

#include "ctx.h"

typedef struct dtq_heartbeat dtq_heartbeat;

dtq_heartbeat *dtq_heartbeat_new(dtq_ctx *ctx);
void dtq_heartbeat_free(dtq_heartbeat *hb);
/* Starts the periodic beat (idempotent), beating at once. */
void dtq_heartbeat_start(dtq_heartbeat *hb);
/* Sets the status written from now on ("running", "draining", "stopped": a static
 * string) and writes one beat now; cb (may be NULL) runs when Redis answered or the
 * write could not be sent. */
void dtq_heartbeat_set_status(dtq_heartbeat *hb, const char *status, void (*cb)(void *arg),
                              void *arg);

#endif
