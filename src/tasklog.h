/* tasklog.h: the ends of attempts once Redis has answered their finish or handback batch:
 * counted in the task's metrics cell (metrics.h) and logged, one structured line each
 * (dtq_log_fields): a success at debug, a retry, cancellation or hand-back at info, a dead
 * letter, a permanent failure without dead letter, or an end Redis did not record at warn.
 * Lines other than successes are rate-limited per (queue, task_type, class): at most
 * [log] task_lines_per_s in a second, then one summary line with the count of the lines
 * left out. */
#ifndef DTQ_TASKLOG_H
#define DTQ_TASKLOG_H

#include <hiredis/hiredis.h>

#include "ctx.h"
#include "finish_record.h"
#include "metrics.h"

/* The error as a log line carries it: its first line, at most this many bytes. */
#define DTQ_TASKLOG_ERROR_MAX 200

typedef struct dtq_tasklog dtq_tasklog;

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

#endif
