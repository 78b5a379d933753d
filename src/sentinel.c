/* sentinel.c: see sentinel.h.
 *
 * A question (query) walks the sentinels from the preferred one: it waits for that
 * sentinel's connection while it is being made, sends get-master-addr-by-name once it is
 * up, and moves on when the connection is down (not even connecting), when no answer came
 * within connect_timeout_ms, or when the answer is not an address. A 20 ms tick drives
 * the waiting. Each command carries a ticket (query, step), so a late answer from a
 * sentinel the query has moved past is ignored; a query is freed once it is finished and
 * no ticket of it is out. */
#include "sentinel.h"

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "redis_proto.h"
#include "tls.h"
#include "util.h"

#define TICK_MS 20

typedef struct query query;

/* One attached data connection and the address it was last given. */
typedef struct attached {
    dtq_sentinel *s;
    dtq_rconn *rc;
    char *host;
    int port;
    query *q; /* the question under way for it */
} attached;

struct query {
    dtq_sentinel *s;
    attached *a; /* NULL: a check (after subscribing), or the connection stopped waiting */
    int check;
    int done;
    int tried; /* sentinels taken so far */
    int cur;   /* the one being asked */
    int step;  /* bumped per sentinel taken */
    int sent;  /* the command to cur is out */
    int64_t step_started_ms;
    int inflight; /* tickets out */
    int nil_answers;
    struct event *tick;
    query *prev, *next;
};

typedef struct ticket {
    query *q;
    int step;
} ticket;

struct dtq_sentinel {
    struct event_base *base;
    char *master;
    int n;
    dtq_redis_endpoint *where; /* the sentinels, in the URL's order */
    dtq_rconn **conns;         /* one per sentinel, for the questions */
    dtq_rconn *sub;            /* subscribed to +switch-master, on one sentinel at a time */
    int sub_next;              /* the sentinel the subscription connects to next */
    int sub_at;                /* ... and the one it is on */
    int preferred;             /* asked first: the last that answered */
    int64_t timeout_ms;
    attached **att;
    int natt;
    char *last_host; /* the last answer, for the log */
    int last_port;
    query *queries;
};

static void advance(query *q);

/* ----------------------------------------------------------------- queries */

static void query_unlink_free(query *q) {
    dtq_sentinel *s = q->s;
    if (q->prev)
        q->prev->next = q->next;
    else
        s->queries = q->next;
    if (q->next) q->next->prev = q->prev;
    event_free(q->tick);
    free(q);
}

/* Finished: no more asking; freed now or when its last ticket comes back. */
static void query_finish(query *q) {
    q->done = 1;
    evtimer_del(q->tick);
    if (q->a) q->a->q = NULL;
    q->a = NULL;
    if (q->inflight == 0) query_unlink_free(q);
}

static void tick_cb(evutil_socket_t fd, short what, void *arg) {
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    advance(arg);
}

static query *query_new(dtq_sentinel *s, attached *a) {
    query *q = dtq_xcalloc(1, sizeof(*q));
    q->s = s;
    q->a = a;
    q->check = a == NULL;
    q->cur = -1;
    q->tick = event_new(s->base, -1, EV_PERSIST, tick_cb, q);
    {
        struct timeval tv = {0, TICK_MS * 1000};
        evtimer_add(q->tick, &tv);
    }
    q->next = s->queries;
    if (s->queries) s->queries->prev = q;
    s->queries = q;
    return q;
}

static const char *sentinel_name(const dtq_sentinel *s, int i, char *buf, size_t len) {
    return dtq_redis_hostport(buf, len, s->where[i].host, s->where[i].port);
}

/* An attached connection not at (or on its way to) host:port, and not asking, is dropped:
 * it asks again. One waiting to retry is hurried along (dtq_rconn_drop). */
