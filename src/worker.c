/* worker.c: the daemon's lifecycle. Builds the modules, sets Redis up after every
 * (re)connect (Functions library, published config, consumer groups), turns signals into
 * drain and reload, and decides when the process may exit. */
#include "worker.h"

#include <cjson/cJSON.h>
#include <event2/event.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "consumer.h"
#include "events.h"
#include "executor.h"
#include "handler_exec.h"
#include "heartbeat.h"
#include "http.h"
#include "log.h"
#include "scheduler.h"
#include "scripts.h"
#include "sdnotify.h"
#include "util.h"

#define HARD_STOP_GRACE_S 15

static void setup_redis(dtq_worker *w);

/* ----------------------------------------------------------------- helpers */

char *dtq_worker_key(const dtq_worker *w, const char *fmt, ...) {
    va_list ap;
    char *suffix = NULL, *key;
    va_start(ap, fmt);
    if (vasprintf(&suffix, fmt, ap) < 0) abort();
    va_end(ap);
    key = dtq_xasprintf("%s:%s", w->prefix, suffix);
    free(suffix);
    return key;
}

char *dtq_worker_fn(const dtq_worker *w, const char *name) {
    return dtq_xasprintf("%s_%s", w->cfg->ns, name);
}

int dtq_worker_is_up(const dtq_worker *w) {
    return w->ready && dtq_rconn_is_up(w->cmd);
}

int dtq_worker_command(dtq_worker *w, redisCallbackFn *cb, void *priv, int argc, char **argv,
                       const size_t *lens) {
    if (!w->ready) return DTQ_ERR;
    return dtq_rconn_command(w->cmd, cb, priv, argc, (const char **)argv, lens);
}

void dtq_worker_publish(dtq_worker *w, char *json) {
    dtq_argv a;
    char *channel;
    if (!json) return;
    channel = dtq_worker_key(w, "events");
    dtq_argv_init(&a);
    dtq_argv_adds(&a, "PUBLISH");
    dtq_argv_adds(&a, channel);
    dtq_argv_adds(&a, json);
    dtq_worker_command(w, NULL, NULL, a.argc, a.argv, a.lens);
    dtq_argv_deinit(&a);
    if (w->cfg->events_stream_maxlen > 0) {
        char *stream = dtq_worker_key(w, "stream:events");
        dtq_argv_init(&a);
        dtq_argv_adds(&a, "XADD");
        dtq_argv_adds(&a, stream);
        dtq_argv_adds(&a, "MAXLEN");
        dtq_argv_adds(&a, "~");
        dtq_argv_addll(&a, w->cfg->events_stream_maxlen);
        dtq_argv_adds(&a, "*");
        dtq_argv_adds(&a, "event");
        dtq_argv_adds(&a, json);
        dtq_worker_command(w, NULL, NULL, a.argc, a.argv, a.lens);
        dtq_argv_deinit(&a);
        free(stream);
    }
    free(channel);
    free(json);
}

static void worker_event(dtq_worker *w, const char *type) {
    dtq_worker_publish(w, dtq_events_build(w->cfg->events, dtq_now_ms(), type, "", "", "", 0,
                                           w->cfg->worker_id, NULL));
}

/* Releases what derive() built; nstreams / 10 is the number of queues it was built for. */
static void free_derived(dtq_worker *w) {
    for (int i = 0; i < w->nstreams; i++) free(w->streams[i]);
    for (int q = 0; w->paused_keys && q < w->nstreams / 10; q++) free(w->paused_keys[q]);
    free(w->streams);
    free(w->paused_keys);
    free(w->prefix);
    free(w->policy_json);
    w->streams = w->paused_keys = NULL;
    w->prefix = w->policy_json = NULL;
    w->nstreams = 0;
}

