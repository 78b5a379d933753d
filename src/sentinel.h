/* sentinel.h: Redis Sentinel for the daemon's connections (redis-sentinel:// URLs).
 *
 * Before each connect of an attached connection the sentinels are asked in turn
 * (SENTINEL get-master-addr-by-name), asynchronously: the one that answered last first,
 * each given connect_timeout_ms to answer (a sentinel that is down is skipped at once),
 * and all failing is a failed connect (the connection's usual backoff). The connection
 * then checks ROLE in its handshake. One connection to a sentinel stays subscribed to
 * +switch-master; a message naming our master drops the attached connections that are
 * not at the new address, so they ask again. Each sentinel has a connection of its own
 * (rconn, with the usual reconnect and liveness PING) for the questions. */
#ifndef DTQ_SENTINEL_H
#define DTQ_SENTINEL_H

#include <stdint.h>

#include "rconn.h"

struct event_base;
struct dtq_tls;

typedef struct dtq_sentinel dtq_sentinel;

/* url: a redis-sentinel:// or rediss-sentinel:// URL (its sentinels and master name are
 * copied). user/password ("" = none) authenticate to the sentinels; tls (rediss-sentinel,
 * else NULL) is used for them (a reference is taken). */
dtq_sentinel *dtq_sentinel_new(struct event_base *base, const dtq_redis_url *url, const char *user,
                               const char *password, struct dtq_tls *tls,
                               int64_t connect_timeout_ms);
/* rc (made from the same URL) gets its address from the sentinels and checks ROLE; call
 * before dtq_rconn_start(rc). rc must be freed before the sentinel is. */
void dtq_sentinel_attach(dtq_sentinel *s, dtq_rconn *rc);
/* Connects to the sentinels and subscribes; call before starting attached connections. */
void dtq_sentinel_start(dtq_sentinel *s);
/* NULL-safe. */
void dtq_sentinel_free(dtq_sentinel *s);

#endif
