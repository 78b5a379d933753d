/* task.h: a claimed task as the daemon holds it while it runs, decoded from the claim
 * reply of the fetch and reap Functions, plus the status names of SPEC 3.
 * Checklist: statuses must match lua/dtq.lua and SPEC 3. */
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
} dtq_task;

/* Decodes one claimed-task array; NULL (with err filled) when it is malformed.
 * The reply is borrowed; the task is caller-owned (dtq_task_free). */
dtq_task *dtq_task_from_reply(const redisReply *r, char *err, size_t errlen);
void dtq_task_free(dtq_task *t);

/* The terminal statuses, NULL-terminated: the C side's one list (lua/dtq.lua's TERMINAL is
 * the Lua side's; tests/check_task.c keeps the two equal). */
extern const char *const dtq_task_terminal_statuses[];
int dtq_task_status_is_terminal(const char *status);

#endif
