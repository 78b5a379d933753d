/* worker.c: the daemon's lifecycle. Builds the modules, sets Redis up after every
 * (re)connect (Functions library, published config, consumer groups), turns signals into
 * drain and reload, and decides when the process may exit. */
#include "reply_class.h"
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
#include "lease.h"
#include "log.h"
#include "rcluster.h"
#include "reaper.h"
#include "rsteps.h"
#include "scheduler.h"
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
    unsigned setup_gen; /* the current setup round's number: older rounds are ignored */
    int ever_ready;
    int policy_warned;         /* the volatile-* eviction warning was logged */
    int layout_warned;         /* <ns>_layout could not be called (single layout) */
    char library_why[256];     /* why the loaded library cannot be used, if it cannot */
    char library_problem[640]; /* the missing step, as last logged */
    dtq_finisher *finisher;
    dtq_executor *executor;
    dtq_consumer *consumer;
    dtq_reaper *reaper;
    dtq_lease *lease;
    dtq_scheduler *scheduler;
    dtq_cron_pass *cron;
    dtq_heartbeat *heartbeat;
    dtq_http *http;
    dtq_sentinel *sentinel; /* redis-sentinel:// */
    struct event *sig_term, *sig_int, *sig_hup, *sig_pipe, *sig_chld;
    struct event *drain_timer, *hard_stop_timer, *watchdog_timer, *setup_retry_timer;
    struct event *cluster_watch_timer; /* the cluster layout: slots reachable, recoveries */
    char unreachable[512];             /* the cluster layout: as last logged */
    int exit_code;
};

static void setup_redis(dtq_worker *w);
static void check_drained(dtq_worker *w);

static void set_state(dtq_worker *w, enum dtq_worker_state st) {
    w->state = st;
    dtq_http_set_serving(w->http, st == DTQ_WORKER_RUNNING);
}

