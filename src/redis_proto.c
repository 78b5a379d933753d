/* redis_proto.c: see redis_proto.h. */
#include "redis_proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static void add(dtq_handshake *h, dtq_hs_kind kind, int argc, const char *a0, const char *a1,
                const char *a2) {
    dtq_hs_step *s = &h->steps[h->n++];
    s->kind = kind;
    s->argc = argc;
    s->argv[0] = a0;
    s->argv[1] = a1;
    s->argv[2] = a2;
}

void dtq_handshake_plan(dtq_handshake *h, const dtq_redis_url *url, const dtq_hs_opts *o) {
    memset(h, 0, sizeof(*h));
    if (url->password) {
        if (url->user)
            add(h, DTQ_HS_AUTH, 3, "AUTH", url->user, url->password);
        else
            add(h, DTQ_HS_AUTH, 2, "AUTH", url->password, NULL);
    }
    if (o->role_check) add(h, DTQ_HS_ROLE, 1, "ROLE", NULL, NULL);
    if (url->db) {
        snprintf(h->db, sizeof(h->db), "%d", url->db);
        add(h, DTQ_HS_SELECT, 2, "SELECT", h->db, NULL);
    }
    if (o->client_name) add(h, DTQ_HS_SETNAME, 3, "CLIENT", "SETNAME", o->client_name);
    if (o->ping) add(h, DTQ_HS_PING, 1, "PING", NULL, NULL);
}

const char *dtq_handshake_step_name(dtq_hs_kind kind) {
    switch (kind) {
    case DTQ_HS_AUTH: return "AUTH";
    case DTQ_HS_ROLE: return "ROLE";
    case DTQ_HS_SELECT: return "SELECT";
    case DTQ_HS_SETNAME: return "CLIENT SETNAME";
    case DTQ_HS_PING: return "PING";
    }
    return "?";
}

static int is_status(const redisReply *r, const char *word) {
    return r->type == REDIS_REPLY_STATUS && r->str && !strcmp(r->str, word);
}

int dtq_handshake_check(dtq_hs_kind kind, const redisReply *reply, char *why, size_t whylen) {
    if (!reply) {
        snprintf(why, whylen, "no reply");
        return DTQ_HS_WRONG;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
        if (kind == DTQ_HS_SETNAME) return DTQ_HS_OK;
        snprintf(why, whylen, "%s", reply->str ? reply->str : "error");
        return DTQ_HS_REFUSED;
    }
    switch (kind) {
    case DTQ_HS_ROLE: {
        const char *role = reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 &&
                                   reply->element[0]->type == REDIS_REPLY_STRING
                               ? reply->element[0]->str
                               : "?";
        if (!strcmp(role, "master")) return DTQ_HS_OK;
        snprintf(why, whylen, "not a master (ROLE: %s)", role);
        return DTQ_HS_WRONG;
    }
    case DTQ_HS_PING:
        if (is_status(reply, "PONG")) return DTQ_HS_OK;
        break;
    case DTQ_HS_SETNAME: return DTQ_HS_OK;
    case DTQ_HS_AUTH:
    case DTQ_HS_SELECT:
        if (is_status(reply, "OK")) return DTQ_HS_OK;
        break;
    }
    snprintf(why, whylen, "unexpected reply to %s", dtq_handshake_step_name(kind));
    return DTQ_HS_WRONG;
}

void dtq_sentinel_question(const char *master, const char *argv[DTQ_SENTINEL_QUESTION_ARGC]) {
    argv[0] = "SENTINEL";
    argv[1] = "get-master-addr-by-name";
    argv[2] = master;
}

int dtq_sentinel_answer(const redisReply *r, char **host, int *port, char *why, size_t whylen) {
    int64_t p;
    *host = NULL;
    *port = 0;
    if (r && r->type == REDIS_REPLY_NIL) {
        snprintf(why, whylen, "does not know the master");
        return DTQ_SENTINEL_UNKNOWN;
    }
    if (r && r->type == REDIS_REPLY_ERROR) {
        snprintf(why, whylen, "%s", r->str ? r->str : "error");
        return DTQ_SENTINEL_BAD;
    }
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING ||
        r->element[0]->len == 0 || memchr(r->element[0]->str, '\0', r->element[0]->len) ||
        dtq_parse_int64(r->element[1]->str, 1, 65535, &p) != DTQ_OK) {
        snprintf(why, whylen, "%s", r ? "not an address" : "no reply");
        return DTQ_SENTINEL_BAD;
    }
    *host = dtq_xstrndup(r->element[0]->str, r->element[0]->len);
    *port = (int)p;
    return DTQ_SENTINEL_ADDR;
}

/* One blank-separated word of s into out (at most DTQ_SENTINEL_HOST_MAX bytes); the rest. */
static const char *switch_word(const char *s, char *out) {
    size_t n;
    s += strspn(s, " ");
    n = strcspn(s, " ");
    if (n == 0 || n > DTQ_SENTINEL_HOST_MAX) return NULL;
    memcpy(out, s, n);
    out[n] = '\0';
    return s + n;
}

static const char *switch_port(const char *s, int *port) {
    char word[DTQ_SENTINEL_HOST_MAX + 1];
    int64_t p;
    s = s ? switch_word(s, word) : NULL;
    if (!s || dtq_parse_int64(word, 1, 65535, &p) != DTQ_OK) return NULL;
    *port = (int)p;
    return s;
}

int dtq_sentinel_switch_parse(const redisReply *msg, dtq_sentinel_switch *sw) {
    const redisReply *payload;
    const char *p;
    memset(sw, 0, sizeof(*sw));
    if (!msg || msg->type != REDIS_REPLY_ARRAY || msg->elements < 1) return -1;
    payload = msg->element[msg->elements - 1];
    if (payload->type != REDIS_REPLY_STRING || memchr(payload->str, '\0', payload->len)) return -1;
    p = switch_word(payload->str, sw->master);
    p = p ? switch_word(p, sw->old_host) : NULL;
    p = switch_port(p, &sw->old_port);
    p = p ? switch_word(p, sw->new_host) : NULL;
    p = switch_port(p, &sw->new_port);
    if (!p || p[strspn(p, " ")]) {
        memset(sw, 0, sizeof(*sw));
        return -1;
    }
    return 0;
}
