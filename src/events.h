/* events.h: lifecycle event JSON (SPEC 10) built by the daemon for its hot path; the
 * Functions build the events of transitions that happen inside Redis. */
#ifndef DTQ_EVENTS_H
#define DTQ_EVENTS_H

#include <stdint.h>

#include "config.h"

/* Whether `type` is published at `level`. */
int dtq_events_wanted(enum dtq_events_level level, const char *type);

/* Returns caller-owned JSON, or NULL when level filters the event out. metadata_json is
 * an object in JSON text or NULL. */
char *dtq_events_build(enum dtq_events_level level, int64_t ts_ms, const char *type,
                       const char *task_id, const char *queue, const char *task_type,
                       int64_t attempt, const char *worker_id, const char *metadata_json);

#endif
