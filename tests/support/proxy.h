/* proxy.h: a fault-injecting TCP relay for the tests (see proxy.c). */
#ifndef DTQ_TEST_PROXY_H
#define DTQ_TEST_PROXY_H

#include <sys/types.h>

typedef struct th_proxy {
    pid_t pid;
    int port;   /* 127.0.0.1:port relays to the target */
    int cmd_fd; /* the relay's command pipe (th_proxy_arm, th_proxy_cut_all) */
} th_proxy;

/* Relays 127.0.0.1:<p->port> to 127.0.0.1:target_port. The first `cuts` times a chunk from
 * a client contains `cut_after` (e.g. "dtq_fetch"; NULL: none), the chunk is forwarded and
 * that connection is cut before the reply can come back. Fails the test if it cannot. */
void th_proxy_start(th_proxy *p, int target_port, const char *cut_after, int cuts);
/* The same without Check, for programs that are not Check suites: 0, or -1 (errno set). */
int th_proxy_open(th_proxy *p, int target_port, const char *cut_after, int cuts);
/* Arms one cut, replacing the armed one: the next chunk from a client that contains
 * marker is forwarded and that connection cut. 0, or -1 when the relay is gone. */
int th_proxy_arm(th_proxy *p, const char *marker);
/* Cuts every connection now. 0, or -1 when the relay is gone. */
int th_proxy_cut_all(th_proxy *p);
/* Stops the relay (a child of this process) and waits for it. */
void th_proxy_stop(th_proxy *p);

#endif
