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

#include "calls.h"
#include "finisher.h"
#include "streams.h"
#include "task.h"
#include "util.h"

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

/* Sends `a` (and empties it for the next call); exits on an error reply. */
static redisReply *send_argv(redisContext *c, dtq_argv *a) {
    redisReply *r = redisCommandArgv(c, a->argc, (const char **)a->argv, a->lens);
    if (!r) {
        fprintf(stderr, "fn_cost: redis: %s\n", c->errstr);
        exit(1);
    }
    if (r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "fn_cost: %s %s: %s\n", a->argv[0], a->argv[1], r->str);
        exit(1);
    }
    dtq_argv_deinit(a);
    return r;
}

/* "FCALL <fn> 0 <arg> ...": the head of every batched call here. */
static void fcall_head(dtq_argv *a, const char *fn, const char *arg1, const char *arg2) {
    dtq_argv_init(a);
    dtq_argv_adds(a, "FCALL");
    dtq_argv_adds(a, fn);
    dtq_argv_adds(a, "0");
    dtq_argv_adds(a, arg1);
    if (arg2) dtq_argv_adds(a, arg2);
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

/* Where the decoded lean claims go: recs[*got], up to n. */
typedef struct {
    dtq_finish_record *recs;
    long *got, n;
} claim_sink;

static void sink_claim(dtq_task *t, void *arg) {
    claim_sink *s = arg;
    if (*s->got < s->n) {
        dtq_finish_record *rec = &s->recs[(*s->got)++];
        rec->stream = t->stream;
        rec->entry_id = t->entry_id;
        rec->task_id = t->id;
        rec->attempt = t->attempt;
        rec->outcome = DTQ_OUTCOME_SUCCEEDED;
        rec->result_state = DTQ_RESULT_NONE;
        rec->lean = t->lean;
        t->stream = t->entry_id = t->id = NULL; /* now the record's */
    }
    dtq_task_free(t);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: fn_cost <unix-socket> <namespace> <n> <batch>\n");
        return 2;
    }
    const char *ns = argv[2];
    long n = atol(argv[3]), batch = atol(argv[4]);
    if (n < 1 || n > 10000000 || batch < 1 || batch > 1000) {
        fprintf(stderr, "fn_cost: n must be 1-10000000 and batch 1-1000\n");
        return 2;
    }
    redisContext *c = redisConnectUnix(argv[1]);
    if (!c || c->err) {
        fprintf(stderr, "fn_cost: cannot connect to %s\n", argv[1]);
        return 1;
    }
    char fn_enqueue[64], fn_fetch[64], fn_finish[64], fn_bulk[64];
    snprintf(fn_enqueue, sizeof fn_enqueue, "%s_enqueue", ns);
    snprintf(fn_fetch, sizeof fn_fetch, "%s_fetch", ns);
    snprintf(fn_finish, sizeof fn_finish, "%s_finish", ns);
    snprintf(fn_bulk, sizeof fn_bulk, "%s_enqueue_bulk", ns);

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

    /* fetch and finish calls laid out by the daemon's own code (src/calls.c, finisher.c) */
    dtq_streams st = {0};
    char *queues[1] = {(char *)"default"};
    dtq_streams_build(&st, ns, queues, 1);
    dtq_finish_record *recs = calloc((size_t)n, sizeof *recs);
    long got = 0;
    dtq_argv a;
    freeReplyObject(redisCommand(c, "CONFIG RESETSTAT"));
    hook("begin", "fetch");
    while (got < n) {
        dtq_call_fetch(&a, fn_fetch, &st, "fn-cost", (int)batch, "{\"d\":[5,30000],\"t\":{}}");
        redisReply *r = send_argv(c, &a);
        redisReply *list = r->element[0];
        if (list->elements == 0 && r->element[2]->integer == -1 && got == 0) {
            freeReplyObject(r); /* the group was created: read again */
            continue;
        }
        if (r->elements > 3) { /* the lean-claims, as the daemon decodes them */
            claim_sink sink = {recs, &got, n};
            char err[128];
            if (dtq_lean_claims_decode(r->element[3], sink_claim, &sink, err, sizeof err) < 0) {
                fprintf(stderr, "fn_cost: %s\n", err);
                return 1;
            }
        }
        if (r->elements > 4) { /* the full-claims, alike */
            claim_sink sink = {recs, &got, n};
            char err[128];
            if (dtq_full_claims_decode(r->element[4], sink_claim, &sink, err, sizeof err) < 0) {
                fprintf(stderr, "fn_cost: %s\n", err);
                return 1;
            }
        }
        if (list->elements == 0 && r->element[2]->integer > 0) {
            freeReplyObject(r); /* lean or full claims alone */
            continue;
        }
        if (list->elements == 0) {
            fprintf(stderr, "fn_cost: fetch returned nothing after %ld tasks\n", got);
            return 1;
        }
        for (size_t i = 0; i < list->elements && got < n; i++) {
            redisReply *t = list->element[i];
            dtq_finish_record *rec = &recs[got++];
            rec->stream = dtq_xstrdup(t->element[0]->str);
            rec->entry_id = dtq_xstrdup(t->element[1]->str);
            rec->task_id = dtq_xstrdup(t->element[2]->str);
            rec->attempt = t->element[6]->integer;
            rec->outcome = DTQ_OUTCOME_SUCCEEDED;
            rec->result_state = DTQ_RESULT_NONE;
            rec->lean = t->elements == 10 && t->element[9]->integer == 1; /* a lean queue */
        }
        freeReplyObject(r);
    }
    hook("end", "fetch");
    report(c, "fetch", n);
    dtq_streams_clear(&st);

    freeReplyObject(redisCommand(c, "CONFIG RESETSTAT"));
    hook("begin", "finish");
    for (long done = 0; done < n;) {
        long m = n - done < batch ? n - done : batch;
        long nlean = 0;
        for (long i = 0; i < m; i++) nlean += recs[done + i].lean;
        dtq_call_finish(&a, fn_finish, "fn-cost", (int)(m - nlean));
        for (long i = 0; i < m; i++)
            if (!recs[done + i].lean) dtq_finish_record_encode(&a, &recs[done + i]);
        if (nlean) { /* the lean section, as the daemon's finisher sends it */
            dtq_finish_lean_head(&a, "{\"d\":[5,30000],\"t\":{}}", (int)nlean);
            for (long i = 0; i < m; i++)
                if (recs[done + i].lean)
                    dtq_finish_lean_encode(&a, recs[done + i].stream, recs[done + i].entry_id,
                                           "noop", recs[done + i].attempt);
        }
        redisReply *r = send_argv(c, &a);
        for (size_t i = 0; i < r->elements; i++)
            if (r->element[i]->type == REDIS_REPLY_INTEGER) {
                if (r->element[i]->integer != nlean) {
                    fprintf(stderr, "fn_cost: finish acknowledged %lld lean tasks of %ld\n",
                            r->element[i]->integer, nlean);
                    return 1;
                }
            } else if (strcmp(r->element[i]->str, "succeeded")) {
                fprintf(stderr, "fn_cost: finish said %s\n", r->element[i]->str);
                return 1;
            }
        freeReplyObject(r);
        done += m;
    }
    hook("end", "finish");
    report(c, "finish", n);
    for (long i = 0; i < n; i++) {
        free(recs[i].stream);
        free(recs[i].entry_id);
        free(recs[i].task_id);
    }
    free(recs);

    /* N more tasks through <ns>_enqueue_bulk, B payloads per call */
    freeReplyObject(redisCommand(c, "CONFIG RESETSTAT"));
    hook("begin", "bulk");
    for (long done = 0; done < n;) {
        long m = n - done < batch ? n - done : batch;
        fcall_head(&a, fn_bulk, "default", "noop");
        dtq_argv_addll(&a, m);
        for (long i = 0; i < m; i++) dtq_argv_adds(&a, "{}");
        redisReply *r = send_argv(c, &a);
        if ((long)r->elements != m || r->element[0]->type != REDIS_REPLY_STRING) {
            fprintf(stderr, "fn_cost: enqueue_bulk failed\n");
            return 1;
        }
        freeReplyObject(r);
        done += m;
    }
    hook("end", "bulk");
    report(c, "bulk", n);
    redisFree(c);
    return 0;
}
