/* Redis time per task of the three Functions on a task's hot path, without the daemon:
 * N no-op tasks are enqueued one per call (<ns>_enqueue, pipelined), fetched in batches
 * of B (<ns>_fetch), then finished as succeeded in batches of B (<ns>_finish); then N more are
 * enqueued B per call (<ns>_enqueue_bulk). Each phase
 * reports the server's own accounting (INFO commandstats: FCALL time per task and the
 * commands the Function ran), which does not depend on this client or the network.
 * Usage: fn_cost <unix-socket> <namespace> <n> <batch>
 * The Functions and <ns>:config must be loaded (bench/fn_cost.sh starts a daemon once).
 * With FN_COST_HOOK set, `$FN_COST_HOOK begin|end <phase>` runs around each phase
 * (bench/fn_cost.sh uses it to count instructions under callgrind). */
#include <hiredis/hiredis.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BANDS 10

typedef struct {
    char *stream, *entry, *id;
    long long attempt;
} claimed;

static void hook(const char *when, const char *phase) {
    const char *h = getenv("FN_COST_HOOK");
    if (!h || !*h) return;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s %s", h, when, phase);
    if (system(cmd) != 0) {
        fprintf(stderr, "fn_cost: hook failed: %s\n", cmd);
        exit(1);
    }
}

static redisReply *cmd_argv(redisContext *c, int argc, const char **argv) {
    redisReply *r = redisCommandArgv(c, argc, argv, NULL);
    if (!r) {
        fprintf(stderr, "fn_cost: redis: %s\n", c->errstr);
        exit(1);
    }
    if (r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "fn_cost: %s: %s\n", argv[0], r->str);
        exit(1);
    }
    return r;
}

