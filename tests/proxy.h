/* proxy.h: a fault-injecting TCP relay for the tests (see proxy.c). */
#ifndef DTQ_TEST_PROXY_H
#define DTQ_TEST_PROXY_H

#include <sys/types.h>

typedef struct th_proxy {
    pid_t pid;
    int port; /* 127.0.0.1:port relays to the target */
} th_proxy;

/* Relays 127.0.0.1:<p->port> to 127.0.0.1:target_port. The first `cuts` times a chunk from
 * a client contains `cut_after` (e.g. "dtq_fetch"), the chunk is forwarded and that
 * connection is cut before the reply can come back. */
void th_proxy_start(th_proxy *p, int target_port, const char *cut_after, int cuts);
void th_proxy_stop(th_proxy *p);

#endif
