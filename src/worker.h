/* worker.h: struct dtq_worker, the one object that holds a daemon's runtime state, and its
 * lifecycle: starting -> running -> draining -> stopped. Every module receives it
 * explicitly; there are no globals besides the logger settings.
 *
 * Two Redis connections: `cmd` carries every command, pipelined; `blk` only ever waits in
 * XREAD BLOCK while the served streams are empty, so waiting never stalls the pipeline. */
#ifndef DTQ_WORKER_H
#define DTQ_WORKER_H

#include <stdint.h>

#include "config.h"
#include "handler.h"
#include "rconn.h"

struct event_base;
struct event;
typedef struct dtq_executor dtq_executor;
typedef struct dtq_consumer dtq_consumer;
typedef struct dtq_scheduler dtq_scheduler;
typedef struct dtq_heartbeat dtq_heartbeat;
typedef struct dtq_http dtq_http;
typedef struct dtq_exec dtq_exec;

enum dtq_worker_state {
    DTQ_WORKER_STARTING,
    DTQ_WORKER_RUNNING,
    DTQ_WORKER_DRAINING,
    DTQ_WORKER_STOPPED
};

typedef struct dtq_counters {
    uint64_t processed; /* attempts finished, any outcome */
    uint64_t succeeded;
    uint64_t failed;  /* dead-lettered or failed */
    uint64_t retried; /* retries scheduled */
    uint64_t finish_batches;
} dtq_counters;

typedef struct dtq_worker {
    dtq_config *cfg; /* swapped whole on SIGHUP */
    dtq_handler_registry *handlers;
    char *prefix;      /* key prefix: ns or {ns} */
    char *policy_json; /* max_attempts/timeout resolution table for the Functions */
    char **streams;    /* served stream keys, queue order then p9..p0 */
    int nstreams;
    char **paused_keys; /* <prefix>:queue:<q>:paused, one per served queue */
    struct event_base *base;
    dtq_rconn *cmd;
    dtq_rconn *blk;
    enum dtq_worker_state state;
    int setup_pending; /* setup replies outstanding after a (re)connect */
    int ready;         /* setup done on the current connection */
    int ever_ready;
    dtq_executor *exec;
    dtq_consumer *cons;
    dtq_scheduler *sched;
    dtq_heartbeat *hb;
    dtq_http *http;
    dtq_exec *execs; /* children of exec handlers */
    struct event *sig_term, *sig_int, *sig_hup, *sig_pipe, *sig_chld;
    struct event *drain_timer, *hard_stop_timer, *watchdog_timer, *setup_retry_timer;
    int64_t started_at_ms;
    char hostname[256];
    dtq_counters counters;
    int exit_code;
} dtq_worker;

/* Takes ownership of cfg. NULL (err filled) when a handler cannot be loaded. */
dtq_worker *dtq_worker_new(dtq_config *cfg, char *err, size_t errlen);
/* Runs the loop until stopped; returns the process exit code. */
int dtq_worker_run(dtq_worker *w);
void dtq_worker_free(dtq_worker *w);

/* Builds "<prefix>:<suffix>" (caller-owned). */
char *dtq_worker_key(const dtq_worker *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* "<ns>_<name>", the Function name (caller-owned). */
char *dtq_worker_fn(const dtq_worker *w, const char *name);
/* Sends a command on `cmd`; DTQ_ERR when Redis is down (cb not called). */
int dtq_worker_command(dtq_worker *w, redisCallbackFn *cb, void *priv, int argc, char **argv,
                       const size_t *lens);
/* Publishes a daemon-built event JSON (takes ownership; NULL is a no-op). */
void dtq_worker_publish(dtq_worker *w, char *json);
/* Called by modules when work may have finished, to end a drain. */
void dtq_worker_check_drained(dtq_worker *w);
int dtq_worker_is_up(const dtq_worker *w);

#endif
