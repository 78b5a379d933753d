/* Idle enqueue-to-start latency of a running daemon, seen from a C client: K times, enqueue
 * one task (FCALL <ns>_enqueue) and wait for its TASK_STARTED event on <ns>:events, then
 * pause 20 ms. The same probe as the peer harness's Python client (peers/dtq_peer), without
 * the Python interpreter's own time in it. Prints p50, p99 and max in ms.
 * Usage: latency <unix-socket|host:port> <namespace> <queue> <task_type> <k> */
#include <hiredis/hiredis.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static redisContext *connect_to(const char *where) {
    const char *colon = strrchr(where, ':');
    if (strchr(where, '/') || !colon) return redisConnectUnix(where);
    char host[256];
    snprintf(host, sizeof host, "%.*s", (int)(colon - where), where);
    return redisConnect(host, atoi(colon + 1));
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr,
                "usage: latency <unix-socket|host:port> <namespace> <queue> <task_type> <k>\n");
        return 2;
    }
    const char *ns = argv[2], *queue = argv[3], *type = argv[4];
    int k = atoi(argv[5]), warm = 5;
    redisContext *c = connect_to(argv[1]), *sub = connect_to(argv[1]);
    if (!c || c->err || !sub || sub->err || k < 1) {
        fprintf(stderr, "latency: cannot connect to %s\n", argv[1]);
        return 1;
    }
    redisReply *r = redisCommand(sub, "SUBSCRIBE %s:events", ns);
    freeReplyObject(r);
    double *lat = calloc((size_t)k, sizeof *lat), *enq = calloc((size_t)k, sizeof *enq);
    for (int i = 0; i < k + warm; i++) {
        double t0 = now_ms();
        r = redisCommand(c, "FCALL %s_enqueue 0 %s %s {}", ns, queue, type);
        if (!r || r->type != REDIS_REPLY_ARRAY) {
            fprintf(stderr, "latency: enqueue failed: %s\n", r ? r->str : c->errstr);
            return 1;
        }
        char want[160];
        snprintf(want, sizeof want, "\"task_id\":\"%s\"", r->element[0]->str);
        freeReplyObject(r);
        double t1 = now_ms();
        for (;;) {
            redisReply *m;
            if (redisGetReply(sub, (void **)&m) != REDIS_OK) {
                fprintf(stderr, "latency: subscriber lost: %s\n", sub->errstr);
                return 1;
            }
            int hit = m->type == REDIS_REPLY_ARRAY && m->elements == 3 &&
                      m->element[2]->type == REDIS_REPLY_STRING &&
                      strstr(m->element[2]->str, want) &&
                      strstr(m->element[2]->str, "\"type\":\"TASK_STARTED\"");
            freeReplyObject(m);
            if (hit) break;
        }
        if (i >= warm) {
            lat[i - warm] = now_ms() - t0;
            enq[i - warm] = t1 - t0;
        }
        struct timespec pause = {0, 20 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    qsort(lat, (size_t)k, sizeof *lat, cmp_double);
    qsort(enq, (size_t)k, sizeof *enq, cmp_double);
    int p99 = (k * 99) / 100 < k ? (k * 99) / 100 : k - 1;
    printf("enqueue->TASK_STARTED over %d probes: p50 %.2f ms, p99 %.2f ms, max %.2f ms\n", k,
           lat[k / 2], lat[p99], lat[k - 1]);
    printf("  of which the enqueue's own round trip: p50 %.2f ms, p99 %.2f ms\n", enq[k / 2],
           enq[p99]);
    free(lat);
    free(enq);
    redisFree(c);
    redisFree(sub);
    return 0;
}
