/* executor.h: execution slots. Runs claimed tasks through their handlers with a timeout,
 * turns each ended attempt into a decision (outcome.c) and hands it to the finisher; the
 * slot is free at once. Owns the children of exec handlers. */
#ifndef DTQ_EXECUTOR_H
#define DTQ_EXECUTOR_H

#include "ctx.h"
#include "finisher.h"
#include "task.h"

typedef struct dtq_executor dtq_executor;

dtq_executor *dtq_executor_new(dtq_ctx *ctx, dtq_finisher *fin);
void dtq_executor_free(dtq_executor *ex);

/* concurrency minus the running tasks and the reserved slots (never below 0). */
int dtq_executor_free_slots(const dtq_executor *ex);
/* Reserves n slots (n < 0 gives them back): the cluster layout's concurrent fetches each
 * hold the count they asked for until their reply, so that neither they nor a reap claim
 * the same free slots twice. */
void dtq_executor_reserve(dtq_executor *ex, int n);
int dtq_executor_running(const dtq_executor *ex);
/* Starts an attempt; takes ownership of t. */
void dtq_executor_run(dtq_executor *ex, dtq_task *t);
/* Starts every task of a fetch or reap reply (an array of claimed-task arrays). */
void dtq_executor_run_claimed(dtq_executor *ex, const redisReply *list);
/* Starts every task of a fetch reply (dtq_fetch_reply_ok): its claimed tasks, lean-claims
 * and full-claims. */
void dtq_executor_run_fetched(dtq_executor *ex, const redisReply *reply);
/* Stops the handler of a running attempt because dtq_cancel asked; it ends cancelled.
 * No-op when that attempt is not running here. */
void dtq_executor_cancel(dtq_executor *ex, const char *task_id, int64_t attempt);
/* Stops every running handler and hands its task back for another worker. */
void dtq_executor_abandon_all(dtq_executor *ex, const char *reason);
/* The daemon is stopping. From now on an exec child killed by a signal the daemon did not
 * send (the unit's stop reached it too) hands its task back instead of failing it. */
void dtq_executor_drain(dtq_executor *ex);
/* Calls fn for the task of every running attempt. */
void dtq_executor_each_task(const dtq_executor *ex, void (*fn)(const dtq_task *t, void *arg),
                            void *arg);
/* Reaps exited children, of exec handlers and pools (SIGCHLD). */
void dtq_executor_reap_children(dtq_executor *ex);
/* The config was reloaded (pools start, roll, retire). */
void dtq_executor_config_changed(dtq_executor *ex);
/* The daemon stops, its runs ended: pool processes get EOF, then kill_grace_ms, then
 * SIGKILL; `done` runs once none is alive. */
void dtq_executor_stop_pools(dtq_executor *ex, void (*done)(void *arg), void *arg);

#endif
