/* dtq/handler.h: the handler ABI, shared by the builtins and by plugins (.so files named
 * in [handler:<task_type>] plugin = ..., symbol = ...).
 *
 * The daemon calls the handler function once per attempt, on its event loop thread. The
 * handler reports the outcome exactly once through call->complete, either before it
 * returns (a synchronous handler) or later from a callback on call->base (an asynchronous
 * one). A handler must never block the loop: work that waits belongs on call->base
 * (timers, fds) or on a thread of the plugin's own that reports back through the loop.
 *
 * An asynchronous handler sets call->cancel before returning. The daemon calls it at most
 * once, when it abandons the attempt (timeout, cancellation, shutdown); after cancel
 * returns the handler must release its resources and never call complete. */
#ifndef DTQ_HANDLER_H
#define DTQ_HANDLER_H

#include <stddef.h>

#define DTQ_HANDLER_ABI_VERSION 1

struct event_base;

enum dtq_handler_status {
    DTQ_HANDLER_OK = 0,    /* success; result is the task's result */
    DTQ_HANDLER_RETRY = 1, /* retryable failure: retried while attempts remain */
    DTQ_HANDLER_FAIL = 2   /* permanent failure: dead-lettered */
};

typedef struct dtq_handler_call dtq_handler_call;

struct dtq_handler_call {
    int abi_version;     /* DTQ_HANDLER_ABI_VERSION */
    const char *task_id; /* borrowed, valid until complete or cancel */
    const char *queue;
    const char *task_type;
    const char *payload; /* the payload JSON text, NUL-terminated */
    size_t payload_len;  /* bytes */
    long long attempt;   /* 1-based */
    long long max_attempts;
    long long timeout_ms;    /* the daemon enforces it; informational for the handler */
    struct event_base *base; /* the daemon's libevent loop */
    void *handler_data;      /* the handler's own, untouched by the daemon */
    const char *config;      /* the handler section's target string (builtin name or path) */

    /* Set by an asynchronous handler; see above. */
    void (*cancel)(dtq_handler_call *call);

    /* Reports the outcome, once. `result` is JSON text (NULL or empty = null), copied;
     * `error` is a message for RETRY/FAIL (NULL allowed), copied. */
    void (*complete)(dtq_handler_call *call, int status, const char *result, size_t result_len,
                     const char *error);

    void *daemon_private; /* the daemon's; do not touch */

    /* A task that waited for others (enqueue option `after`): their results, a JSON object
     * of task id -> result (null for one without); NULL otherwise. Borrowed like payload.
     * Added after the fields above, so a plugin built against an older header still works. */
    const char *parent_results;
    size_t parent_results_len;

    /* Set by the daemon: reports how far the attempt got, any number of times before
     * complete (the daemon stores and publishes at most one report a second per task, the
     * last one). fraction in [0, 1], or -1 for none; message NULL or text (copied, cut to
     * 200 bytes). NULL in a daemon older than this field: check before calling. */
    void (*progress)(dtq_handler_call *call, double fraction, const char *message);
};

/* The type of a handler entry point (plugin `symbol`). */
typedef void dtq_handler_fn(dtq_handler_call *call);

#endif
