/* rcluster.c: see rcluster.h. The router owns the nodes (one dtq_rconn each, made when a
 * node is first needed), the slot map, the commands (a copy of each, kept until its caller
 * is answered so a redirection can resend it) and one timer (the tick) that times out
 * links and waiting commands and paces the map reads.
 *
 * Re-entrancy: everything that enters from the event loop (a reply, a node's state, the
 * tick) raises `dispatching`. A dtq_rcluster_free from inside marks the router stopping
 * (callbacks from then on get NULL) and frees it from a zero-delay event, when no rconn
 * is inside a callback of ours. */
#include "rcluster.h"

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "rconn.h"
#include "tls.h"
#include "util.h"

#define TICK_MS 100
#define REFRESH_BACKOFF_MIN_MS 100
#define REFRESH_BACKOFF_MAX_MS 1000
#define DEFAULT_MAX_WAIT_MS 5000

typedef struct node node;

/* One command of the caller, until its callback has run. */
typedef struct req {
    dtq_rcluster *rc;
    redisCallbackFn *cb;
    void *priv;
    int argc;
    char **argv;
    size_t *lens;
    int slot;           /* -1: keyless */
    dtq_route rt;       /* its way through the cluster (cluster.c decides each step) */
    int asking;         /* the next send is preceded by ASKING (an ASK redirection) */
    int pinned;         /* sent to a named node (a redirection): not moved by a map read */
    int node;           /* the node it is sent to, waits for, or that answered */
    int64_t since;      /* when it started waiting for its node's link, or for a map read */
    int64_t resend_at;  /* TRYAGAIN: sent again from then (in rc->later) */
    redisReply *parked; /* a redirection to decide on again after a map read (in rc->await) */
    long long after;    /* ... after the map read numbered above this one */
    struct req *next;
} req;

struct node {
    dtq_rcluster *rc;
    int idx;
    char *host;
    int port;
    dtq_rconn *conn; /* NULL until needed */
    int up;
    int down;              /* lost, or not up within connect_timeout_ms: a map read is wanted */
    int64_t since;         /* when the link was made or lost (for the connect time-out) */
    int announced;         /* node_fn told of this link (a primary's) since it came up */
    int inflight;          /* commands of ours (the caller's, CLUSTER SLOTS) sent, unanswered */
    req *wait, *wait_tail; /* commands waiting for the link, in order */
};

struct dtq_rcluster {
    struct event_base *base;
    dtq_redis_url url;
    int64_t connect_timeout_ms;
    int64_t liveness_ms; /* 0: rconn's default */
    int64_t max_wait_ms;
    char *name;
    dtq_rcluster_state_fn *fn;
    void *arg;
    dtq_rcluster_node_fn *node_fn;
    void *node_arg;
    struct dtq_tls *tls;
    node **nodes;
    int nnodes;
    dtq_cluster_map *map;
    int up;
    int started;
    /* map reads */
    int refresh_wanted;
    int refresh_inflight;
    int refresh_next;   /* the node to ask first next time (round robin) */
    int refresh_streak; /* map reads failed in a row */
    int64_t refresh_backoff_ms;
    int64_t refresh_at;             /* monotonic: not before */
    long long refresh_seq;          /* map reads sent so far */
    long long refresh_inflight_seq; /* the number of the one in flight */
    req *await, *await_tail; /* redirections to an address the map lacks: for the next read */
    req *later, *later_tail; /* TRYAGAIN: to send again at their resend_at */
    int last;                /* the node of the previous command (keyless rule), -1 for none */
    struct event *tick_ev;
    struct event *free_ev;
    int dispatching;
    int stopping;
    dtq_rcluster_stats stats;
};

static void refresh_maybe(dtq_rcluster *rc);
static void dispatch_req(dtq_rcluster *rc, req *q);
static void destroy(dtq_rcluster *rc);

/* ----------------------------------------------------------------- commands */

