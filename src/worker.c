/* worker.c: the daemon's lifecycle. Builds the modules, has Redis set up after every
 * (re)connect (redis_setup.c) and opens the gate when it is, turns signals into drain and
 * reload, and decides when the process may exit. */
#include "worker.h"

#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calls.h"
#include "consumer.h"
#include "cron_pass.h"
#include "ctx.h"
#include "executor.h"
#include "finisher.h"
#include "heartbeat.h"
#include "http.h"
#include "keys.h"
#include "leader.h"
#include "pool.h"
#include "lease.h"
#include "log.h"
#include "rcluster.h"
#include "reaper.h"
#include "redis_setup.h"
#include "rsteps.h"
#include "scheduler.h"
#include "scope.h"
#include "scripts.h"
#include "sdnotify.h"
#include "sentinel.h"
#include "tls.h"
#include "util.h"

#define HARD_STOP_GRACE_S 15

enum dtq_worker_state {
    DTQ_WORKER_STARTING,
    DTQ_WORKER_RUNNING,
    DTQ_WORKER_DRAINING,
    DTQ_WORKER_STOPPED
};

struct dtq_worker {
    dtq_ctx *ctx;
    enum dtq_worker_state state;
    int ever_ready;
    dtq_redis_setup *setup; /* what Redis must hold before serving, after every connect */
    dtq_finisher *finisher;
    dtq_executor *executor;
    dtq_consumer *consumer;
    dtq_reaper *reaper;
    dtq_lease *lease;
    dtq_leader *leader; /* the scheduler leader's lock, which scheduler and cron follow */
    dtq_scheduler *scheduler;
    dtq_cron_pass *cron;
    dtq_heartbeat *heartbeat;
    dtq_http *http;
    dtq_sentinel *sentinel; /* redis-sentinel:// */
    struct event *sig_term, *sig_int, *sig_hup, *sig_pipe, *sig_chld;
    struct event *drain_timer, *hard_stop_timer, *watchdog_timer;
    struct event *cluster_watch_timer; /* the cluster layout: slots reachable, recoveries */
    char unreachable[512];             /* the cluster layout: as last logged */
    int exit_code;
};

static void check_drained(dtq_worker *w);

static void set_state(dtq_worker *w, enum dtq_worker_state st) {
    w->state = st;
    dtq_http_set_serving(w->http, st == DTQ_WORKER_RUNNING);
}

/* WORKER_STARTED / WORKER_STOPPED, built and published by the Functions like every event. */
static void worker_event(dtq_worker *w, const char *type) {
    dtq_argv a;
    dtq_call_worker_event(&a, w->ctx->fn.worker_event, w->ctx->cfg->worker_id, type);
    dtq_scope_tag_call(&a, w->ctx->gtag);
    dtq_ctx_command(w->ctx, NULL, NULL, &a);
    dtq_argv_deinit(&a);
}

/* A stopping worker leaves the groups (where it holds nothing) and <prefix>:workers, so
 * neither grows with every deploy. The cluster layout: one call per queue (each touches
 * its slot only), and the SREM of {ns}:workers here. */
static void deregister(dtq_worker *w) {
    dtq_ctx *ctx = w->ctx;
    dtq_argv a;
    if (!dtq_ctx_cluster(ctx)) {
        dtq_call_deregister(&a, ctx->fn.deregister, &ctx->streams, ctx->cfg->worker_id);
        dtq_ctx_command(ctx, NULL, NULL, &a);
        dtq_argv_deinit(&a);
        return;
    }
    for (int q = 0; q < ctx->streams.nqueues; q++) {
        dtq_streams one = dtq_streams_one(&ctx->streams, q);
        dtq_call_deregister(&a, ctx->fn.deregister, &one, ctx->cfg->worker_id);
        dtq_scope_tag_call(&a, dtq_ctx_qtag(ctx, q));
        dtq_ctx_command(ctx, NULL, NULL, &a);
        dtq_argv_deinit(&a);
    }
    {
        char *key = dtq_key_workers(ctx->prefix);
        dtq_argv_init(&a);
        dtq_argv_adds(&a, "SREM");
        dtq_argv_adds(&a, key);
        dtq_argv_adds(&a, ctx->cfg->worker_id);
        dtq_ctx_command(ctx, NULL, NULL, &a);
        dtq_argv_deinit(&a);
        free(key);
    }
}

