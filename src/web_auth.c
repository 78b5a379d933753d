/* web_auth.c: token files and the constant-time bearer check; the Host check. */
#include "web_auth.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "util.h"

#define DIGEST_LEN 32
#define TOKEN_FILE_MAX (64 * 1024)

typedef struct web_token {
    unsigned char digest[DIGEST_LEN]; /* SHA-256 of the token; the token itself is not kept */
    char *actor;                      /* "dtq-web" or "dtq-web:<name>" */
} web_token;

struct dtq_web_tokens {
    web_token v[DTQ_WEB_TOKENS_MAX];
    int n;
};

static void sha256(const char *s, size_t len, unsigned char out[DIGEST_LEN]) {
    unsigned int outlen = 0;
    if (EVP_Digest(s, len, out, &outlen, EVP_sha256(), NULL) != 1 || outlen != DIGEST_LEN) abort();
}

/* A token is printable ASCII without blanks (what `openssl rand -hex 32` or -base64 make). */
static int valid_token(const char *s, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (s[i] <= ' ' || s[i] > '~') return 0;
    return 1;
}

static int all_hex(const char *s, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (!isxdigit((unsigned char)s[i])) return 0;
    return 1;
}

dtq_web_tokens *dtq_web_tokens_parse(const char *text, char *err, size_t errlen) {
    dtq_web_tokens *t = dtq_xcalloc(1, sizeof(*t));
    const char *line = text;
    int lineno = 0;
    while (*line) {
        const char *end = strchr(line, '\n'), *next;
        char *copy, *save = NULL, *w1, *w2, *w3;
        size_t clen;
        if (!end) end = line + strlen(line);
        next = *end ? end + 1 : end;
        lineno++;
        clen = (size_t)(end - line);
        copy = dtq_xstrndup(line, clen);
        line = next;
        w1 = strtok_r(copy, " \t\r", &save);
        if (!w1 || *w1 == '#') {
            OPENSSL_cleanse(copy, clen);
            free(copy);
            continue;
        }
        w2 = strtok_r(NULL, " \t\r", &save);
        w3 = w2 ? strtok_r(NULL, " \t\r", &save) : NULL;
        if (w3) {
            snprintf(err, errlen, "line %d: expected '<token>' or '<name> <token>'", lineno);
            goto fail;
        }
        if (w2 && !dtq_valid_name(w1, strlen(w1), 64)) {
            snprintf(err, errlen, "line %d: the name must match [A-Za-z0-9._:-]{1,64}", lineno);
            goto fail;
        }
        {
            const char *tok = w2 ? w2 : w1;
            size_t len = strlen(tok);
            web_token *wt;
            if (!valid_token(tok, len)) {
                snprintf(err, errlen,
                         "line %d: a token must be printable characters without blanks (make "
                         "one with: openssl rand -hex 32)",
                         lineno);
                goto fail;
            }
            if (len < (all_hex(tok, len) ? DTQ_WEB_TOKEN_MIN_HEX : DTQ_WEB_TOKEN_MIN)) {
                snprintf(err, errlen,
                         "line %d: the token is %zu characters; a token needs 32 random bytes: "
                         "%d hex digits, or at least %d characters (make one with: openssl "
                         "rand -hex 32)",
                         lineno, len, DTQ_WEB_TOKEN_MIN_HEX, DTQ_WEB_TOKEN_MIN);
                goto fail;
            }
            if (t->n == DTQ_WEB_TOKENS_MAX) {
                snprintf(err, errlen, "line %d: more than %d tokens", lineno, DTQ_WEB_TOKENS_MAX);
                goto fail;
            }
            wt = &t->v[t->n++];
            sha256(tok, len, wt->digest);
            wt->actor = w2 ? dtq_xasprintf("dtq-web:%s", w1) : dtq_xstrdup("dtq-web");
        }
        OPENSSL_cleanse(copy, clen);
        free(copy);
        continue;
    fail:
        OPENSSL_cleanse(copy, clen);
        free(copy);
        dtq_web_tokens_free(t);
        return NULL;
    }
    if (t->n == 0) {
        snprintf(err, errlen, "no token in the file");
        dtq_web_tokens_free(t);
        return NULL;
    }
    return t;
}

dtq_web_tokens *dtq_web_tokens_load(const char *path, char *err, size_t errlen) {
    struct stat sb;
    FILE *f;
    char *buf, perr[256];
    size_t n;
    dtq_web_tokens *t;
    if (stat(path, &sb) != 0 || !(f = fopen(path, "r"))) {
        snprintf(err, errlen, "cannot read '%s': %s", path, strerror(errno));
        return NULL;
    }
    if (!S_ISREG(sb.st_mode) || sb.st_size > TOKEN_FILE_MAX) {
        snprintf(err, errlen, "'%s' is not a regular file of at most %d bytes", path,
                 TOKEN_FILE_MAX);
        fclose(f);
        return NULL;
    }
    buf = dtq_xcalloc(1, TOKEN_FILE_MAX + 1);
    n = fread(buf, 1, TOKEN_FILE_MAX, f);
    fclose(f);
    if (memchr(buf, '\0', n)) {
        snprintf(err, errlen, "'%s' holds a NUL byte", path);
        free(buf);
        return NULL;
    }
    t = dtq_web_tokens_parse(buf, perr, sizeof(perr));
    OPENSSL_cleanse(buf, n);
    free(buf);
    if (!t) snprintf(err, errlen, "%s: %s", path, perr);
    return t;
}

