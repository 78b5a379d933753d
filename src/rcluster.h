/* rcluster.h: the event-driven Redis Cluster router, for the daemon and dtq-web (dtqctl's
 * blocking one is rsync.c; both drive the same router core, cluster.c's dtq_route_decide
 * and dtq_cluster_keyless_node, and carry out what it says).
 *
 * One dtq_rconn (rconn.h: connect, TLS, handshake, liveness, reconnect with backoff) per
 * node, on the caller's event base, all with the URL's credentials and TLS, and the TLS and
 * liveness settings given here. The seeds of the URL are connected to first; the first that
 * answers CLUSTER SLOTS gives the slot map. Each map read then opens a link to every
 * primary it names (so dtq_rcluster_slot_up means something before the first command) and
 * closes idle links to nodes that are no longer primaries.
 *
 * Routing: a command goes to the primary of its key's slot (dtq_cluster_key_index finds the
 * key: FCALL/EVAL* their first key when numkeys > 0, XREAD[GROUP] the first stream, a plain
 * command argv[1]); dtq_rcluster_command_at names the key, _slot the slot. A command
 * without a key goes by cluster.c's keyless rule: the node of the previous command while it
 * is a primary with its link up, else the first primary of the map whose link is up (the
 * map's order), else the first primary. A command for a node whose link is not up yet (connecting,
 * reconnecting) waits for it, in order, at most max_wait_ms (dtq_rcluster_set_max_wait;
 * default 5000); a map read meanwhile moves it to its slot's new owner; past the wait its
 * callback gets NULL (it was never sent).
 *
 * Replies come back in order per node, borrowed for the callback. The callback runs once,
 * never from inside dtq_rcluster_command*: with the reply, or NULL when the node's link
 * died with the command in flight (it may have run: it is never resent), when it could not
 * be sent within max_wait_ms, or when the router is freed.
 *
 * Each reply goes through cluster.c's dtq_route_decide (cluster.h) before the caller's
 * callback:
 *  - MOVED slot host:port: the slot's owner is set in the map at once, a map read is asked
 *    for (one in flight at a time; commands sent meanwhile go by the map as it is and may
 *    be redirected again), and the command is sent to the node named;
 *  - ASK slot host:port: ASKING and then the command on the named node's link, once; the map
 *    is unchanged. An empty host is the node that answered;
 *  - a redirection to an address not in the map: the command waits for the next map read
 *    (at most max_wait_ms), is followed if the map names the address then, else answered
 *    with an error reply "cluster redirection to h:p, not a node of the cluster's slot map;
 *    not followed" (no command and no AUTH go there);
 *  - at most DTQ_CLUSTER_MAX_REDIRECTS (5) followed per command, then an error reply "more
 *    than 5 cluster redirections for slot N (the last: ...)";
 *  - TRYAGAIN: sent again to the node that answered (ASKING again after an ASK) after
 *    pauses of 50 ms doubling to 500 ms (the tick's 100 ms grain), for max_wait_ms from the
 *    first; then the TRYAGAIN is the answer;
 *  - CLUSTERDOWN: the caller's, and a map read is asked for.
 * A MOVED, ASK or TRYAGAIN reply means the command did not run, so resending is safe. Other
 * errors (CROSSSLOT, a Function's refusal, ...) are the caller's.
 *
 * Failures: a node's link lost (or not up within connect_timeout_ms) marks the node down
 * and asks for a map read from another node with an up link (or, with none, from every
 * known node connected to); the read is retried with backoff (100 ms doubling to 1 s)
 * until the map covers every slot and names no primary that is down, or the router is
 * freed. After a primary's failure its replica shows as the primary in CLUSTER SLOTS once
 * promoted (the cluster's node timeout plus a second or so).
 *
 * A slot is "up" (dtq_rcluster_slot_up) when the map names a primary for it and that
 * primary's link is up. The router is "up" (the state callback) once a map is loaded and
 * at least one node's link is up; down when no link is.
 *
 * Not here: pub/sub (push messages are not routed: a SUBSCRIBE through this router is not
 * supported), reading from replicas, MULTI/EXEC across redirections. */
#ifndef DTQ_RCLUSTER_H
#define DTQ_RCLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/async.h>

#include "cluster.h"
#include "redis_url.h"

struct event_base;
struct dtq_tls;

typedef struct dtq_rcluster dtq_rcluster;

/* up=1 once a map is loaded and a node's link is up; up=0 when no node's link is. */
typedef void dtq_rcluster_state_fn(dtq_rcluster *rc, int up, void *arg);

