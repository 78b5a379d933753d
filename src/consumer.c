/* consumer.c: the fetch loop. At most one fetch is in flight; completions that free slots
 * while it is out are picked up by the next one, so reads batch themselves under load. */
#include "consumer.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "executor.h"
#include "log.h"
#include "util.h"

#define BLOCK_MS 1000
#define POLL_MS 200

struct dtq_consumer {
    dtq_worker *w;
    int started;
    int stopped;
    int fetch_inflight;
    int block_inflight;
    int reap_inflight;
    int idle;       /* the last fetch found nothing: wait for the block or the poll timer */
    int processing; /* inside fetch_cb: kicks are folded into one fetch at its end */
    struct event *poll_ev;
    struct event *reap_ev;
    char *fetch_fn, *reap_fn;
};

static void maybe_fetch(dtq_consumer *c);

static void start_claimed(dtq_consumer *c, const redisReply *list) {
    char err[128];
    for (size_t i = 0; i < list->elements; i++) {
        dtq_task *t = dtq_task_from_reply(list->element[i], err, sizeof(err));
        if (!t) {
            dtq_error("ignoring a malformed claimed task: %s", err);
            continue;
        }
        dtq_executor_run(c->w->exec, t);
    }
}

static void arm_poll(dtq_consumer *c, int ms) {
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(c->poll_ev, &tv);
}

static void block_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_consumer *c = priv;
    DTQ_UNUSED(ac);
    DTQ_UNUSED(r);
    c->block_inflight = 0;
    c->idle = 0;
    maybe_fetch(c);
}

/* Waits on `blk` for an entry newer than the last one seen in each served stream. */
static void start_block(dtq_consumer *c, const redisReply *pairs) {
    dtq_argv a;
    if (pairs->elements == 0 || !dtq_rconn_is_up(c->w->blk)) {
        arm_poll(c, pairs->elements == 0 ? BLOCK_MS : POLL_MS);
        return;
    }
    dtq_argv_init(&a);
    dtq_argv_adds(&a, "XREAD");
    dtq_argv_adds(&a, "BLOCK");
    dtq_argv_addll(&a, BLOCK_MS);
    dtq_argv_adds(&a, "COUNT");
    dtq_argv_adds(&a, "1");
    dtq_argv_adds(&a, "STREAMS");
    for (size_t i = 0; i + 1 < pairs->elements; i += 2)
        dtq_argv_add(&a, pairs->element[i]->str, pairs->element[i]->len);
    for (size_t i = 1; i < pairs->elements; i += 2)
        dtq_argv_add(&a, pairs->element[i]->str, pairs->element[i]->len);
    if (dtq_rconn_command(c->w->blk, block_cb, c, a.argc, (const char **)a.argv, a.lens) == DTQ_OK)
        c->block_inflight = 1;
    else
        arm_poll(c, POLL_MS);
    dtq_argv_deinit(&a);
}

static void fetch_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_consumer *c = priv;
    redisReply *reply = r;
    DTQ_UNUSED(ac);
    c->fetch_inflight = 0;
    if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements != 3) {
        if (reply) { /* without a reply the connection is gone and the reconnect kicks us */
            dtq_error("fetch failed: %s",
                      reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
            c->idle = 1;
            arm_poll(c, BLOCK_MS);
        }
        if (c->stopped) dtq_worker_check_drained(c->w);
        return;
    }
    c->processing = 1;
    start_claimed(c, reply->element[0]);
    c->processing = 0;
    if (c->stopped) { /* draining: what was claimed runs, nothing more is read */
        dtq_worker_check_drained(c->w);
        return;
    }
    if (reply->element[2]->integer == 0) {
        c->idle = 1;
        start_block(c, reply->element[1]);
        return;
    }
    c->idle = 0;
    maybe_fetch(c);
}

static void maybe_fetch(dtq_consumer *c) {
    dtq_worker *w = c->w;
    const dtq_config *cfg = w->cfg;
    dtq_argv a;
    int free_slots;
    if (!c->started || c->stopped || c->processing || c->fetch_inflight || !dtq_worker_is_up(w))
        return;
    if (c->idle) return; /* the block or poll timer ends idleness */
    free_slots = dtq_executor_free_slots(w->exec);
    if (free_slots <= 0) return;

    dtq_argv_init(&a);
    dtq_argv_adds(&a, "FCALL");
    dtq_argv_adds(&a, c->fetch_fn);
    dtq_argv_addll(&a, (long long)cfg->nqueues * 11);
    for (int q = 0; q < cfg->nqueues; q++) {
        dtq_argv_adds(&a, w->paused_keys[q]);
        for (int band = 0; band < 10; band++) dtq_argv_adds(&a, w->streams[q * 10 + band]);
    }
    dtq_argv_adds(&a, cfg->worker_id);
    dtq_argv_addll(&a, free_slots);
    dtq_argv_adds(&a, w->policy_json);
    for (int q = 0; q < cfg->nqueues; q++) dtq_argv_adds(&a, cfg->queues[q]);
    if (dtq_worker_command(w, fetch_cb, c, a.argc, a.argv, a.lens) == DTQ_OK) c->fetch_inflight = 1;
    dtq_argv_deinit(&a);
}