static void drop_others(dtq_sentinel *s, const char *host, int port, const char *why) {
    for (int i = 0; i < s->natt; i++) {
        attached *a = s->att[i];
        if (a->q) continue; /* asking now: it gets the new answer */
        if (a->host && !strcmp(a->host, host) && a->port == port &&
            (dtq_rconn_is_up(a->rc) || dtq_rconn_is_connecting(a->rc)))
            continue;
        dtq_rconn_drop(a->rc, why);
    }
}

/* A sentinel answered with the master's address. */
static void answered(query *q, const char *host, int port) {
    dtq_sentinel *s = q->s;
    char sn[300], now_at[300], was_at[300];
    s->preferred = q->cur;
    dtq_redis_hostport(now_at, sizeof(now_at), host, port);
    if (!s->last_host)
        dtq_info("sentinel: master %s is at %s (sentinel %s)", s->master, now_at,
                 sentinel_name(s, q->cur, sn, sizeof(sn)));
    else if (strcmp(s->last_host, host) || s->last_port != port)
        dtq_info("sentinel: master %s moved from %s to %s (sentinel %s)", s->master,
                 dtq_redis_hostport(was_at, sizeof(was_at), s->last_host, s->last_port), now_at,
                 sentinel_name(s, q->cur, sn, sizeof(sn)));
    free(s->last_host);
    s->last_host = dtq_xstrdup(host);
    s->last_port = port;
    if (q->check) {
        drop_others(s, host, port, "the sentinels name another master");
        query_finish(q);
        return;
    }
    {
        attached *a = q->a;
        free(a->host);
        a->host = dtq_xstrdup(host);
        a->port = port;
        query_finish(q);
        dtq_rconn_resolved(a->rc, host, port, NULL);
    }
}

/* Every sentinel was tried. */
static void exhausted(query *q) {
    dtq_sentinel *s = q->s;
    attached *a = q->a;
    char why[300];
    if (q->nil_answers)
        snprintf(why, sizeof(why), "sentinel: no sentinel knows master %s (%d of %d asked)",
                 s->master, q->nil_answers, s->n);
    else
        snprintf(why, sizeof(why), "sentinel: none of the %d sentinel(s) answered for master %s",
                 s->n, s->master);
    query_finish(q);
    if (a)
        dtq_rconn_resolved(a->rc, NULL, 0, why);
    else
        dtq_debug("%s", why);
}

static void reply_cb(redisAsyncContext *ac, void *r, void *priv) {
    ticket *t = priv;
    query *q = t->q;
    redisReply *reply = r;
    int current = t->step == q->step && !q->done;
    DTQ_UNUSED(ac);
    free(t);
    q->inflight--;
    if (q->done) {
        if (q->inflight == 0) query_unlink_free(q);
        return;
    }
    if (!current) return; /* a sentinel the query already gave up on */
    q->sent = 0;
    if (reply) {
        char sn[300], why[300], *host;
        int port, a = dtq_sentinel_answer(reply, &host, &port, why, sizeof(why));
        if (a == DTQ_SENTINEL_ADDR) {
            answered(q, host, port);
            free(host);
            return;
        }
        if (a == DTQ_SENTINEL_UNKNOWN) {
            q->nil_answers++;
            dtq_warn("sentinel %s does not know master %s",
                     sentinel_name(q->s, q->cur, sn, sizeof(sn)), q->s->master);
        } else {
            dtq_warn("sentinel %s: unexpected answer for master %s: %s",
                     sentinel_name(q->s, q->cur, sn, sizeof(sn)), q->s->master, why);
        }
    }
    q->cur = -1; /* next */
    advance(q);
}

static int send_question(query *q) {
    dtq_sentinel *s = q->s;
    const char *argv[DTQ_SENTINEL_QUESTION_ARGC];
    ticket *t = dtq_xcalloc(1, sizeof(*t));
    t->q = q;
    t->step = q->step;
    dtq_sentinel_question(s->master, argv);
    if (dtq_rconn_command(s->conns[q->cur], reply_cb, t, DTQ_SENTINEL_QUESTION_ARGC, argv, NULL) !=
        DTQ_OK) {
        free(t);
        return DTQ_ERR;
    }
    q->inflight++;
    q->sent = 1;
    q->step_started_ms = dtq_monotonic_ms();
    return DTQ_OK;
}

