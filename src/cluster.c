/* cluster.c: see cluster.h. */
#include "cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "reply_class.h"
#include "util.h"

uint16_t dtq_cluster_crc16(const char *buf, size_t len) {
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((uint16_t)(unsigned char)buf[i] << 8);
        for (int b = 0; b < 8; b++) crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    return crc;
}

uint16_t dtq_cluster_keyslot(const char *key, size_t len) {
    const char *open = memchr(key, '{', len);
    if (open) {
        size_t from = (size_t)(open - key) + 1;
        const char *close = memchr(open + 1, '}', len - from);
        if (close && close > open + 1) /* a non-empty tag: only it is hashed */
            return dtq_cluster_crc16(open + 1, (size_t)(close - open - 1)) &
                   (DTQ_CLUSTER_SLOTS - 1);
    }
    return dtq_cluster_crc16(key, len) & (DTQ_CLUSTER_SLOTS - 1);
}

/* ----------------------------------------------------------------- the slot map */

static int map_fail(dtq_cluster_map *m, char *why, size_t whylen, const char *detail) {
    snprintf(why, whylen, "CLUSTER SLOTS: %s", detail);
    dtq_cluster_map_free(m);
    return DTQ_ERR;
}

int dtq_cluster_map_find(const dtq_cluster_map *m, const char *host, int port) {
    for (int i = 0; i < m->nnodes; i++)
        if (m->nodes[i].port == port && !strcmp(m->nodes[i].host, host)) return i;
    return -1;
}

/* The node index of a [endpoint, port, ...] entry (added when new), or -1 when it is not
 * one. */
static int map_node(dtq_cluster_map *m, const redisReply *n, const char *asked_host) {
    const char *host;
    int i;
    if (n->type != REDIS_REPLY_ARRAY || n->elements < 2 ||
        n->element[1]->type != REDIS_REPLY_INTEGER || n->element[1]->integer < 1 ||
        n->element[1]->integer > 65535)
        return -1;
    if (n->element[0]->type == REDIS_REPLY_NIL)
        host = "";
    else if (n->element[0]->type == REDIS_REPLY_STRING)
        host = n->element[0]->str;
    else
        return -1;
    if (!*host || !strcmp(host, "?")) host = asked_host;
    if (!host || !*host) return -1;
    i = dtq_cluster_map_find(m, host, (int)n->element[1]->integer);
    if (i >= 0) return i;
    m->nodes = dtq_xrealloc(m->nodes, sizeof(*m->nodes) * (size_t)(m->nnodes + 1));
    m->nodes[m->nnodes].host = dtq_xstrdup(host);
    m->nodes[m->nnodes].port = (int)n->element[1]->integer;
    return m->nnodes++;
}

static int range_cmp(const void *a, const void *b) {
    const dtq_cluster_range *x = a, *y = b;
    return (int)x->start - (int)y->start;
}

dtq_cluster_map *dtq_cluster_map_from_slots(const redisReply *r, const char *asked_host, char *why,
                                            size_t whylen) {
    dtq_cluster_map *m;
    if (!r) {
        snprintf(why, whylen, "no reply");
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(why, whylen, "%s", r->str ? r->str : "error");
        return NULL;
    }
    if (r->type != REDIS_REPLY_ARRAY) {
        snprintf(why, whylen, "CLUSTER SLOTS: not an array");
        return NULL;
    }
    m = dtq_xcalloc(1, sizeof(*m));
    m->owner = dtq_xcalloc(DTQ_CLUSTER_SLOTS, sizeof(*m->owner));
    for (int s = 0; s < DTQ_CLUSTER_SLOTS; s++) m->owner[s] = -1;
    m->ranges = dtq_xcalloc(r->elements ? r->elements : 1, sizeof(*m->ranges));
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        dtq_cluster_range *rg = &m->ranges[m->nranges];
        int p;
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER) {
            map_fail(m, why, whylen, "an entry is not [start, end, node...]");
            return NULL;
        }
        if (e->element[0]->integer < 0 || e->element[1]->integer >= DTQ_CLUSTER_SLOTS ||
            e->element[0]->integer > e->element[1]->integer) {
            map_fail(m, why, whylen, "a slot range out of [0, 16383]");
            return NULL;
        }
        rg->start = (uint16_t)e->element[0]->integer;
        rg->end = (uint16_t)e->element[1]->integer;
        p = map_node(m, e->element[2], asked_host);
        if (p < 0) {
            map_fail(m, why, whylen, "a node is not [host, port, ...]");
            return NULL;
        }
        m->nranges++;
        rg->primary = p;
        if (e->elements > 3) rg->replicas = dtq_xcalloc(e->elements - 3, sizeof(int));
        for (size_t k = 3; k < e->elements; k++) {
            int n = map_node(m, e->element[k], asked_host);
            if (n < 0) {
                map_fail(m, why, whylen, "a node is not [host, port, ...]");
                return NULL;
            }
            rg->replicas[rg->nreplicas++] = n;
        }
        for (int s = rg->start; s <= rg->end; s++) m->owner[s] = (int16_t)p;
        {
            int seen = 0;
            for (int k = 0; k < m->nprimaries; k++) seen |= m->primaries[k] == p;
            if (!seen) {
                m->primaries =
                    dtq_xrealloc(m->primaries, sizeof(int) * (size_t)(m->nprimaries + 1));
                m->primaries[m->nprimaries++] = p;
            }
        }
    }
    qsort(m->ranges, (size_t)m->nranges, sizeof(*m->ranges), range_cmp);
    return m;
}