static void poll_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_consumer *c = arg;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    c->idle = 0;
    maybe_fetch(c);
}

/* ----------------------------------------------------------------- reaper */

static void reap_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_consumer *c = priv;
    redisReply *reply = r;
    DTQ_UNUSED(ac);
    c->reap_inflight = 0;
    if (!reply) {
        if (c->stopped) dtq_worker_check_drained(c->w);
        return;
    }
    if (reply->type != REDIS_REPLY_ARRAY) {
        dtq_error("reaper failed: %s", reply->type == REDIS_REPLY_ERROR ? reply->str : "bad reply");
        if (c->stopped) dtq_worker_check_drained(c->w);
        return;
    }
    if (reply->elements) dtq_info("reaper: adopted %zu task(s) of lost workers", reply->elements);
    start_claimed(c, reply);
    if (c->stopped) dtq_worker_check_drained(c->w);
}

static void reap_tick_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_consumer *c = arg;
    dtq_worker *w = c->w;
    const dtq_config *cfg = w->cfg;
    struct timeval tv = {cfg->visibility_timeout_s / 2, (cfg->visibility_timeout_s % 2) * 500000};
    int free_slots = dtq_executor_free_slots(w->exec);
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (c->stopped) return;
    evtimer_add(c->reap_ev, &tv);
    if (c->reap_inflight || free_slots <= 0 || !dtq_worker_is_up(w)) return;
    dtq_argv a;
    dtq_argv_init(&a);
    dtq_argv_adds(&a, "FCALL");
    dtq_argv_adds(&a, c->reap_fn);
    dtq_argv_addll(&a, w->nstreams);
    for (int i = 0; i < w->nstreams; i++) dtq_argv_adds(&a, w->streams[i]);
    dtq_argv_adds(&a, cfg->worker_id);
    dtq_argv_addll(&a, (long long)cfg->visibility_timeout_s * 1000);
    dtq_argv_addll(&a, free_slots);
    dtq_argv_adds(&a, w->policy_json);
    for (int i = 0; i < w->nstreams; i++) {
        dtq_argv_adds(&a, cfg->queues[i / 10]);
        dtq_argv_addll(&a, 9 - i % 10);
    }
    if (dtq_worker_command(w, reap_cb, c, a.argc, a.argv, a.lens) == DTQ_OK) c->reap_inflight = 1;
    dtq_argv_deinit(&a);
}

/* ----------------------------------------------------------------- lifecycle */

dtq_consumer *dtq_consumer_new(dtq_worker *w) {
    dtq_consumer *c = dtq_xcalloc(1, sizeof(*c));
    c->w = w;
    c->poll_ev = evtimer_new(w->base, poll_cb, c);
    c->reap_ev = evtimer_new(w->base, reap_tick_cb, c);
    c->fetch_fn = dtq_worker_fn(w, "fetch");
    c->reap_fn = dtq_worker_fn(w, "reap");
    return c;
}

void dtq_consumer_start(dtq_consumer *c) {
    if (!c->started) {
        struct timeval tv = {1, 0}; /* first reap soon after start: recover a crash quickly */
        c->started = 1;
        evtimer_add(c->reap_ev, &tv);
    }
    c->idle = 0;
    maybe_fetch(c);
}

void dtq_consumer_stop(dtq_consumer *c) {
    c->stopped = 1;
    evtimer_del(c->poll_ev);
    evtimer_del(c->reap_ev);
}

void dtq_consumer_kick(dtq_consumer *c) {
    if (c) maybe_fetch(c);
}

int dtq_consumer_busy(const dtq_consumer *c) {
    return c->fetch_inflight || c->reap_inflight;
}

void dtq_consumer_reset(dtq_consumer *c) {
    c->idle = 0;
    maybe_fetch(c);
}

void dtq_consumer_free(dtq_consumer *c) {
    if (!c) return;
    event_free(c->poll_ev);
    event_free(c->reap_ev);
    free(c->fetch_fn);
    free(c->reap_fn);
    free(c);
}