/* A redis-cluster:// or rediss-cluster:// URL (copied); NULL for any other URL (a single
 * Redis or Sentinel is rconn.c's). `name` labels log lines. Call dtq_rcluster_start next. */
dtq_rcluster *dtq_rcluster_new(struct event_base *base, const dtq_redis_url *url,
                               int64_t connect_timeout_ms, const char *name,
                               dtq_rcluster_state_fn *fn, void *arg);
/* rediss-cluster://: the TLS settings for every node (a reference is taken). Before start. */
void dtq_rcluster_set_tls(dtq_rcluster *rc, struct dtq_tls *tls);
/* As dtq_rconn_set_liveness, for every node's link. Before start. */
void dtq_rcluster_set_liveness(dtq_rcluster *rc, int64_t liveness_ms);
/* How long a command waits for its node's link to come up (default 5000 ms). */
void dtq_rcluster_set_max_wait(dtq_rcluster *rc, int64_t max_wait_ms);
/* Told of every primary's link that comes up (at start, after a reconnect, a replica
 * promoted by a failover, a node that got slots), once per link, with one slot it serves,
 * before the commands waiting for it are sent: what fn sends to that slot
 * (dtq_rcluster_command_slot, e.g. the Functions' check and load) goes first. */
typedef void dtq_rcluster_node_fn(dtq_rcluster *rc, const char *host, int port, int slot,
                                  void *arg);
void dtq_rcluster_set_node_fn(dtq_rcluster *rc, dtq_rcluster_node_fn *fn, void *arg);
void dtq_rcluster_start(dtq_rcluster *rc);
int dtq_rcluster_is_up(const dtq_rcluster *rc);

/* Sends a command routed by its key (see above). DTQ_ERR, and cb is never called, when no
 * map is loaded yet, the map names no primary for the slot, or the command cannot be
 * formatted; else cb runs exactly once, later. lens NULL: C strings. */
int dtq_rcluster_command(dtq_rcluster *rc, redisCallbackFn *cb, void *priv, int argc,
                         const char **argv, const size_t *lens);
/* Routed by the slot of slot_key (a C string, which need not be in argv; NULL: keyless). */
int dtq_rcluster_command_at(dtq_rcluster *rc, const char *slot_key, redisCallbackFn *cb, void *priv,
                            int argc, const char **argv, const size_t *lens);
/* Routed by slot (0..16383; -1: keyless). */
int dtq_rcluster_command_slot(dtq_rcluster *rc, int slot, redisCallbackFn *cb, void *priv, int argc,
                              const char **argv, const size_t *lens);

/* 1 when the map names a primary for slot and that primary's link is up. */
int dtq_rcluster_slot_up(const dtq_rcluster *rc, int slot);
/* Which node the map names as slot's primary: a number that stands for that host:port for
 * the router's life (0, 1, ...: a node is numbered the first time it is named, and keeps
 * its number when it stops being a primary); -1 when no primary is named or none has a
 * link yet. For the daemon's per-shard fetch scheduling. */
int dtq_rcluster_slot_node(const dtq_rcluster *rc, int slot);
/* The map's primaries, in the map's order: at most max into out (host borrowed until the
 * next map read: copy it), each with one slot it serves (for dtq_rcluster_command_slot,
 * e.g. FUNCTION LOAD on each) and whether its link is up. Returns how many there are (may
 * exceed max); 0 before the first map. */
typedef struct dtq_rcluster_primary {
    const char *host;
    int port;
    int slot;
    int up;
} dtq_rcluster_primary;
int dtq_rcluster_primaries(const dtq_rcluster *rc, dtq_rcluster_primary *out, int max);
/* The slot map as last read (patched by MOVED); borrowed, valid until the next event. NULL
 * before the first. */
const dtq_cluster_map *dtq_rcluster_map(const dtq_rcluster *rc);

/* What the router did since it was made. */
typedef struct dtq_rcluster_stats {
    long long moved;         /* MOVED followed */
    long long ask;           /* ASK followed */
    long long refreshes;     /* slot maps read, the first included */
    long long refresh_fails; /* map reads that failed (no answer, not a map) */
    long long node_downs;    /* node links lost, or not up within connect_timeout_ms */
    long long lost;          /* callbacks given NULL (link lost in flight, waited too long) */
} dtq_rcluster_stats;
void dtq_rcluster_stats_get(const dtq_rcluster *rc, dtq_rcluster_stats *st);

/* Closes every link; pending and waiting callbacks run with NULL. NULL-safe. From one of
 * the router's callbacks it takes effect once the event loop runs again (the callbacks
 * still pending then run with NULL). */
void dtq_rcluster_free(dtq_rcluster *rc);

#endif