/* Derived state of a config: prefix, served streams and the claim-time policy table. */
static void derive(dtq_worker *w) {
    const dtq_config *cfg = w->cfg;
    cJSON *root = cJSON_CreateObject(), *d = cJSON_CreateArray(), *t = cJSON_CreateObject();
    free_derived(w);
    w->prefix = dtq_config_prefix(cfg);
    w->nstreams = cfg->nqueues * 10;
    w->streams = dtq_xcalloc((size_t)w->nstreams, sizeof(char *));
    for (int q = 0; q < cfg->nqueues; q++)
        for (int band = 9; band >= 0; band--)
            w->streams[q * 10 + (9 - band)] =
                dtq_worker_key(w, "stream:%s:p%d", cfg->queues[q], band);
    w->paused_keys = dtq_xcalloc((size_t)cfg->nqueues, sizeof(char *));
    for (int q = 0; q < cfg->nqueues; q++)
        w->paused_keys[q] = dtq_worker_key(w, "queue:%s:paused", cfg->queues[q]);
    cJSON_AddItemToArray(d, cJSON_CreateNumber((double)cfg->default_max_attempts));
    cJSON_AddItemToArray(d, cJSON_CreateNumber(30000));
    for (int i = 0; i < cfg->nhandlers; i++) {
        const dtq_handler_conf *h = &cfg->handlers[i];
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(
            pair, cJSON_CreateNumber(
                      (double)(h->max_attempts ? h->max_attempts : cfg->default_max_attempts)));
        cJSON_AddItemToArray(pair, cJSON_CreateNumber((double)h->timeout_ms));
        cJSON_AddItemToObject(t, h->task_type, pair);
    }
    cJSON_AddItemToObject(root, "d", d);
    cJSON_AddItemToObject(root, "t", t);
    w->policy_json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
}

/* ----------------------------------------------------------------- setup after connect */

static void setup_done(dtq_worker *w) {
    w->ready = 1;
    if (!w->ever_ready) {
        w->ever_ready = 1;
        dtq_sdnotify("READY=1\nSTATUS=connected, serving");
        worker_event(w, "WORKER_STARTED");
        dtq_info("worker %s ready: serving %d queue(s) with concurrency %lld", w->cfg->worker_id,
                 w->cfg->nqueues, (long long)w->cfg->concurrency);
    } else {
        dtq_sdnotify("STATUS=reconnected, serving");
        dtq_info("redis setup done after reconnect");
    }
    if (w->state == DTQ_WORKER_STARTING) w->state = DTQ_WORKER_RUNNING;
    dtq_heartbeat_start(w->hb);
    dtq_executor_flush(w->exec);
    if (w->state == DTQ_WORKER_RUNNING) {
        dtq_consumer_start(w->cons);
        dtq_scheduler_start(w->sched);
    }
    dtq_worker_check_drained(w);
}

static void setup_retry_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_worker *w = arg;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (dtq_rconn_is_up(w->cmd) && !w->ready) setup_redis(w);
}

static void setup_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_worker *w = priv;
    redisReply *reply = r;
    DTQ_UNUSED(ac);
    if (!reply) return; /* lost again; the next connect restarts the setup */
    if (reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, "BUSYGROUP", 9)) {
        struct timeval tv = {5, 0};
        dtq_error("redis setup failed (is this Redis 7 or newer?): %s; retrying in 5s", reply->str);
        w->setup_pending = -1000; /* poison this round */
        evtimer_add(w->setup_retry_timer, &tv);
        return;
    }
    if (--w->setup_pending == 0) setup_done(w);
}

static void setup_command(dtq_worker *w, dtq_argv *a) {
    if (dtq_rconn_command(w->cmd, setup_cb, w, a->argc, (const char **)a->argv, a->lens) == DTQ_OK)
        w->setup_pending++;
    dtq_argv_deinit(a);
}

