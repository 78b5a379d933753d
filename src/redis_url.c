/* redis_url.c: see redis_url.h. */
#include "redis_url.h"

#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "util.h"

static int url_fail(char *err, size_t errlen, const char *msg) {
    snprintf(err, errlen, "%s", msg);
    return DTQ_ERR;
}

/* host[:port] or [v6]:port of len bytes into *host and *port (defport without one). */
static int parse_hostport(const char *s, size_t len, int defport, char **host, int *port, char *err,
                          size_t errlen) {
    char *hostport = dtq_xstrndup(s, len), *colon;
    *host = NULL;
    *port = defport;
    if (hostport[0] == '[') { /* [::1]:6379 */
        char *close = strchr(hostport, ']');
        if (!close || (close[1] && close[1] != ':')) {
            free(hostport);
            return url_fail(err, errlen, "unterminated [ in host");
        }
        *close = '\0';
        *host = dtq_xstrdup(hostport + 1);
        colon = close[1] == ':' ? close + 1 : NULL;
    } else {
        colon = strrchr(hostport, ':');
        if (colon) *colon = '\0';
        *host = dtq_xstrdup(hostport);
    }
    if (colon) {
        int64_t p;
        if (dtq_parse_int64(colon + 1, 1, 65535, &p) != DTQ_OK) {
            free(hostport);
            free(*host);
            *host = NULL;
            return url_fail(err, errlen, "port must be an integer in [1, 65535]");
        }
        *port = (int)p;
    }
    free(hostport);
    if (!**host) {
        free(*host);
        *host = NULL;
        return url_fail(err, errlen, "URL has no host");
    }
    return DTQ_OK;
}

/* [user:password@] at the start of p (up to `end`); returns where the hosts start. */
static const char *parse_userinfo(const char *p, const char *end, dtq_redis_url *out) {
    const char *at = NULL;
    for (const char *q = p; q < end; q++)
        if (*q == '@') at = q;
    if (!at) return p;
    {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (colon) {
            if (colon > p) out->user = dtq_xstrndup(p, (size_t)(colon - p));
            out->password = dtq_xstrndup(colon + 1, (size_t)(at - colon - 1));
        } else {
            out->password = dtq_xstrndup(p, (size_t)(at - p));
        }
    }
    return at + 1;
}

static int parse_db(const char *s, dtq_redis_url *out, char *err, size_t errlen) {
    int64_t db;
    if (dtq_parse_int64(s, 0, 100000, &db) != DTQ_OK)
        return url_fail(err, errlen, "database must be a non-negative integer");
    out->db = (int)db;
    return DTQ_OK;
}

/* After "redis-sentinel://": [user:password@]h[:p][,h[:p]...]/master_name[/db]. */
static int parse_sentinel(const char *p, dtq_redis_url *out, char *err, size_t errlen) {
    const char *slash, *hosts, *name, *name_end;
    /* the master name may not hold '/', the password may: the hosts end at the first '/'
     * after the last '@' before that name */
    const char *first_slash = strchr(p, '/');
    const char *at = NULL;
    for (const char *q = p; *q; q++)
        if (*q == '@') at = q;
    if (at && first_slash && first_slash < at) first_slash = strchr(at, '/');
    hosts = parse_userinfo(p, at ? at + 1 : p, out);
    slash = first_slash;
    if (!slash || !slash[1])
        return url_fail(err, errlen, "sentinel URL needs /master_name after the sentinels");
    for (const char *h = hosts; h < slash;) {
        const char *comma = memchr(h, ',', (size_t)(slash - h));
        const char *e = comma ? comma : slash;
        dtq_redis_endpoint ep;
        if (e == h) return url_fail(err, errlen, "empty sentinel address");
        if (parse_hostport(h, (size_t)(e - h), DTQ_SENTINEL_DEFAULT_PORT, &ep.host, &ep.port, err,
                           errlen) != DTQ_OK)
            return DTQ_ERR;
        out->sentinels =
            dtq_xrealloc(out->sentinels, sizeof(*out->sentinels) * (size_t)(out->nsentinels + 1));
        out->sentinels[out->nsentinels++] = ep;
        h = comma ? comma + 1 : slash;
        if (comma && h == slash) return url_fail(err, errlen, "empty sentinel address");
    }
    if (!out->nsentinels) return url_fail(err, errlen, "sentinel URL has no sentinel");
    name = slash + 1;
    name_end = strchr(name, '/');
    if (!name_end) name_end = name + strlen(name);
    if (name_end == name) return url_fail(err, errlen, "sentinel URL has an empty master name");
    out->master_name = dtq_xstrndup(name, (size_t)(name_end - name));
    if (*name_end && name_end[1] && parse_db(name_end + 1, out, err, errlen) != DTQ_OK)
        return DTQ_ERR;
    return DTQ_OK;
}

