/* cron_pass.h: periodic tasks in the daemon: the config's [cron:NAME] schedules written to
 * Redis (every daemon, at setup and after SIGHUP), and the scheduler leader's fires. */
#ifndef DTQ_CRON_PASS_H
#define DTQ_CRON_PASS_H

#include "ctx.h"
#include "leader.h"

typedef struct dtq_cron_pass dtq_cron_pass;

/* leader: borrowed, outlives the pass. */
dtq_cron_pass *dtq_cron_pass_new(dtq_ctx *ctx, const dtq_leader *leader);
/* Starts the timer: syncs the config's schedules once the connection is set up, and fires
 * while dtq_leader_leads says this daemon leads. */
void dtq_cron_pass_start(dtq_cron_pass *cp);
void dtq_cron_pass_stop(dtq_cron_pass *cp);
/* The command connection went: what was in flight is forgotten, the sync is done again. */
void dtq_cron_pass_connection_lost(dtq_cron_pass *cp);
/* SIGHUP: the config's schedules are synced again. */
void dtq_cron_pass_config_changed(dtq_cron_pass *cp);
void dtq_cron_pass_free(dtq_cron_pass *cp);

#endif
