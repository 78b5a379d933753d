/* cluster.h: the pure parts of speaking to a Redis Cluster, shared by the blocking router
 * (rsync.c) and the event-driven one (rcluster.c): a key's hash slot, the slot map read from
 * a CLUSTER SLOTS reply, the MOVED / ASK redirections, where a command's key is, and the
 * router core: what to do with each reply (dtq_route_decide), where a keyless command goes,
 * the redirection cap. No I/O here: a router sends its way and hands the replies in.
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
 * the client's credentials (AUTH) on a node's word; dtq_route_decide has the map read
 * again once for an address not in it, and refuses the redirection when it is still not
 * there. */
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

/* ----------------------------------------------------------------- the router core */

/* What a router (rsync.c, blocking; rcluster.c, event-driven) does with each reply to a
 * command it sent: decided here, once, for both; the routers only carry it out (send,
 * wait, read the map, answer). One command's way through the cluster is a dtq_route;
 * dtq_route_decide reads a reply and says the next step:
 *
 *  - a reply that is not an error, an error that is not a redirection (CROSSSLOT, a
 *    Function's refusal, ...) or a malformed MOVED/ASK: DONE, the reply is the answer.
 *    CLUSTERDOWN: DONE, and the map is read again (step.reread: after a failover the slot
 *    may have a new owner; the next command goes by the new map).
 *  - MOVED slot host:port to a node of the map: RESEND there, the slot's owner set in the
 *    map at once (dtq_cluster_map_move; step.moved) AND the map read again (step.reread).
 *    Chosen for both routers (rsync.c used to read the map only, rcluster.c to patch it
 *    only): the patch sends the next command of that slot right without waiting for the
 *    read, the read picks up the rest of a reshard (a MOVED seldom comes alone).
 *  - ASK slot host:port to a node of the map: RESEND there with ASKING, once; the map is
 *    unchanged (the slot is only migrating).
 *  - MOVED or ASK to an address not in the map: REREAD (read the map, then decide again
 *    on the same reply), once per reply; still not in the map: GIVE_UP ("cluster
 *    redirection to h:p, not a node of the cluster's slot map; not followed"): no command
 *    and no credentials (a new link's AUTH) go to an address a reply names
 *    (dtq_cluster_redirect_allowed, issue 27). Chosen for both (rcluster.c used to refuse
 *    at once): a node added by a reshard is then followed by the first command it concerns.
 *  - a redirection past DTQ_CLUSTER_MAX_REDIRECTS followed: GIVE_UP ("more than 5 cluster
 *    redirections for slot N (the last: MOVED ...)"). The one answer of both routers
 *    (rsync.c used to answer NULL, rcluster.c the last redirection): an error reply, since
 *    the command did not run (NULL means no answer: it may have), and one that names the
 *    count, not a MOVED that reads like a redirection still to follow.
 *  - TRYAGAIN (a multi-key command's keys split by a migration; it did not run): RESEND to
 *    the node that answered, with ASKING again when the command had it (the importing node
 *    serves the slot only so), after step.pause_ms (50 ms doubling to 500 ms), until the
 *    route's tryagain window from the first TRYAGAIN has passed; then DONE (the TRYAGAIN is
 *    the answer). Not counted as a redirection.
 *
 * GIVE_UP is answered as an error reply of step.why's text (dtq_cluster_error_reply), by
 * both routers. Pure: no I/O, no clock (now_ms is the caller's), the map only read. */
typedef enum dtq_route_action {
    DTQ_ROUTE_DONE = 0, /* the reply is the caller's answer */
    DTQ_ROUTE_RESEND,   /* the command did not run: send it again to step.host:step.port */
    DTQ_ROUTE_REREAD,   /* read the slot map again, then decide again on the same reply */
    DTQ_ROUTE_GIVE_UP   /* the command did not run: answer the error reply step.why */
} dtq_route_action;

/* One command's way: what dtq_route_decide remembers between its replies. */
typedef struct dtq_route {
    int redirects;              /* MOVED and ASK followed */
    int asking;                 /* the next (last) send is preceded by ASKING */
    int reread;                 /* the map was read again for the reply being decided */
    int64_t tryagain_window_ms; /* how long TRYAGAIN is sent again (0: never) */
    int64_t tryagain_until;     /* 0 until the first TRYAGAIN */
    int64_t pause_ms;           /* the next pause after TRYAGAIN */
} dtq_route;

typedef struct dtq_route_step {
    dtq_route_action action;
    /* RESEND: where (never "": the node that answered is named), ASKING first or not,
     * after how long; followed: the redirection followed (DTQ_REDIRECT_NONE for TRYAGAIN) */
    char host[DTQ_CLUSTER_HOST_MAX + 1];
    int port;
    int asking;
    int64_t pause_ms;
    dtq_cluster_redirect_kind followed;
    /* MOVED followed: set the owner of slot to host:port in the map (dtq_cluster_map_move) */
    int moved;
    int slot;
    /* besides the action: have the map read again (MOVED followed, CLUSTERDOWN) */
    int reread;
    char why[DTQ_CLUSTER_HOST_MAX + 320]; /* GIVE_UP: the error reply's text */
} dtq_route_step;

/* A new command's route; tryagain_window_ms: the command's own time limit. */
void dtq_route_start(dtq_route *rt, int64_t tryagain_window_ms);
/* The next step for reply (NULL: DONE) from host:port, the node the command was sent to,
 * with m the router's map (as read; after a REREAD, as read again). Updates rt; fills out
 * and returns out->action. */
dtq_route_action dtq_route_decide(dtq_route *rt, const dtq_cluster_map *m, const char *host,
                                  int port, const redisReply *reply, int64_t now_ms,
                                  dtq_route_step *out);
/* Sets slot's owner to host:port when the map names that node (a MOVED followed, until the
 * next read says more); 0 when it does not. */
int dtq_cluster_map_move(dtq_cluster_map *m, uint16_t slot, const char *host, int port);
/* A new error reply of text (freeReplyObject), for GIVE_UP: made by hiredis's reader, as a
 * reply from a node would be. */
redisReply *dtq_cluster_error_reply(const char *text);

/* Which node a command without a key goes to, as an index into m->nodes (-1: the map names
 * no primary): the node of the previous command (last, an index into m->nodes; -1: none)
 * while it is a primary of the map with its link up, so WAIT counts the replicas of the
 * write before it and a subscriber reads where it subscribed; else the first primary of the
 * map (the map's order) whose link is up (up(arg, i) for m->nodes[i]; NULL: none is); else
 * the first primary. The one rule of both routers. */
int dtq_cluster_keyless_node(const dtq_cluster_map *m, int last, int (*up)(void *arg, int node),
                             void *arg);

/* ----------------------------------------------------------------- routing */

/* The index in argv of the key that routes a command, or -1 for a command to send to any
 * node. FCALL, FCALL_RO, EVAL, EVALSHA, EVAL_RO, EVALSHA_RO: the first key when numkeys
 * > 0, else -1. XREAD, XREADGROUP: the first key after STREAMS. Commands without a key
 * (PING, WAIT, SUBSCRIBE, PUBLISH, FUNCTION, SCRIPT, CLUSTER, INFO, TIME, CLIENT, ...): -1.
 * Any other command with an argument: argv[1]. Case-insensitive; lens NULL: C strings. */
int dtq_cluster_key_index(int argc, const char **argv, const size_t *lens);

#endif