void dtq_web_tokens_free(dtq_web_tokens *t) {
    if (!t) return;
    for (int i = 0; i < t->n; i++) free(t->v[i].actor);
    OPENSSL_cleanse(t, sizeof(*t));
    free(t);
}

int dtq_web_tokens_count(const dtq_web_tokens *t) {
    return t ? t->n : 0;
}

const char *dtq_web_tokens_check(const dtq_web_tokens *t, const char *authorization) {
    unsigned char digest[DIGEST_LEN];
    const char *p, *end, *actor = NULL;
    if (!t || !authorization) return NULL;
    p = authorization;
    while (*p == ' ' || *p == '\t') p++;
    if (strncasecmp(p, "Bearer", 6) || (p[6] != ' ' && p[6] != '\t')) return NULL;
    p += 6;
    while (*p == ' ' || *p == '\t') p++;
    end = p + strlen(p);
    while (end > p && (end[-1] == ' ' || end[-1] == '\t')) end--;
    if (end == p) return NULL;
    /* Digests are compared, not tokens: equal lengths, and no early exit over the list. */
    sha256(p, (size_t)(end - p), digest);
    for (int i = 0; i < t->n; i++)
        if (CRYPTO_memcmp(digest, t->v[i].digest, DIGEST_LEN) == 0 && !actor) actor = t->v[i].actor;
    return actor;
}

/* ----------------------------------------------------------------- hosts */

typedef struct host_entry {
    int family;             /* AF_INET, AF_INET6, or 0 for a name */
    unsigned char addr[16]; /* the address of an IP entry */
    char *name;             /* a name, lower case */
} host_entry;

struct dtq_web_hosts {
    host_entry listen; /* the listen address (unused when listen_any) */
    int listen_any;    /* listen is every address: any IP address names dtq-web */
    int port;          /* the listen port */
    int any;           /* allowed_hosts holds "*" */
    host_entry v[DTQ_WEB_HOSTS_MAX];
    int n;
};

/* A DNS name as a Host may carry it: dot-separated labels of letters, digits, '-' and '_'
 * (1-63 bytes each, 253 in all), no empty label. */
static int valid_host_name(const char *s, size_t len) {
    size_t label = 0;
    if (len == 0 || len > 253) return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '.') {
            if (label == 0) return 0;
            label = 0;
        } else if (isalnum(c) || c == '-' || c == '_') {
            if (++label > 63) return 0;
        } else {
            return 0;
        }
    }
    return label > 0;
}

/* Fills e from s[0, len): an IPv6 address when v6 (brackets already taken off), else an
 * IPv4 address or a name. 0, or -1 when it is none of them. */
static int host_entry_parse(const char *s, size_t len, int v6, host_entry *e) {
    char buf[256];
    memset(e, 0, sizeof(*e));
    if (len == 0 || len >= sizeof(buf)) return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (v6) {
        if (inet_pton(AF_INET6, buf, e->addr) != 1) return -1;
        e->family = AF_INET6;
        return 0;
    }
    if (inet_pton(AF_INET, buf, e->addr) == 1) {
        e->family = AF_INET;
        return 0;
    }
    if (!valid_host_name(buf, len)) return -1;
    for (size_t i = 0; i < len; i++) buf[i] = (char)tolower((unsigned char)buf[i]);
    e->name = dtq_xstrdup(buf);
    return 0;
}

static int host_entry_same(const host_entry *a, const host_entry *b) {
    if (a->family != b->family) return 0;
    if (a->family == AF_INET) return !memcmp(a->addr, b->addr, 4);
    if (a->family == AF_INET6) return !memcmp(a->addr, b->addr, 16);
    return a->name && b->name && !strcmp(a->name, b->name);
}

/* Splits a Host value (host[:port], [v6][:port]) into e and *port (-1: none). 0, or -1
 * when it is malformed. */
