/* rsteps.c: pipelined steps of Redis commands over one rconn connection. */
#include "rsteps.h"

#include <stdarg.h>
#include <stdlib.h>

#include "rcluster.h"

struct dtq_rsteps {
    dtq_rconn *rc;
    dtq_rcluster *cl; /* instead of rc: routed by key */
    int outstanding;  /* replies of the current step not yet in */
    int lost;         /* a reply was NULL, or a command could not be sent */
    dtq_rsteps_step_fn *next;
    dtq_rsteps_step_fn *on_lost;
    void *state;
    void (*state_free)(void *state);
};

typedef struct call {
    dtq_rsteps *j;
    dtq_rsteps_reply_fn *fn;
    int a, b;
} call;

static void steps_continue(dtq_rsteps *j);

dtq_rsteps *dtq_rsteps_new(dtq_rconn *rc, void *state, void (*state_free)(void *),
                           dtq_rsteps_step_fn *lost) {
    dtq_rsteps *j = dtq_xcalloc(1, sizeof(*j));
    j->rc = rc;
    j->state = state;
    j->state_free = state_free;
    j->on_lost = lost;
    return j;
}

dtq_rsteps *dtq_rsteps_new_routed(dtq_rcluster *rc, void *state, void (*state_free)(void *),
                                  dtq_rsteps_step_fn *lost) {
    dtq_rsteps *j = dtq_rsteps_new(NULL, state, state_free, lost);
    j->cl = rc;
    return j;
}

void *dtq_rsteps_state(const dtq_rsteps *j) {
    return j->state;
}

void dtq_rsteps_end(dtq_rsteps *j) {
    if (j->state_free) j->state_free(j->state);
    free(j);
}

static void reply_cb(redisAsyncContext *ac, void *reply, void *priv) {
    call *c = priv;
    dtq_rsteps *j = c->j;
    DTQ_UNUSED(ac);
    if (!reply)
        j->lost = 1;
    else if (c->fn && !j->lost)
        c->fn(j, reply, c->a, c->b);
    free(c);
    if (--j->outstanding == 0) steps_continue(j);
}

void dtq_rsteps_send(dtq_rsteps *j, dtq_rsteps_reply_fn *fn, int a, int b, const dtq_argv *argv) {
    call *c;
    if (j->lost) return;
    c = dtq_xcalloc(1, sizeof(*c));
    c->j = j;
    c->fn = fn;
    c->a = a;
    c->b = b;
    j->outstanding++;
    if ((j->cl ? dtq_rcluster_command(j->cl, reply_cb, c, argv->argc, (const char **)argv->argv,
                                      argv->lens)
               : dtq_rconn_command(j->rc, reply_cb, c, argv->argc, (const char **)argv->argv,
                                   argv->lens)) != DTQ_OK) {
        j->outstanding--;
        j->lost = 1;
        free(c);
    }
}

void dtq_rsteps_sendl(dtq_rsteps *j, dtq_rsteps_reply_fn *fn, int a, int b, ...) {
    dtq_argv argv;
    va_list ap;
    const char *s;
    dtq_argv_init(&argv);
    va_start(ap, b);
    while ((s = va_arg(ap, const char *)) != NULL) dtq_argv_adds(&argv, s);
    va_end(ap);
    dtq_rsteps_send(j, fn, a, b, &argv);
    dtq_argv_deinit(&argv);
}

void dtq_rsteps_wait(dtq_rsteps *j, dtq_rsteps_step_fn *next) {
    j->next = next;
    if (j->outstanding == 0) steps_continue(j);
}

/* The step's replies are in: the next step, or `lost` and the end. */
static void steps_continue(dtq_rsteps *j) {
    dtq_rsteps_step_fn *next = j->next;
    j->next = NULL;
    if (j->lost || !next) {
        if (j->on_lost) j->on_lost(j);
        dtq_rsteps_end(j);
        return;
    }
    next(j);
}