static void publish_config(dtq_worker *w, int counted) {
    const dtq_config *cfg = w->cfg;
    dtq_argv a;
    char *key = dtq_worker_key(w, "config");
    dtq_argv_init(&a);
    dtq_argv_adds(&a, "HSET");
    dtq_argv_adds(&a, key);
#define PUT(name, v)                                                                               \
    do {                                                                                           \
        dtq_argv_adds(&a, name);                                                                   \
        dtq_argv_addll(&a, (long long)(v));                                                        \
    } while (0)
    PUT("max_payload_bytes", cfg->max_payload_bytes);
    PUT("max_queue_depth", cfg->max_queue_depth);
    PUT("default_max_attempts", cfg->default_max_attempts);
    PUT("default_priority", 5);
    PUT("task_retention_s", cfg->task_retention_s);
    PUT("result_retention_s", cfg->result_retention_s);
    PUT("idem_ttl_s", cfg->idem_ttl_s);
    PUT("dlq_maxlen", cfg->dlq_maxlen);
    PUT("dlq_enabled", cfg->dlq_enabled);
    PUT("events_stream_maxlen", cfg->events_stream_maxlen);
    PUT("result_max_bytes", cfg->result_max_bytes);
#undef PUT
    dtq_argv_adds(&a, "events");
    dtq_argv_adds(&a, cfg->events_raw);
    free(key);
    if (counted) {
        setup_command(w, &a);
    } else {
        dtq_rconn_command(w->cmd, NULL, NULL, a.argc, (const char **)a.argv, a.lens);
        dtq_argv_deinit(&a);
    }
}

static void setup_redis(dtq_worker *w) {
    dtq_argv a;
    size_t len;
    char *lib = dtq_scripts_library(w->cfg->ns, w->prefix, &len);
    w->ready = 0;
    w->setup_pending = 0;
    dtq_argv_init(&a);
    dtq_argv_adds(&a, "FUNCTION");
    dtq_argv_adds(&a, "LOAD");
    dtq_argv_adds(&a, "REPLACE");
    dtq_argv_add(&a, lib, len);
    free(lib);
    setup_command(w, &a);
    publish_config(w, 1);
    for (int i = 0; i < w->nstreams; i++) {
        dtq_argv_init(&a);
        dtq_argv_adds(&a, "XGROUP");
        dtq_argv_adds(&a, "CREATE");
        dtq_argv_adds(&a, w->streams[i]);
        dtq_argv_adds(&a, "workers");
        dtq_argv_adds(&a, "0");
        dtq_argv_adds(&a, "MKSTREAM");
        setup_command(w, &a);
    }
}

static void cmd_state_cb(dtq_rconn *rc, int up, void *arg) {
    dtq_worker *w = arg;
    DTQ_UNUSED(rc);
    if (up) {
        setup_redis(w);
        return;
    }
    w->ready = 0;
    dtq_sdnotify("STATUS=redis connection lost, reconnecting");
    dtq_scheduler_connection_lost(w->sched);
}

static void blk_state_cb(dtq_rconn *rc, int up, void *arg) {
    dtq_worker *w = arg;
    DTQ_UNUSED(rc);
    if (up) dtq_consumer_kick(w->cons);
}

/* ----------------------------------------------------------------- drain and signals */

static void final_beat_done(void *arg) {
    dtq_worker *w = arg;
    event_base_loopbreak(w->base);
}

static void finish_stop(dtq_worker *w) {
    if (w->state == DTQ_WORKER_STOPPED) return;
    w->state = DTQ_WORKER_STOPPED;
    dtq_info("drained; stopping");
    if (dtq_worker_is_up(w)) {
        worker_event(w, "WORKER_STOPPED");
        dtq_heartbeat_beat(w->hb, "stopped", final_beat_done, w);
    } else {
        event_base_loopbreak(w->base);
    }
}

void dtq_worker_check_drained(dtq_worker *w) {
    /* A fetch still in flight may hand over claimed tasks; they must run before exit. */
    if (w->state == DTQ_WORKER_DRAINING && dtq_executor_idle(w->exec) &&
        !dtq_consumer_busy(w->cons))
        finish_stop(w);
}

