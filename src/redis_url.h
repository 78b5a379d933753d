/* redis_url.h: where Redis is, as a URL says it: redis://, rediss:// (TLS), unix://,
 * redis-sentinel://, rediss-sentinel://, redis-cluster:// and rediss-cluster://. Pure (no
 * connection); shared by the loader (config.c checks [redis] url), the async client (rconn.c,
 * sentinel.c), the blocking client (rsync.c) and dtq-web. */
#ifndef DTQ_REDIS_URL_H
#define DTQ_REDIS_URL_H

#include <stddef.h>

#include <sys/socket.h>

/* One host:port of a sentinel list or a cluster's seed list. */
typedef struct dtq_redis_endpoint {
    char *host;
    int port;
} dtq_redis_endpoint;

typedef struct dtq_redis_url {
    int is_unix;
    int tls;    /* rediss://, rediss-sentinel://, rediss-cluster:// */
    char *host; /* tcp host; NULL for a sentinel or cluster URL (the sentinels, the seeds say) */
    int port;
    char *path; /* unix socket path */
    char *user; /* ACL user, NULL for the default user (of the data nodes) */
    char *password;
    int db;
    /* redis-sentinel:// and rediss-sentinel:// */
    int sentinel;
    dtq_redis_endpoint *sentinels; /* in the URL's order */
    int nsentinels;
    char *master_name;
    /* redis-cluster:// and rediss-cluster:// (db is 0: a cluster has no other) */
    int cluster;
    dtq_redis_endpoint *seeds; /* the nodes to learn the slot map from, in the URL's order */
    int nseeds;
} dtq_redis_url;

#define DTQ_SENTINEL_DEFAULT_PORT 26379
/* Parses redis://[user:password@]host[:port][/db], the same with rediss:// (TLS),
 * unix:///path.sock[?db=N], or
 * redis-sentinel://[user:password@]host[:port][,host[:port]...]/master_name[/db] (the
 * sentinels' addresses, port 26379 unless given; user and password are the data nodes'),
 * the same with rediss-sentinel:// (TLS to the sentinels and the data nodes), or
 * redis-cluster://[user:password@]host[:port][,host[:port]...][/] (a Redis Cluster: any of
 * its nodes as seeds, port 6379 unless given; no database number, a cluster has db 0 only),
 * the same with rediss-cluster:// (TLS to every node). */
int dtq_redis_url_parse(const char *url, dtq_redis_url *out, char *err, size_t errlen);
void dtq_redis_url_deinit(dtq_redis_url *u);
/* A deep copy; free it with dtq_redis_url_deinit. */
void dtq_redis_url_copy(dtq_redis_url *dst, const dtq_redis_url *src);
/* The socket address of a URL: the unix path, or the host resolved like hiredis does
 * (IPv4 first, IPv6 when the name has no IPv4 address; blocking). */
int dtq_redis_url_address(const dtq_redis_url *u, struct sockaddr_storage *ss, socklen_t *sslen,
                          char *why, size_t whylen);
/* host:port, or [host]:port for an IPv6 literal, into buf; returns buf. */
const char *dtq_redis_hostport(char *buf, size_t len, const char *host, int port);
/* Where a URL points, for messages (never the URL itself, which may hold a password): the
 * socket path or host:port (a cluster URL: its first seed; a sentinel URL: its first
 * sentinel). */
const char *dtq_redis_url_where(const dtq_redis_url *u, char *buf, size_t len);

#endif
