/* cluster.h: the pure parts of speaking to a Redis Cluster, shared by the blocking client
 * (rsync.c) and, later, the async one (rconn.c): a key's hash slot, the slot map read from
 * a CLUSTER SLOTS reply, the MOVED / ASK redirections, and where a command's key is. No
 * I/O here: a client sends CLUSTER SLOTS its own way and hands the reply in.
 *
 * The slot of a key is CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0, as Redis's
 * crc16.c) of the key modulo 16384, where a key holding a hash tag ("{", then the first
 * "}" after it, with at least one byte between) hashes only what is between the braces:
 * "{user1000}.following" and "{user1000}.followers" share a slot. */
#ifndef DTQ_CLUSTER_H
#define DTQ_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "redis_url.h"

#define DTQ_CLUSTER_SLOTS 16384
/* The redirections one command may follow before the client gives up. */
#define DTQ_CLUSTER_MAX_REDIRECTS 5

/* CRC16-CCITT (XMODEM) of len bytes: "123456789" -> 0x31C3. */
uint16_t dtq_cluster_crc16(const char *buf, size_t len);
/* The hash slot of a key of len bytes (binary-safe), hash tags honoured. */
uint16_t dtq_cluster_keyslot(const char *key, size_t len);

/* ----------------------------------------------------------------- the slot map */

/* One range of slots [start, end] and the nodes that serve it: indexes into the map's
 * nodes, the primary first. */
typedef struct dtq_cluster_range {
    uint16_t start, end;
    int primary;
    int *replicas;
    int nreplicas;
} dtq_cluster_range;

/* What CLUSTER SLOTS said, at the moment it was asked. Read-only for its users. */
typedef struct dtq_cluster_map {
    dtq_redis_endpoint *nodes; /* every distinct host:port named, primaries and replicas */
    int nnodes;
    dtq_cluster_range *ranges; /* sorted by start; a slot in no range is not served */
    int nranges;
    int *primaries; /* the distinct primaries (indexes into nodes), in order of first range */
    int nprimaries;
    int16_t *owner; /* DTQ_CLUSTER_SLOTS entries: the primary's node index, -1 for none */
} dtq_cluster_map;

/* Builds the map from a CLUSTER SLOTS reply: an array of [start, end, primary, replica...]
 * where each node is [endpoint, port, id, ...]. An endpoint that is nil, "" or "?" (a node
 * that does not know or announce its address, e.g. cluster-preferred-endpoint-type
 * unknown-endpoint) means the node that was asked: asked_host. NULL with why for an error
 * reply or a reply of another shape (a range out of [0, 16383] or reversed, a port out of
 * [1, 65535], a range without a primary). An empty array gives an empty map (a node with no
 * slots assigned yet). */
dtq_cluster_map *dtq_cluster_map_from_slots(const redisReply *r, const char *asked_host, char *why,
                                            size_t whylen);
void dtq_cluster_map_free(dtq_cluster_map *m); /* NULL-safe */
/* The primary that serves slot, or NULL when no node does. Borrowed from the map. */
const dtq_redis_endpoint *dtq_cluster_map_primary(const dtq_cluster_map *m, uint16_t slot);
/* How many of the 16384 slots the map has a primary for. */
int dtq_cluster_map_covered(const dtq_cluster_map *m);
/* The index in m->nodes of host:port, or -1. */
int dtq_cluster_map_find(const dtq_cluster_map *m, const char *host, int port);

/* ----------------------------------------------------------------- redirections */

/* Whether a client may follow a redirection to host:port (the node a MOVED or ASK names;
 * host "" is the node that answered): only to a node of the cluster's own slot map (m, as
 * CLUSTER SLOTS last said; NULL: none). Any other address would be handed the command and
 * the client's credentials (AUTH) on a node's word; the routers (rsync.c, rcluster.c)
 * re-read the map once for an address not in it, and refuse the redirection when it is
 * still not there. */
int dtq_cluster_redirect_allowed(const dtq_cluster_map *m, const char *host, int port);

typedef enum dtq_cluster_redirect_kind {
    DTQ_REDIRECT_BAD = -1, /* starts with MOVED or ASK but is not one (a malformed reply) */
    DTQ_REDIRECT_NONE = 0, /* another error (or none) */
    DTQ_REDIRECT_MOVED = 1,
    DTQ_REDIRECT_ASK = 2
} dtq_cluster_redirect_kind;

#define DTQ_CLUSTER_HOST_MAX 255
typedef struct dtq_cluster_redirect {
    dtq_cluster_redirect_kind kind;
    uint16_t slot;
    /* "" for "the node you asked" (Redis 7 with unknown-endpoint sends "MOVED 3999 :6381") */
    char host[DTQ_CLUSTER_HOST_MAX + 1];
    int port;
} dtq_cluster_redirect;

/* Reads an error reply's text (redisReply.str of a REDIS_REPLY_ERROR, without the '-'):
 * "MOVED <slot> <host>:<port>" or "ASK <slot> <host>:<port>", the host an IPv4 or IPv6
 * address (the port after the last ':'; "[v6]:port" too), a name, or empty. Returns the kind
 * (also in out->kind). Exactly three words, a slot in [0, 16383] and a port in [1, 65535],
 * or DTQ_REDIRECT_BAD. */
dtq_cluster_redirect_kind dtq_cluster_redirect_parse(const char *err, dtq_cluster_redirect *out);

/* ----------------------------------------------------------------- routing */

/* The index in argv of the key that routes a command, or -1 for a command to send to any
 * node. FCALL, FCALL_RO, EVAL, EVALSHA, EVAL_RO, EVALSHA_RO: the first key when numkeys
 * > 0, else -1. XREAD, XREADGROUP: the first key after STREAMS. Commands without a key
 * (PING, WAIT, SUBSCRIBE, PUBLISH, FUNCTION, SCRIPT, CLUSTER, INFO, TIME, CLIENT, ...): -1.
 * Any other command with an argument: argv[1]. Case-insensitive; lens NULL: C strings. */
int dtq_cluster_key_index(int argc, const char **argv, const size_t *lens);

#endif
