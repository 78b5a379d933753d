/* conn_guard.c: the connection limits of the daemon's endpoint and of dtq-web (see
 * conn_guard.h and docs/design.md). The guard never closes a socket itself: whoever owns
 * the connection does, when asked through close_fn, and reports it with dtq_guard_remove.
 * So the same code serves http.c, which owns its bufferevents, and web.c, where evhttp
 * owns them and a connection is closed by shutting its socket down (evhttp then sees the
 * end and frees it). */
#include "conn_guard.h"

#include <event2/event.h>
#include <event2/listener.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

#define ACCEPT_PAUSE_MS 1000
#define GUARD_LOG_BURST 3
#define GUARD_LOG_WINDOW_MS 10000

/* ----------------------------------------------------------------- rate-limited lines */

static void ratelog_flush_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_ratelog *r = arg;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (r->suppressed > 0)
        dtq_warn("%s: %ld more in the last %d s, not logged one by one", r->what, r->suppressed,
                 r->window_ms / 1000);
    r->suppressed = 0;
}

void dtq_ratelog_init(dtq_ratelog *r, struct event_base *base, const char *what, int burst,
                      int window_ms) {
    r->flush = evtimer_new(base, ratelog_flush_cb, r);
    r->what = what;
    r->burst = burst;
    r->window_ms = window_ms;
    r->window_start = 0;
    r->logged = 0;
    r->suppressed = 0;
}

void dtq_ratelog_deinit(dtq_ratelog *r) {
    if (!r->flush) return;
    if (evtimer_pending(r->flush, NULL)) ratelog_flush_cb(-1, 0, r); /* say what was left */
    event_free(r->flush);
    r->flush = NULL;
}

int dtq_ratelog_allow(dtq_ratelog *r) {
    int64_t now = dtq_monotonic_ms();
    if (r->logged == 0 || now - r->window_start >= r->window_ms) {
        r->window_start = now;
        r->logged = 0;
    }
    if (r->logged < r->burst) {
        r->logged++;
        return 1;
    }
    /* the summary comes when the window that suppressed the line ends */
    if (r->suppressed++ == 0) {
        int64_t left = r->window_start + r->window_ms - now;
        struct timeval tv = {(time_t)(left / 1000), (suseconds_t)(left % 1000) * 1000};
        if (left < 0) tv.tv_sec = tv.tv_usec = 0;
        evtimer_add(r->flush, &tv);
    }
    return 0;
}

/* ----------------------------------------------------------------- connections */

struct dtq_guard_conn {
    dtq_guard *g;
    dtq_guard_conn *prev, *next; /* newest first */
    dtq_guard_close_fn *close_fn;
    void *arg;
    struct event *deadline;
    int64_t accepted_ms;
    int answering; /* a whole request came and is being answered */
    int closing;   /* asked to close, not gone yet */
};

struct dtq_guard {
    struct event_base *base;
    const char *name;
    int max_conns, deadline_ms;
    dtq_guard_conn *conns;
    int nconns;   /* open, closing ones included: each holds a descriptor */
    int nactive;  /* open and not closing */
    int max_open; /* descriptors held at once, closing ones included */
    struct evconnlistener *listener;
    struct event *resume;
    int full; /* the listener is off until closing connections are gone (max_open) */
    dtq_ratelog refused, accept_errors, expired;
    char *what[3];         /* the ratelogs' names */
    dtq_guard *next_guard; /* the guards watching a listener, to find one from its listener */
};

static dtq_guard *watching;

static void conn_close(dtq_guard_conn *c) {
    if (c->closing) return;
    c->closing = 1;
    c->g->nactive--;
    evtimer_del(c->deadline);
    c->close_fn(c->arg); /* may call dtq_guard_remove(c) */
}

dtq_guard *dtq_guard_new(struct event_base *base, const char *name, int max_conns,
                         int deadline_ms) {
    dtq_guard *g = dtq_xcalloc(1, sizeof(*g));
    g->base = base;
    g->name = name;
    g->max_conns = max_conns > 0 ? max_conns : 1;
    g->deadline_ms = deadline_ms;
    g->max_open = 2 * g->max_conns;
    g->what[0] = dtq_xasprintf("%s: connections refused or evicted at the cap", name);
    g->what[1] = dtq_xasprintf("%s: accept errors", name);
    g->what[2] = dtq_xasprintf("%s: connections closed at their deadline", name);
    dtq_ratelog_init(&g->refused, base, g->what[0], GUARD_LOG_BURST, GUARD_LOG_WINDOW_MS);
    dtq_ratelog_init(&g->accept_errors, base, g->what[1], GUARD_LOG_BURST, GUARD_LOG_WINDOW_MS);
    dtq_ratelog_init(&g->expired, base, g->what[2], GUARD_LOG_BURST, GUARD_LOG_WINDOW_MS);
    return g;
}

void dtq_guard_free(dtq_guard *g) {
    dtq_guard **p;
    if (!g) return;
    for (p = &watching; *p; p = &(*p)->next_guard)
        if (*p == g) {
            *p = g->next_guard;
            break;
        }
    while (g->conns) dtq_guard_remove(g->conns);
    if (g->resume) event_free(g->resume);
    dtq_ratelog_deinit(&g->refused);
    dtq_ratelog_deinit(&g->accept_errors);
    dtq_ratelog_deinit(&g->expired);
    for (int i = 0; i < 3; i++) free(g->what[i]);
    free(g);
}

