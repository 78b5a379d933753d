/* task.h: a claimed task as the daemon holds it while it runs, decoded from the claim
 * reply of the fetch and reap Functions, plus the status names of SPEC 3.
 * Checklist: statuses must match lua/lib/task.lua and SPEC 3. */
#ifndef DTQ_TASK_H
#define DTQ_TASK_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

typedef struct dtq_task {
    char *stream;   /* stream key of the entry carrying this attempt */
    char *entry_id; /* that entry's id */
    char *id;       /* task id */
    char *queue;
    char *task_type;
    char *payload;        /* JSON text, NUL-terminated */
    size_t payload_len;   /* bytes */
    int64_t attempt;      /* the attempt being run, 1-based */
    int64_t max_attempts; /* as resolved at claim, the value every later decision uses */
    int64_t timeout_ms;   /* as resolved at claim */
    int lean;             /* a lean task (reference 4.3): its entry alone, no task hash */
    char *parent_results; /* a released waiter's: its parents' results (a JSON object), or NULL */
    size_t parent_results_len;
} dtq_task;

/* The bound of attempt and timeout_ms (2^53, the Functions' integers). */
#define DTQ_TASK_INT_MAX ((int64_t)1 << 53)

/* Workflow bounds, the Functions' (lua/fn/batch.lua, through CONST): the most tasks one
 * <ns>_batch or <ns>_chain call takes (dtqctl sends a larger batch in calls of this many),
 * and the most batches one <ns>_batch_list answers. */
#define DTQ_GROUP_MAX 10000
#define DTQ_BATCH_LIST_MAX 200

/* Decodes one claimed-task array; NULL (with err filled) when it is malformed: not an array
 * of 9 (or of 10, the last 1 for a lean task, or of 11, a released waiter's: 0 and its
 * parent_results), a field of the wrong type, or attempt, max_attempts
 * or timeout_ms outside the Functions' bounds ([1, 2^53], [1, DTQ_MAX_ATTEMPTS], [1, 2^53]). The
 * reply is borrowed; the task is caller-owned (dtq_task_free). */
dtq_task *dtq_task_from_reply(const redisReply *r, char *err, size_t errlen);
void dtq_task_free(dtq_task *t);

/* The shape of the fetch Function's reply, {claimed, block, read, lean, full}: claimed an
 * array (of claimed tasks, each decoded on its own), block an array of stream key / last id
 * string pairs (where to wait when idle), read an integer, lean and full arrays (lean-claims
 * and full-claims, decoded by dtq_lean_claims_decode and dtq_full_claims_decode; a library
 * older than them answers without them). 1 when r has it. */
int dtq_fetch_reply_ok(const redisReply *r);

/* The fetch reply's lean-claims (r->element[3], NULL when absent): flat groups, one per
 * stream, `stream, queue, band, m` then m times `entry_id, task_type, payload,
 * max_attempts, timeout_ms` (reference 5.4). Each task, decoded as a lean claim at attempt 1
 * with the id <queue>:p<band>:<entry_id>, is handed to fn (which owns it) in order. Returns
 * the number of tasks, or -1 (err filled) at the first malformed group: the tasks before it
 * were handed over, nothing after it is. */
int dtq_lean_claims_decode(const redisReply *r, void (*fn)(dtq_task *t, void *arg), void *arg,
                           char *err, size_t errlen);
/* The fetch reply's full-claims (r->element[4], NULL when absent): flat groups, one per
 * stream, `stream, queue, m` then m times `entry_id, task_id, task_type, payload, attempt,
 * max_attempts, timeout_ms` (reference 5.4), each a full task's claim with the bounds of
 * dtq_task_from_reply. Handed to fn and counted as dtq_lean_claims_decode does. */
int dtq_full_claims_decode(const redisReply *r, void (*fn)(dtq_task *t, void *arg), void *arg,
                           char *err, size_t errlen);
/* The shape of the reap Function's reply, {claimed, cursors}: two arrays. */
int dtq_reap_reply_ok(const redisReply *r);

/* The terminal statuses, NULL-terminated: the C side's one list (the library's CONST.TERMINAL is
 * the Lua side's; tests/check_task.c keeps the two equal). */
extern const char *const dtq_task_terminal_statuses[];
int dtq_task_status_is_terminal(const char *status);

#endif