/* ctx hooks: what the subsystems report. */
static void on_slots_freed(void *arg) {
    dtq_worker *w = arg;
    dtq_consumer_kick(w->consumer);
}

static void on_settled(void *arg) {
    check_drained(arg);
}

static void on_queue_quiet(void *arg) {
    dtq_worker *w = arg;
    dtq_reaper_recover_pending(w->reaper);
}

/* ----------------------------------------------------------------- after connect */

/* Redis is set up (redis_setup.c's done hook): the gate opens and the modules start. */
static void setup_done(void *arg) {
    dtq_worker *w = arg;
    dtq_ctx *ctx = w->ctx;
    ctx->ready = 1;
    if (ctx->cmd) dtq_rconn_serving(ctx->cmd);
    /* First on the connection, before any fetch: what a lost reply claimed for us. */
    dtq_reaper_recover_own(w->reaper, !w->ever_ready);
    if (!w->ever_ready) {
        w->ever_ready = 1;
        dtq_sdnotify("READY=1\nSTATUS=connected, serving");
        worker_event(w, "WORKER_STARTED");
        dtq_info("worker %s ready: serving %d queue(s) with concurrency %lld", ctx->cfg->worker_id,
                 ctx->cfg->nqueues, (long long)ctx->cfg->concurrency);
    } else {
        dtq_reaper_reconnected(w->reaper);
        dtq_sdnotify("STATUS=reconnected, serving");
        dtq_info("redis setup done after reconnect");
    }
    if (w->state == DTQ_WORKER_STARTING) set_state(w, DTQ_WORKER_RUNNING);
    dtq_heartbeat_start(w->heartbeat);
    dtq_lease_start(w->lease);
    dtq_finisher_flush(w->finisher);
    if (w->state == DTQ_WORKER_RUNNING) {
        dtq_consumer_start(w->consumer);
        dtq_reaper_start(w->reaper);
        dtq_scheduler_start(w->scheduler);
        dtq_cron_pass_start(w->cron);
    }
    check_drained(w);
}

/* The namespace is laid out for another layout (redis_setup.c's hook): not starting. */
/* WRONG_LAYOUT at a (re)connect. A starting daemon stops (exit 78). A daemon that has
 * served meets it only when the marker was changed behind it (the marker is written once,
 * when absent): the namespace's keys are where this daemon put them, and stopping would
 * take the fleet down at its next reconnects (the units do not restart exit 78), so it
 * serves on with its layout and says, at every reconnect, how to put the marker back. */
static int setup_wrong_layout(void *arg, const char *why) {
    dtq_worker *w = arg;
    char *key;
    if (!w->ever_ready) {
        dtq_error("redis setup: %s; not starting", why);
        w->exit_code = DTQ_EX_CONFIG;
        event_base_loopbreak(w->ctx->base);
        return 0;
    }
    key = dtq_key_layout(w->ctx->prefix);
    dtq_error("redis setup: %s; serving on with the %s layout this daemon started with: an "
              "admin should restore the marker (SET %s %s)",
              why, w->ctx->rc ? "cluster" : "single", key, w->ctx->rc ? "cluster" : "single");
    free(key);
    return 1;
}

static void redis_state(dtq_worker *w, int up) {
    if (up) {
        dtq_redis_setup_start(w->setup);
        return;
    }
    w->ctx->ready = 0;
    dtq_sdnotify("STATUS=redis connection lost, reconnecting");
    dtq_scheduler_connection_lost(w->scheduler);
    dtq_cron_pass_connection_lost(w->cron);
}

static void cmd_state_cb(dtq_rconn *rc, int up, void *arg) {
    DTQ_UNUSED(rc);
    redis_state(arg, up);
}