void dtq_guard_close_all(dtq_guard *g) {
    dtq_guard_conn *c = g->conns, *next;
    for (; c; c = next) {
        next = c->next;
        if (!c->closing) conn_close(c);
    }
}

void dtq_guard_set_max_open(dtq_guard *g, int max_open) {
    g->max_open = max_open > g->max_conns ? max_open : g->max_conns + 1;
}

int dtq_guard_count(const dtq_guard *g) {
    return g->nconns;
}

int dtq_guard_max(const dtq_guard *g) {
    return g->max_conns;
}

static void deadline_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_guard_conn *c = arg;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (!c->answering && dtq_ratelog_allow(&c->g->expired))
        dtq_info("%s: closing a connection that sent no whole request within %d ms", c->g->name,
                 c->g->deadline_ms);
    conn_close(c);
}

static void arm_deadline(dtq_guard_conn *c) {
    int ms = c->g->deadline_ms;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(c->deadline, &tv);
}

/* New connections are put at the head of the list, so the oldest is the last one found. */
static dtq_guard_conn *oldest_idle(dtq_guard *g) {
    dtq_guard_conn *c, *found = NULL;
    for (c = g->conns; c; c = c->next)
        if (!c->answering && !c->closing) found = c;
    return found;
}

dtq_guard_conn *dtq_guard_add(dtq_guard *g, dtq_guard_close_fn *close_fn, void *arg) {
    dtq_guard_conn *c;
    if (g->nactive >= g->max_conns) {
        dtq_guard_conn *idle = oldest_idle(g);
        if (!idle) {
            if (dtq_ratelog_allow(&g->refused))
                dtq_warn("%s: %d connections open, all being answered; refusing a new one", g->name,
                         g->nactive);
            return NULL;
        }
        if (dtq_ratelog_allow(&g->refused))
            dtq_warn("%s: %d connections open (the cap); closing the oldest one that has not "
                     "sent a whole request",
                     g->name, g->nactive);
        conn_close(idle);
    }
    c = dtq_xcalloc(1, sizeof(*c));
    c->g = g;
    c->close_fn = close_fn;
    c->arg = arg;
    c->accepted_ms = dtq_monotonic_ms();
    c->deadline = evtimer_new(g->base, deadline_cb, c);
    c->next = g->conns;
    if (g->conns) g->conns->prev = c;
    g->conns = c;
    g->nconns++;
    g->nactive++;
    arm_deadline(c);
    /* Evicted connections hold their descriptors until their owner has closed them (evhttp:
     * a turn of the loop later), and the listener accepts all it can in one go: stop it
     * before that runs out of descriptors, until the evicted ones are gone. */
    if (g->listener && !g->full && g->nconns >= g->max_open) {
        g->full = 1;
        evconnlistener_disable(g->listener);
    }
    return c;
}

void dtq_guard_remove(dtq_guard_conn *c) {
    dtq_guard *g;
    if (!c) return;
    g = c->g;
    if (c->prev)
        c->prev->next = c->next;
    else
        g->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    g->nconns--;
    if (!c->closing) g->nactive--;
    event_free(c->deadline);
    free(c);
    if (g->full && g->listener && g->nconns < g->max_open) {
        g->full = 0;
        if (!evtimer_pending(g->resume, NULL)) evconnlistener_enable(g->listener);
    }
}

void dtq_guard_answering(dtq_guard_conn *c, int hold) {
    c->answering = 1;
    if (hold) evtimer_del(c->deadline);
}

void dtq_guard_idle(dtq_guard_conn *c) {
    c->answering = 0;
    if (!c->closing) arm_deadline(c);
}

int64_t dtq_guard_age_ms(const dtq_guard_conn *c) {
    return dtq_monotonic_ms() - c->accepted_ms;
}

/* ----------------------------------------------------------------- accept errors */

static void resume_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_guard *g = arg;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (g->listener && !g->full) evconnlistener_enable(g->listener);
}

/* accept() failed for want of resources: the connection stays queued, so the listener
 * would fire again at once and spin (and log each time). Pause it. */
static void accept_error_cb(struct evconnlistener *l, void *arg) {
    dtq_guard *g;
    struct timeval tv = {ACCEPT_PAUSE_MS / 1000, (ACCEPT_PAUSE_MS % 1000) * 1000};
    int err = EVUTIL_SOCKET_ERROR();
    DTQ_UNUSED(arg); /* the listener's user data is its owner's (evhttp's for dtq-web) */
    for (g = watching; g && g->listener != l; g = g->next_guard) {
    }
    if (!g) return;
    if (dtq_ratelog_allow(&g->accept_errors))
        dtq_warn("%s: accept: %s (%d connections open); not accepting for %d ms", g->name,
                 evutil_socket_error_to_string(err), g->nconns, ACCEPT_PAUSE_MS);
    evconnlistener_disable(l);
    evtimer_add(g->resume, &tv);
}

void dtq_guard_watch_listener(dtq_guard *g, struct evconnlistener *l) {
    if (!l) { /* the listener is about to be freed */
        dtq_guard **p;
        for (p = &watching; *p; p = &(*p)->next_guard)
            if (*p == g) {
                *p = g->next_guard;
                break;
            }
        g->listener = NULL;
        g->full = 0;
        if (g->resume) evtimer_del(g->resume);
        return;
    }
    if (!g->resume) g->resume = evtimer_new(g->base, resume_cb, g);
    if (!g->listener) {
        g->next_guard = watching;
        watching = g;
    }
    g->listener = l;
    evconnlistener_set_error_cb(l, accept_error_cb);
}
