/* worker.h: the daemon's lifecycle, starting -> running -> draining -> stopped. Builds
 * the shared context (ctx.h) and the subsystems on it, has Redis set up after every
 * (re)connect (redis_setup.h) and serves once it is, turns signals into drain and reload,
 * and decides when the process may exit. Subsystems never call into this module: they
 * report through the ctx hooks, or hooks of their own (redis_setup.h, leader.h). */
#ifndef DTQ_WORKER_H
#define DTQ_WORKER_H

#include <stddef.h>

#include "config.h"

typedef struct dtq_worker dtq_worker;

/* Takes ownership of cfg on success. NULL (err filled, cfg still the caller's) when a
 * handler cannot be loaded, the URL is bad, or the HTTP address cannot be bound. */
dtq_worker *dtq_worker_new(dtq_config *cfg, char *err, size_t errlen);
/* Runs the loop until stopped; returns the process exit code. */
int dtq_worker_run(dtq_worker *w);
void dtq_worker_free(dtq_worker *w);

#endif
