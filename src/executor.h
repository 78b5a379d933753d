/* executor.h: execution slots. Runs claimed tasks through their handlers with a timeout,
 * turns each outcome into a decision (succeeded, retry, dead letter), and finalizes the
 * decisions in batches: one FCALL <ns>_finish per batch, pipelined, ACK last. */
#ifndef DTQ_EXECUTOR_H
#define DTQ_EXECUTOR_H

#include "task.h"
#include "worker.h"

dtq_executor *dtq_executor_new(dtq_worker *w);
void dtq_executor_free(dtq_executor *ex);

int dtq_executor_free_slots(const dtq_executor *ex);
int dtq_executor_running(const dtq_executor *ex);
/* Starts an attempt; takes ownership of t. */
void dtq_executor_run(dtq_executor *ex, dtq_task *t);
/* Sends pending finalizations (after a reconnect, or when a batch returns). */
void dtq_executor_flush(dtq_executor *ex);
/* True when nothing runs and no finalization is waiting or in flight. */
int dtq_executor_idle(const dtq_executor *ex);
/* Stops every running handler and hands its task back for another worker. */
void dtq_executor_abandon_all(dtq_executor *ex, const char *reason);
/* Asks Redis whether any running task had cancel_requested set (dtq_cancel on a running
 * task); such a handler is stopped and its task ends cancelled. Called every heartbeat. */
void dtq_executor_check_cancels(dtq_executor *ex);
/* Calls fn for the entry of every running attempt (heartbeat XCLAIM). */
void dtq_executor_each_entry(const dtq_executor *ex,
                             void (*fn)(const char *stream, const char *entry_id, void *arg),
                             void *arg);

#endif
