/* web_history.h: the samples behind dtq-web's rates and plots. Every [web]
 * sample_interval_s the server reads each queue's depth and pending count and every live
 * worker's heartbeat hash, and feeds them here. The workers count outcomes per queue since
 * their process started (q:<queue>:succeeded|failed|retried in the hash, written once per
 * heartbeat); this module turns those cumulative counters into outcomes per sample
 * interval, per queue, following each worker process by (worker id, started_at) so that a
 * restart or a worker that goes away neither double-counts nor goes negative. The last
 * `capacity` samples are kept in a ring. Pure: no Redis, no event loop, no clock. */
#ifndef DTQ_WEB_HISTORY_H
#define DTQ_WEB_HISTORY_H

#include <stdint.h>

#define DTQ_WEB_HISTORY_QUEUES_MAX 4096 /* queue names followed; more are ignored */

typedef struct dtq_web_counts {
    int64_t succeeded;
    int64_t failed; /* dead-lettered or failed */
    int64_t retried;
} dtq_web_counts;

typedef struct dtq_web_history dtq_web_history;

dtq_web_history *dtq_web_history_new(int capacity);
void dtq_web_history_free(dtq_web_history *h); /* NULL-safe */

/* A sample is begin, any number of gauge and worker calls, then end. The first sample
 * after new() is the baseline: it records gauges, and the workers' counters only as the
 * point later deltas start from. */
void dtq_web_history_begin(dtq_web_history *h, int64_t ts_ms);
/* The queue's entries not yet delivered (depth) and delivered, not acknowledged (pending). */
void dtq_web_history_gauge(dtq_web_history *h, const char *queue, int64_t depth, int64_t pending);
/* One live worker's cumulative counters for one queue, as its hash holds them. Call it
 * with queue NULL (cumulative unused) first for every live worker, also one without
 * counters yet, so that counts it makes later are not taken for old ones. */
void dtq_web_history_worker(dtq_web_history *h, const char *worker_id, int64_t started_at_ms,
                            const char *queue, const dtq_web_counts *cumulative);
/* Commits the sample; workers it did not mention are forgotten. */
void dtq_web_history_end(dtq_web_history *h);

/* Number of committed samples held (at most capacity). */
int dtq_web_history_len(const dtq_web_history *h);
/* Sample i (0 = the oldest held) for `queue`, or summed over every queue with NULL: its
 * time, depth and pending (-1 when the queue had no gauge in it) and the outcomes counted
 * since the sample before. 0 on success, -1 when i is out of range. */
int dtq_web_history_point(const dtq_web_history *h, int i, const char *queue, int64_t *ts_ms,
                          int64_t *depth, int64_t *pending, dtq_web_counts *delta);
/* Outcomes per minute over the last window_ms of samples (queue NULL = every queue), and
 * in *span_ms (NULL: not wanted) the time the samples used cover, at most the window
 * unless two samples are further apart: 0, or -1 when fewer than two samples are held. */
int dtq_web_history_rate(const dtq_web_history *h, const char *queue, int64_t window_ms,
                         double *succeeded, double *failed, double *retried, int64_t *span_ms);
/* Outcomes counted since the baseline (queue NULL = every queue). */
void dtq_web_history_total(const dtq_web_history *h, const char *queue, dtq_web_counts *out);
/* 1 when the queue name has appeared in a sample. */
int dtq_web_history_knows(const dtq_web_history *h, const char *queue);

#endif
