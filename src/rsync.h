/* rsync.h: the blocking Redis client, for the synchronous program (dtqctl); the daemon
 * and dtq-web use the event-driven rconn.c. Both reach Redis the same way: redis_url.h
 * for the address, tls.c for rediss://, redis_proto.h for the handshake (AUTH [user]
 * password, ROLE after a Sentinel lookup, SELECT) and for the sentinels' answer, and
 * hiredis as the protocol only (redisFormatCommandArgv, a redisReader) over a socket of
 * its own, plus OpenSSL for rediss://: hiredis 0.14 has no TLS, and one code path for
 * every transport is the one the plain-TCP and unix-socket tests exercise.
 *
 * Every command goes through route() in rsync.c, the one place that picks the node.
 *
 * A Redis Cluster (redis-cluster://, rediss-cluster://): dtq_rsync_connect asks the seeds
 * in the URL's order for the slot map (CLUSTER SLOTS; the handshake on every node is AUTH
 * and TLS as for one Redis; no SELECT: a cluster has db 0 only); the first that answers
 * gives it, a seed that cannot be reached is named through o->note, a seed that is not a
 * cluster node ends the connect ("... gave no slot map ...: is it a cluster node?"). Then:
 *  - one link per node, opened when a command first goes there (connect_timeout_ms over
 *    connect, TLS and handshake), kept until it fails or the client is closed;
 *  - a command goes to the primary of its key's slot (cluster.h: CRC16 with hash tags):
 *    dtq_rsync_command finds the key itself (dtq_cluster_key_index: FCALL/FCALL_RO/EVAL*
 *    their first key when numkeys > 0, XREAD[GROUP] the first stream, the plain commands
 *    argv[1]); dtq_rsync_command_at names it; dtq_rsync_command_slot names the slot. A
 *    command without a key (FCALL with numkeys 0, WAIT, SUBSCRIBE, PING, FUNCTION ...)
 *    goes by cluster.c's keyless rule (dtq_cluster_keyless_node): the node of the previous
 *    command while it is a primary with its link open (so WAIT counts the replicas of the
 *    write before it, and a subscriber reads where it subscribed), else a primary;
 *  - each reply goes through cluster.c's router core (dtq_route_decide, cluster.h), the
 *    rules of both routers: "MOVED slot host:port": the slot's owner set in the map, the
 *    map read again and the command sent to the node named; "ASK slot host:port": ASKING
 *    then the command at the node named, once, the map unchanged; an empty host is the node
 *    that answered; a redirection to an address not in the map: the map read again once,
 *    then refused (an error reply "cluster redirection to h:p, not a node of the cluster's
 *    slot map; not followed"); at most DTQ_CLUSTER_MAX_REDIRECTS (5) redirections for one
 *    command, then an error reply "more than 5 cluster redirections for slot N (the last:
 *    ...)"; TRYAGAIN sent again after pauses (50 ms doubling to 500 ms) until the reply
 *    timeout (10 s when none) from the first, then it is the answer; CLUSTERDOWN answered,
 *    the map read again;
 *  - a node that cannot be reached (connect refused, TLS, handshake, or an idle link found
 *    closed before anything is written): the map is read again from another node (those
 *    with a link first) and the command tried once more at the slot's owner then. A link
 *    lost AFTER the command was written: NULL with why and no second try (the command may
 *    have run: dtqctl's writes are not all idempotent); the map is read again, the link
 *    reopened by the next command, and the client stays usable.
 * Other error replies (CROSSSLOT, a Function's refusal, ...) are returned as replies. */
#ifndef DTQ_RSYNC_H
#define DTQ_RSYNC_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "cluster.h"
#include "redis_url.h"

struct dtq_tls;

typedef struct dtq_rsync dtq_rsync;