/* Moves the query on as far as it can go now. */
static void advance(query *q) {
    dtq_sentinel *s = q->s;
    int64_t now = dtq_monotonic_ms();
    char sn[300];
    while (!q->done) {
        if (q->cur >= 0) {
            dtq_rconn *c = s->conns[q->cur];
            if (q->sent) {
                if (now - q->step_started_ms < s->timeout_ms) return;
                dtq_warn("sentinel %s did not answer within %lld ms; asking the next",
                         sentinel_name(s, q->cur, sn, sizeof(sn)), (long long)s->timeout_ms);
                q->sent = 0;
            } else if (dtq_rconn_is_up(c)) {
                if (send_question(q) == DTQ_OK) return;
            } else if (dtq_rconn_is_connecting(c) && now - q->step_started_ms < s->timeout_ms) {
                return; /* being connected: wait for it */
            } else {
                dtq_debug("sentinel %s is not connected; asking the next",
                          sentinel_name(s, q->cur, sn, sizeof(sn)));
            }
        }
        if (q->tried == s->n) {
            exhausted(q);
            return;
        }
        q->cur = (s->preferred + q->tried) % s->n;
        q->tried++;
        q->step++;
        q->sent = 0;
        q->step_started_ms = now;
    }
}

/* ----------------------------------------------------------------- attached connections */

static void resolve_cb(dtq_rconn *rc, void *arg) {
    attached *a = arg;
    query *q;
    DTQ_UNUSED(rc);
    if (a->q) query_finish(a->q); /* not expected: a connection asks once per connect */
    q = query_new(a->s, a);
    a->q = q;
    advance(q);
}

static void cancel_cb(dtq_rconn *rc, void *arg) {
    attached *a = arg;
    DTQ_UNUSED(rc);
    if (a->q) query_finish(a->q);
}

void dtq_sentinel_attach(dtq_sentinel *s, dtq_rconn *rc) {
    attached *a = dtq_xcalloc(1, sizeof(*a));
    dtq_rconn_resolver r = {resolve_cb, cancel_cb, a};
    a->s = s;
    a->rc = rc;
    s->att = dtq_xrealloc(s->att, sizeof(*s->att) * (size_t)(s->natt + 1));
    s->att[s->natt++] = a;
    dtq_rconn_set_resolver(rc, &r);
    dtq_rconn_set_role_check(rc, 1);
}

/* ----------------------------------------------------------------- +switch-master */

static void push_cb(dtq_rconn *rc, const redisReply *msg, void *arg) {
    dtq_sentinel *s = arg;
    dtq_sentinel_switch sw;
    char sn[300], why[600];
    DTQ_UNUSED(rc);
    if (dtq_sentinel_switch_parse(msg, &sw) != 0 || strcmp(sw.master, s->master)) return;
    dtq_info("sentinel: +switch-master %s %s:%d -> %s:%d (sentinel %s)", sw.master, sw.old_host,
             sw.old_port, sw.new_host, sw.new_port, sentinel_name(s, s->sub_at, sn, sizeof(sn)));
    s->preferred = s->sub_at; /* it knows of the switch */
    snprintf(why, sizeof(why), "the master moved to %s:%d (+switch-master)", sw.new_host,
             sw.new_port);
    drop_others(s, sw.new_host, sw.new_port, why);
}

static void subscribed_cb(redisAsyncContext *ac, void *r, void *priv) {
    dtq_sentinel *s = priv;
    redisReply *reply = r;
    char sn[300];
    DTQ_UNUSED(ac);
    if (!reply) return;
    if (reply->type == REDIS_REPLY_ERROR) {
        dtq_warn("sentinel %s: SUBSCRIBE +switch-master refused: %s",
                 sentinel_name(s, s->sub_at, sn, sizeof(sn)), reply->str);
        return;
    }
    dtq_debug("sentinel: subscribed to +switch-master on %s",
              sentinel_name(s, s->sub_at, sn, sizeof(sn)));
}