/* After "redis-cluster://": [user:password@]h[:p][,h[:p]...][/]. */
static int parse_cluster(const char *p, dtq_redis_url *out, char *err, size_t errlen) {
    const char *at = NULL, *hosts, *end;
    for (const char *q = p; *q; q++)
        if (*q == '@') at = q; /* a password may hold '/' and '@'; a host list neither */
    hosts = parse_userinfo(p, at ? at + 1 : p, out);
    end = strchr(hosts, '/');
    if (end && end[1])
        return url_fail(err, errlen,
                        "a cluster URL takes no database number (a Redis Cluster has database 0 "
                        "only): end it after the last host:port");
    if (!end) end = hosts + strlen(hosts);
    for (const char *h = hosts; h < end;) {
        const char *comma = memchr(h, ',', (size_t)(end - h));
        const char *e = comma ? comma : end;
        dtq_redis_endpoint ep;
        if (e == h) return url_fail(err, errlen, "empty cluster node address");
        if (parse_hostport(h, (size_t)(e - h), 6379, &ep.host, &ep.port, err, errlen) != DTQ_OK)
            return DTQ_ERR;
        out->seeds = dtq_xrealloc(out->seeds, sizeof(*out->seeds) * (size_t)(out->nseeds + 1));
        out->seeds[out->nseeds++] = ep;
        h = comma ? comma + 1 : end;
        if (comma && h == end) return url_fail(err, errlen, "empty cluster node address");
    }
    if (!out->nseeds) return url_fail(err, errlen, "cluster URL has no node");
    return DTQ_OK;
}

int dtq_redis_url_parse(const char *url, dtq_redis_url *out, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    out->port = 6379;
    if (!strncmp(url, "unix://", 7)) {
        const char *path = url + 7, *q = strchr(path, '?');
        if (*path != '/') return url_fail(err, errlen, "unix URL needs an absolute path");
        out->is_unix = 1;
        out->path = q ? dtq_xstrndup(path, (size_t)(q - path)) : dtq_xstrdup(path);
        if (q) {
            if (strncmp(q, "?db=", 4) || parse_db(q + 4, out, err, errlen) != DTQ_OK) {
                dtq_redis_url_deinit(out);
                return url_fail(err, errlen, "unix URL query must be ?db=N");
            }
        }
        if (strlen(out->path) < 2) {
            dtq_redis_url_deinit(out);
            return url_fail(err, errlen, "unix URL has an empty path");
        }
        return DTQ_OK;
    }
    if (!strncmp(url, "redis-sentinel://", 17) || !strncmp(url, "rediss-sentinel://", 18)) {
        out->tls = url[5] == 's';
        out->sentinel = 1;
        out->port = 0;
        if (parse_sentinel(url + (out->tls ? 18 : 17), out, err, errlen) != DTQ_OK) {
            dtq_redis_url_deinit(out);
            return DTQ_ERR;
        }
        return DTQ_OK;
    }
    if (!strncmp(url, "redis-cluster://", 16) || !strncmp(url, "rediss-cluster://", 17)) {
        out->tls = url[5] == 's';
        out->cluster = 1;
        out->port = 0;
        if (parse_cluster(url + (out->tls ? 17 : 16), out, err, errlen) != DTQ_OK) {
            dtq_redis_url_deinit(out);
            return DTQ_ERR;
        }
        return DTQ_OK;
    }
    if (!strncmp(url, "rediss://", 9))
        out->tls = 1;
    else if (strncmp(url, "redis://", 8))
        return url_fail(err, errlen,
                        "URL must start with redis://, rediss://, unix://, redis-sentinel://, "
                        "rediss-sentinel://, redis-cluster:// or rediss-cluster://");
    {
        const char *p = url + (out->tls ? 9 : 8), *slash;
        p = parse_userinfo(p, p + strlen(p), out);
        slash = strchr(p, '/');
        if (parse_hostport(p, slash ? (size_t)(slash - p) : strlen(p), 6379, &out->host, &out->port,
                           err, errlen) != DTQ_OK) {
            dtq_redis_url_deinit(out);
            return DTQ_ERR;
        }
        if (slash && slash[1] && parse_db(slash + 1, out, err, errlen) != DTQ_OK) {
            dtq_redis_url_deinit(out);
            return DTQ_ERR;
        }
    }
    return DTQ_OK;
}