/* WORKER_STARTED / WORKER_STOPPED, built and published by the Functions like every event. */
static void worker_event(dtq_worker *w, const char *type) {
    dtq_argv a;
    dtq_call_worker_event(&a, w->ctx->fn.worker_event, w->ctx->cfg->worker_id, type);
    dtq_call_tag(&a, w->ctx->gtag);
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
        dtq_call_tag(&a, dtq_ctx_qtag(ctx, q));
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

/* ----------------------------------------------------------------- setup after connect */

static void setup_done(dtq_worker *w) {
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

static void setup_retry_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_worker *w = arg;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (w->ctx->rc ? dtq_rcluster_is_up(w->ctx->rc) : dtq_rconn_is_up(w->ctx->cmd)) {
        if (!w->ctx->ready) setup_redis(w);
    }
}

/* A setup round: one step of commands (rsteps.h) after a (re)connect; setup_done once its
 * replies are in, unless it gave up. A round that a newer one replaced is ignored. */
typedef struct setup_round {
    dtq_worker *w;
    unsigned gen;
    int failed; /* this round gave up: its other replies are ignored */
} setup_round;

/* The round's state while it is the current one, else NULL (its replies are ignored). */
static setup_round *current_round(dtq_rsteps *j) {
    setup_round *s = dtq_rsteps_state(j);
    return s->gen == s->w->setup_gen ? s : NULL;
}

/* Gives up this setup round (its other replies are ignored) and tries again in 5 s. */
static void setup_retry_later(setup_round *s) {
    struct timeval tv = {5, 0};
    s->failed = 1;
    evtimer_add(s->w->setup_retry_timer, &tv);
}

static void setup_reply(dtq_rsteps *j, redisReply *reply, int a, int b) {
    setup_round *s = current_round(j);
    DTQ_UNUSED(a);
    DTQ_UNUSED(b);
    if (!s) return;
    if (reply->type == REDIS_REPLY_ERROR && dtq_reply_class_of(reply->str) != DTQ_REPLY_BUSYGROUP) {
        /* One line per try: the other setup commands of the try are refused alike (OOM
         * refuses all ~22 of them). An unavailable server: rconn said why and reconnects. */
        if (!s->failed && !dtq_reply_class_unavailable(dtq_reply_class_of(reply->str)))
            dtq_error("redis setup failed (is this Redis 7 or newer?): %s; retrying in 5s",
                      reply->str);
        setup_retry_later(s);
    }
}

/* Every reply of the round is in. */
static void setup_end(dtq_rsteps *j) {
    setup_round *s = current_round(j);
    dtq_worker *w = s && !s->failed ? s->w : NULL;
    dtq_rsteps_end(j);
    if (w) setup_done(w);
}

/* Evicted task hashes are silently lost tasks, so a policy that may evict any key
 * (allkeys-*) keeps the daemon from serving: it says why and checks again every 5 s. The
 * volatile-* policies evict only keys with a TTL (finished tasks, results, idempotency
 * records): served, with a warning. Returns 0 to serve. */
static int check_eviction_policy(dtq_worker *w, const redisReply *reply) {
    const char *p;
    char policy[64] = "";
    if (reply->type != REDIS_REPLY_STRING) {
        dtq_warn("cannot read maxmemory-policy (%s); make sure it is noeviction",
                 reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
        return 0;
    }
    p = strstr(reply->str, "maxmemory_policy:"); /* reply-text: INFO's text, not an error */
    if (p) sscanf(p + 17, "%63[a-z-]", policy);
    if (!strncmp(policy, "allkeys-", 8)) {
        dtq_error("redis maxmemory-policy is %s: Redis may evict queued task hashes, which "
                  "loses tasks; not serving until it is noeviction (CONFIG SET "
                  "maxmemory-policy noeviction); checking again in 5s",
                  policy);
        return -1;
    }
    if (!strncmp(policy, "volatile-", 9) && !w->policy_warned) {
        dtq_warn("redis maxmemory-policy is %s: finished tasks, results and idempotency "
                 "records (keys with a TTL) may be evicted early; noeviction is recommended",
                 policy);
        w->policy_warned = 1;
    }
    return 0;
}

static void policy_reply(dtq_rsteps *j, redisReply *reply, int a, int b) {
    setup_round *s = current_round(j);
    if (s && check_eviction_policy(s->w, reply) != 0) {
        setup_retry_later(s);
        return;
    }
    setup_reply(j, reply, a, b);
}

/* The Functions library. First FCALL_RO <ns>_version: when the library of this build is
 * loaded already (by another worker, or by an admin's `dtqctl functions install`), nothing
 * is loaded, so a user without FUNCTION LOAD (dtqctl acl worker) is never refused anything.
 * Otherwise FUNCTION LOAD REPLACE; when the ACL refuses that (NOPERM), the worker says once
 * what is missing, does not serve, and checks again every 5 s, so that the install is all
 * it takes. */
/* FUNCTION LOAD was refused (NOPERM): says what is missing, once per change. */
static void library_refused(dtq_worker *w) {
    const char *ns = w->ctx->cfg->ns;
    char msg[sizeof(w->library_problem)];
    snprintf(msg, sizeof(msg),
             "redis setup: this redis user may not FUNCTION LOAD, and %s; an admin must run "
             "'dtqctl -n %s functions install' (dtqctl %s); not serving until then, checking "
             "every 5s",
             w->library_why, ns, DTQ_VERSION);
    if (strcmp(msg, w->library_problem)) {
        dtq_error("%s", msg);
        dtq_sdnotify("STATUS=waiting for the dtq Functions library (dtqctl functions install)");
        snprintf(w->library_problem, sizeof(w->library_problem), "%s", msg);
    }
}

static void load_reply(dtq_rsteps *j, redisReply *reply, int a, int b) {
    setup_round *s = current_round(j);
    if (!s) return;
    if (reply->type != REDIS_REPLY_ERROR || dtq_reply_class_of(reply->str) != DTQ_REPLY_NOPERM) {
        setup_reply(j, reply, a, b);
        return;
    }
    library_refused(s->w);
    setup_retry_later(s);
}

/* <ns>_version answered: 1 when it is this build's library; else w->library_why says why
 * the loaded one cannot be used. */
static int library_current(dtq_worker *w, const redisReply *reply) {
    const char *ns = w->ctx->cfg->ns, *want = dtq_scripts_version();
    if (reply->type == REDIS_REPLY_STRING && !strcmp(reply->str, want)) {
        if (w->library_problem[0])
            dtq_info("the Functions library %s version %s is installed; serving", ns, want);
        w->library_problem[0] = '\0';
        return 1;
    }
    if (reply->type == REDIS_REPLY_STRING)
        snprintf(w->library_why, sizeof(w->library_why),
                 "the installed Functions library is version %.64s, not %s", reply->str, want);
    else if (reply->type == REDIS_REPLY_ERROR &&
             dtq_reply_class_of(reply->str) == DTQ_REPLY_NO_FUNCTION)
        snprintf(w->library_why, sizeof(w->library_why),
                 "the Functions library (namespace %s) is not installed", ns);
    else if (reply->type == REDIS_REPLY_ERROR && dtq_reply_class_of(reply->str) == DTQ_REPLY_NOPERM)
        snprintf(w->library_why, sizeof(w->library_why),
                 "it may not call %s_version either (give it the worker role: dtqctl acl "
                 "worker)",
                 ns);
    else
        snprintf(w->library_why, sizeof(w->library_why), "%s_version failed: %.120s", ns,
                 reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
    return 0;
}

/* FUNCTION LOAD REPLACE of this build's library (caller deinits). */
static void library_load_argv(dtq_worker *w, dtq_argv *argv) {
    size_t len;
    char *lib = dtq_scripts_library(w->ctx->cfg->ns, w->ctx->prefix, &len);
    dtq_argv_init(argv);
    dtq_argv_adds(argv, "FUNCTION");
    dtq_argv_adds(argv, "LOAD");
    dtq_argv_adds(argv, "REPLACE");
    dtq_argv_add(argv, lib, len);
    free(lib);
}

static void version_reply(dtq_rsteps *j, redisReply *reply, int a, int b) {
    setup_round *s = current_round(j);
    dtq_argv argv;
    if (!s) return;
    if (library_current(s->w, reply)) {
        setup_reply(j, reply, a, b);
        return;
    }
    library_load_argv(s->w, &argv);
    /* a command of this step: the round waits for it too, load_reply answers for it */
    dtq_rsteps_send(j, load_reply, 0, 0, &argv);
    dtq_argv_deinit(&argv);
}

/* A command of the setup round (setup commands bypass the gate: they are what opens it). */
static void setup_command(dtq_rsteps *j, dtq_rsteps_reply_fn *fn, dtq_argv *a) {
    dtq_rsteps_send(j, fn, 0, 0, a);
    dtq_argv_deinit(a);
}

typedef struct cl_setup cl_setup;
static void cluster_publish(dtq_worker *w, cl_setup *s);

static void queue_mode_reply(redisAsyncContext *ac, void *r, void *priv) {
    redisReply *reply = r;
    DTQ_UNUSED(ac);
    DTQ_UNUSED(priv);
    if (reply && reply->type == REDIS_REPLY_ERROR)
        dtq_error("setting a queue's mode from its [queue:NAME] section failed: %s", reply->str);
}

/* The modes of the [queue:NAME] sections (<ns>_queue_mode, reference 4.3), at setup and on
 * SIGHUP: producers' enqueues follow what Redis holds. Not counted: setup never waits on
 * it. In the cluster layout each call goes to its queue's slot ({ns:q}). */
static void publish_queue_modes(dtq_worker *w) {
    dtq_ctx *ctx = w->ctx;
    const dtq_config *cfg = ctx->cfg;
    char *fn = cfg->nqueue_confs ? dtq_keys_function(cfg->ns, "queue_mode") : NULL;
    for (int i = 0; i < cfg->nqueue_confs; i++) {
        const dtq_queue_conf *q = &cfg->queue_confs[i];
        char *tag;
        dtq_argv a;
        if (!q->mode) continue;
        dtq_argv_init(&a);
        dtq_argv_adds(&a, "FCALL");
        dtq_argv_adds(&a, fn);
        dtq_argv_adds(&a, "0");
        dtq_argv_adds(&a, cfg->worker_id);
        dtq_argv_adds(&a, q->name);
        dtq_argv_adds(&a, q->mode);
        /* setup's own commands bypass the gate (they are what opens it) */
        if (dtq_ctx_cluster(ctx)) {
            tag = dtq_xasprintf("{%s:%s}", cfg->ns, q->name);
            dtq_call_tag(&a, tag);
            dtq_rcluster_command(ctx->rc, queue_mode_reply, NULL, a.argc, (const char **)a.argv,
                                 a.lens);
            free(tag);
        } else {
            dtq_rconn_command(ctx->cmd, queue_mode_reply, NULL, a.argc, (const char **)a.argv,
                              a.lens);
        }
        dtq_argv_deinit(&a);
    }
    free(fn);
}

/* <prefix>:config: the limits the Functions enforce, as this daemon's config says (the
 * fields are config.c's, dtq_config_each_field); a command of setup round j, or on its
 * own with j NULL. */
static void publish_config(dtq_worker *w, dtq_rsteps *j) {
    dtq_argv a;
    char *key;
    if (dtq_ctx_cluster(w->ctx)) {
        cluster_publish(w, NULL);
        return;
    }
    key = dtq_key_config(w->ctx->prefix);
    dtq_argv_init(&a);
    dtq_argv_adds(&a, "HSET");
    dtq_argv_adds(&a, key);
    dtq_config_publish_args(w->ctx->cfg, &a);
    free(key);
    if (j) {
        setup_command(j, setup_reply, &a);
    } else {
        dtq_rconn_command(w->ctx->cmd, NULL, NULL, a.argc, (const char **)a.argv, a.lens);
        dtq_argv_deinit(&a);
    }
}

/* ----------------------------------------------------------------- the cluster layout
 * Setup once the router is up (and again whenever it was down): first, on every primary
 * of the map, the Functions library (<ns>_version, FUNCTION LOAD REPLACE when it is not
 * this build's) and the eviction policy; then, through the router, the layout check
 * (<ns>_layout with {ns}: a namespace laid out for a single Redis stops the daemon), the
 * queue index ({ns}:queues), each served queue's config copy ({ns:q}:config) and the
 * consumer groups. A primary whose link comes up later (a promoted replica, a node that
 * took slots, a reconnect) gets the library check from the router's node hook, and the
 * recovery of its queues (what a reply lost with the old link claimed for us). */
typedef struct cl_setup {
    dtq_worker *w;
    unsigned gen;
    int left;   /* replies to come in this phase */
    int failed; /* retry in 5 s */
    int fatal;  /* the namespace is laid out for a single Redis: stop */
    int phase;  /* 1: the library on every primary; 2: the layout; 3: the writes */
} cl_setup;

typedef struct cl_cmd {
    cl_setup *s;
    int kind;
    int slot; /* the node's slot (library commands) */
} cl_cmd;

enum { CL_POLICY, CL_VERSION, CL_LOAD, CL_LAYOUT, CL_PLAIN };

static void cl_setup_send(cl_setup *s, int kind, int slot, dtq_argv *a);
static void cl_setup_phase2(cl_setup *s);
static void cl_setup_phase3(cl_setup *s);
static void cl_setup_release(cl_setup *s);

static void cl_setup_fail(cl_setup *s) {
    struct timeval tv = {5, 0};
    if (s->failed || s->fatal) return;
    s->failed = 1;
    evtimer_add(s->w->setup_retry_timer, &tv);
}

static void cl_setup_reply(redisAsyncContext *ac, void *r, void *priv) {
    cl_cmd *c = priv;
    cl_setup *s = c->s;
    dtq_worker *w = s->w;
    redisReply *reply = r;
    int kind = c->kind, slot = c->slot;
    DTQ_UNUSED(ac);
    free(c);
    if (s->gen != w->setup_gen) {
        /* a newer round replaced this one */
    } else if (!reply) {
        cl_setup_fail(s); /* a node's link lost: rcluster reads the map again */
    } else if (kind == CL_POLICY) {
        if (check_eviction_policy(w, reply) != 0) cl_setup_fail(s);
    } else if (kind == CL_VERSION) {
        if (!library_current(w, reply)) {
            dtq_argv a;
            library_load_argv(w, &a);
            cl_setup_send(s, CL_LOAD, slot, &a);
        }
    } else if (kind == CL_LAYOUT && reply->type == REDIS_REPLY_ERROR &&
               dtq_reply_class_of(reply->str) == DTQ_REPLY_WRONG_LAYOUT) {
        dtq_error("redis setup: %s; not starting", reply->str);
        s->fatal = 1;
        w->exit_code = DTQ_EX_CONFIG;
        event_base_loopbreak(w->ctx->base);
    } else if (reply->type == REDIS_REPLY_ERROR &&
               dtq_reply_class_of(reply->str) != DTQ_REPLY_BUSYGROUP) {
        if (kind == CL_LOAD && dtq_reply_class_of(reply->str) == DTQ_REPLY_NOPERM)
            library_refused(w);
        else if (!s->failed)
            dtq_error("redis setup failed: %s; retrying in 5s", reply->str);
        cl_setup_fail(s);
    }
    cl_setup_release(s);
}

/* One reply of the phase is in (or the phase's hold is let go): the next phase, or
 * setup_done, once they all are. */
static void cl_setup_release(cl_setup *s) {
    dtq_worker *w = s->w;
    if (--s->left > 0) return;
    if (s->gen == w->setup_gen && !s->failed && !s->fatal) {
        if (s->phase == 1) {
            cl_setup_phase2(s);
            return;
        }
        if (s->phase == 2) {
            cl_setup_phase3(s);
            return;
        }
        free(s);
        setup_done(w);
        return;
    }
    free(s);
}

/* Sends a command of the round: to the node of slot (>= 0), else routed by its key. */
static void cl_setup_send(cl_setup *s, int kind, int slot, dtq_argv *a) {
    dtq_rcluster *rc = s->w->ctx->rc;
    cl_cmd *c = dtq_xcalloc(1, sizeof(*c));
    int ok;
    c->s = s;
    c->kind = kind;
    c->slot = slot;
    if (slot >= 0)
        ok = dtq_rcluster_command_slot(rc, slot, cl_setup_reply, c, a->argc, (const char **)a->argv,
                                       a->lens);
    else
        ok = dtq_rcluster_command(rc, cl_setup_reply, c, a->argc, (const char **)a->argv, a->lens);
    dtq_argv_deinit(a);
    if (ok != DTQ_OK) {
        free(c);
        cl_setup_fail(s);
        return;
    }
    s->left++;
}

/* The library and the eviction policy of the primary that serves slot. */
static void cl_library_check(cl_setup *s, int slot) {
    dtq_argv a;
    char *fn = dtq_keys_function(s->w->ctx->cfg->ns, "version");
    dtq_argv_init(&a);
    dtq_argv_adds(&a, "INFO");
    dtq_argv_adds(&a, "memory");
    cl_setup_send(s, CL_POLICY, slot, &a);
    dtq_argv_init(&a);
    dtq_argv_adds(&a, "FCALL_RO");
    dtq_argv_adds(&a, fn);
    dtq_argv_adds(&a, "0");
    cl_setup_send(s, CL_VERSION, slot, &a);
    free(fn);
}

/* {ns}:queues (the index of every queue) gets the served ones, and each served queue's own
 * {ns:q}:queues its name; each {ns:q}:config copy is this daemon's config. With s NULL:
 * on their own (SIGHUP). */
static void cluster_publish(dtq_worker *w, cl_setup *s) {
    dtq_ctx *ctx = w->ctx;
    dtq_argv a;
    char *key = dtq_key_queues(ctx->prefix);
    dtq_argv_init(&a);
    dtq_argv_adds(&a, "SADD");
    dtq_argv_adds(&a, key);
    for (int q = 0; q < ctx->streams.nqueues; q++) dtq_argv_adds(&a, ctx->streams.queues[q]);
    free(key);
    if (s)
        cl_setup_send(s, CL_PLAIN, -1, &a);
    else {
        dtq_rcluster_command(ctx->rc, NULL, NULL, a.argc, (const char **)a.argv, a.lens);
        dtq_argv_deinit(&a);
    }
    for (int q = 0; q < ctx->streams.nqueues; q++) {
        /* the config copy, and the queue in its own one-member {ns:q}:queues, which the
         * Functions' queue checks read (pause, queue_view, queue_remove) */
        for (int step = 0; step < 2; step++) {
            key =
                step ? dtq_key_queues(dtq_ctx_qtag(ctx, q)) : dtq_key_config(dtq_ctx_qtag(ctx, q));
            dtq_argv_init(&a);
            dtq_argv_adds(&a, step ? "SADD" : "HSET");
            dtq_argv_adds(&a, key);
            if (step)
                dtq_argv_adds(&a, ctx->streams.queues[q]);
            else
                dtq_config_publish_args(ctx->cfg, &a);
            free(key);
            if (s) {
                cl_setup_send(s, CL_PLAIN, -1, &a);
            } else {
                dtq_rcluster_command(ctx->rc, NULL, NULL, a.argc, (const char **)a.argv, a.lens);
                dtq_argv_deinit(&a);
            }
        }
    }
}

static void cl_setup_phase2(cl_setup *s) {
    dtq_ctx *ctx = s->w->ctx;
    dtq_argv a;
    char *fn = dtq_keys_function(ctx->cfg->ns, "layout");
    s->phase = 2;
    s->left = 1; /* held while the phase's commands leave */
    dtq_argv_init(&a);
    dtq_argv_adds(&a, "FCALL");
    dtq_argv_adds(&a, fn);
    dtq_argv_adds(&a, "1");
    dtq_argv_adds(&a, ctx->gtag);
    dtq_argv_adds(&a, "cluster");
    free(fn);
    cl_setup_send(s, CL_LAYOUT, -1, &a);
    cl_setup_release(s);
}

static void cl_setup_phase3(cl_setup *s) {
    dtq_ctx *ctx = s->w->ctx;
    dtq_argv a;
    s->phase = 3;
    s->left = 1; /* held while the phase's commands leave */
    cluster_publish(s->w, s);
    publish_queue_modes(s->w);
    for (int i = 0; i < dtq_streams_count(&ctx->streams); i++) {
        dtq_argv_init(&a);
        dtq_argv_adds(&a, "XGROUP");
        dtq_argv_adds(&a, "CREATE");
        dtq_argv_adds(&a, ctx->streams.keys[i]);
        dtq_argv_adds(&a, DTQ_GROUP);
        dtq_argv_adds(&a, "0");
        dtq_argv_adds(&a, "MKSTREAM");
        cl_setup_send(s, CL_PLAIN, -1, &a);
    }
    cl_setup_release(s);
}

static void cluster_setup(dtq_worker *w) {
    int n = dtq_rcluster_primaries(w->ctx->rc, NULL, 0);
    dtq_rcluster_primary *p = dtq_xcalloc((size_t)(n > 0 ? n : 1), sizeof(*p));
    cl_setup *s = dtq_xcalloc(1, sizeof(*s));
    n = dtq_rcluster_primaries(w->ctx->rc, p, n);
    w->ctx->ready = 0;
    s->w = w;
    s->gen = ++w->setup_gen;
    s->phase = 1;
    s->left = 1; /* held while the phase's commands leave */
    for (int i = 0; i < n; i++)
        if (p[i].slot >= 0) cl_library_check(s, p[i].slot);
    free(p);
    cl_setup_release(s);
}

/* The namespace's layout marker (<ns>_layout): a namespace laid out for Redis Cluster
 * (or another layout) stops the daemon with the Function's message, which says how to
 * move. Checked before setup writes anything. */
static void layout_reply(dtq_rsteps *j, redisReply *reply, int a, int b) {
    setup_round *s = current_round(j);
    dtq_worker *w;
    if (!s) return;
    w = s->w;
    if (reply->type == REDIS_REPLY_ERROR &&
        (dtq_reply_class_of(reply->str) == DTQ_REPLY_NOPERM ||
         dtq_reply_class_of(reply->str) == DTQ_REPLY_NO_FUNCTION)) {
        /* a worker role made before <ns>_layout existed, or an admin's older library: a
         * single Redis's namespace can only be single, so serving goes on unchecked */
        if (!w->layout_warned)
            dtq_warn("redis setup: %s_layout: %s; the namespace's layout is not checked "
                     "(apply the worker role again: dtqctl acl worker)",
                     w->ctx->cfg->ns, reply->str);
        w->layout_warned = 1;
        return;
    }
    if (reply->type != REDIS_REPLY_ERROR ||
        dtq_reply_class_of(reply->str) != DTQ_REPLY_WRONG_LAYOUT) {
        setup_reply(j, reply, a, b);
        return;
    }
    dtq_error("redis setup: %s; not starting", reply->str);
    s->failed = 1;
    w->exit_code = DTQ_EX_CONFIG;
    event_base_loopbreak(w->ctx->base);
}

/* The round's steps after the library: the layout, then the writes. */
static setup_round *step_round(dtq_rsteps *j) {
    setup_round *s = current_round(j);
    if (!s || s->failed) {
        dtq_rsteps_end(j);
        return NULL;
    }
    return s;
}

static void setup_writes(dtq_rsteps *j) {
    setup_round *s = step_round(j);
    dtq_worker *w;
    dtq_ctx *ctx;
    dtq_argv a;
    if (!s) return;
    w = s->w;
    ctx = w->ctx;
    publish_config(w, j);
    publish_queue_modes(w);
    /* <prefix>:queues, the queues <ns>_stats reports on; not counted: setup never waits on it */
    {
        char *key = dtq_key_queues(ctx->prefix);
        dtq_argv_init(&a);
        dtq_argv_adds(&a, "SADD");
        dtq_argv_adds(&a, key);
        for (int q = 0; q < ctx->streams.nqueues; q++) dtq_argv_adds(&a, ctx->streams.queues[q]);
        dtq_rconn_command(ctx->cmd, NULL, NULL, a.argc, (const char **)a.argv, a.lens);
        dtq_argv_deinit(&a);
        free(key);
    }
    for (int i = 0; i < dtq_streams_count(&ctx->streams); i++) {
        dtq_argv_init(&a);
        dtq_argv_adds(&a, "XGROUP");
        dtq_argv_adds(&a, "CREATE");
        dtq_argv_adds(&a, ctx->streams.keys[i]);
        dtq_argv_adds(&a, DTQ_GROUP);
        dtq_argv_adds(&a, "0");
        dtq_argv_adds(&a, "MKSTREAM");
        setup_command(j, setup_reply, &a);
    }
    dtq_rsteps_wait(j, setup_end);
}

static void setup_layout(dtq_rsteps *j) {
    setup_round *s = step_round(j);
    char *fn;
    if (!s) return;
    fn = dtq_keys_function(s->w->ctx->cfg->ns, "layout");
    dtq_rsteps_sendl(j, layout_reply, 0, 0, "FCALL", fn, "0", "single", NULL);
    free(fn);
    dtq_rsteps_wait(j, setup_writes);
}

static void setup_redis(dtq_worker *w) {
    dtq_ctx *ctx = w->ctx;
    setup_round *s;
    if (ctx->rc) {
        cluster_setup(w);
        return;
    }
    s = dtq_xcalloc(1, sizeof(*s));
    dtq_rsteps *j;
    dtq_argv a;
    ctx->ready = 0;
    s->w = w;
    s->gen = ++w->setup_gen; /* a round still in flight is ignored from here on */
    /* a lost link ends the round: the next connect starts another */
    j = dtq_rsteps_new(ctx->cmd, s, free, NULL);
    dtq_argv_init(&a);
    dtq_argv_adds(&a, "INFO");
    dtq_argv_adds(&a, "memory");
    setup_command(j, policy_reply, &a);
    {
        char *fn = dtq_keys_function(ctx->cfg->ns, "version");
        dtq_rsteps_sendl(j, version_reply, 0, 0, "FCALL_RO", fn, "0", NULL);
        free(fn);
    }
    dtq_rsteps_wait(j, setup_layout);
}

static void redis_state(dtq_worker *w, int up) {
    if (up) {
        setup_redis(w);
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

/* The node hook's library check of one primary, after the first setup. */
typedef struct node_check {
    dtq_worker *w;
    int slot;
} node_check;

static void node_load_cb(redisAsyncContext *ac, void *r, void *priv) {
    node_check *nc = priv;
    redisReply *reply = r;
    DTQ_UNUSED(ac);
    if (reply && reply->type == REDIS_REPLY_ERROR) {
        if (dtq_reply_class_of(reply->str) == DTQ_REPLY_NOPERM)
            library_refused(nc->w);
        else
            dtq_error("redis setup: loading the Functions on the node of slot %d failed: %s",
                      nc->slot, reply->str);
    }
    free(nc);
}

static void node_version_cb(redisAsyncContext *ac, void *r, void *priv) {
    node_check *nc = priv;
    redisReply *reply = r;
    dtq_argv a;
    DTQ_UNUSED(ac);
    if (!reply || library_current(nc->w, reply) || !nc->w->ctx->rc) {
        free(nc);
        return;
    }
    dtq_info("redis setup: loading the Functions on the node of slot %d (%s)", nc->slot,
             nc->w->library_why);
    library_load_argv(nc->w, &a);
    if (dtq_rcluster_command_slot(nc->w->ctx->rc, nc->slot, node_load_cb, nc, a.argc,
                                  (const char **)a.argv, a.lens) != DTQ_OK)
        free(nc);
    dtq_argv_deinit(&a);
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
    node_check *nc;
    char *fn;
    const char *argv[3];
    if (!w->ever_ready) return;
    nc = dtq_xcalloc(1, sizeof(*nc));
    nc->w = w;
    nc->slot = slot;
    fn = dtq_keys_function(ctx->cfg->ns, "version");
    argv[0] = "FCALL_RO";
    argv[1] = fn;
    argv[2] = "0";
    if (dtq_rcluster_command_slot(rc, slot, node_version_cb, nc, 3, argv, NULL) != DTQ_OK) free(nc);
    free(fn);
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

static void finish_stop(dtq_worker *w) {
    if (w->state == DTQ_WORKER_STOPPED) return;
    set_state(w, DTQ_WORKER_STOPPED);
    dtq_info("drained; stopping");
    if (dtq_ctx_is_up(w->ctx)) {
        worker_event(w, "WORKER_STOPPED");
        deregister(w);
    }
    dtq_heartbeat_set_status(w->heartbeat, "stopped", final_beat_done, w);
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
        publish_config(w, NULL);
        publish_queue_modes(w);
    }
    dtq_consumer_reset(w->consumer);
    dtq_cron_pass_config_changed(w->cron);
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
    dtq_handler_registry *reg = dtq_handler_registry_new(cfg, err, errlen);
    struct event_base *base;
    dtq_redis_url url;
    dtq_tls *tls = NULL;
    dtq_ctx *ctx;
    int64_t wd;
    if (!reg) return NULL;
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
    w->finisher = dtq_finisher_new(ctx);
    w->executor = dtq_executor_new(ctx, w->finisher);
    w->consumer = dtq_consumer_new(ctx, w->executor, w->finisher);
    w->reaper = dtq_reaper_new(ctx, w->executor, w->finisher);
    w->lease = dtq_lease_new(ctx, w->executor, w->finisher);
    w->scheduler = dtq_scheduler_new(ctx);
    w->cron = dtq_cron_pass_new(ctx);
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
    w->setup_retry_timer = evtimer_new(base, setup_retry_cb, w);
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
    struct event *events[] = {w ? w->sig_term : NULL,        w ? w->sig_int : NULL,
                              w ? w->sig_hup : NULL,         w ? w->sig_pipe : NULL,
                              w ? w->sig_chld : NULL,        w ? w->drain_timer : NULL,
                              w ? w->hard_stop_timer : NULL, w ? w->setup_retry_timer : NULL,
                              w ? w->watchdog_timer : NULL,  w ? w->cluster_watch_timer : NULL};
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
    dtq_http_free(w->http);
    dtq_heartbeat_free(w->heartbeat);
    dtq_scheduler_free(w->scheduler);
    dtq_cron_pass_free(w->cron);
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