static req *req_new(dtq_rcluster *rc, redisCallbackFn *cb, void *priv, int slot, int argc,
                    const char **argv, const size_t *lens) {
    req *q = dtq_xcalloc(1, sizeof(*q));
    q->rc = rc;
    q->cb = cb;
    q->priv = priv;
    q->slot = slot;
    q->node = -1;
    dtq_route_start(&q->rt, rc->max_wait_ms);
    q->argc = argc;
    q->argv = dtq_xcalloc((size_t)argc, sizeof(*q->argv));
    q->lens = dtq_xcalloc((size_t)argc, sizeof(*q->lens));
    for (int i = 0; i < argc; i++) {
        size_t n = lens ? lens[i] : strlen(argv[i]);
        q->argv[i] = dtq_xmalloc(n + 1);
        memcpy(q->argv[i], argv[i], n);
        q->argv[i][n] = '\0';
        q->lens[i] = n;
    }
    return q;
}

static void req_free(req *q) {
    if (q->parked) freeReplyObject(q->parked);
    for (int i = 0; i < q->argc; i++) free(q->argv[i]);
    free(q->argv);
    free(q->lens);
    free(q);
}

/* The caller's callback, once; then the command is forgotten. A stopping router answers
 * NULL. */
static void req_done(req *q, redisReply *reply) {
    dtq_rcluster *rc = q->rc;
    if (rc->stopping) reply = NULL;
    if (!reply) rc->stats.lost++;
    if (q->cb) q->cb(NULL, reply, q->priv);
    req_free(q);
}

/* ----------------------------------------------------------------- nodes */

static void enter(dtq_rcluster *rc) {
    rc->dispatching++;
}

static void leave(dtq_rcluster *rc) {
    rc->dispatching--;
}

static void set_state(dtq_rcluster *rc) {
    int up = 0;
    if (rc->map)
        for (int i = 0; i < rc->nnodes && !up; i++) up = rc->nodes[i]->up;
    if (up == rc->up || rc->stopping) return;
    rc->up = up;
    if (up)
        dtq_info("redis %s: cluster map loaded, %d primaries", rc->name, rc->map->nprimaries);
    else
        dtq_warn("redis %s: no cluster node reachable", rc->name);
    if (rc->fn) rc->fn(rc, up, rc->arg);
}

/* The index of host:port among the known nodes, added (without a link) when new. */
static int node_add(dtq_rcluster *rc, const char *host, int port) {
    node *n;
    for (int i = 0; i < rc->nnodes; i++)
        if (rc->nodes[i]->port == port && !strcmp(rc->nodes[i]->host, host)) return i;
    rc->nodes = dtq_xrealloc(rc->nodes, sizeof(*rc->nodes) * (size_t)(rc->nnodes + 1));
    n = dtq_xcalloc(1, sizeof(*n));
    n->rc = rc;
    n->idx = rc->nnodes;
    n->host = dtq_xstrdup(host);
    n->port = port;
    rc->nodes[rc->nnodes] = n;
    return rc->nnodes++;
}

static void node_state(dtq_rconn *conn, int up, void *arg);

/* Makes and starts node i's link if it has none. */
static void node_link(dtq_rcluster *rc, int i) {
    node *n = rc->nodes[i];
    dtq_redis_url u;
    char name[400], where[300];
    if (n->conn || rc->stopping) return;
    memset(&u, 0, sizeof(u));
    u.tls = rc->url.tls;
    u.host = n->host;
    u.port = n->port;
    u.user = rc->url.user;
    u.password = rc->url.password;
    snprintf(name, sizeof(name), "%s %s", rc->name,
             dtq_redis_hostport(where, sizeof(where), n->host, n->port));
    n->conn = dtq_rconn_new(rc->base, &u, rc->connect_timeout_ms, name, node_state, n);
    if (rc->tls) dtq_rconn_set_tls(n->conn, rc->tls);
    if (rc->liveness_ms > 0) dtq_rconn_set_liveness(n->conn, rc->liveness_ms);
    n->up = 0;
    n->down = 0;
    n->announced = 0;
    n->since = dtq_monotonic_ms();
    dtq_rconn_start(n->conn);
}