static void cluster_state_cb(dtq_rcluster *rc, int up, void *arg) {
    DTQ_UNUSED(rc);
    redis_state(arg, up);
}

/* A primary's link came up (rcluster's node hook), before the commands waiting for it go.
 * At start the setup round does all this for every primary; later (a reconnect, a
 * promoted replica, a node that took slots) it is done here: the library check, and the
 * recovery of the served queues it holds (their replies lost with the old link may have
 * claimed tasks for us), sent first on the link. */
static void cluster_node_cb(dtq_rcluster *rc, const char *host, int port, int slot, void *arg) {
    dtq_worker *w = arg;
    dtq_ctx *ctx = w->ctx;
    const dtq_cluster_map *map = dtq_rcluster_map(rc);
    if (!w->ever_ready) return;
    dtq_redis_setup_check_node(w->setup, slot);
    dtq_reaper_reconnected(w->reaper);
    for (int q = 0; map && q < ctx->streams.nqueues; q++) {
        const dtq_redis_endpoint *e = dtq_cluster_map_primary(map, (uint16_t)ctx->streams.slots[q]);
        if (e && e->port == port && !strcmp(e->host, host))
            dtq_reaper_recover_queue(w->reaper, q, 0);
    }
}

/* Every second in the cluster layout: says once per change which served queues' slots
 * cannot be reached (/readyz says it too), sends the recoveries that wait for a slot, and
 * lets the consumer try the queues that came back. */
static void cluster_watch_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_worker *w = arg;
    char now[sizeof(w->unreachable)];
    int n;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (!w->ever_ready) return;
    n = dtq_ctx_unreachable(w->ctx, now, sizeof(now));
    if (strcmp(now, w->unreachable)) {
        if (n)
            dtq_warn("redis cluster: cannot reach the slot of %d served queue(s): %s", n, now);
        else
            dtq_info("redis cluster: every served queue's slot is reachable again");
        snprintf(w->unreachable, sizeof(w->unreachable), "%s", now);
    }
    dtq_reaper_recover_pending(w->reaper);
    dtq_consumer_kick(w->consumer);
}

static void blk_state_cb(dtq_rconn *rc, int up, void *arg) {
    dtq_worker *w = arg;
    DTQ_UNUSED(rc);
    if (up) dtq_consumer_kick(w->consumer);
}

/* ----------------------------------------------------------------- drain and signals */

static void final_beat_done(void *arg) {
    dtq_worker *w = arg;
    event_base_loopbreak(w->ctx->base);
}

/* Every pool process has exited: the worker leaves. */
static void pools_stopped(void *arg) {
    dtq_worker *w = arg;
    if (dtq_ctx_is_up(w->ctx)) {
        worker_event(w, "WORKER_STOPPED");
        deregister(w);
    }
    dtq_heartbeat_set_status(w->heartbeat, "stopped", final_beat_done, w);
}

static void finish_stop(dtq_worker *w) {
    if (w->state == DTQ_WORKER_STOPPED) return;
    set_state(w, DTQ_WORKER_STOPPED);
    dtq_info("drained; stopping");
    /* nothing runs any more: the pools' processes get EOF and stop (kill_grace_ms) */
    dtq_executor_stop_pools(w->executor, pools_stopped, w);
}

/* A drain ends when nothing runs, no outcome waits to be written, and no fetch or reap
 * reply (which may still hand over claimed tasks, to be run before exit) is outstanding. */
static void check_drained(dtq_worker *w) {
    if (w->state == DTQ_WORKER_DRAINING && dtq_executor_running(w->executor) == 0 &&
        dtq_finisher_idle(w->finisher) && !dtq_consumer_busy(w->consumer) &&
        !dtq_reaper_busy(w->reaper))
        finish_stop(w);
}

static void drain_expired(dtq_worker *w) {
    int n = dtq_executor_running(w->executor);
    if (n) {
        dtq_warn("drain: %d task(s) still running; stopping them and handing them back", n);
        dtq_executor_abandon_all(w->executor, "interrupted: worker shut down");
    }
    check_drained(w);
}

