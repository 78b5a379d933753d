/* metrics.h: the labelled task metrics of this process, served on /metrics (http.c):
 * counters and histograms per (queue, task_type) cell. Label values come from the
 * configuration only, never from a task: the queues and handler task types of every
 * configuration loaded since start (a reload adds, never removes, so counters never go
 * back), plus DTQ_METRICS_OTHER for a task whose queue or type is not among them. A task's
 * cell is found once, when it is claimed (dtq_metrics_cell_for), and counting is then an
 * array increment: no string is hashed or compared per outcome. */
#ifndef DTQ_METRICS_H
#define DTQ_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "registry.h"

#define DTQ_METRICS_OTHER "_other"

/* How an attempt ended, as Redis's reply to the finish (or handback) said. */
enum dtq_metric_outcome {
    DTQ_MO_SUCCEEDED,
    DTQ_MO_RETRIED,       /* retrying: a retry is scheduled */
    DTQ_MO_DEAD_LETTERED, /* dead_lettered */
    DTQ_MO_FAILED,        /* failed: permanent, [limits] dlq_enabled = false */
    DTQ_MO_CANCELLED,
    DTQ_MO_HANDED_BACK, /* handback answered queued */
    DTQ_MO_DEFERRED,    /* not run here (unknown task type, hand_back): pending again */
    DTQ_MO_STALE,       /* stale, gone or quarantined: the end was not recorded */
    DTQ_MO_COUNT
};
const char *dtq_metric_outcome_name(enum dtq_metric_outcome o);
/* The outcome of a reply word of <ns>_finish (handback 0) or <ns>_handback (1); -1 for a
 * word neither replies. */
int dtq_metric_outcome_from_verdict(const char *word, int handback);

/* Failure classes: the names dtq_retry_class_to_string() gives, then DTQ_METRICS_OTHER for
 * any other (a class added later is counted there until it is listed here). */
#define DTQ_METRICS_NCLASSES 10
int dtq_metrics_class_index(const char *cls);
const char *dtq_metrics_class_name(int i);

/* Histogram bucket bounds (le), in microseconds; the +Inf bucket comes after them. */
#define DTQ_METRICS_NBUCKETS 17
extern const int64_t dtq_metrics_bucket_us[DTQ_METRICS_NBUCKETS];

typedef struct dtq_histogram {
    uint64_t buckets[DTQ_METRICS_NBUCKETS + 1]; /* per bucket, not cumulative; last: +Inf */
    uint64_t sum_us;
    uint64_t count;
} dtq_histogram;
void dtq_histogram_observe(dtq_histogram *h, int64_t us);

/* The line-rate state of one (queue, task_type, class) key, for tasklog.c. */
typedef struct dtq_line_limit {
    int64_t window_ms;   /* monotonic start of the current one-second window */
    int64_t lines;       /* written in it */
    uint64_t suppressed; /* not written since the last summary */
    int level;           /* the highest level among them */
} dtq_line_limit;
/* Keys per cell: retries by failure class, permanent failures (dead-lettered or failed) by
 * failure class, so that a flood of retries never hides a dead letter; then cancelled,
 * interrupted (handed back) and stale. */
#define DTQ_LIMIT_PERMANENT DTQ_METRICS_NCLASSES /* + class index */
#define DTQ_LIMIT_CANCELLED (2 * DTQ_METRICS_NCLASSES)
#define DTQ_LIMIT_INTERRUPTED (2 * DTQ_METRICS_NCLASSES + 1)
#define DTQ_LIMIT_STALE (2 * DTQ_METRICS_NCLASSES + 2)
#define DTQ_LIMIT_KEYS (2 * DTQ_METRICS_NCLASSES + 3)

typedef struct dtq_metrics_cell {
    const char *queue;     /* label values, owned by the metrics tables */
    const char *task_type; /* a handler's task type or DTQ_METRICS_OTHER */
    dtq_histogram *wait;   /* the queue's */
    uint64_t outcomes[DTQ_MO_COUNT];
    uint64_t failures[DTQ_METRICS_NCLASSES]; /* retried, dead-lettered and failed, by class */
    dtq_histogram duration;
    dtq_line_limit limits[DTQ_LIMIT_KEYS];
} dtq_metrics_cell;

typedef struct dtq_metrics dtq_metrics;

dtq_metrics *dtq_metrics_new(void);
void dtq_metrics_free(dtq_metrics *m);
/* Adds the queues and handler task types of a (re)loaded configuration, and maps the
 * entries of its registry (reg->entries[i]) to their task types. */
void dtq_metrics_configure(dtq_metrics *m, const dtq_config *cfg, const dtq_handler_registry *reg);
/* The cell of a claimed task: its queue name (a scan of the few configured queues) and the
 * index of its handler in the registry last configured (-1: no handler). Valid, at the
 * same address, for the life of m. */
dtq_metrics_cell *dtq_metrics_cell_for(dtq_metrics *m, const char *queue, int entry);
/* The cell of (queue, task_type) for a task type a pool serves: types its processes
 * announce, which no config section names (bounded by the pools' hellos). */
dtq_metrics_cell *dtq_metrics_cell_for_type(dtq_metrics *m, const char *queue,
                                            const char *task_type);
/* Calls fn for every cell counted so far. */
void dtq_metrics_each_cell(dtq_metrics *m, void (*fn)(dtq_metrics_cell *c, void *arg), void *arg);
/* Writes the families dtq_tasks_total, dtq_task_failures_total, dtq_task_duration_seconds
 * and dtq_task_wait_seconds in Prometheus' text format: every configured (queue,
 * task_type) from the start (zeros), a DTQ_METRICS_OTHER one once counted. */
void dtq_metrics_render(const dtq_metrics *m, FILE *out);

#endif