/* A map read is wanted (now if the backoff allows, else from the tick). */
static void want_refresh(dtq_rcluster *rc) {
    rc->refresh_wanted = 1;
    refresh_maybe(rc);
}

static void node_is_down(dtq_rcluster *rc, node *n) {
    if (n->down) return;
    n->down = 1;
    n->since = dtq_monotonic_ms();
    rc->stats.node_downs++;
    want_refresh(rc);
}

/* The waiting commands of node n are sent, in order (the link is up). */
static void node_flush(dtq_rcluster *rc, node *n) {
    req *q = n->wait;
    n->wait = n->wait_tail = NULL;
    while (q) {
        req *next = q->next;
        q->next = NULL;
        dispatch_req(rc, q);
        q = next;
    }
}

/* The slot of the first range node i is the primary of; -1 when it is not one. */
static int primary_slot(dtq_rcluster *rc, int i) {
    const dtq_cluster_map *m = rc->map;
    int k;
    if (!m || (k = dtq_cluster_map_find(m, rc->nodes[i]->host, rc->nodes[i]->port)) < 0) return -1;
    for (int r = 0; r < m->nranges; r++)
        if (m->ranges[r].primary == k) return m->ranges[r].start;
    return -1;
}

/* node_fn hears of a primary's link up, once per link, before its waiting commands go. */
static void announce(dtq_rcluster *rc, node *n) {
    int slot;
    if (n->announced || !n->up || !rc->node_fn || rc->stopping) return;
    slot = primary_slot(rc, n->idx);
    if (slot < 0) return;
    n->announced = 1;
    rc->node_fn(rc, n->host, n->port, slot, rc->node_arg);
}

static void node_state(dtq_rconn *conn, int up, void *arg) {
    node *n = arg;
    dtq_rcluster *rc = n->rc;
    DTQ_UNUSED(conn);
    if (rc->stopping) return;
    enter(rc);
    n->up = up;
    n->announced = 0;
    if (up) {
        n->down = 0;
        announce(rc, n);
        node_flush(rc, n);
        if (rc->refresh_wanted) refresh_maybe(rc);
    } else {
        n->inflight = 0; /* the callbacks have all run with NULL */
        node_is_down(rc, n);
    }
    set_state(rc);
    leave(rc);
}

/* ----------------------------------------------------------------- routing */

/* A node of the map (an index into its nodes) is "up" for the keyless rule when its link
 * is. */
static int map_node_up(void *arg, int map_node) {
    dtq_rcluster *rc = arg;
    const dtq_redis_endpoint *e = &rc->map->nodes[map_node];
    for (int i = 0; i < rc->nnodes; i++)
        if (rc->nodes[i]->port == e->port && !strcmp(rc->nodes[i]->host, e->host))
            return rc->nodes[i]->up;
    return 0;
}

/* The node for a slot by the map (-1: keyless: cluster.c's rule, dtq_cluster_keyless_node,
 * with the node of the previous command); -1 when none. */
static int node_for(dtq_rcluster *rc, int slot) {
    const dtq_redis_endpoint *e = NULL;
    if (!rc->map) return -1;
    if (slot < 0) {
        int last = rc->last >= 0 ? dtq_cluster_map_find(rc->map, rc->nodes[rc->last]->host,
                                                        rc->nodes[rc->last]->port)
                                 : -1,
            k = dtq_cluster_keyless_node(rc->map, last, map_node_up, rc);
        if (k >= 0) e = &rc->map->nodes[k];
    } else {
        e = dtq_cluster_map_primary(rc->map, (uint16_t)slot);
    }
    return e ? node_add(rc, e->host, e->port) : -1;
}

static void on_reply(redisAsyncContext *ctx, void *reply, void *priv);

/* Sends q to its node (q->node, or the map's choice when -1), or queues it there until
 * the link is up. */
/* Appends q to the list (*head, *tail): the waiting lists keep the callers' order. */
static void req_append(req **head, req **tail, req *q) {
    q->next = NULL;
    if (*tail)
        (*tail)->next = q;
    else
        *head = q;
    *tail = q;
}

