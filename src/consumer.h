/* consumer.h: reading work. One FCALL <ns>_fetch reads and claims up to the free slots in
 * strict priority order; when the streams are empty the `blk` connection waits in one
 * XREAD BLOCK; a reaper takes entries of lost workers (XAUTOCLAIM) every
 * visibility_timeout_s / 2. */
#ifndef DTQ_CONSUMER_H
#define DTQ_CONSUMER_H

#include "worker.h"

dtq_consumer *dtq_consumer_new(dtq_worker *w);
void dtq_consumer_free(dtq_consumer *c);
void dtq_consumer_start(dtq_consumer *c);
/* Stops reading (drain). */
void dtq_consumer_stop(dtq_consumer *c);
/* Slots were freed or the connection came back: fetch if there may be work. */
void dtq_consumer_kick(dtq_consumer *c);
/* True while a fetch or reap reply is outstanding: it may still hand over tasks. */
int dtq_consumer_busy(const dtq_consumer *c);
/* The served streams changed (reload) or were recreated. */
void dtq_consumer_reset(dtq_consumer *c);

#endif
