/* consumer.h: reading new work. One FCALL <ns>_fetch reads and claims up to the free
 * slots in strict priority order; when the streams are empty the `blk` connection waits in
 * one XREAD BLOCK. At most one fetch is in flight (in the cluster layout: one per shard,
 * the free slots split between them); completions that free slots while it is out are
 * picked up by the next one, so reads batch themselves under load. */
#ifndef DTQ_CONSUMER_H
#define DTQ_CONSUMER_H

#include "ctx.h"
#include "executor.h"
#include "finisher.h"

typedef struct dtq_consumer dtq_consumer;

/* While `fin` reports refused finishes, nothing new is fetched. */
dtq_consumer *dtq_consumer_new(dtq_ctx *ctx, dtq_executor *ex, const dtq_finisher *fin);
void dtq_consumer_free(dtq_consumer *c);
void dtq_consumer_start(dtq_consumer *c);
/* Stops reading (drain). */
void dtq_consumer_stop(dtq_consumer *c);
/* Slots were freed, the connection came back, or the served streams changed: fetch if
 * there may be work. NULL-safe. */
void dtq_consumer_kick(dtq_consumer *c);
/* Forgets that the streams looked empty (reload) and fetches. */
void dtq_consumer_reset(dtq_consumer *c);
/* True while a fetch reply is outstanding: it may still hand over tasks. */
int dtq_consumer_busy(const dtq_consumer *c);

#endif