static void dispatch_req(dtq_rcluster *rc, req *q) {
    node *n;
    if (q->node < 0) q->node = node_for(rc, q->slot);
    if (q->node < 0) {
        req_done(q, NULL);
        return;
    }
    n = rc->nodes[q->node];
    node_link(rc, q->node);
    if (n->up && dtq_rconn_is_up(n->conn)) {
        static const char *asking[] = {"ASKING"};
        int ok = 1;
        if (q->asking) ok = dtq_rconn_command(n->conn, NULL, NULL, 1, asking, NULL) == DTQ_OK;
        if (ok && dtq_rconn_command(n->conn, on_reply, q, q->argc, (const char **)q->argv,
                                    q->lens) == DTQ_OK) {
            q->asking = 0;
            n->inflight++;
            rc->last = q->node;
            return;
        }
    }
    if (!q->since) q->since = dtq_monotonic_ms();
    req_append(&n->wait, &n->wait_tail, q);
}

/* Carries out the step cluster.c's dtq_route_decide gave for reply (from q->node): the
 * router's one place for what a reply means (cluster.h). A GIVE_UP is answered as an error
 * reply; a REREAD waits in rc->await for the next map read (dispatch_awaiting), at most
 * max_wait_ms (then decided on the map as it is); a TRYAGAIN's resend waits in rc->later. */
static void follow(dtq_rcluster *rc, req *q, redisReply *reply) {
    dtq_route_step st;
    node *n = rc->nodes[q->node];
    dtq_route_action act =
        dtq_route_decide(&q->rt, rc->map, n->host, n->port, reply, dtq_monotonic_ms(), &st);
    if (st.moved) dtq_cluster_map_move(rc->map, (uint16_t)st.slot, st.host, st.port);
    if (st.reread) want_refresh(rc);
    switch (act) {
    case DTQ_ROUTE_DONE: req_done(q, reply); return;
    case DTQ_ROUTE_GIVE_UP: {
        redisReply *e = dtq_cluster_error_reply(st.why);
        dtq_warn("redis %s: %s", rc->name, st.why);
        req_done(q, e);
        freeReplyObject(e);
        return;
    }
    case DTQ_ROUTE_REREAD:
        if (reply != q->parked) q->parked = dtq_cluster_error_reply(reply->str);
        q->since = dtq_monotonic_ms();
        q->after = rc->refresh_seq; /* a read already in flight may predate the redirection */
        req_append(&rc->await, &rc->await_tail, q);
        want_refresh(rc);
        return;
    case DTQ_ROUTE_RESEND: break;
    }
    if (st.followed == DTQ_REDIRECT_MOVED) rc->stats.moved++;
    if (st.followed == DTQ_REDIRECT_ASK) rc->stats.ask++;
    q->node = node_add(rc, st.host, st.port);
    q->asking = st.asking;
    q->pinned = 1;
    q->since = 0;
    if (st.pause_ms > 0) {
        q->resend_at = dtq_monotonic_ms() + st.pause_ms;
        req_append(&rc->later, &rc->later_tail, q);
        return;
    }
    dispatch_req(rc, q);
}

/* The redirections waiting for a map read are decided on again: those parked before read
 * number seq was sent (all when seq < 0: they waited too long, the map is as it is). */
static void dispatch_awaiting(dtq_rcluster *rc, long long seq, int64_t now) {
    req *q = rc->await, *keep = NULL, *keep_tail = NULL, *go = NULL, *go_tail = NULL;
    rc->await = rc->await_tail = NULL;
    while (q) {
        req *next = q->next;
        if ((seq >= 0 && seq > q->after) || (seq < 0 && now - q->since >= rc->max_wait_ms))
            req_append(&go, &go_tail, q);
        else
            req_append(&keep, &keep_tail, q);
        q = next;
    }
    rc->await = keep;
    rc->await_tail = keep_tail;
    if (keep) rc->refresh_wanted = 1;
    while (go) {
        req *next = go->next;
        redisReply *r = go->parked;
        go->next = NULL;
        go->parked = NULL;
        follow(rc, go, r);
        if (r) freeReplyObject(r);
        go = next;
    }
}

