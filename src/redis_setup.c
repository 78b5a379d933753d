/* redis_setup.c: Redis set up for the daemon after every (re)connect (redis_setup.h), in
 * both layouts: a single Redis's round of pipelined steps (rsteps.h), the cluster's
 * phases over every primary and the check of each primary whose link comes up later. */
#include "redis_setup.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calls.h"
#include "keys.h"
#include "log.h"
#include "rcluster.h"
#include "rsteps.h"
#include "reply_class.h"
#include "scope.h"
#include "scripts.h"
#include "sdnotify.h"
#include "util.h"

struct dtq_redis_setup {
    dtq_ctx *ctx;
    dtq_redis_setup_hooks hooks;
    unsigned round_gen;        /* the current setup round's number: older rounds are ignored */
    int policy_warned;         /* the volatile-* eviction warning was logged */
    int layout_warned;         /* <ns>_layout could not be called */
    char library_why[256];     /* why the loaded library cannot be used, if it cannot */
    char library_problem[640]; /* the missing step, as last logged */
    struct event *setup_retry_timer; /* a round that gave up: the next one in 5 s */
};

static void setup_redis(dtq_redis_setup *rs);

/* XGROUP CREATE of the consumer group on stream key, made with the stream (caller
 * deinits); BUSYGROUP, a group that exists, is no failure. */
static void group_create_argv(dtq_argv *a, const char *key) {
    dtq_argv_init(a);
    dtq_argv_adds(a, "XGROUP");
    dtq_argv_adds(a, "CREATE");
    dtq_argv_adds(a, key);
    dtq_argv_adds(a, DTQ_GROUP);
    dtq_argv_adds(a, "0");
    dtq_argv_adds(a, "MKSTREAM");
}

/* The round's replies are all in and nothing failed: the gate may open. */
static void setup_done(dtq_redis_setup *rs) {
    rs->hooks.done(rs->hooks.arg);
}

static void setup_retry_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_redis_setup *rs = arg;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (rs->ctx->rc ? dtq_rcluster_is_up(rs->ctx->rc) : dtq_rconn_is_up(rs->ctx->cmd)) {
        if (!rs->ctx->ready) setup_redis(rs);
    }
}

/* A setup round: one step of commands (rsteps.h) after a (re)connect; setup_done once its
 * replies are in, unless it gave up. A round that a newer one replaced is ignored. */
typedef struct setup_round {
    dtq_redis_setup *rs;
    unsigned gen;
    int failed; /* this round gave up: its other replies are ignored */
} setup_round;

/* The round's state while it is the current one, else NULL (its replies are ignored). */
static setup_round *current_round(dtq_rsteps *j) {
    setup_round *s = dtq_rsteps_state(j);
    return s->gen == s->rs->round_gen ? s : NULL;
}

/* Gives up this setup round (its other replies are ignored) and tries again in 5 s. */
static void setup_retry_later(setup_round *s) {
    struct timeval tv = {5, 0};
    s->failed = 1;
    evtimer_add(s->rs->setup_retry_timer, &tv);
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
    dtq_redis_setup *rs = s && !s->failed ? s->rs : NULL;
    dtq_rsteps_end(j);
    if (rs) setup_done(rs);
}

/* Evicted task hashes are silently lost tasks, so a policy that may evict any key
 * (allkeys-*) keeps the daemon from serving: it says why and checks again every 5 s. The
 * volatile-* policies evict only keys with a TTL (finished tasks, results, idempotency
 * records): served, with a warning. Returns 0 to serve. */
static int check_eviction_policy(dtq_redis_setup *rs, const redisReply *reply) {
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
    if (!strncmp(policy, "volatile-", 9) && !rs->policy_warned) {
        dtq_warn("redis maxmemory-policy is %s: finished tasks, results and idempotency "
                 "records (keys with a TTL) may be evicted early; noeviction is recommended",
                 policy);
        rs->policy_warned = 1;
    }
    return 0;
}