static void sub_state_cb(dtq_rconn *rc, int up, void *arg) {
    dtq_sentinel *s = arg;
    const char *argv[2] = {"SUBSCRIBE", "+switch-master"};
    if (!up) return;
    dtq_rconn_command(rc, subscribed_cb, s, 2, argv, NULL);
    /* a switch while no subscription was up went unheard: compare with the sentinels */
    if (s->natt) advance(query_new(s, NULL));
}

/* The subscription moves to the next sentinel at every connect. */
static void sub_resolve_cb(dtq_rconn *rc, void *arg) {
    dtq_sentinel *s = arg;
    s->sub_at = s->sub_next;
    s->sub_next = (s->sub_next + 1) % s->n;
    dtq_rconn_resolved(rc, s->where[s->sub_at].host, s->where[s->sub_at].port, NULL);
}

/* ----------------------------------------------------------------- lifecycle */

dtq_sentinel *dtq_sentinel_new(struct event_base *base, const dtq_redis_url *url, const char *user,
                               const char *password, struct dtq_tls *tls,
                               int64_t connect_timeout_ms) {
    dtq_sentinel *s = dtq_xcalloc(1, sizeof(*s));
    dtq_redis_url su;
    s->base = base;
    s->master = dtq_xstrdup(url->master_name);
    s->n = url->nsentinels;
    s->timeout_ms = connect_timeout_ms;
    s->where = dtq_xcalloc((size_t)s->n, sizeof(*s->where));
    s->conns = dtq_xcalloc((size_t)s->n, sizeof(*s->conns));
    memset(&su, 0, sizeof(su));
    su.tls = url->tls;
    su.user = user && *user ? (char *)user : NULL;
    su.password = password && *password ? (char *)password : NULL;
    for (int i = 0; i < s->n; i++) {
        char name[320], where[300];
        s->where[i].host = dtq_xstrdup(url->sentinels[i].host);
        s->where[i].port = url->sentinels[i].port;
        su.host = s->where[i].host;
        su.port = s->where[i].port;
        snprintf(name, sizeof(name), "sentinel %s", sentinel_name(s, i, where, sizeof(where)));
        s->conns[i] = dtq_rconn_new(base, &su, connect_timeout_ms, name, NULL, NULL);
        if (tls) dtq_rconn_set_tls(s->conns[i], tls);
    }
    su.host = NULL; /* the subscription's resolver picks the sentinel */
    su.port = 0;
    s->sub = dtq_rconn_new(base, &su, connect_timeout_ms, "sentinel-sub", sub_state_cb, s);
    if (tls) dtq_rconn_set_tls(s->sub, tls);
    {
        dtq_rconn_resolver r = {sub_resolve_cb, NULL, s};
        dtq_rconn_set_resolver(s->sub, &r);
    }
    dtq_rconn_set_push_handler(s->sub, push_cb, s);
    return s;
}

void dtq_sentinel_start(dtq_sentinel *s) {
    for (int i = 0; i < s->n; i++) dtq_rconn_start(s->conns[i]);
    dtq_rconn_start(s->sub);
}

void dtq_sentinel_free(dtq_sentinel *s) {
    if (!s) return;
    /* the attached connections are gone: nothing may answer them any more */
    for (query *q = s->queries; q; q = q->next) q->a = NULL;
    for (int i = 0; i < s->natt; i++) {
        free(s->att[i]->host);
        free(s->att[i]);
    }
    free(s->att);
    /* pending questions come back with NULL and free their finished queries */
    for (query *q = s->queries; q; q = q->next) {
        q->done = 1;
        evtimer_del(q->tick);
    }
    dtq_rconn_free(s->sub);
    for (int i = 0; i < s->n; i++) dtq_rconn_free(s->conns[i]);
    while (s->queries) query_unlink_free(s->queries);
    for (int i = 0; i < s->n; i++) free(s->where[i].host);
    free(s->where);
    free(s->conns);
    free(s->master);
    free(s->last_host);
    free(s);
}