static void drain_expired(dtq_worker *w) {
    int n = dtq_executor_running(w->exec);
    if (n) {
        dtq_warn("drain: %d task(s) still running; stopping them and handing them back", n);
        dtq_executor_abandon_all(w->exec, "interrupted: worker shut down");
    }
    dtq_worker_check_drained(w);
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
    w->state = DTQ_WORKER_STOPPED;
    event_base_loopbreak(w->base);
}

static void start_drain(dtq_worker *w) {
    struct timeval tv = {w->cfg->drain_timeout_s, 0};
    struct timeval hard = {w->cfg->drain_timeout_s + HARD_STOP_GRACE_S, 0};
    w->state = DTQ_WORKER_DRAINING;
    dtq_sdnotify("STOPPING=1\nSTATUS=draining");
    dtq_info("draining: %d task(s) running, up to %llds", dtq_executor_running(w->exec),
             (long long)w->cfg->drain_timeout_s);
    dtq_consumer_stop(w->cons);
    dtq_scheduler_stop(w->sched);
    if (dtq_worker_is_up(w)) dtq_heartbeat_beat(w->hb, "draining", NULL, NULL);
    evtimer_add(w->drain_timer, &tv);
    evtimer_add(w->hard_stop_timer, &hard);
    dtq_worker_check_drained(w);
}