void dtq_cluster_map_free(dtq_cluster_map *m) {
    if (!m) return;
    for (int i = 0; i < m->nnodes; i++) free(m->nodes[i].host);
    for (int i = 0; i < m->nranges; i++) free(m->ranges[i].replicas);
    free(m->nodes);
    free(m->ranges);
    free(m->primaries);
    free(m->owner);
    free(m);
}

const dtq_redis_endpoint *dtq_cluster_map_primary(const dtq_cluster_map *m, uint16_t slot) {
    if (slot >= DTQ_CLUSTER_SLOTS || m->owner[slot] < 0) return NULL;
    return &m->nodes[m->owner[slot]];
}

int dtq_cluster_map_covered(const dtq_cluster_map *m) {
    int n = 0;
    for (int s = 0; s < DTQ_CLUSTER_SLOTS; s++) n += m->owner[s] >= 0;
    return n;
}

/* ----------------------------------------------------------------- redirections */

int dtq_cluster_redirect_allowed(const dtq_cluster_map *m, const char *host, int port) {
    if (!*host) return 1; /* the node that answered: already talked to */
    return m && dtq_cluster_map_find(m, host, port) >= 0;
}

static dtq_cluster_redirect_kind bad(dtq_cluster_redirect *out) {
    memset(out, 0, sizeof(*out));
    out->kind = DTQ_REDIRECT_BAD;
    return DTQ_REDIRECT_BAD;
}

dtq_cluster_redirect_kind dtq_cluster_redirect_parse(const char *err, dtq_cluster_redirect *out) {
    const char *p, *sp, *addr, *colon;
    size_t hostlen;
    int64_t v;
    char num[16];
    memset(out, 0, sizeof(*out));
    if (!err) return DTQ_REDIRECT_NONE;
    switch (dtq_reply_class_of(err)) {
    case DTQ_REPLY_MOVED: out->kind = DTQ_REDIRECT_MOVED; break;
    case DTQ_REPLY_ASK: out->kind = DTQ_REDIRECT_ASK; break;
    default: return DTQ_REDIRECT_NONE;
    }
    p = dtq_reply_detail(err);
    if (!*p) return bad(out);
    /* the slot */
    sp = strchr(p, ' ');
    if (!sp || sp == p || (size_t)(sp - p) >= sizeof(num)) return bad(out);
    memcpy(num, p, (size_t)(sp - p));
    num[sp - p] = '\0';
    if (dtq_parse_int64(num, 0, DTQ_CLUSTER_SLOTS - 1, &v) != DTQ_OK) return bad(out);
    out->slot = (uint16_t)v;
    /* host:port, the last word */
    addr = sp + 1;
    if (strchr(addr, ' ') || !*addr) return bad(out);
    if (addr[0] == '[') {
        const char *close = strchr(addr, ']');
        if (!close || close[1] != ':') return bad(out);
        hostlen = (size_t)(close - addr - 1);
        colon = close + 1;
        addr++;
    } else {
        colon = strrchr(addr, ':');
        if (!colon) return bad(out);
        hostlen = (size_t)(colon - addr);
    }
    if (hostlen > DTQ_CLUSTER_HOST_MAX) return bad(out);
    if (strlen(colon + 1) >= sizeof(num)) return bad(out);
    if (dtq_parse_int64(colon + 1, 1, 65535, &v) != DTQ_OK) return bad(out);
    memcpy(out->host, addr, hostlen);
    out->host[hostlen] = '\0';
    out->port = (int)v;
    return out->kind;
}