static void drain_timer_cb(evutil_socket_t fd, short what, void *arg) {
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    drain_expired(arg);
}

static void hard_stop_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_worker *w = arg;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    dtq_error("stopping without Redis: unsent task outcomes are recovered by another worker's "
              "reaper after visibility_timeout_s");
    set_state(w, DTQ_WORKER_STOPPED);
    event_base_loopbreak(w->ctx->base);
}

static void start_drain(dtq_worker *w) {
    const dtq_config *cfg = w->ctx->cfg;
    struct timeval tv = {cfg->drain_timeout_s, 0};
    struct timeval hard = {cfg->drain_timeout_s + HARD_STOP_GRACE_S, 0};
    set_state(w, DTQ_WORKER_DRAINING);
    dtq_executor_drain(w->executor);
    dtq_sdnotify_stopping(cfg->drain_timeout_s + HARD_STOP_GRACE_S);
    dtq_info("draining: %d task(s) running, up to %llds", dtq_executor_running(w->executor),
             (long long)cfg->drain_timeout_s);
    dtq_consumer_stop(w->consumer);
    dtq_reaper_stop(w->reaper);
    dtq_scheduler_stop(w->scheduler);
    dtq_cron_pass_stop(w->cron);
    dtq_heartbeat_set_status(w->heartbeat, "draining", NULL, NULL);
    evtimer_add(w->drain_timer, &tv);
    evtimer_add(w->hard_stop_timer, &hard);
    check_drained(w);
}

static void reload(dtq_worker *w) {
    dtq_ctx *ctx = w->ctx;
    char err[512];
    dtq_config *cfg;
    dtq_handler_registry *reg;
    enum dtq_log_level lvl;
    enum dtq_log_format fmt;
    if (!ctx->cfg->path) {
        dtq_warn("SIGHUP: no config file to reload");
        return;
    }
    cfg = dtq_config_load(ctx->cfg->path, err, sizeof(err));
    if (!cfg) {
        dtq_error("SIGHUP: new config refused, keeping the old one: %s", err);
        return;
    }
    if (dtq_pools_check(cfg, err, sizeof(err)) != 0) {
        dtq_error("SIGHUP: new config refused, keeping the old one: %s", err);
        dtq_config_free(cfg);
        return;
    }
    reg = dtq_handler_registry_new(cfg, err, sizeof(err));
    if (!reg) {
        dtq_error("SIGHUP: new config refused, keeping the old one: %s", err);
        dtq_config_free(cfg);
        return;
    }
    if (strcmp(cfg->redis_url, ctx->cfg->redis_url) || strcmp(cfg->ns, ctx->cfg->ns) ||
        cfg->cluster_hash_tag != ctx->cfg->cluster_hash_tag ||
        strcmp(cfg->tls_ca_file, ctx->cfg->tls_ca_file) ||
        strcmp(cfg->tls_cert_file, ctx->cfg->tls_cert_file) ||
        strcmp(cfg->tls_key_file, ctx->cfg->tls_key_file) ||
        strcmp(cfg->tls_server_name, ctx->cfg->tls_server_name) ||
        cfg->tls_verify != ctx->cfg->tls_verify ||
        strcmp(cfg->sentinel_user, ctx->cfg->sentinel_user) ||
        strcmp(cfg->sentinel_password, ctx->cfg->sentinel_password))
        dtq_warn("SIGHUP: [redis] changes take effect only after a restart");
    if (strcmp(cfg->http_listen, ctx->cfg->http_listen))
        dtq_warn("SIGHUP: [http] listen changes take effect only after a restart (still %s)",
                 *ctx->cfg->http_listen ? ctx->cfg->http_listen : "off");
    /* Identity and connection settings stay as started. */
    free(cfg->worker_id);
    cfg->worker_id = dtq_xstrdup(ctx->cfg->worker_id);
    free(cfg->redis_url);
    cfg->redis_url = dtq_xstrdup(ctx->cfg->redis_url);
    free(cfg->ns);
    cfg->ns = dtq_xstrdup(ctx->cfg->ns);
    cfg->cluster_hash_tag = ctx->cfg->cluster_hash_tag;
    {
        char **mine[] = {&cfg->tls_ca_file,     &cfg->tls_cert_file, &cfg->tls_key_file,
                         &cfg->tls_server_name, &cfg->sentinel_user, &cfg->sentinel_password};
        const char *old[] = {ctx->cfg->tls_ca_file,   ctx->cfg->tls_cert_file,
                             ctx->cfg->tls_key_file,  ctx->cfg->tls_server_name,
                             ctx->cfg->sentinel_user, ctx->cfg->sentinel_password};
        for (size_t i = 0; i < sizeof(mine) / sizeof(mine[0]); i++) {
            free(*mine[i]);
            *mine[i] = dtq_xstrdup(old[i]);
        }
        cfg->tls_verify = ctx->cfg->tls_verify;
    }
    dtq_ctx_set_config(ctx, cfg, reg);
    dtq_log_level_from_string(cfg->log_level, &lvl);
    dtq_log_format_from_string(cfg->log_format, &fmt);
    dtq_log_setup(lvl, fmt);
    dtq_executor_config_changed(w->executor);
    /* [scheduler] enabled: stopping releases the leader lock at once, so another daemon
     * takes over within one interval instead of after leader_lock_ms. */
    if (!cfg->scheduler_enabled)
        dtq_scheduler_stop(w->scheduler);
    else if (w->state == DTQ_WORKER_RUNNING && ctx->ready)
        dtq_scheduler_start(w->scheduler);
    if (ctx->rc ? ctx->ready : dtq_rconn_is_up(ctx->cmd)) {
        dtq_redis_setup_publish(w->setup);
    }
    dtq_consumer_reset(w->consumer);
    dtq_cron_pass_config_changed(w->cron);
    if (cfg->npools)
        dtq_info("SIGHUP: configuration reloaded (%d handler(s), %d pool(s))", cfg->nhandlers,
                 cfg->npools);
    else
        dtq_info("SIGHUP: configuration reloaded (%d handler(s))", cfg->nhandlers);
}

