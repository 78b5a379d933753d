/* heartbeat.h: the worker hash <prefix>:worker:<id> (EXPIRE 3x the interval), membership
 * in <prefix>:workers, and XCLAIM IDLE 0 of in-flight entries so that the reapers of
 * other daemons leave live long tasks alone. */
#ifndef DTQ_HEARTBEAT_H
#define DTQ_HEARTBEAT_H

#include "worker.h"

dtq_heartbeat *dtq_heartbeat_new(dtq_worker *w);
void dtq_heartbeat_free(dtq_heartbeat *hb);
void dtq_heartbeat_start(dtq_heartbeat *hb);
/* Writes one heartbeat now with the given status ("running", "draining", "stopped");
 * cb (may be NULL) runs when Redis answered or the write failed. */
void dtq_heartbeat_beat(dtq_heartbeat *hb, const char *status, void (*cb)(void *arg), void *arg);
void dtq_heartbeat_stop(dtq_heartbeat *hb);

#endif