/* ----------------------------------------------------------------- the router core */

#define TRYAGAIN_PAUSE_MIN_MS 50
#define TRYAGAIN_PAUSE_MAX_MS 500

void dtq_route_start(dtq_route *rt, int64_t tryagain_window_ms) {
    memset(rt, 0, sizeof(*rt));
    rt->tryagain_window_ms = tryagain_window_ms > 0 ? tryagain_window_ms : 0;
    rt->pause_ms = TRYAGAIN_PAUSE_MIN_MS;
}

static dtq_route_action step_to(dtq_route *rt, dtq_route_step *out, dtq_route_action a) {
    out->action = a;
    /* a re-read is for the one reply it was asked for */
    rt->reread = a == DTQ_ROUTE_REREAD;
    return a;
}

dtq_route_action dtq_route_decide(dtq_route *rt, const dtq_cluster_map *m, const char *host,
                                  int port, const redisReply *reply, int64_t now_ms,
                                  dtq_route_step *out) {
    dtq_cluster_redirect d;
    dtq_cluster_redirect_kind kind;
    const char *to;
    memset(out, 0, sizeof(*out));
    out->slot = -1;
    if (!reply || reply->type != REDIS_REPLY_ERROR) return step_to(rt, out, DTQ_ROUTE_DONE);
    switch (dtq_reply_class_of(reply->str)) {
    case DTQ_REPLY_CLUSTERDOWN: out->reread = 1; return step_to(rt, out, DTQ_ROUTE_DONE);
    case DTQ_REPLY_TRYAGAIN:
        if (!rt->tryagain_until) rt->tryagain_until = now_ms + rt->tryagain_window_ms;
        if (now_ms + rt->pause_ms >= rt->tryagain_until) return step_to(rt, out, DTQ_ROUTE_DONE);
        snprintf(out->host, sizeof(out->host), "%s", host);
        out->port = port;
        out->asking = rt->asking;
        out->pause_ms = rt->pause_ms;
        rt->pause_ms =
            rt->pause_ms * 2 > TRYAGAIN_PAUSE_MAX_MS ? TRYAGAIN_PAUSE_MAX_MS : rt->pause_ms * 2;
        return step_to(rt, out, DTQ_ROUTE_RESEND);
    case DTQ_REPLY_MOVED:
    case DTQ_REPLY_ASK: break;
    default: return step_to(rt, out, DTQ_ROUTE_DONE);
    }
    kind = dtq_cluster_redirect_parse(reply->str, &d);
    if (kind != DTQ_REDIRECT_MOVED && kind != DTQ_REDIRECT_ASK) /* malformed: the caller's */
        return step_to(rt, out, DTQ_ROUTE_DONE);
    if (rt->redirects >= DTQ_CLUSTER_MAX_REDIRECTS) {
        snprintf(out->why, sizeof(out->why),
                 "more than %d cluster redirections for slot %d (the last: %.300s)",
                 DTQ_CLUSTER_MAX_REDIRECTS, d.slot, reply->str);
        return step_to(rt, out, DTQ_ROUTE_GIVE_UP);
    }
    to = d.host[0] ? d.host : host;
    /* only to a node of the cluster's own map: not the command, nor the AUTH of a new
     * link, to any address a reply names; the map is read once for one it does not hold */
    if (!dtq_cluster_redirect_allowed(m, to, d.port)) {
        if (!rt->reread) return step_to(rt, out, DTQ_ROUTE_REREAD);
        snprintf(out->why, sizeof(out->why),
                 "cluster redirection to %.*s:%d, not a node of the cluster's slot map; not "
                 "followed",
                 DTQ_CLUSTER_HOST_MAX, to, d.port);
        return step_to(rt, out, DTQ_ROUTE_GIVE_UP);
    }
    rt->redirects++;
    snprintf(out->host, sizeof(out->host), "%s", to);
    out->port = d.port;
    out->followed = kind;
    out->slot = d.slot;
    out->moved = kind == DTQ_REDIRECT_MOVED;
    out->reread = out->moved && !rt->reread; /* unless the map was just read for this reply */
    /* ASKING before this send only: ASK is one command's detour, and the map stays */
    rt->asking = out->asking = kind == DTQ_REDIRECT_ASK;
    return step_to(rt, out, DTQ_ROUTE_RESEND);
}

int dtq_cluster_map_move(dtq_cluster_map *m, uint16_t slot, const char *host, int port) {
    int k;
    if (!m || slot >= DTQ_CLUSTER_SLOTS || (k = dtq_cluster_map_find(m, host, port)) < 0) return 0;
    m->owner[slot] = (int16_t)k;
    return 1;
}

