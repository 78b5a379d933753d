/* redis_proto.h: the pure steps of reaching Redis, shared by the async client (rconn.c,
 * sentinel.c) and the blocking one (rsync.c), so both say and check the same things:
 * the handshake (its commands, and what each reply must be) and the answer of a sentinel
 * (SENTINEL get-master-addr-by-name). No I/O here: a client sends the commands of a plan
 * its own way and hands each reply back to be checked.
 * A Redis Cluster's pure parts (key slots, the slot map, MOVED/ASK) are in cluster.h. */
#ifndef DTQ_REDIS_PROTO_H
#define DTQ_REDIS_PROTO_H

#include <stddef.h>

#include <hiredis/hiredis.h>

#include "redis_url.h"

/* ----------------------------------------------------------------- the handshake */

typedef enum dtq_hs_kind {
    DTQ_HS_AUTH,    /* AUTH [user] password: the URL's (or the sentinels') credentials */
    DTQ_HS_ROLE,    /* ROLE: the server must be a master (a Sentinel-named data node) */
    DTQ_HS_SELECT,  /* SELECT db, when db is not 0 */
    DTQ_HS_SETNAME, /* CLIENT SETNAME name: best effort, a refusal is not a failure */
    DTQ_HS_PING     /* PING: the last step of the async client, so "up" is one path */
} dtq_hs_kind;

typedef struct dtq_hs_step {
    dtq_hs_kind kind;
    int argc;
    const char *argv[3]; /* borrowed from the URL, the name, or the plan (db) */
} dtq_hs_step;

typedef struct dtq_handshake {
    dtq_hs_step steps[5];
    int n;
    char db[16];
} dtq_handshake;

typedef struct dtq_hs_opts {
    int role_check;          /* ROLE after AUTH */
    const char *client_name; /* NULL: no CLIENT SETNAME */
    int ping;                /* end with PING */
} dtq_hs_opts;

/* The commands to send, in order, on a new connection to url (its user, password, db):
 * AUTH [user] password (with a password), ROLE (role_check), SELECT db (db != 0), CLIENT
 * SETNAME (client_name), PING (ping). The plan borrows url's strings and client_name. May
 * be empty. */
void dtq_handshake_plan(dtq_handshake *h, const dtq_redis_url *url, const dtq_hs_opts *o);

enum {
    DTQ_HS_OK = 0,
    DTQ_HS_REFUSED = 1, /* an error reply: why is the server's error */
    DTQ_HS_WRONG = 2    /* not the expected reply: why says what came (ROLE: "slave") */
};
/* Checks the reply to a step of that kind: AUTH, SELECT and CLIENT SETNAME answer OK, PING
 * PONG, ROLE an array whose first element is "master". A refused CLIENT SETNAME is
 * DTQ_HS_OK (the name is a label). NULL reply (no answer): DTQ_HS_WRONG, "no reply". */
int dtq_handshake_check(dtq_hs_kind kind, const redisReply *reply, char *why, size_t whylen);
/* "AUTH", "ROLE", "SELECT", "CLIENT SETNAME", "PING": for messages. */
const char *dtq_handshake_step_name(dtq_hs_kind kind);

/* ----------------------------------------------------------------- Sentinel */

/* The question: SENTINEL get-master-addr-by-name <master> (argv borrows master). */
#define DTQ_SENTINEL_QUESTION_ARGC 3
void dtq_sentinel_question(const char *master, const char *argv[DTQ_SENTINEL_QUESTION_ARGC]);

enum {
    DTQ_SENTINEL_ADDR = 0,    /* *host (caller-owned) and *port are set */
    DTQ_SENTINEL_UNKNOWN = 1, /* nil: this sentinel does not know the master */
    DTQ_SENTINEL_BAD = 2      /* an error, or not [host, port] with a host and a valid port */
};
/* Reads a sentinel's answer. An empty host, a port outside [1, 65535] or any other shape
 * is DTQ_SENTINEL_BAD with why ("not an address", or the error reply's text). */
int dtq_sentinel_answer(const redisReply *r, char **host, int *port, char *why, size_t whylen);

/* A +switch-master message of the sentinels' pub/sub channel (["message", channel, payload]
 * or the pmessage form, the payload last): "<master> <old-host> <old-port> <new-host>
 * <new-port>". */
#define DTQ_SENTINEL_HOST_MAX 255
typedef struct dtq_sentinel_switch {
    char master[DTQ_SENTINEL_HOST_MAX + 1];
    char old_host[DTQ_SENTINEL_HOST_MAX + 1];
    char new_host[DTQ_SENTINEL_HOST_MAX + 1];
    int old_port, new_port;
} dtq_sentinel_switch;
/* 0 with sw filled; -1 when the message is not one: no string payload, not exactly five
 * words, a word longer than DTQ_SENTINEL_HOST_MAX or a NUL byte in the payload, or a port
 * outside [1, 65535]. */
int dtq_sentinel_switch_parse(const redisReply *msg, dtq_sentinel_switch *sw);

#endif
