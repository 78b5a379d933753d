/* heartbeat.c: periodic liveness. */
#include "heartbeat.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "executor.h"
#include "log.h"
#include "util.h"

struct dtq_heartbeat {
    dtq_worker *w;
    struct event *tick_ev;
    char *key;
};

typedef struct beat_done {
    void (*cb)(void *arg);
    void *arg;
} beat_done;

static void beat_done_cb(redisAsyncContext *ac, void *r, void *priv) {
    beat_done *d = priv;
    DTQ_UNUSED(ac);
    DTQ_UNUSED(r);
    d->cb(d->arg);
    free(d);
}

typedef struct claim_ctx {
    dtq_worker *w;
    const char *stream;
    dtq_argv *a;
} claim_ctx;

/* Collects the in-flight entries of one stream into one XCLAIM. */
static void add_entry(const char *stream, const char *entry_id, void *arg) {
    claim_ctx *c = arg;
    if (!strcmp(stream, c->stream)) dtq_argv_adds(c->a, entry_id);
}

static void claim_inflight(dtq_heartbeat *hb) {
    dtq_worker *w = hb->w;
    for (int i = 0; i < w->nstreams; i++) {
        dtq_argv a;
        claim_ctx c = {w, w->streams[i], &a};
        dtq_argv_init(&a);
        dtq_argv_adds(&a, "XCLAIM");
        dtq_argv_adds(&a, w->streams[i]);
        dtq_argv_adds(&a, "workers");
        dtq_argv_adds(&a, w->cfg->worker_id);
        dtq_argv_adds(&a, "0");
        dtq_executor_each_entry(w->exec, add_entry, &c);
        if (a.argc > 5) {
            dtq_argv_adds(&a, "IDLE");
            dtq_argv_adds(&a, "0");
            dtq_argv_adds(&a, "JUSTID");
            dtq_worker_command(w, NULL, NULL, a.argc, a.argv, a.lens);
        }
        dtq_argv_deinit(&a);
    }
}

void dtq_heartbeat_beat(dtq_heartbeat *hb, const char *status, void (*cb)(void *arg), void *arg) {
    dtq_worker *w = hb->w;
    const dtq_config *cfg = w->cfg;
    dtq_argv a;
    char *workers = dtq_worker_key(w, "workers");
    int ok;
    dtq_argv_init(&a);
    dtq_argv_adds(&a, "HSET");
    dtq_argv_adds(&a, hb->key);
    dtq_argv_adds(&a, "worker_id");
    dtq_argv_adds(&a, cfg->worker_id);
    dtq_argv_adds(&a, "hostname");
    dtq_argv_adds(&a, w->hostname);
    dtq_argv_adds(&a, "pid");
    dtq_argv_addll(&a, getpid());
    dtq_argv_adds(&a, "started_at");
    dtq_argv_addll(&a, w->started_at_ms);
    dtq_argv_adds(&a, "last_heartbeat");
    dtq_argv_addll(&a, dtq_now_ms());
    dtq_argv_adds(&a, "active_tasks");
    dtq_argv_addll(&a, dtq_executor_running(w->exec));
    dtq_argv_adds(&a, "concurrency");
    dtq_argv_addll(&a, cfg->concurrency);
    dtq_argv_adds(&a, "tasks_processed");
    dtq_argv_addll(&a, (long long)w->counters.processed);
    dtq_argv_adds(&a, "tasks_failed");
    dtq_argv_addll(&a, (long long)w->counters.failed);
    dtq_argv_adds(&a, "tasks_retried");
    dtq_argv_addll(&a, (long long)w->counters.retried);
    dtq_argv_adds(&a, "status");
    dtq_argv_adds(&a, status);
    dtq_argv_adds(&a, "version");
    dtq_argv_adds(&a, DTQ_VERSION);
    dtq_worker_command(w, NULL, NULL, a.argc, a.argv, a.lens);
    dtq_argv_deinit(&a);

    dtq_argv_init(&a);
    dtq_argv_adds(&a, "SADD");
    dtq_argv_adds(&a, workers);
    dtq_argv_adds(&a, cfg->worker_id);
    dtq_worker_command(w, NULL, NULL, a.argc, a.argv, a.lens);
    dtq_argv_deinit(&a);
    free(workers);

    claim_inflight(hb);
    dtq_executor_check_cancels(w->exec);

    dtq_argv_init(&a);
    dtq_argv_adds(&a, "EXPIRE");
    dtq_argv_adds(&a, hb->key);
    dtq_argv_addll(&a, cfg->heartbeat_interval_s * 3);
    if (cb) {
        beat_done *d = dtq_xcalloc(1, sizeof(*d));
        d->cb = cb;
        d->arg = arg;
        ok = dtq_worker_command(w, beat_done_cb, d, a.argc, a.argv, a.lens);
        if (ok != DTQ_OK) {
            free(d);
            cb(arg);
        }
    } else {
        dtq_worker_command(w, NULL, NULL, a.argc, a.argv, a.lens);
    }
    dtq_argv_deinit(&a);
}

static void tick_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_heartbeat *hb = arg;
    struct timeval tv = {hb->w->cfg->heartbeat_interval_s, 0};
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (dtq_worker_is_up(hb->w))
        dtq_heartbeat_beat(hb, hb->w->state == DTQ_WORKER_DRAINING ? "draining" : "running", NULL,
                           NULL);
    evtimer_add(hb->tick_ev, &tv);
}

dtq_heartbeat *dtq_heartbeat_new(dtq_worker *w) {
    dtq_heartbeat *hb = dtq_xcalloc(1, sizeof(*hb));
    hb->w = w;
    hb->tick_ev = evtimer_new(w->base, tick_cb, hb);
    hb->key = dtq_worker_key(w, "worker:%s", w->cfg->worker_id);
    return hb;
}

void dtq_heartbeat_start(dtq_heartbeat *hb) {
    if (!evtimer_pending(hb->tick_ev, NULL)) tick_cb(-1, 0, hb);
}

void dtq_heartbeat_stop(dtq_heartbeat *hb) {
    evtimer_del(hb->tick_ev);
}

void dtq_heartbeat_free(dtq_heartbeat *hb) {
    if (!hb) return;
    event_free(hb->tick_ev);
    free(hb->key);
    free(hb);
}