void dtq_redis_url_deinit(dtq_redis_url *u) {
    free(u->host);
    free(u->path);
    free(u->user);
    free(u->password);
    for (int i = 0; i < u->nsentinels; i++) free(u->sentinels[i].host);
    free(u->sentinels);
    free(u->master_name);
    for (int i = 0; i < u->nseeds; i++) free(u->seeds[i].host);
    free(u->seeds);
    memset(u, 0, sizeof(*u));
}

static dtq_redis_endpoint *copy_endpoints(const dtq_redis_endpoint *src, int n) {
    dtq_redis_endpoint *dst;
    if (!n) return NULL;
    dst = dtq_xcalloc((size_t)n, sizeof(*dst));
    for (int i = 0; i < n; i++) {
        dst[i].host = dtq_xstrdup(src[i].host);
        dst[i].port = src[i].port;
    }
    return dst;
}

void dtq_redis_url_copy(dtq_redis_url *dst, const dtq_redis_url *src) {
    *dst = *src;
    dst->host = src->host ? dtq_xstrdup(src->host) : NULL;
    dst->path = src->path ? dtq_xstrdup(src->path) : NULL;
    dst->user = src->user ? dtq_xstrdup(src->user) : NULL;
    dst->password = src->password ? dtq_xstrdup(src->password) : NULL;
    dst->master_name = src->master_name ? dtq_xstrdup(src->master_name) : NULL;
    dst->sentinels = copy_endpoints(src->sentinels, src->nsentinels);
    dst->seeds = copy_endpoints(src->seeds, src->nseeds);
}

int dtq_redis_url_address(const dtq_redis_url *u, struct sockaddr_storage *ss, socklen_t *sslen,
                          char *why, size_t whylen) {
    memset(ss, 0, sizeof(*ss));
    if (u->is_unix) {
        struct sockaddr_un *sun = (struct sockaddr_un *)ss;
        if (strlen(u->path) >= sizeof(sun->sun_path)) {
            snprintf(why, whylen, "connect failed: socket path too long");
            return DTQ_ERR;
        }
        sun->sun_family = AF_UNIX;
        memcpy(sun->sun_path, u->path, strlen(u->path) + 1);
        *sslen = sizeof(*sun);
        return DTQ_OK;
    }
    if (!u->host) {
        snprintf(why, whylen, "connect failed: no address (a %s URL names no single node)",
                 u->cluster ? "cluster" : "sentinel");
        return DTQ_ERR;
    }
    {
        struct addrinfo hints, *res = NULL;
        char port[16];
        int rv;
        memset(&hints, 0, sizeof(hints));
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_family = AF_INET;
        snprintf(port, sizeof(port), "%d", u->port);
        rv = getaddrinfo(u->host, port, &hints, &res);
        if (rv != 0) {
            hints.ai_family = AF_INET6;
            rv = getaddrinfo(u->host, port, &hints, &res);
        }
        if (rv != 0 || !res) {
            snprintf(why, whylen, "connect failed: %s", rv ? gai_strerror(rv) : "no address");
            if (res) freeaddrinfo(res);
            return DTQ_ERR;
        }
        memcpy(ss, res->ai_addr, res->ai_addrlen);
        *sslen = res->ai_addrlen;
        freeaddrinfo(res);
        return DTQ_OK;
    }
}

const char *dtq_redis_hostport(char *buf, size_t len, const char *host, int port) {
    if (strchr(host, ':'))
        snprintf(buf, len, "[%s]:%d", host, port);
    else
        snprintf(buf, len, "%s:%d", host, port);
    return buf;
}

const char *dtq_redis_url_where(const dtq_redis_url *u, char *buf, size_t len) {
    if (u->is_unix) {
        snprintf(buf, len, "%s", u->path);
        return buf;
    }
    if (!u->host && u->nseeds) /* a cluster URL: its first seed */
        return dtq_redis_hostport(buf, len, u->seeds[0].host, u->seeds[0].port);
    if (!u->host && u->nsentinels) /* a sentinel URL: its first sentinel */
        return dtq_redis_hostport(buf, len, u->sentinels[0].host, u->sentinels[0].port);
    return dtq_redis_hostport(buf, len, u->host ? u->host : "?", u->port);
}