/* A reply (or NULL: the link died) to one of the caller's commands. */
static void on_reply(redisAsyncContext *ctx, void *reply_, void *priv) {
    req *q = priv;
    dtq_rcluster *rc = q->rc;
    redisReply *reply = reply_;
    node *n = rc->nodes[q->node];
    DTQ_UNUSED(ctx);
    enter(rc);
    if (n->inflight > 0) n->inflight--;
    if (!reply || rc->stopping)
        req_done(q, reply);
    else
        follow(rc, q, reply);
    leave(rc);
}

/* ----------------------------------------------------------------- the map */

/* A map that serves every slot from primaries none of which is down. */
static int map_healthy(dtq_rcluster *rc) {
    if (!rc->map || dtq_cluster_map_covered(rc->map) != DTQ_CLUSTER_SLOTS) return 0;
    for (int k = 0; k < rc->map->nprimaries; k++) {
        const dtq_redis_endpoint *e = &rc->map->nodes[rc->map->primaries[k]];
        if (rc->nodes[node_add(rc, e->host, e->port)]->down) return 0;
    }
    return 1;
}

static int is_primary(dtq_rcluster *rc, int i) {
    for (int k = 0; rc->map && k < rc->map->nprimaries; k++) {
        const dtq_redis_endpoint *e = &rc->map->nodes[rc->map->primaries[k]];
        if (e->port == rc->nodes[i]->port && !strcmp(e->host, rc->nodes[i]->host)) return 1;
    }
    return 0;
}

/* After a new map: links to every primary, waiting commands moved to their slot's owner,
 * idle links to other nodes closed. */
static void map_changed(dtq_rcluster *rc) {
    for (int k = 0; k < rc->map->nprimaries; k++) {
        const dtq_redis_endpoint *e = &rc->map->nodes[rc->map->primaries[k]];
        int i = node_add(rc, e->host, e->port);
        node_link(rc, i);
        announce(rc, rc->nodes[i]); /* a link up before the map named it a primary */
    }
    for (int i = 0; i < rc->nnodes; i++) {
        node *n = rc->nodes[i];
        req *q = n->wait, *keep = NULL, *keep_tail = NULL, *move = NULL, *move_tail = NULL;
        while (q) {
            req *next = q->next;
            int to = q->pinned ? i : node_for(rc, q->slot);
            q->next = NULL;
            if (to >= 0 && to != i) {
                q->node = to;
                req_append(&move, &move_tail, q);
            } else {
                req_append(&keep, &keep_tail, q);
            }
            q = next;
        }
        n->wait = keep;
        n->wait_tail = keep_tail;
        while (move) {
            req *next = move->next;
            move->next = NULL;
            dispatch_req(rc, move);
            move = next;
        }
    }
    for (int i = 0; i < rc->nnodes; i++) {
        node *n = rc->nodes[i];
        if (n->conn && !is_primary(rc, i) && !n->inflight && !n->wait) {
            dtq_rconn_free(n->conn);
            n->conn = NULL;
            n->up = 0;
            n->down = 0;
            n->announced = 0;
        }
    }
}

