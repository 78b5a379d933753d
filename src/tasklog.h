/* tasklog.h: the ends of attempts once Redis has answered their finish or handback batch:
 * counted in the task's metrics cell (metrics.h) and logged, one structured line each
 * (dtq_log_fields): a success at debug, a retry, cancellation or hand-back at info, a dead
 * letter, a permanent failure without dead letter, or an end Redis did not record at warn.
 * Lines other than successes are rate-limited per (queue, task_type, class): at most
 * [log] task_lines_per_s in a second, then one summary line with the count of the lines
 * left out. A hand-back of a type this worker has no handler for (a rolling deploy: every
 * bounce of every such task) is logged once per (queue, task_type) per
 * DTQ_TASKLOG_BOUNCE_INTERVAL_MS instead: the first bounce at once, then one line with the
 * count of the bounces in the interval. */
#ifndef DTQ_TASKLOG_H
#define DTQ_TASKLOG_H

#include <hiredis/hiredis.h>

#include "ctx.h"
#include "finish_record.h"
#include "metrics.h"

/* The error as a log line carries it: its first line, at most this many bytes. */
#define DTQ_TASKLOG_ERROR_MAX 200

/* The interval of the hand-back lines of one (queue, task_type). */
#define DTQ_TASKLOG_BOUNCE_INTERVAL_MS 60000
/* (queue, task_type) pairs whose bounces are counted at once; one more evicts the oldest
 * (its count written first). */
#define DTQ_TASKLOG_BOUNCE_TYPES 64

typedef struct dtq_tasklog dtq_tasklog;

/* The bounces of one (queue, task_type) in its current interval. */
typedef struct dtq_bounce {
    char *queue, *task_type; /* NULL: a free entry */
    int64_t since_ms;        /* monotonic start of the interval */
    uint64_t count;          /* bounces in it not yet written */
} dtq_bounce;

dtq_tasklog *dtq_tasklog_new(dtq_ctx *ctx);
/* Writes the summaries still due, then frees. */
void dtq_tasklog_free(dtq_tasklog *tl);
/* A batch's records (the list, in order) and Redis's reply to it: one word per record. */
void dtq_tasklog_verdicts(dtq_tasklog *tl, const dtq_finish_record *list, const redisReply *reply);

/* The rate gate of one key, pure, for tests. A window is one second from its first line.
 * dtq_line_limit_admit: 1 when a line of `level` at now_ms may be written (per_s <= 0: no
 * limit), 0 when it is counted as suppressed; when an earlier window ended with lines
 * suppressed, *summary gets their count (and *summary_level their highest level), else 0,
 * and the summary is to be written before the line. dtq_line_limit_expire: the same
 * summary, without a new line, once the window is over (0 when none is due). */
int dtq_line_limit_admit(dtq_line_limit *l, int64_t now_ms, int64_t per_s, int level,
                         uint64_t *summary, int *summary_level);
uint64_t dtq_line_limit_expire(dtq_line_limit *l, int64_t now_ms, int *summary_level);

/* The bounce gate, pure, for tests, over a table of DTQ_TASKLOG_BOUNCE_TYPES entries.
 * dtq_bounce_note counts a bounce of (queue, task_type) at now_ms: 1 when it is the first
 * of an interval (to be written at once), else 0. dtq_bounce_due hands out, one at a time,
 * an entry whose interval is over with bounces not yet written: *count gets them, the
 * entry is reset and its names are returned through queue/task_type (valid until the next
 * call); 0 when none is due (with flush set, every entry with a count is due). */
int dtq_bounce_note(dtq_bounce *table, const char *queue, const char *task_type, int64_t now_ms);
int dtq_bounce_due(dtq_bounce *table, int64_t now_ms, int flush, const char **queue,
                   const char **task_type, uint64_t *count);
void dtq_bounce_clear(dtq_bounce *table);

#endif