static void signal_cb(evutil_socket_t sig, short what, void *arg) {
    dtq_worker *w = arg;
    DTQ_UNUSED(what);
    if (sig == SIGHUP) {
        reload(w);
        return;
    }
    if (sig == SIGPIPE) return;
    if (sig == SIGCHLD) {
        dtq_executor_reap_children(w->executor);
        return;
    }
    if (w->state == DTQ_WORKER_DRAINING) {
        dtq_warn("second signal: ending the drain now");
        evtimer_del(w->drain_timer);
        drain_expired(w);
        return;
    }
    if (w->state == DTQ_WORKER_STOPPED) return;
    dtq_info("signal %d: shutting down", (int)sig);
    start_drain(w);
}

static void watchdog_cb(evutil_socket_t fd, short what, void *arg) {
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    DTQ_UNUSED(arg);
    dtq_sdnotify("WATCHDOG=1");
}

/* ----------------------------------------------------------------- lifecycle */

static struct event *add_signal(dtq_worker *w, int sig) {
    struct event *ev = evsignal_new(w->ctx->base, sig, signal_cb, w);
    evsignal_add(ev, NULL);
    return ev;
}

dtq_worker *dtq_worker_new(dtq_config *cfg, char *err, size_t errlen) {
    dtq_worker *w;
    dtq_handler_registry *reg;
    struct event_base *base;
    dtq_redis_url url;
    dtq_tls *tls = NULL;
    dtq_ctx *ctx;
    int64_t wd;
    if (dtq_pools_check(cfg, err, errlen) != 0) return NULL;
    if (!(reg = dtq_handler_registry_new(cfg, err, errlen))) return NULL;
    if (dtq_redis_url_parse(cfg->redis_url, &url, err, errlen) != DTQ_OK) {
        dtq_handler_registry_free(reg, 1);
        return NULL;
    }
    if (url.tls) {
        tls = dtq_tls_from_config(cfg, err, errlen);
        if (!tls) {
            dtq_redis_url_deinit(&url);
            dtq_handler_registry_free(reg, 1);
            return NULL;
        }
        if (!cfg->tls_verify)
            dtq_warn("[redis] tls_verify = false: the Redis server's certificate is NOT "
                     "verified; anyone on the path can impersonate it and read the tasks");
    } else if (*cfg->tls_ca_file || *cfg->tls_cert_file || *cfg->tls_server_name ||
               !cfg->tls_verify) {
        dtq_warn("[redis] tls_* settings are ignored: the url is not rediss://, "
                 "rediss-sentinel:// or rediss-cluster://");
    }
    if (!url.sentinel && (*cfg->sentinel_user || *cfg->sentinel_password))
        dtq_warn("[redis] sentinel_* settings are ignored: the url is not redis-sentinel://");
    base = event_base_new();
    if (!base) abort();
    w = dtq_xcalloc(1, sizeof(*w));
    w->ctx = ctx = dtq_ctx_new(cfg, reg, base, url.cluster);
    if (url.cluster) {
        ctx->rc =
            dtq_rcluster_new(base, &url, cfg->connect_timeout_ms, "cluster", cluster_state_cb, w);
        dtq_rcluster_set_liveness(ctx->rc, cfg->liveness_timeout_ms);
        if (tls) dtq_rcluster_set_tls(ctx->rc, tls);
        dtq_rcluster_set_node_fn(ctx->rc, cluster_node_cb, w);
        if (cfg->cluster_hash_tag)
            dtq_warn("[redis] cluster_hash_tag is ignored with a redis-cluster:// url: every "
                     "queue has a hash tag of its own");
    } else {
        ctx->cmd = dtq_rconn_new(base, &url, cfg->connect_timeout_ms, "cmd", cmd_state_cb, w);
        ctx->blk = dtq_rconn_new(base, &url, cfg->connect_timeout_ms, "blk", blk_state_cb, w);
        /* At least 1.5 s (the key's lower bound): blk's PING waits behind an XREAD BLOCK
         * 1000. */
        dtq_rconn_set_liveness(ctx->cmd, cfg->liveness_timeout_ms);
        dtq_rconn_set_liveness(ctx->blk, cfg->liveness_timeout_ms);
        dtq_rconn_set_tls(ctx->cmd, tls);
        dtq_rconn_set_tls(ctx->blk, tls);
    }
    if (url.sentinel) {
        w->sentinel = dtq_sentinel_new(base, &url, cfg->sentinel_user, cfg->sentinel_password, tls,
                                       cfg->connect_timeout_ms);
        dtq_sentinel_attach(w->sentinel, ctx->cmd);
        dtq_sentinel_attach(w->sentinel, ctx->blk);
    }
    dtq_tls_unref(tls);
    dtq_redis_url_deinit(&url);
    ctx->hooks.slots_freed = on_slots_freed;
    ctx->hooks.settled = on_settled;
    ctx->hooks.queue_quiet = on_queue_quiet;
    ctx->hooks.arg = w;
    {
        dtq_redis_setup_hooks sh = {setup_done, setup_wrong_layout, w};
        w->setup = dtq_redis_setup_new(ctx, &sh);
    }
    w->finisher = dtq_finisher_new(ctx);
    w->executor = dtq_executor_new(ctx, w->finisher);
    w->consumer = dtq_consumer_new(ctx, w->executor, w->finisher);
    w->reaper = dtq_reaper_new(ctx, w->executor, w->finisher);
    w->lease = dtq_lease_new(ctx, w->executor, w->finisher);
    w->leader = dtq_leader_new(ctx);
    w->scheduler = dtq_scheduler_new(ctx, w->leader);
    w->cron = dtq_cron_pass_new(ctx, w->leader);
    w->heartbeat = dtq_heartbeat_new(ctx);
    if (*cfg->http_listen) {
        w->http = dtq_http_new(ctx, cfg->http_listen, err, errlen);
        if (!w->http) {
            ctx->cfg = NULL; /* the caller still owns cfg on failure */
            dtq_worker_free(w);
            return NULL;
        }
    }
    w->sig_term = add_signal(w, SIGTERM);
    w->sig_int = add_signal(w, SIGINT);
    w->sig_hup = add_signal(w, SIGHUP);
    w->sig_pipe = add_signal(w, SIGPIPE);
    w->sig_chld = add_signal(w, SIGCHLD);
    w->drain_timer = evtimer_new(base, drain_timer_cb, w);
    w->hard_stop_timer = evtimer_new(base, hard_stop_cb, w);
    if (ctx->rc) {
        struct timeval tv = {1, 0};
        w->cluster_watch_timer = event_new(base, -1, EV_PERSIST, cluster_watch_cb, w);
        evtimer_add(w->cluster_watch_timer, &tv);
    }
    wd = dtq_sdnotify_watchdog_ms();
    if (wd > 0) {
        struct timeval tv = {(wd / 2) / 1000, ((wd / 2) % 1000) * 1000};
        w->watchdog_timer = event_new(base, -1, EV_PERSIST, watchdog_cb, w);
        evtimer_add(w->watchdog_timer, &tv);
    }
    return w;
}