static void on_slots(redisAsyncContext *ctx, void *reply_, void *priv) {
    node *n = priv;
    dtq_rcluster *rc = n->rc;
    redisReply *reply = reply_;
    dtq_cluster_map *m = NULL;
    char why[300] = "no answer";
    DTQ_UNUSED(ctx);
    if (rc->stopping) return;
    enter(rc);
    if (n->inflight > 0) n->inflight--;
    rc->refresh_inflight = 0;
    if (reply) m = dtq_cluster_map_from_slots(reply, n->host, why, sizeof(why));
    if (m && !dtq_cluster_map_covered(m)) {
        dtq_cluster_map_free(m);
        m = NULL;
        snprintf(why, sizeof(why), "no slot of the cluster is assigned yet");
    }
    if (!m) {
        char where[300];
        /* a warning for the first failure of a streak, then debug lines */
        dtq_log(rc->refresh_streak++ ? DTQ_LOG_DEBUG : DTQ_LOG_WARN,
                "redis %s: no slot map from %s: %s%s", rc->name,
                dtq_redis_hostport(where, sizeof(where), n->host, n->port), why,
                reply && reply->type == REDIS_REPLY_ERROR ? " (is it a cluster node?)" : "");
        rc->stats.refresh_fails++;
    } else {
        dtq_cluster_map_free(rc->map);
        rc->map = m;
        rc->stats.refreshes++;
        rc->refresh_streak = 0;
        for (int k = 0; k < m->nnodes; k++) node_add(rc, m->nodes[k].host, m->nodes[k].port);
        map_changed(rc);
    }
    if (m && map_healthy(rc)) {
        rc->refresh_wanted = 0;
        rc->refresh_backoff_ms = 0;
    } else {
        rc->refresh_wanted = 1;
        rc->refresh_backoff_ms =
            rc->refresh_backoff_ms ? rc->refresh_backoff_ms * 2 : REFRESH_BACKOFF_MIN_MS;
        if (rc->refresh_backoff_ms > REFRESH_BACKOFF_MAX_MS)
            rc->refresh_backoff_ms = REFRESH_BACKOFF_MAX_MS;
        rc->refresh_at = dtq_monotonic_ms() + rc->refresh_backoff_ms;
    }
    /* the redirections that waited for this read (read or not: decided on the map now) */
    dispatch_awaiting(rc, rc->refresh_inflight_seq, dtq_monotonic_ms());
    set_state(rc);
    refresh_maybe(rc);
    leave(rc);
}

/* Starts a map read if one is wanted, none is in flight and the backoff allows: from a
 * node whose link is up and that is not down (round robin), or, with none, links are made
 * to every known node and the first to come up is asked. */
static void refresh_maybe(dtq_rcluster *rc) {
    static const char *argv[] = {"CLUSTER", "SLOTS"};
    if (!rc->refresh_wanted || rc->refresh_inflight || rc->stopping || !rc->started) return;
    if (dtq_monotonic_ms() < rc->refresh_at) return;
    for (int k = 0; k < rc->nnodes; k++) {
        int i = (rc->refresh_next + k) % rc->nnodes;
        node *n = rc->nodes[i];
        if (!n->up || n->down || !dtq_rconn_is_up(n->conn)) continue;
        if (dtq_rconn_command(n->conn, on_slots, n, 2, argv, NULL) != DTQ_OK) continue;
        n->inflight++;
        rc->refresh_inflight = 1;
        rc->refresh_inflight_seq = ++rc->refresh_seq;
        rc->refresh_next = (i + 1) % rc->nnodes;
        return;
    }
    for (int i = 0; i < rc->nnodes; i++) node_link(rc, i);
}

/* ----------------------------------------------------------------- the tick */

static void tick_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_rcluster *rc = arg;
    int64_t now = dtq_monotonic_ms();
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    if (rc->stopping) return;
    enter(rc);
    for (int i = 0; i < rc->nnodes; i++) {
        node *n = rc->nodes[i];
        req *q, *keep = NULL, *keep_tail = NULL, *late = NULL;
        if (n->conn && !n->up && !n->down && now - n->since >= rc->connect_timeout_ms)
            node_is_down(rc, n);
        /* commands that waited too long for their node's link */
        q = n->wait;
        while (q) {
            req *next = q->next;
            q->next = NULL;
            if (now - q->since >= rc->max_wait_ms) {
                q->next = late;
                late = q;
            } else {
                req_append(&keep, &keep_tail, q);
            }
            q = next;
        }
        n->wait = keep;
        n->wait_tail = keep_tail;
        while (late) {
            req *next = late->next;
            req_done(late, NULL);
            late = next;
        }
    }
    /* TRYAGAIN's resends that are due, in order */
    {
        req *q = rc->later, *keep = NULL, *keep_tail = NULL, *due = NULL, *due_tail = NULL;
        rc->later = rc->later_tail = NULL;
        while (q) {
            req *next = q->next;
            if (now >= q->resend_at)
                req_append(&due, &due_tail, q);
            else
                req_append(&keep, &keep_tail, q);
            q = next;
        }
        rc->later = keep;
        rc->later_tail = keep_tail;
        while (due) {
            req *next = due->next;
            due->next = NULL;
            dispatch_req(rc, due);
            due = next;
        }
    }
    /* redirections that waited max_wait_ms for a map read: decided on the map as it is */
    dispatch_awaiting(rc, -1, now);
    refresh_maybe(rc);
    leave(rc);
}