redisReply *dtq_cluster_error_reply(const char *text) {
    redisReader *rd = redisReaderCreate();
    size_t n = strlen(text);
    char *line = dtq_xmalloc(n + 3);
    void *r = NULL;
    if (!rd) abort();
    line[0] = '-';
    for (size_t i = 0; i < n; i++) /* one line: no CR or LF inside */
        line[i + 1] = text[i] == '\r' || text[i] == '\n' ? ' ' : text[i];
    memcpy(line + n + 1, "\r\n", 2);
    redisReaderFeed(rd, line, n + 3);
    if (redisReaderGetReply(rd, &r) != REDIS_OK || !r) abort();
    redisReaderFree(rd);
    free(line);
    return r;
}

int dtq_cluster_keyless_node(const dtq_cluster_map *m, int last, int (*up)(void *arg, int node),
                             void *arg) {
    if (!m || !m->nprimaries) return -1;
    if (last >= 0 && up && up(arg, last))
        for (int k = 0; k < m->nprimaries; k++)
            if (m->primaries[k] == last) return last;
    for (int k = 0; up && k < m->nprimaries; k++)
        if (up(arg, m->primaries[k])) return m->primaries[k];
    return m->primaries[0];
}

/* ----------------------------------------------------------------- routing */

static int arg_is(int argc, const char **argv, const size_t *lens, int i, const char *word) {
    size_t n = strlen(word);
    if (i >= argc) return 0;
    if ((lens ? lens[i] : strlen(argv[i])) != n) return 0;
    return !strncasecmp(argv[i], word, n);
}

int dtq_cluster_key_index(int argc, const char **argv, const size_t *lens) {
    static const char *keyless[] = {
        "PING",    "ECHO",     "WAIT",         "SUBSCRIBE", "PSUBSCRIBE", "UNSUBSCRIBE",
        "PUBLISH", "FUNCTION", "SCRIPT",       "CLUSTER",   "INFO",       "TIME",
        "CLIENT",  "AUTH",     "HELLO",        "SELECT",    "ROLE",       "READONLY",
        "ASKING",  "DBSIZE",   "SCAN",         "KEYS",      "CONFIG",     "ACL",
        "COMMAND", "MULTI",    "EXEC",         "DISCARD",   "QUIT",       "LASTSAVE",
        "MEMORY",  "LATENCY",  "SLOWLOG",      "DEBUG",     "MONITOR",    "SHUTDOWN",
        "FLUSHDB", "FLUSHALL", "PUNSUBSCRIBE", "PUBSUB",    "RESET",      "READWRITE",
        "SAVE",    "BGSAVE",   "BGREWRITEAOF", "SWAPDB",    "LOLWUT",     NULL};
    if (argc < 2) return -1;
    for (const char **k = keyless; *k; k++)
        if (arg_is(argc, argv, lens, 0, *k)) return -1;
    if (arg_is(argc, argv, lens, 0, "FCALL") || arg_is(argc, argv, lens, 0, "FCALL_RO") ||
        arg_is(argc, argv, lens, 0, "EVAL") || arg_is(argc, argv, lens, 0, "EVALSHA") ||
        arg_is(argc, argv, lens, 0, "EVAL_RO") || arg_is(argc, argv, lens, 0, "EVALSHA_RO")) {
        char num[24];
        size_t n;
        int64_t k;
        if (argc < 4) return -1;
        n = lens ? lens[2] : strlen(argv[2]);
        if (n == 0 || n >= sizeof(num)) return -1;
        memcpy(num, argv[2], n);
        num[n] = '\0';
        if (dtq_parse_int64(num, 1, INT32_MAX, &k) != DTQ_OK) return -1;
        return 3;
    }
    /* a subcommand first: XGROUP CREATE <key> ..., XINFO STREAM|GROUPS|CONSUMERS <key>,
     * OBJECT ENCODING <key> */
    if (arg_is(argc, argv, lens, 0, "XGROUP") || arg_is(argc, argv, lens, 0, "XINFO") ||
        arg_is(argc, argv, lens, 0, "OBJECT"))
        return argc > 2 ? 2 : -1;
    if (arg_is(argc, argv, lens, 0, "XREAD") || arg_is(argc, argv, lens, 0, "XREADGROUP")) {
        for (int i = 1; i + 1 < argc; i++)
            if (arg_is(argc, argv, lens, i, "STREAMS")) return i + 1;
        return -1;
    }
    return 1;
}