static int host_value_parse(const char *s, host_entry *e, int *port) {
    const char *hb = s, *he, *rest;
    int v6 = 0;
    *port = -1;
    if (*s == '[') {
        hb = s + 1;
        he = strchr(hb, ']');
        if (!he) return -1;
        rest = he + 1;
        v6 = 1;
    } else {
        he = strchr(s, ':');
        if (!he) he = s + strlen(s);
        rest = he;
    }
    if (*rest == ':') {
        long p = 0;
        const char *d = rest + 1;
        if (!*d) return -1;
        for (; *d; d++) {
            if (!isdigit((unsigned char)*d) || d - rest > 5) return -1;
            p = p * 10 + (*d - '0');
        }
        if (p < 1 || p > 65535) return -1;
        *port = (int)p;
    } else if (*rest) {
        return -1;
    }
    return host_entry_parse(hb, (size_t)(he - hb), v6, e);
}

dtq_web_hosts *dtq_web_hosts_new(const char *listen, const char *allowed, char *err,
                                 size_t errlen) {
    dtq_web_hosts *h = dtq_xcalloc(1, sizeof(*h));
    char *lhost = NULL;
    const char *p = allowed ? allowed : "";
    if (dtq_split_hostport(listen, &lhost, &h->port) != DTQ_OK) {
        snprintf(err, errlen, "'%s' is not host:port, :port or [IPv6]:port", listen);
        goto fail;
    }
    if (!*lhost ||
        host_entry_parse(lhost, strlen(lhost), strchr(lhost, ':') != NULL, &h->listen) != 0) {
        /* ":port", or a listen name evhttp resolves that no Host can match as written */
        h->listen_any = !*lhost;
    } else if (h->listen.family) {
        static const unsigned char zero[16];
        h->listen_any = !memcmp(h->listen.addr, zero, h->listen.family == AF_INET ? 4 : 16);
    }
    free(lhost);
    lhost = NULL;
    for (;;) {
        size_t len;
        const char *tok;
        host_entry e;
        int rc;
        p += strspn(p, " \t,");
        if (!*p) break;
        tok = p;
        len = strcspn(p, " \t,");
        p += len;
        if (len == 1 && *tok == '*') {
            h->any = 1;
            continue;
        }
        if (h->n == DTQ_WEB_HOSTS_MAX) {
            snprintf(err, errlen, "more than %d entries", DTQ_WEB_HOSTS_MAX);
            goto fail;
        }
        if (memchr(tok, '*', len)) {
            snprintf(err, errlen, "'%.*s': a wildcard is '*' alone (it turns the check off)",
                     (int)len, tok);
            goto fail;
        }
        if (*tok == '[')
            rc = tok[len - 1] == ']' ? host_entry_parse(tok + 1, len - 2, 1, &e) : -1;
        else if (memchr(tok, ':', len))
            rc = host_entry_parse(tok, len, 1, &e);
        else
            rc = host_entry_parse(tok, len, 0, &e);
        if (rc != 0) {
            if (memchr(tok, ':', len) && !(*tok == '[' && tok[len - 1] == ']'))
                snprintf(err, errlen,
                         "'%.*s' is not an IPv6 address; give a name without a port (any port "
                         "is accepted)",
                         (int)len, tok);
            else
                snprintf(err, errlen, "'%.*s' is not a host name, an IP address or *", (int)len,
                         tok);
            goto fail;
        }
        h->v[h->n++] = e;
    }
    return h;
fail:
    free(lhost);
    dtq_web_hosts_free(h);
    return NULL;
}

void dtq_web_hosts_free(dtq_web_hosts *h) {
    if (!h) return;
    free(h->listen.name);
    for (int i = 0; i < h->n; i++) free(h->v[i].name);
    free(h);
}

int dtq_web_hosts_any(const dtq_web_hosts *h) {
    return h && h->any;
}

int dtq_web_hosts_check(const dtq_web_hosts *h, const char *host) {
    host_entry e;
    int port, ok = 0;
    if (!h || !host) return 0;
    if (h->any) return 1;
    if (host_value_parse(host, &e, &port) != 0) return 0;
    if (port == -1 || port == h->port) {
        if (!e.family && !strcmp(e.name, "localhost"))
            ok = 1;
        else if (h->listen_any ? e.family != 0 : host_entry_same(&h->listen, &e))
            ok = 1;
    }
    for (int i = 0; i < h->n && !ok; i++) ok = host_entry_same(&h->v[i], &e);
    free(e.name);
    return ok;
}

int dtq_web_hosts_request(const dtq_web_hosts *h, const char *host, int nhost,
                          const char *target_host, int http10, const char **refused,
                          const char **why) {
    *refused = NULL;
    *why = NULL;
    if (nhost > 1) {
        *why = "the request carries more than one Host";
        return 400;
    }
    if (!host && !target_host) {
        if (http10) return 0;
        *why = "an HTTP/1.1 request needs a Host header";
        return 400;
    }
    *why = "a name this server does not answer for";
    if (target_host && !dtq_web_hosts_check(h, target_host)) {
        *refused = target_host;
        return 421;
    }
    if (host && !dtq_web_hosts_check(h, host)) {
        *refused = host;
        return 421;
    }
    *why = NULL;
    return 0;
}
