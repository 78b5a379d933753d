/* rsteps.h: a job of pipelined steps over one Redis connection (rconn.h), or over a Redis
 * Cluster router (rcluster.h: each command goes to the primary of its key's slot, the
 * replies of one step may come from several nodes; a step still waits for all). A step sends its
 * commands (pipelined, in order), each with a callback for its reply; once the step's last
 * reply is in, the job's next step runs and reads what those callbacks kept in the job's
 * state. A reply callback may send more commands of its own step: the step waits for them
 * too. A NULL reply (the link dropped) or a command that cannot be sent ends the job: the
 * replies still to come are not handed to their callbacks, and once they are in, `lost`
 * runs in place of the next step and the job is freed.
 *
 * Below dtq-web's handlers (one job per request, and the sampler) and the daemon's setup
 * round (worker.c); it knows neither. Single-threaded, like the event loop it runs on. */
#ifndef DTQ_RSTEPS_H
#define DTQ_RSTEPS_H

#include <hiredis/hiredis.h>

#include "rconn.h"
#include "util.h"

struct dtq_rcluster;
typedef struct dtq_rsteps dtq_rsteps;

/* A step: sends the next commands and waits (dtq_rsteps_wait), or ends the job
 * (dtq_rsteps_end). */
typedef void dtq_rsteps_step_fn(dtq_rsteps *j);
/* A command's reply (never NULL, borrowed for the call), with the a and b it was sent with.
 * It may send more commands of the step; it must not end the job. */
typedef void dtq_rsteps_reply_fn(dtq_rsteps *j, redisReply *r, int a, int b);

/* A job on rc with its state (owned: state_free(state) runs when the job is freed; either
 * may be NULL). `lost` (NULL: nothing) runs when the link drops; the job is freed after it
 * returns. */
dtq_rsteps *dtq_rsteps_new(dtq_rconn *rc, void *state, void (*state_free)(void *),
                           dtq_rsteps_step_fn *lost);
/* The same job over a cluster router: every command routed by its key (rcluster.h); a
 * command the router cannot send (no slot map, no primary for its slot) ends the job as a
 * NULL reply does. */
dtq_rsteps *dtq_rsteps_new_routed(struct dtq_rcluster *rc, void *state, void (*state_free)(void *),
                                  dtq_rsteps_step_fn *lost);
void *dtq_rsteps_state(const dtq_rsteps *j);
/* Sends one command of the current step; fn (NULL: the reply is only waited for) runs with
 * its reply. Nothing is sent once the job has lost its link. */
void dtq_rsteps_send(dtq_rsteps *j, dtq_rsteps_reply_fn *fn, int a, int b, const dtq_argv *argv);
/* dtq_rsteps_send with the arguments as strings, NULL-terminated. */
void dtq_rsteps_sendl(dtq_rsteps *j, dtq_rsteps_reply_fn *fn, int a, int b, ...)
    __attribute__((sentinel));
/* Ends the current step: `next` runs once the replies of what it sent are in (at once when
 * there are none, before this returns). */
void dtq_rsteps_wait(dtq_rsteps *j, dtq_rsteps_step_fn *next);
/* Ends the job from one of its steps: frees it and its state. */
void dtq_rsteps_end(dtq_rsteps *j);

#endif