/* The FCALL time and the commands of one phase, per task, from INFO commandstats. */
static void report(redisContext *c, const char *phase, long n) {
    redisReply *r = redisCommand(c, "INFO commandstats");
    if (!r || r->type != REDIS_REPLY_STRING) {
        fprintf(stderr, "fn_cost: INFO failed\n");
        exit(1);
    }
    double fcall = 0, inner = 0;
    char others[1024] = "";
    for (char *line = strtok(r->str, "\r\n"); line; line = strtok(NULL, "\r\n")) {
        char name[64];
        long long calls, usec;
        if (sscanf(line, "cmdstat_%63[^:]:calls=%lld,usec=%lld", name, &calls, &usec) != 3)
            continue;
        if (!strcmp(name, "fcall")) {
            fcall = (double)usec / n;
            continue;
        }
        if (!strcmp(name, "config") || !strcmp(name, "info")) continue;
        inner += (double)usec / n;
        size_t len = strlen(others);
        snprintf(others + len, sizeof others - len, " %s %.2f (%.2f us)", name, (double)calls / n,
                 (double)usec / n);
    }
    printf("%-7s %6.2f us/task in the Function: %5.2f in its commands, %5.2f in Lua;%s\n", phase,
           fcall, inner, fcall - inner, others);
    freeReplyObject(r);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: fn_cost <unix-socket> <namespace> <n> <batch>\n");
        return 2;
    }
    const char *ns = argv[2];
    long n = atol(argv[3]), batch = atol(argv[4]);
    redisContext *c = redisConnectUnix(argv[1]);
    if (!c || c->err) {
        fprintf(stderr, "fn_cost: cannot connect to %s\n", argv[1]);
        return 1;
    }
    char fn_enqueue[64], fn_fetch[64], fn_finish[64], paused[128], streams[BANDS][128];
    snprintf(fn_enqueue, sizeof fn_enqueue, "%s_enqueue", ns);
    snprintf(fn_fetch, sizeof fn_fetch, "%s_fetch", ns);
    snprintf(fn_finish, sizeof fn_finish, "%s_finish", ns);
    snprintf(paused, sizeof paused, "%s:queue:default:paused", ns);
    for (int b = 0; b < BANDS; b++)
        snprintf(streams[b], sizeof streams[b], "%s:stream:default:p%d", ns, 9 - b);

    freeReplyObject(redisCommand(c, "CONFIG RESETSTAT"));
    hook("begin", "enqueue");
    for (long i = 0; i < n; i++) redisAppendCommand(c, "FCALL %s 0 default noop {}", fn_enqueue);
    for (long i = 0; i < n; i++) {
        redisReply *r;
        if (redisGetReply(c, (void **)&r) != REDIS_OK || r->type == REDIS_REPLY_ERROR) {
            fprintf(stderr, "fn_cost: enqueue failed\n");
            return 1;
        }
        freeReplyObject(r);
    }
    hook("end", "enqueue");
    report(c, "enqueue", n);

    claimed *tasks = calloc((size_t)n, sizeof *tasks);
    long got = 0;
    char count[32];
    snprintf(count, sizeof count, "%ld", batch);
    const char *policy = "{\"d\":[5,30000],\"t\":{}}";
    const char *fa[3 + 1 + BANDS + 4];
    int fn = 0;
    fa[fn++] = "FCALL";
    fa[fn++] = fn_fetch;
    fa[fn++] = "11";
    fa[fn++] = paused;
    for (int b = 0; b < BANDS; b++) fa[fn++] = streams[b];
    fa[fn++] = "fn-cost";
    fa[fn++] = count;
    fa[fn++] = policy;
    fa[fn++] = "default";

    freeReplyObject(redisCommand(c, "CONFIG RESETSTAT"));
    hook("begin", "fetch");
    while (got < n) {
        redisReply *r = cmd_argv(c, fn, fa);
        redisReply *list = r->element[0];
        if (list->elements == 0 && r->element[2]->integer == -1 && got == 0) {
            freeReplyObject(r); /* the group was created: read again */
            continue;
        }
        if (list->elements == 0) {
            fprintf(stderr, "fn_cost: fetch returned nothing after %ld tasks\n", got);
            return 1;
        }
        for (size_t i = 0; i < list->elements && got < n; i++) {
            redisReply *t = list->element[i];
            tasks[got].stream = strdup(t->element[0]->str);
            tasks[got].entry = strdup(t->element[1]->str);
            tasks[got].id = strdup(t->element[2]->str);
            tasks[got].attempt = t->element[6]->integer;
            got++;
        }
        freeReplyObject(r);
    }
    hook("end", "fetch");
    report(c, "fetch", n);

    freeReplyObject(redisCommand(c, "CONFIG RESETSTAT"));
    hook("begin", "finish");
    const char **a = malloc(sizeof *a * (size_t)(4 + batch * 10));
    char(*att)[24] = malloc(sizeof *att * (size_t)batch);
    for (long done = 0; done < n;) {
        long m = n - done < batch ? n - done : batch;
        int k = 0;
        char nrec[24];
        snprintf(nrec, sizeof nrec, "%ld", m);
        a[k++] = "FCALL";
        a[k++] = fn_finish;
        a[k++] = "0";
        a[k++] = "fn-cost";
        a[k++] = nrec;
        for (long i = 0; i < m; i++) {
            claimed *t = &tasks[done + i];
            snprintf(att[i], sizeof att[i], "%lld", t->attempt);
            const char *rec[10] = {t->id, att[i], "succeeded", t->stream, t->entry,
                                   "",    "none", "",          "",        "0"};
            for (int j = 0; j < 10; j++) a[k++] = rec[j];
        }
        redisReply *r = cmd_argv(c, k, a);
        for (size_t i = 0; i < r->elements; i++)
            if (strcmp(r->element[i]->str, "succeeded")) {
                fprintf(stderr, "fn_cost: finish said %s\n", r->element[i]->str);
                return 1;
            }
        freeReplyObject(r);
        done += m;
    }
    hook("end", "finish");
    report(c, "finish", n);

    /* N more tasks through <ns>_enqueue_bulk, B payloads per call */
    char fn_bulk[64];
    snprintf(fn_bulk, sizeof fn_bulk, "%s_enqueue_bulk", ns);
    const char **ba = malloc(sizeof *ba * (size_t)(6 + batch));
    freeReplyObject(redisCommand(c, "CONFIG RESETSTAT"));
    hook("begin", "bulk");
    for (long done = 0; done < n;) {
        long m = n - done < batch ? n - done : batch;
        int k = 0;
        char nres[24];
        snprintf(nres, sizeof nres, "%ld", m);
        ba[k++] = "FCALL";
        ba[k++] = fn_bulk;
        ba[k++] = "0";
        ba[k++] = "default";
        ba[k++] = "noop";
        ba[k++] = nres;
        for (long i = 0; i < m; i++) ba[k++] = "{}";
        redisReply *r = cmd_argv(c, k, ba);
        if (r->type != REDIS_REPLY_ARRAY || (long)r->elements != m ||
            r->element[0]->type != REDIS_REPLY_ARRAY) {
            fprintf(stderr, "fn_cost: enqueue_bulk failed\n");
            return 1;
        }
        freeReplyObject(r);
        done += m;
    }
    hook("end", "bulk");
    report(c, "bulk", n);
    free(ba);
    for (long i = 0; i < n; i++) {
        free(tasks[i].stream);
        free(tasks[i].entry);
        free(tasks[i].id);
    }
    free(tasks);
    free(a);
    free(att);
    redisFree(c);
    return 0;
}