typedef struct dtq_rsync_opts {
    /* one limit over connect, TLS and handshake (for a Sentinel URL: per sentinel asked,
     * then again for the master) */
    int64_t connect_timeout_ms;
    /* one limit over a command, from its first byte written to its reply's last byte read
     * (also across a cluster's redirections, per node asked); 0: none. A subscriber's
     * dtq_rsync_read has none. */
    int64_t reply_timeout_ms;
    /* out, may be NULL: set to 1 when dtq_rsync_connect failed because a deadline passed
     * (no answer in time: connect, TLS, handshake, a sentinel or a cluster seed) */
    int *timed_out;
    /* rediss://, rediss-sentinel:// (borrowed), rediss-cluster:// (a reference is taken:
     * the nodes are connected to as commands need them); NULL for the others */
    struct dtq_tls *tls;
    const char *sentinel_user; /* the sentinels' AUTH; NULL or "": none */
    const char *sentinel_password;
    const char *client_name; /* CLIENT SETNAME; NULL: none */
    /* A sentinel that could not answer, said before the next one is asked, e.g.
     * "sentinel 127.0.0.1:26379: Connection refused; asking the next". NULL: silent. */
    void (*note)(const char *line, void *arg);
    void *note_arg;
} dtq_rsync_opts;

/* Connects to url: for a sentinel URL the sentinels are asked in turn where the master is,
 * and it must answer ROLE master; for a cluster URL the seeds are asked for the slot map. NULL with
 * why, one line naming the socket or host:port (never the URL, which may hold a password): "cannot
 * connect to Redis at h:p: ...", "TLS handshake with Redis at h:p failed: ...", "redis AUTH:
 * WRONGPASS ...", "no sentinel knows master m", ... */
dtq_rsync *dtq_rsync_connect(const dtq_redis_url *url, const dtq_rsync_opts *o, char *why,
                             size_t whylen);
/* Sends one command and waits for its reply (an error reply is a reply). NULL when the
 * connection failed, with why ("write failed: ...", "read failed: Server closed the
 * connection", "protocol error: ..."); the connection is unusable after that (a cluster
 * client stays usable: see above). lens NULL: argv are C strings. On a cluster it goes to
 * the node of its key (dtq_cluster_key_index). */
redisReply *dtq_rsync_command(dtq_rsync *c, int argc, const char **argv, const size_t *lens,
                              char *why, size_t whylen);
/* dtq_rsync_command routed by the slot of slot_key (a C string, which need not be in argv;
 * NULL: any node, as a command without a key). Not a cluster: dtq_rsync_command. */
redisReply *dtq_rsync_command_at(dtq_rsync *c, const char *slot_key, int argc, const char **argv,
                                 const size_t *lens, char *why, size_t whylen);
/* The same by slot number (0..16383; -1: any node). */
redisReply *dtq_rsync_command_slot(dtq_rsync *c, int slot, int argc, const char **argv,
                                   const size_t *lens, char *why, size_t whylen);
/* The next reply without sending anything (a subscriber's messages), waiting for ever. */
redisReply *dtq_rsync_read(dtq_rsync *c, char *why, size_t whylen);
/* The socket path or host:port connected to (a cluster: the node of the last command). */
const char *dtq_rsync_where(const dtq_rsync *c);

/* 1 when the last command's NULL came from reply_timeout_ms or connect_timeout_ms passing
 * (Redis did not answer in time), 0 for any other failure. */
int dtq_rsync_timed_out(const dtq_rsync *c);
/* The reply timeout in force, and a new one (a command that blocks in Redis, WAIT, needs
 * its own time on top). */
int64_t dtq_rsync_reply_timeout(const dtq_rsync *c);
void dtq_rsync_set_reply_timeout(dtq_rsync *c, int64_t ms);

/* 1 for a cluster URL's client. */
int dtq_rsync_is_cluster(const dtq_rsync *c);
/* The cluster's slot map as last read (borrowed: valid until the next command); NULL when
 * not a cluster. */
const dtq_cluster_map *dtq_rsync_cluster_map(const dtq_rsync *c);
/* Reads the map again (any node). DTQ_ERR with why when no node answers (the old map
 * stays). Not a cluster: DTQ_OK. */
int dtq_rsync_cluster_refresh(dtq_rsync *c, char *why, size_t whylen);
/* What the router did, counted since the connect (all 0 when not a cluster). */
typedef struct dtq_rsync_cluster_stats {
    long long moved;         /* MOVED followed */
    long long ask;           /* ASK followed */
    long long refreshes;     /* slot maps read, the first included */
    long long connects;      /* links opened (or tried) to nodes */
    long long node_failures; /* commands whose node could not be reached or was lost */
} dtq_rsync_cluster_stats;
void dtq_rsync_cluster_stats_get(const dtq_rsync *c, dtq_rsync_cluster_stats *st);
/* NULL-safe. */
void dtq_rsync_close(dtq_rsync *c);

#endif
