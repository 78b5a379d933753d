/* rsync.h: the blocking Redis client, for the synchronous program (dtqctl); the daemon
 * and dtq-web use the event-driven rconn.c. Both reach Redis the same way: redis_url.h
 * for the address, tls.c for rediss://, redis_proto.h for the handshake (AUTH [user]
 * password, ROLE after a Sentinel lookup, SELECT) and for the sentinels' answer, and
 * hiredis as the protocol only (redisFormatCommandArgv, a redisReader) over a socket of
 * its own, plus OpenSSL for rediss://: hiredis 0.14 has no TLS, and one code path for
 * every transport is the one the plain-TCP and unix-socket tests exercise.
 *
 * Every command goes through dtq_rsync_command, the one place that picks the node: a
 * Redis Cluster router (a slot map, MOVED/ASK followed) belongs there, over links kept
 * per node, with its pure parts in redis_proto.c beside the handshake for rconn's side. */
#ifndef DTQ_RSYNC_H
#define DTQ_RSYNC_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "redis_url.h"

struct dtq_tls;

typedef struct dtq_rsync dtq_rsync;

typedef struct dtq_rsync_opts {
    /* one limit over connect, TLS and handshake (for a Sentinel URL: per sentinel asked,
     * then again for the master) */
    int64_t connect_timeout_ms;
    struct dtq_tls *tls; /* rediss:// and rediss-sentinel:// (borrowed); NULL for the others */
    const char *sentinel_user; /* the sentinels' AUTH; NULL or "": none */
    const char *sentinel_password;
    const char *client_name; /* CLIENT SETNAME; NULL: none */
    /* A sentinel that could not answer, said before the next one is asked, e.g.
     * "sentinel 127.0.0.1:26379: Connection refused; asking the next". NULL: silent. */
    void (*note)(const char *line, void *arg);
    void *note_arg;
} dtq_rsync_opts;

/* Connects to url: for a sentinel URL the sentinels are asked in turn where the master is,
 * and it must answer ROLE master. NULL with why, one line naming the socket or host:port
 * (never the URL, which may hold a password): "cannot connect to Redis at h:p: ...",
 * "TLS handshake with Redis at h:p failed: ...", "redis AUTH: WRONGPASS ...", "no sentinel
 * knows master m", ... */
dtq_rsync *dtq_rsync_connect(const dtq_redis_url *url, const dtq_rsync_opts *o, char *why,
                             size_t whylen);
/* Sends one command and waits for its reply (an error reply is a reply). NULL when the
 * connection failed, with why ("write failed: ...", "read failed: Server closed the
 * connection", "protocol error: ..."); the connection is unusable after that. lens NULL:
 * argv are C strings. */
redisReply *dtq_rsync_command(dtq_rsync *c, int argc, const char **argv, const size_t *lens,
                              char *why, size_t whylen);
/* The next reply without sending anything (a subscriber's messages), waiting for ever. */
redisReply *dtq_rsync_read(dtq_rsync *c, char *why, size_t whylen);
/* The socket path or host:port connected to. */
const char *dtq_rsync_where(const dtq_rsync *c);
/* NULL-safe. */
void dtq_rsync_close(dtq_rsync *c);

#endif
