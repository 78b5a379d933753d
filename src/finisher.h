/* finisher.h: writes the ends of attempts to Redis. Finish records (and, on a drain,
 * hand-back records) queue up here and leave in batches, one FCALL <ns>_finish or
 * <ns>_handback per batch and one batch in flight at a time, so batches grow under load
 * and stay small when idle. A batch that does not make it (no reply, or an error) goes
 * back to the head of the queue and is sent again: the Functions guard on the attempt,
 * so a batch that did land answers 'stale' the second time and acknowledges nothing. */
#ifndef DTQ_FINISHER_H
#define DTQ_FINISHER_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

#include "ctx.h"
#include "finish_record.h"

typedef struct dtq_finisher dtq_finisher;

dtq_finisher *dtq_finisher_new(dtq_ctx *ctx);
void dtq_finisher_free(dtq_finisher *f);
/* Queues a record (takes ownership) and sends what can be sent. */
void dtq_finisher_add(dtq_finisher *f, dtq_finish_record *rec);
/* Sends queued records (after a reconnect, or when a batch returns). */
void dtq_finisher_flush(dtq_finisher *f);
/* True while Redis refuses finish batches (the last one came back with an error and its
 * records wait): take no new work meanwhile. */
int dtq_finisher_refused(const dtq_finisher *f);
/* Calls fn for the entry of every record not yet written (queued or in flight): their
 * claims must be kept until Redis has the results. */
void dtq_finisher_each_entry(const dtq_finisher *f,
                             void (*fn)(const char *stream, const char *entry_id, void *arg),
                             void *arg);
/* True when nothing is queued or in flight. */
int dtq_finisher_idle(const dtq_finisher *f);

#endif