int dtq_worker_run(dtq_worker *w) {
    dtq_info("dtq-worker %s starting as %s (pid %d)", DTQ_VERSION, w->ctx->cfg->worker_id,
             (int)getpid());
    dtq_sdnotify("STATUS=connecting to redis");
    if (w->sentinel) dtq_sentinel_start(w->sentinel);
    if (w->ctx->rc) {
        dtq_rcluster_start(w->ctx->rc);
    } else {
        dtq_rconn_start(w->ctx->cmd);
        dtq_rconn_start(w->ctx->blk);
    }
    event_base_dispatch(w->ctx->base);
    dtq_info("stopped");
    return w->exit_code;
}

void dtq_worker_free(dtq_worker *w) {
    struct event *events[] = {w ? w->sig_term : NULL,
                              w ? w->sig_int : NULL,
                              w ? w->sig_hup : NULL,
                              w ? w->sig_pipe : NULL,
                              w ? w->sig_chld : NULL,
                              w ? w->drain_timer : NULL,
                              w ? w->hard_stop_timer : NULL,
                              w ? w->watchdog_timer : NULL,
                              w ? w->cluster_watch_timer : NULL};
    struct event_base *base;
    if (!w) return;
    base = w->ctx->base;
    /* Connections first: their pending callbacks run (with NULL) while everything lives;
     * the gate closed, so that nothing is sent from them. */
    w->ctx->ready = 0;
    dtq_rconn_free(w->ctx->blk);
    dtq_rconn_free(w->ctx->cmd);
    w->ctx->blk = w->ctx->cmd = NULL;
    dtq_rcluster_free(w->ctx->rc);
    w->ctx->rc = NULL;
    dtq_sentinel_free(w->sentinel); /* after the connections it answers */
    dtq_redis_setup_free(w->setup); /* after the connections: their callbacks reach it */
    dtq_http_free(w->http);
    dtq_heartbeat_free(w->heartbeat);
    dtq_scheduler_free(w->scheduler);
    dtq_cron_pass_free(w->cron);
    dtq_leader_free(w->leader);
    dtq_lease_free(w->lease);
    dtq_reaper_free(w->reaper);
    dtq_consumer_free(w->consumer);
    dtq_executor_free(w->executor);
    dtq_finisher_free(w->finisher);
    for (size_t i = 0; i < sizeof(events) / sizeof(events[0]); i++)
        if (events[i]) event_free(events[i]);
    dtq_ctx_free(w->ctx);
    /* A bufferevent made with BEV_OPT_DEFER_CALLBACKS is destroyed by a deferred callback:
     * one more pass of the loop, with every other event gone, runs it before the base. */
    event_base_loop(base, EVLOOP_NONBLOCK);
    event_base_free(base);
    free(w);
}