/* ----------------------------------------------------------------- the API */

dtq_rcluster *dtq_rcluster_new(struct event_base *base, const dtq_redis_url *url,
                               int64_t connect_timeout_ms, const char *name,
                               dtq_rcluster_state_fn *fn, void *arg) {
    dtq_rcluster *rc;
    if (!url->cluster || url->nseeds < 1) return NULL;
    rc = dtq_xcalloc(1, sizeof(*rc));
    rc->base = base;
    dtq_redis_url_copy(&rc->url, url);
    rc->connect_timeout_ms = connect_timeout_ms;
    rc->max_wait_ms = DEFAULT_MAX_WAIT_MS;
    rc->name = dtq_xstrdup(name);
    rc->fn = fn;
    rc->arg = arg;
    rc->last = -1;
    for (int i = 0; i < url->nseeds; i++) node_add(rc, url->seeds[i].host, url->seeds[i].port);
    rc->tick_ev = event_new(base, -1, EV_PERSIST, tick_cb, rc);
    return rc;
}

void dtq_rcluster_set_tls(dtq_rcluster *rc, struct dtq_tls *tls) {
    dtq_tls_unref(rc->tls);
    rc->tls = dtq_tls_ref(tls);
}

void dtq_rcluster_set_liveness(dtq_rcluster *rc, int64_t liveness_ms) {
    rc->liveness_ms = liveness_ms;
}

void dtq_rcluster_set_node_fn(dtq_rcluster *rc, dtq_rcluster_node_fn *fn, void *arg) {
    rc->node_fn = fn;
    rc->node_arg = arg;
}

void dtq_rcluster_set_max_wait(dtq_rcluster *rc, int64_t max_wait_ms) {
    rc->max_wait_ms = max_wait_ms;
}

void dtq_rcluster_start(dtq_rcluster *rc) {
    struct timeval tv = {0, TICK_MS * 1000};
    if (rc->started) return;
    rc->started = 1;
    evtimer_add(rc->tick_ev, &tv);
    want_refresh(rc); /* no link is up: every seed is connected to */
}

int dtq_rcluster_is_up(const dtq_rcluster *rc) {
    return rc && rc->up && !rc->stopping;
}

int dtq_rcluster_command_slot(dtq_rcluster *rc, int slot, redisCallbackFn *cb, void *priv, int argc,
                              const char **argv, const size_t *lens) {
    req *q;
    if (rc->stopping || !rc->map || argc < 1) return DTQ_ERR;
    if (slot >= DTQ_CLUSTER_SLOTS || slot < -1) slot = -1;
    if (node_for(rc, slot) < 0) return DTQ_ERR;
    {
        char *cmd = NULL;
        if (redisFormatCommandArgv(&cmd, argc, argv, lens) < 0) return DTQ_ERR;
        redisFreeCommand(cmd);
    }
    q = req_new(rc, cb, priv, slot, argc, argv, lens);
    /* never answered from here: dispatch_req only sends or queues when a node exists */
    dispatch_req(rc, q);
    return DTQ_OK;
}

int dtq_rcluster_command_at(dtq_rcluster *rc, const char *slot_key, redisCallbackFn *cb, void *priv,
                            int argc, const char **argv, const size_t *lens) {
    return dtq_rcluster_command_slot(
        rc, slot_key ? dtq_cluster_keyslot(slot_key, strlen(slot_key)) : -1, cb, priv, argc, argv,
        lens);
}

