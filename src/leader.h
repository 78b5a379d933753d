/* leader.h: the scheduler leader's lock <prefix>:lock:scheduler ({ns} in the cluster
 * layout): taken with SET NX PX, refreshed with compare-and-pexpire (<ns>_lock_refresh),
 * released with compare-and-delete (<ns>_lock_release). This module alone knows whether
 * this daemon leads; the scheduler drives the tries (one per pass), the cron pass asks
 * dtq_leader_leads, and whoever must act on a change subscribes to it. */
#ifndef DTQ_LEADER_H
#define DTQ_LEADER_H

#include "ctx.h"

typedef struct dtq_leader dtq_leader;

/* What a try came to. */
enum dtq_leader_outcome {
    DTQ_LEADER_LEADS,   /* the lock is ours (taken or refreshed) */
    DTQ_LEADER_FOLLOWS, /* another daemon holds it, or the command failed */
    DTQ_LEADER_NO_REPLY /* the link went before the reply (see dtq_leader_try) */
};

/* Told of every change of leadership, after the state changed. */
typedef void dtq_leader_change_fn(void *arg, int leading);
typedef void dtq_leader_try_fn(void *arg, enum dtq_leader_outcome outcome);

dtq_leader *dtq_leader_new(dtq_ctx *ctx);
void dtq_leader_free(dtq_leader *l);
/* Adds fn to those told of each change (at most DTQ_LEADER_MAX_SUBSCRIBERS). */
#define DTQ_LEADER_MAX_SUBSCRIBERS 4
void dtq_leader_subscribe(dtq_leader *l, dtq_leader_change_fn *fn, void *arg);
/* 1 while this daemon holds the lock (as its last refresh said). */
int dtq_leader_leads(const dtq_leader *l);
/* Takes the lock, or refreshes it while leading; done(arg, outcome) once its reply is in.
 * A reply lost with the link: in the cluster layout leadership is lost at once (the lock's
 * node went; the router stays up), on a single Redis dtq_leader_lost follows from the
 * connection's loss. DTQ_ERR (done never called) when the command gate is closed. */
int dtq_leader_try(dtq_leader *l, dtq_leader_try_fn *done, void *arg);
/* Releases the lock if held (compare-and-delete, so another daemon takes over within one
 * interval rather than after leader_lock_ms); not leading from now on. */
void dtq_leader_release(dtq_leader *l);
/* Leadership is lost (why: for the log): a leader must not act on a lock it can no longer
 * refresh. */
void dtq_leader_lost(dtq_leader *l, const char *why);

#endif