static void reload(dtq_worker *w) {
    char err[512];
    dtq_config *cfg;
    dtq_handler_registry *reg;
    enum dtq_log_level lvl;
    enum dtq_log_format fmt;
    if (!w->cfg->path) {
        dtq_warn("SIGHUP: no config file to reload");
        return;
    }
    cfg = dtq_config_load(w->cfg->path, err, sizeof(err));
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
    if (strcmp(cfg->redis_url, w->cfg->redis_url) || strcmp(cfg->ns, w->cfg->ns) ||
        cfg->cluster_hash_tag != w->cfg->cluster_hash_tag)
        dtq_warn("SIGHUP: [redis] changes take effect only after a restart");
    /* Identity and connection settings stay as started. */
    free(cfg->worker_id);
    cfg->worker_id = dtq_xstrdup(w->cfg->worker_id);
    free(cfg->redis_url);
    cfg->redis_url = dtq_xstrdup(w->cfg->redis_url);
    free(cfg->ns);
    cfg->ns = dtq_xstrdup(w->cfg->ns);
    cfg->cluster_hash_tag = w->cfg->cluster_hash_tag;
    dtq_handler_registry_free(w->handlers, 0);
    w->handlers = reg;
    dtq_config_free(w->cfg);
    w->cfg = cfg;
    derive(w);
    dtq_log_level_from_string(cfg->log_level, &lvl);
    dtq_log_format_from_string(cfg->log_format, &fmt);
    dtq_log_setup(lvl, fmt);
    dtq_exec_set_error_max(w->execs, cfg->error_max_bytes);
    if (dtq_rconn_is_up(w->cmd)) publish_config(w, 0);
    dtq_consumer_reset(w->cons);
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
        dtq_exec_reap(w->execs);
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

dtq_worker *dtq_worker_new(dtq_config *cfg, char *err, size_t errlen) {
    dtq_worker *w = dtq_xcalloc(1, sizeof(*w));
    dtq_redis_url url;
    int64_t wd;
    w->cfg = cfg;
    w->handlers = dtq_handler_registry_new(cfg, err, errlen);
    if (!w->handlers) {
        w->cfg = NULL;
        free(w);
        return NULL;
    }
    if (dtq_redis_url_parse(cfg->redis_url, &url, err, errlen) != DTQ_OK) {
        dtq_handler_registry_free(w->handlers, 1);
        free(w);
        return NULL;
    }
    w->base = event_base_new();
    if (!w->base) abort();
    w->started_at_ms = dtq_now_ms();
    if (gethostname(w->hostname, sizeof(w->hostname) - 1) != 0) strcpy(w->hostname, "unknown");
    derive(w);
    w->cmd = dtq_rconn_new(w->base, &url, cfg->connect_timeout_ms, "cmd", cmd_state_cb, w);
    w->blk = dtq_rconn_new(w->base, &url, cfg->connect_timeout_ms, "blk", blk_state_cb, w);
    dtq_redis_url_deinit(&url);
    w->execs = dtq_exec_new(w->base, cfg->error_max_bytes);
    w->exec = dtq_executor_new(w);
    w->cons = dtq_consumer_new(w);
    w->sched = dtq_scheduler_new(w);
    w->hb = dtq_heartbeat_new(w);
    if (*cfg->http_listen) {
        w->http = dtq_http_new(w, cfg->http_listen, err, errlen);
        if (!w->http) {
            w->cfg = NULL; /* the caller still owns cfg on failure */
            dtq_worker_free(w);
            return NULL;
        }
    }
    w->sig_term = evsignal_new(w->base, SIGTERM, signal_cb, w);
    w->sig_int = evsignal_new(w->base, SIGINT, signal_cb, w);
    w->sig_hup = evsignal_new(w->base, SIGHUP, signal_cb, w);
    w->sig_pipe = evsignal_new(w->base, SIGPIPE, signal_cb, w);
    w->sig_chld = evsignal_new(w->base, SIGCHLD, signal_cb, w);
    evsignal_add(w->sig_chld, NULL);
    evsignal_add(w->sig_term, NULL);
    evsignal_add(w->sig_int, NULL);
    evsignal_add(w->sig_hup, NULL);
    evsignal_add(w->sig_pipe, NULL);
    w->drain_timer = evtimer_new(w->base, drain_timer_cb, w);
    w->hard_stop_timer = evtimer_new(w->base, hard_stop_cb, w);
    w->setup_retry_timer = evtimer_new(w->base, setup_retry_cb, w);
    wd = dtq_sdnotify_watchdog_ms();
    if (wd > 0) {
        struct timeval tv = {(wd / 2) / 1000, ((wd / 2) % 1000) * 1000};
        w->watchdog_timer = event_new(w->base, -1, EV_PERSIST, watchdog_cb, w);
        evtimer_add(w->watchdog_timer, &tv);
    }
    return w;
}

int dtq_worker_run(dtq_worker *w) {
    dtq_info("dtq-worker %s starting as %s (pid %d)", DTQ_VERSION, w->cfg->worker_id,
             (int)getpid());
    dtq_sdnotify("STATUS=connecting to redis");
    dtq_rconn_start(w->cmd);
    dtq_rconn_start(w->blk);
    event_base_dispatch(w->base);
    dtq_info("stopped");
    return w->exit_code;
}

void dtq_worker_free(dtq_worker *w) {
    if (!w) return;
    dtq_rconn_free(w->blk);
    dtq_rconn_free(w->cmd);
    dtq_http_free(w->http);
    dtq_heartbeat_free(w->hb);
    dtq_scheduler_free(w->sched);
    dtq_consumer_free(w->cons);
    dtq_executor_free(w->exec);
    dtq_exec_free(w->execs);
    if (w->sig_term) event_free(w->sig_term);
    if (w->sig_int) event_free(w->sig_int);
    if (w->sig_hup) event_free(w->sig_hup);
    if (w->sig_pipe) event_free(w->sig_pipe);
    if (w->sig_chld) event_free(w->sig_chld);
    if (w->drain_timer) event_free(w->drain_timer);
    if (w->hard_stop_timer) event_free(w->hard_stop_timer);
    if (w->setup_retry_timer) event_free(w->setup_retry_timer);
    if (w->watchdog_timer) event_free(w->watchdog_timer);
    free_derived(w);
    dtq_handler_registry_free(w->handlers, 1);
    dtq_config_free(w->cfg);
    if (w->base) event_base_free(w->base);
    free(w);
}
