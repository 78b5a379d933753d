/* pool.h: [pool:NAME] handler pools. Each pool keeps `processes` long-lived processes of
 * the team's own program and hands them tasks over the versioned protocol of
 * sdk/PROTOCOL.md (NDJSON; descriptor 3 to the process, 4 back). It owns everything about
 * those processes: their start (spawn.c), the protocol, which process gets a task, and
 * their supervision: start timeouts, cancels and kills, crashes with exponential back-off,
 * recycling (max_tasks, max_rss_mb), rolling replacement (SIGHUP, `dtqctl pool restart`)
 * and the stop. The executor routes a task here when no [handler:X] serves its type, and
 * hears back through the handler call's complete(), as from any handler. */
#ifndef DTQ_POOL_H
#define DTQ_POOL_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "config.h"
#include "dtq/handler.h"
#include "spawn.h"

struct event_base;

/* The protocol this daemon speaks (sdk/PROTOCOL.md), and the longest line it reads. */
#define DTQ_POOL_PROTOCOL 1
#define DTQ_POOL_LINE_MAX (16 * 1024 * 1024)

typedef struct dtq_pools dtq_pools;
typedef struct dtq_pool dtq_pool;

dtq_pools *dtq_pools_new(struct event_base *base, dtq_spawner *spawner);
/* SIGKILLs every process group still alive and reaps it: none is left behind. NULL-safe. */
void dtq_pools_free(dtq_pools *ps);

/* Whether every [pool:*] of cfg names a program that can run (as exec handlers are
 * checked); err "[pool:NAME] command: why" when not. */
int dtq_pools_check(const dtq_config *cfg, char *err, size_t errlen);
/* Applies a (re)loaded config: starts new pools, rolls changed ones process by process
 * (restart reason `reload`), retires the processes of removed ones. cfg must outlive the
 * next call (the executor's ctx->cfg). */
void dtq_pools_configure(dtq_pools *ps, const dtq_config *cfg);

/* The start gate: 1 once every pool has a process that said hello or has failed its
 * first start, so the types they announce are known before a task is routed. `fn` runs
 * once when that happens after it was 0. */
int dtq_pools_settled(const dtq_pools *ps);
void dtq_pools_on_settled(dtq_pools *ps, void (*fn)(void *arg), void *arg);

/* The pool that serves task_type: the first (in the config's order) whose `types` lists
 * it or whose processes announced it. NULL: none. */
dtq_pool *dtq_pools_route(dtq_pools *ps, const char *task_type);

/* Private statuses of a pool's complete() beyond the ABI's (outcome.h says what they
 * become): a process died or broke the protocol holding the task; the task's payload is no
 * JSON text, or the handler refused it; the pool has no process to run it. */
void dtq_pool_run(dtq_pool *p, dtq_handler_call *call, int64_t deadline_ms);
/* Stops the task of call: `reason` timeout, cancelled or shutdown (sent to the process).
 * Nothing more is reported for call. */
void dtq_pool_cancel(dtq_handler_call *call, const char *reason);

/* A process reported progress on the task of call: fraction in [0, 1] or -1 for none, a
 * message (NULL for none, at most 200 bytes). */
typedef void dtq_pool_progress_fn(dtq_handler_call *call, double fraction, const char *message,
                                  void *arg);
void dtq_pools_on_progress(dtq_pools *ps, dtq_pool_progress_fn *fn, void *arg);

/* A child exited (waitpid's pid and status). Returns 1 when it was a pool process. */
int dtq_pools_reaped(dtq_pools *ps, pid_t pid, int status);

/* Replaces the processes of pool `name` one at a time; 0 when there is no such pool. */
int dtq_pools_restart(dtq_pools *ps, const char *name);
/* The restart stamp <ns>_pool_restart wrote for a pool (ms, Redis's clock), as the
 * heartbeat read it: a stamp newer than the pool's processes and not seen before rolls
 * it. */
void dtq_pools_restart_stamp(dtq_pools *ps, const char *name, int64_t stamp_ms);
/* Calls fn with the name of every configured pool. */
void dtq_pools_each_name(const dtq_pools *ps, void (*fn)(const char *name, void *arg), void *arg);

/* The daemon stops: no process is started again; every process gets EOF on its
 * descriptor 3, kill_grace_ms to exit, then SIGKILL. `done` runs once none is alive. */
void dtq_pools_stop(dtq_pools *ps, void (*done)(void *arg), void *arg);

/* /metrics: dtq_pool_processes, _slots, _busy_slots, _backlog, _restarts_total, _up. */
void dtq_pools_render_metrics(const dtq_pools *ps, FILE *out);
/* /readyz: the number of pools that have settled without a ready process; why names
 * the first and its last failure. */
int dtq_pools_unready(const dtq_pools *ps, char *why, size_t len);
/* The heartbeat's `pools` field: "NAME:ready/wanted" for each pool, blank-separated ("" for
 * none). */
void dtq_pools_summary(const dtq_pools *ps, char *buf, size_t len);

#endif