static void policy_reply(dtq_rsteps *j, redisReply *reply, int a, int b) {
    setup_round *s = current_round(j);
    if (s && check_eviction_policy(s->rs, reply) != 0) {
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
static void library_refused(dtq_redis_setup *rs) {
    const char *ns = rs->ctx->cfg->ns;
    char msg[sizeof(rs->library_problem)];
    snprintf(msg, sizeof(msg),
             "redis setup: this redis user may not FUNCTION LOAD, and %s; an admin must run "
             "'dtqctl -n %s functions install' (dtqctl %s); not serving until then, checking "
             "every 5s",
             rs->library_why, ns, DTQ_VERSION);
    if (strcmp(msg, rs->library_problem)) {
        dtq_error("%s", msg);
        dtq_sdnotify("STATUS=waiting for the dtq Functions library (dtqctl functions install)");
        snprintf(rs->library_problem, sizeof(rs->library_problem), "%s", msg);
    }
}

static void load_reply(dtq_rsteps *j, redisReply *reply, int a, int b) {
    setup_round *s = current_round(j);
    if (!s) return;
    if (reply->type != REDIS_REPLY_ERROR || dtq_reply_class_of(reply->str) != DTQ_REPLY_NOPERM) {
        setup_reply(j, reply, a, b);
        return;
    }
    library_refused(s->rs);
    setup_retry_later(s);
}

/* <ns>_version answered: 1 when it is this build's library; else rs->library_why says why
 * the loaded one cannot be used. */
static int library_current(dtq_redis_setup *rs, const redisReply *reply) {
    const char *ns = rs->ctx->cfg->ns, *want = dtq_scripts_version();
    if (reply->type == REDIS_REPLY_STRING && !strcmp(reply->str, want)) {
        if (rs->library_problem[0])
            dtq_info("the Functions library %s version %s is installed; serving", ns, want);
        rs->library_problem[0] = '\0';
        return 1;
    }
    if (reply->type == REDIS_REPLY_STRING)
        snprintf(rs->library_why, sizeof(rs->library_why),
                 "the installed Functions library is version %.64s, not %s", reply->str, want);
    else if (reply->type == REDIS_REPLY_ERROR &&
             dtq_reply_class_of(reply->str) == DTQ_REPLY_NO_FUNCTION)
        snprintf(rs->library_why, sizeof(rs->library_why),
                 "the Functions library (namespace %s) is not installed", ns);
    else if (reply->type == REDIS_REPLY_ERROR && dtq_reply_class_of(reply->str) == DTQ_REPLY_NOPERM)
        snprintf(rs->library_why, sizeof(rs->library_why),
                 "it may not call %s_version either (give it the worker role: dtqctl acl "
                 "worker)",
                 ns);
    else
        snprintf(rs->library_why, sizeof(rs->library_why), "%s_version failed: %.120s", ns,
                 reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
    return 0;
}

/* FUNCTION LOAD REPLACE of this build's library (caller deinits). */
static void library_load_argv(dtq_redis_setup *rs, dtq_argv *argv) {
    size_t len;
    char *lib = dtq_scripts_library(rs->ctx->cfg->ns, rs->ctx->prefix, &len);
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
    if (library_current(s->rs, reply)) {
        setup_reply(j, reply, a, b);
        return;
    }
    library_load_argv(s->rs, &argv);
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
static void cluster_publish(dtq_redis_setup *rs, cl_setup *s);

static void queue_mode_reply(redisAsyncContext *ac, void *r, void *priv) {
    redisReply *reply = r;
    DTQ_UNUSED(ac);
    DTQ_UNUSED(priv);
    if (reply && reply->type == REDIS_REPLY_ERROR)
        dtq_error("setting a queue's mode from its [queue:NAME] section failed: %s", reply->str);
}

/* <ns>_layout could not be called (dtq_scope_layout_verdict's unchecked: a worker role made
 * before it existed, or an admin's older library): serving goes on, warned once. */
static void layout_unchecked(dtq_redis_setup *rs, const redisReply *reply) {
    if (!rs->layout_warned)
        dtq_warn("redis setup: %s_layout: %s; the namespace's layout is not checked "
                 "(apply the worker role again: dtqctl acl worker)",
                 rs->ctx->cfg->ns, reply->str);
    rs->layout_warned = 1;
}

/* The modes of the [queue:NAME] sections (<ns>_queue_mode, reference 4.3), at setup and on
 * SIGHUP: producers' enqueues follow what Redis holds. Not counted: setup never waits on
 * it. In the cluster layout each call goes to its queue's slot ({ns:q}). */
static void publish_queue_modes(dtq_redis_setup *rs) {
    dtq_ctx *ctx = rs->ctx;
    const dtq_config *cfg = ctx->cfg;
    char *fn = cfg->nqueue_confs ? dtq_keys_function(cfg->ns, "queue_mode") : NULL;
    for (int i = 0; i < cfg->nqueue_confs; i++) {
        const dtq_queue_conf *q = &cfg->queue_confs[i];
        char *tag;
        dtq_argv a;
        if (!q->mode) continue;
        tag = dtq_scope_tag(cfg->ns, dtq_ctx_cluster(ctx), q->name);
        dtq_scope_fcall(&a, 0, fn, tag);
        dtq_argv_adds(&a, cfg->worker_id);
        dtq_argv_adds(&a, q->name);
        dtq_argv_adds(&a, q->mode);
        /* setup's own commands bypass the gate (they are what opens it) */
        if (tag) {
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
static void publish_config(dtq_redis_setup *rs, dtq_rsteps *j) {
    dtq_argv a;
    char *key;
    if (dtq_ctx_cluster(rs->ctx)) {
        cluster_publish(rs, NULL);
        return;
    }
    key = dtq_key_config(rs->ctx->prefix);
    dtq_argv_init(&a);
    dtq_argv_adds(&a, "HSET");
    dtq_argv_adds(&a, key);
    dtq_config_publish_args(rs->ctx->cfg, &a);
    free(key);
    if (j) {
        setup_command(j, setup_reply, &a);
    } else {
        dtq_rconn_command(rs->ctx->cmd, NULL, NULL, a.argc, (const char **)a.argv, a.lens);
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
    dtq_redis_setup *rs;
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
    evtimer_add(s->rs->setup_retry_timer, &tv);
}

static void cl_setup_reply(redisAsyncContext *ac, void *r, void *priv) {
    cl_cmd *c = priv;
    cl_setup *s = c->s;
    dtq_redis_setup *rs = s->rs;
    redisReply *reply = r;
    int kind = c->kind, slot = c->slot;
    DTQ_UNUSED(ac);
    free(c);
    if (s->gen != rs->round_gen) {
        /* a newer round replaced this one */
    } else if (!reply) {
        cl_setup_fail(s); /* a node's link lost: rcluster reads the map again */
    } else if (kind == CL_POLICY) {
        if (check_eviction_policy(rs, reply) != 0) cl_setup_fail(s);
    } else if (kind == CL_VERSION) {
        if (!library_current(rs, reply)) {
            dtq_argv a;
            library_load_argv(rs, &a);
            cl_setup_send(s, CL_LOAD, slot, &a);
        }
    } else if (kind == CL_LAYOUT && dtq_scope_layout_verdict(reply, 1) == DTQ_SCOPE_LAYOUT_WRONG) {
        if (!rs->hooks.wrong_layout(rs->hooks.arg, reply->str)) s->fatal = 1;
    } else if (kind == CL_LAYOUT &&
               dtq_scope_layout_verdict(reply, 1) == DTQ_SCOPE_LAYOUT_UNCHECKED) {
        layout_unchecked(rs, reply);
    } else if (reply->type == REDIS_REPLY_ERROR &&
               dtq_reply_class_of(reply->str) != DTQ_REPLY_BUSYGROUP) {
        if (kind == CL_LOAD && dtq_reply_class_of(reply->str) == DTQ_REPLY_NOPERM)
            library_refused(rs);
        else if (!s->failed)
            dtq_error("redis setup failed: %s; retrying in 5s", reply->str);
        cl_setup_fail(s);
    }
    cl_setup_release(s);
}

/* One reply of the phase is in (or the phase's hold is let go): the next phase, or
 * setup_done, once they all are. */
static void cl_setup_release(cl_setup *s) {
    dtq_redis_setup *rs = s->rs;
    if (--s->left > 0) return;
    if (s->gen == rs->round_gen && !s->failed && !s->fatal) {
        if (s->phase == 1) {
            cl_setup_phase2(s);
            return;
        }
        if (s->phase == 2) {
            cl_setup_phase3(s);
            return;
        }
        free(s);
        setup_done(rs);
        return;
    }
    free(s);
}

/* Sends a command of the round: to the node of slot (>= 0), else routed by its key. */
static void cl_setup_send(cl_setup *s, int kind, int slot, dtq_argv *a) {
    dtq_rcluster *rc = s->rs->ctx->rc;
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
    char *fn = dtq_keys_function(s->rs->ctx->cfg->ns, "version");
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
static void cluster_publish(dtq_redis_setup *rs, cl_setup *s) {
    dtq_ctx *ctx = rs->ctx;
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
    dtq_ctx *ctx = s->rs->ctx;
    dtq_argv a;
    s->phase = 2;
    s->left = 1; /* held while the phase's commands leave */
    dtq_scope_layout_call(&a, ctx->cfg->ns, 1);
    cl_setup_send(s, CL_LAYOUT, -1, &a);
    cl_setup_release(s);
}

static void cl_setup_phase3(cl_setup *s) {
    dtq_ctx *ctx = s->rs->ctx;
    dtq_argv a;
    s->phase = 3;
    s->left = 1; /* held while the phase's commands leave */
    cluster_publish(s->rs, s);
    publish_queue_modes(s->rs);
    for (int i = 0; i < dtq_streams_count(&ctx->streams); i++) {
        group_create_argv(&a, ctx->streams.keys[i]);
        cl_setup_send(s, CL_PLAIN, -1, &a);
    }
    cl_setup_release(s);
}

static void cluster_setup(dtq_redis_setup *rs) {
    int n = dtq_rcluster_primaries(rs->ctx->rc, NULL, 0);
    dtq_rcluster_primary *p = dtq_xcalloc((size_t)(n > 0 ? n : 1), sizeof(*p));
    cl_setup *s = dtq_xcalloc(1, sizeof(*s));
    n = dtq_rcluster_primaries(rs->ctx->rc, p, n);
    rs->ctx->ready = 0;
    s->rs = rs;
    s->gen = ++rs->round_gen;
    s->phase = 1;
    s->left = 1; /* held while the phase's commands leave */
    for (int i = 0; i < n; i++)
        if (p[i].slot >= 0) cl_library_check(s, p[i].slot);
    free(p);
    cl_setup_release(s);
}

/* The namespace's layout marker (<ns>_layout): a namespace laid out for Redis Cluster
 * (or another layout) stops a starting daemon with the Function's message, which says how
 * to move (a daemon that has served serves on: the wrong_layout hook). Checked before setup
 * writes anything. */
static void layout_reply(dtq_rsteps *j, redisReply *reply, int a, int b) {
    setup_round *s = current_round(j);
    dtq_redis_setup *rs;
    if (!s) return;
    rs = s->rs;
    switch (dtq_scope_layout_verdict(reply, 0)) {
    case DTQ_SCOPE_LAYOUT_UNCHECKED: layout_unchecked(rs, reply); return;
    case DTQ_SCOPE_LAYOUT_WRONG: break;
    default: setup_reply(j, reply, a, b); return;
    }
    if (rs->hooks.wrong_layout(rs->hooks.arg, reply->str)) return;
    s->failed = 1;
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
    dtq_redis_setup *rs;
    dtq_ctx *ctx;
    dtq_argv a;
    if (!s) return;
    rs = s->rs;
    ctx = rs->ctx;
    publish_config(rs, j);
    publish_queue_modes(rs);
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
        group_create_argv(&a, ctx->streams.keys[i]);
        setup_command(j, setup_reply, &a);
    }
    dtq_rsteps_wait(j, setup_end);
}

static void setup_layout(dtq_rsteps *j) {
    setup_round *s = step_round(j);
    dtq_argv a;
    if (!s) return;
    dtq_scope_layout_call(&a, s->rs->ctx->cfg->ns, 0);
    dtq_rsteps_send(j, layout_reply, 0, 0, &a);
    dtq_argv_deinit(&a);
    dtq_rsteps_wait(j, setup_writes);
}

static void setup_redis(dtq_redis_setup *rs) {
    dtq_ctx *ctx = rs->ctx;
    setup_round *s;
    if (ctx->rc) {
        cluster_setup(rs);
        return;
    }
    s = dtq_xcalloc(1, sizeof(*s));
    dtq_rsteps *j;
    dtq_argv a;
    ctx->ready = 0;
    s->rs = rs;
    s->gen = ++rs->round_gen; /* a round still in flight is ignored from here on */
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

/* The node hook's library check of one primary, after the first setup. */
typedef struct node_check {
    dtq_redis_setup *rs;
    int slot;
} node_check;

static void node_load_cb(redisAsyncContext *ac, void *r, void *priv) {
    node_check *nc = priv;
    redisReply *reply = r;
    DTQ_UNUSED(ac);
    if (reply && reply->type == REDIS_REPLY_ERROR) {
        if (dtq_reply_class_of(reply->str) == DTQ_REPLY_NOPERM)
            library_refused(nc->rs);
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
    if (!reply || library_current(nc->rs, reply) || !nc->rs->ctx->rc) {
        free(nc);
        return;
    }
    dtq_info("redis setup: loading the Functions on the node of slot %d (%s)", nc->slot,
             nc->rs->library_why);
    library_load_argv(nc->rs, &a);
    if (dtq_rcluster_command_slot(nc->rs->ctx->rc, nc->slot, node_load_cb, nc, a.argc,
                                  (const char **)a.argv, a.lens) != DTQ_OK)
        free(nc);
    dtq_argv_deinit(&a);
}

/* ----------------------------------------------------------------- the module's face */

dtq_redis_setup *dtq_redis_setup_new(dtq_ctx *ctx, const dtq_redis_setup_hooks *hooks) {
    dtq_redis_setup *rs = dtq_xcalloc(1, sizeof(*rs));
    rs->ctx = ctx;
    rs->hooks = *hooks;
    rs->setup_retry_timer = evtimer_new(ctx->base, setup_retry_cb, rs);
    return rs;
}

void dtq_redis_setup_free(dtq_redis_setup *rs) {
    if (!rs) return;
    event_free(rs->setup_retry_timer);
    free(rs);
}

void dtq_redis_setup_start(dtq_redis_setup *rs) {
    setup_redis(rs);
}

void dtq_redis_setup_publish(dtq_redis_setup *rs) {
    publish_config(rs, NULL);
    publish_queue_modes(rs);
}

void dtq_redis_setup_check_node(dtq_redis_setup *rs, int slot) {
    dtq_ctx *ctx = rs->ctx;
    node_check *nc = dtq_xcalloc(1, sizeof(*nc));
    char *fn = dtq_keys_function(ctx->cfg->ns, "version");
    const char *argv[3];
    nc->rs = rs;
    nc->slot = slot;
    argv[0] = "FCALL_RO";
    argv[1] = fn;
    argv[2] = "0";
    if (dtq_rcluster_command_slot(ctx->rc, slot, node_version_cb, nc, 3, argv, NULL) != DTQ_OK)
        free(nc);
    free(fn);
}