int dtq_rcluster_command(dtq_rcluster *rc, redisCallbackFn *cb, void *priv, int argc,
                         const char **argv, const size_t *lens) {
    int k = dtq_cluster_key_index(argc, argv, lens);
    return dtq_rcluster_command_slot(
        rc, k < 0 ? -1 : dtq_cluster_keyslot(argv[k], lens ? lens[k] : strlen(argv[k])), cb, priv,
        argc, argv, lens);
}

int dtq_rcluster_slot_node(const dtq_rcluster *rc, int slot) {
    const dtq_redis_endpoint *e;
    if (!rc->map || slot < 0 || slot >= DTQ_CLUSTER_SLOTS) return -1;
    e = dtq_cluster_map_primary(rc->map, (uint16_t)slot);
    if (!e) return -1;
    for (int i = 0; i < rc->nnodes; i++)
        if (rc->nodes[i]->port == e->port && !strcmp(rc->nodes[i]->host, e->host)) return i;
    return -1;
}

int dtq_rcluster_slot_up(const dtq_rcluster *rc, int slot) {
    int i = dtq_rcluster_slot_node(rc, slot);
    return i >= 0 && rc->nodes[i]->up && dtq_rconn_is_up(rc->nodes[i]->conn);
}

int dtq_rcluster_primaries(const dtq_rcluster *rc, dtq_rcluster_primary *out, int max) {
    const dtq_cluster_map *m = rc->map;
    if (!m) return 0;
    for (int k = 0; k < m->nprimaries && k < max; k++) {
        const dtq_redis_endpoint *e = &m->nodes[m->primaries[k]];
        out[k].host = e->host;
        out[k].port = e->port;
        out[k].slot = -1;
        for (int r = 0; r < m->nranges; r++)
            if (m->ranges[r].primary == m->primaries[k]) {
                out[k].slot = m->ranges[r].start;
                break;
            }
        out[k].up = out[k].slot >= 0 && dtq_rcluster_slot_up(rc, out[k].slot);
    }
    return m->nprimaries;
}

const dtq_cluster_map *dtq_rcluster_map(const dtq_rcluster *rc) {
    return rc->map;
}

void dtq_rcluster_stats_get(const dtq_rcluster *rc, dtq_rcluster_stats *st) {
    *st = rc->stats;
}

/* Links closed (their pending callbacks run with NULL), waiting commands answered NULL. */
static void destroy(dtq_rcluster *rc) {
    rc->stopping = 1;
    rc->dispatching++;
    for (int i = 0; i < rc->nnodes; i++) {
        node *n = rc->nodes[i];
        req *q = n->wait;
        n->wait = n->wait_tail = NULL;
        if (n->conn) dtq_rconn_free(n->conn);
        n->conn = NULL;
        while (q) {
            req *next = q->next;
            req_done(q, NULL);
            q = next;
        }
    }
    for (int k = 0; k < 2; k++) {
        req *q = k ? rc->later : rc->await;
        while (q) {
            req *next = q->next;
            req_done(q, NULL);
            q = next;
        }
    }
    rc->await = rc->await_tail = rc->later = rc->later_tail = NULL;
    for (int i = 0; i < rc->nnodes; i++) {
        free(rc->nodes[i]->host);
        free(rc->nodes[i]);
    }
    free(rc->nodes);
    dtq_cluster_map_free(rc->map);
    if (rc->tick_ev) event_free(rc->tick_ev);
    if (rc->free_ev) event_free(rc->free_ev);
    dtq_tls_unref(rc->tls);
    dtq_redis_url_deinit(&rc->url);
    free(rc->name);
    free(rc);
}

static void free_cb(evutil_socket_t fd, short what, void *arg) {
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    destroy(arg);
}

void dtq_rcluster_free(dtq_rcluster *rc) {
    if (!rc || rc->stopping) return;
    rc->stopping = 1;
    rc->fn = NULL;
    rc->node_fn = NULL;
    if (rc->dispatching) {
        struct timeval zero = {0, 0};
        rc->free_ev = evtimer_new(rc->base, free_cb, rc);
        evtimer_add(rc->free_ev, &zero);
        return;
    }
    destroy(rc);
}
