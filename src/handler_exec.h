/* handler_exec.h: `exec = /path/prog arg...` handlers. A program per attempt, run without
 * a shell in its own process group, with default signal dispositions, an empty signal
 * mask and only descriptors 0-2: payload JSON on stdin, DTQ_TASK_ID, DTQ_TASK_TYPE,
 * DTQ_QUEUE, DTQ_ATTEMPT, DTQ_MAX_ATTEMPTS in its environment, stdout is the result (at
 * most result_max_bytes of it kept, none with `result = ignore`; outcome.c reads it as the
 * section's `result` says). Exit 0 succeeds, an exit code of the section's
 * retry_exit_codes (75, EX_TEMPFAIL, by default) is a retryable failure, any other exit is
 * permanent, and death by a signal the daemon did not send is reported as
 * DTQ_HANDLER_FAIL_SIGNAL `signal:<N>`. Cancelling (timeout, dtq_cancel,
 * shutdown) sends SIGTERM to the group, then SIGKILL after kill_grace_ms, and the job
 * reports nothing after that. Nothing of the task reaches a command line. */
#ifndef DTQ_HANDLER_EXEC_H
#define DTQ_HANDLER_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "dtq/handler.h"
#include "outcome.h"
#include "spawn.h"

struct event_base;

typedef struct dtq_exec_spec {
    dtq_program prog;      /* its base_env: all but the DTQ_ task variables */
    int64_t kill_grace_ms; /* SIGTERM -> SIGKILL */
    /* bit N: exit N is retryable (the section's retry_exit_codes) */
    unsigned char retry_exit_codes[32];
    /* 0 with result = ignore: stdout is read and dropped */
    int keep_stdout;
} dtq_exec_spec;

/* Parses the section's exec, env and workdir; NULL with err filled when invalid. */
dtq_exec_spec *dtq_exec_spec_new(const dtq_handler_conf *h, char *err, size_t errlen);
void dtq_exec_spec_free(dtq_exec_spec *spec);

typedef struct dtq_exec dtq_exec;

dtq_exec *dtq_exec_new(struct event_base *base, dtq_spawner *spawner, int64_t error_max_bytes,
                       int64_t result_max_bytes);
/* Kills (SIGKILL) and reaps every child still alive. NULL-safe. */
void dtq_exec_free(dtq_exec *ex);
/* Bytes of stderr kept for last_error (applies at once) and of stdout kept for the result
 * (applies to children started afterwards). */
void dtq_exec_set_limits(dtq_exec *ex, int64_t error_max_bytes, int64_t result_max_bytes);
/* Starts the program for `call`; reports through call->complete and sets call->cancel. */
void dtq_exec_start(dtq_exec *ex, const dtq_exec_spec *spec, dtq_handler_call *call);
/* A child exited (waitpid's pid and status). Returns 1 when it was one of ex's. */
int dtq_exec_reaped(dtq_exec *ex, pid_t pid, int status);
/* Children alive (running or in their kill grace). */
int dtq_exec_children(const dtq_exec *ex);

#endif
