/* ctl_flow.c: dtqctl's workflow verbs: batch create | add | close | show and chain, each
 * one Function (<ns>_batch, <ns>_batch_show, <ns>_chain; lua/fn/batch.lua). The tasks of
 * a group come on stdin, one per line: the task type, blanks, the JSON payload. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "task.h"
#include "util.h"
#include "view_merge.h"

/* The most tasks one Function call takes: a larger batch is created open, filled by adds,
 * then closed. */
#define GROUP_CHUNK DTQ_GROUP_MAX

typedef struct group {
    char **words; /* type, payload, type, payload... (owned) */
    int n;        /* tasks */
} group;

/* Reads the tasks of stdin ("<type> <payload>" per line; blank lines skipped). */
static void read_group(const char *verb, group *g) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long lineno = 0;
    int capn = 0;
    g->words = NULL;
    g->n = 0;
    while ((len = getline(&line, &cap, stdin)) >= 0) {
        char *type = line, *payload;
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        while (*type == ' ' || *type == '\t') type++;
        if (!*type) continue;
        payload = type + strcspn(type, " \t");
        if (!*payload)
            ctl_usage_error("%s: line %ld: want '<task_type> <payload-json>'", verb, lineno);
        *payload++ = 0;
        while (*payload == ' ' || *payload == '\t') payload++;
        if (g->n == capn) {
            capn = capn ? capn * 2 : 64;
            g->words = dtq_xrealloc(g->words, (size_t)capn * 2 * sizeof(char *));
        }
        g->words[2 * g->n] = dtq_xstrdup(type);
        g->words[2 * g->n + 1] = dtq_xstrdup(payload);
        g->n++;
    }
    free(line);
    if (!g->n)
        ctl_usage_error("%s: no task on stdin (one '<task_type> <payload-json>' per line)", verb);
}

static void free_group(group *g) {
    for (int i = 0; i < 2 * g->n; i++) free(g->words[i]);
    free(g->words);
}

/* A flag of the group verbs and the Function option it becomes. */
typedef struct flag_opt {
    const char *flag, *opt;
    int takes_value;
} flag_opt;

static const flag_opt group_flags[] = {{"--priority", "priority", 1},
                                       {"--max-attempts", "max_attempts", 1},
                                       {"--timeout-ms", "timeout_ms", 1},
                                       {"--ttl-seconds", "ttl_seconds", 1},
                                       {"--limit-key", "limit_key", 1},
                                       {"--delay-ms", "delay_ms", 1},
                                       /* batch create */
                                       {"--id", "batch_id", 1},
                                       {"--on-success", "on_success", 1},
                                       {"--on-success-payload", "on_success_payload", 1},
                                       {"--on-complete", "on_complete", 1},
                                       {"--on-complete-payload", "on_complete_payload", 1},
                                       {"--description", "description", 1},
                                       {"--open", "open", 0},
                                       /* chain */
                                       {"--after", "after", 1},
                                       {"--on-failure", "on_failure", 1}};

/* The options of argv[from..] as Function option pairs appended to out (*n grows); a flag
 * not in `allowed` (a blank-separated list of flags) is a usage error. */
static void take_flags(const char *verb, int argc, char **argv, int from, const char *allowed,
                       const char **out, int *n) {
    for (int i = from; i < argc; i++) {
        const flag_opt *f = NULL;
        for (size_t j = 0; j < sizeof(group_flags) / sizeof(group_flags[0]); j++)
            if (!strcmp(argv[i], group_flags[j].flag)) f = &group_flags[j];
        if (f) {
            const char *hit = strstr(allowed, f->flag);
            size_t fl = strlen(f->flag);
            if (!hit || (hit[fl] != ' ' && hit[fl] != 0)) f = NULL;
        }
        if (!f) ctl_usage_error("%s: unknown option '%s'", verb, argv[i]);
        out[(*n)++] = f->opt;
        if (!f->takes_value) {
            out[(*n)++] = "1";
            continue;
        }
        if (i + 1 >= argc) ctl_usage_error("%s: %s needs a value", verb, argv[i]);
        out[(*n)++] = argv[++i];
    }
}

#define TASK_FLAGS "--priority --max-attempts --timeout-ms --ttl-seconds --limit-key"

/* One call of fn with `head` (nhead words), the tasks [first, first + n) of g and the
 * options; the reply (an array: anything else ends the program). */
static redisReply *group_call(ctl *x, const char *queue, const char *fn, const char **head,
                              int nhead, const group *g, int first, int n, const char **opts,
                              int nopts) {
    const char **a = dtq_xcalloc((size_t)(nhead + 1 + 2 * n + nopts), sizeof(char *));
    char count[16];
    int k = 0;
    redisReply *r;
    for (int i = 0; i < nhead; i++) a[k++] = head[i];
    snprintf(count, sizeof(count), "%d", n);
    a[k++] = count;
    for (int i = 0; i < 2 * n; i++) a[k++] = g->words[2 * first + i];
    for (int i = 0; i < nopts; i++) a[k++] = opts[i];
    r = ctl_fcall(x, 0, queue, fn, k, a);
    free(a);
    if (r->type != REDIS_REPLY_ARRAY) ctl_refused("unexpected reply to %s", fn);
    return r;
}

/* Prints the ids of a group: one per line, or under --json {"batch_id": ..., "task_ids": [...]}. */
static void print_ids(ctl *x, const char *batch_id, cJSON *ids) {
    if (x->json) {
        cJSON *o = cJSON_CreateObject();
        if (batch_id) cJSON_AddStringToObject(o, "batch_id", batch_id);
        cJSON_AddItemReferenceToObject(o, "task_ids", ids);
        ctl_print_json(o);
        cJSON_Delete(o);
        return;
    }
    if (batch_id) printf("batch %s\n", batch_id);
    for (int i = 0; i < cJSON_GetArraySize(ids); i++)
        printf("%s\n", cJSON_GetArrayItem(ids, i)->valuestring);
}

static void add_ids(cJSON *ids, const redisReply *r, size_t from) {
    for (size_t i = from; i < r->elements; i++)
        cJSON_AddItemToArray(ids, cJSON_CreateString(r->element[i]->str));
}

/* batch create <queue> [options] < tasks: one call, or for more than GROUP_CHUNK tasks a
 * batch created open, filled by adds and closed (unless --open). */
static int batch_create(ctl *x, int argc, char **argv) {
    const char *queue = argv[0];
    const char **opts = dtq_xcalloc((size_t)argc * 2 + 4, sizeof(char *));
    const char *head[2] = {"create", queue};
    int nopts = 0, open = 0, ntask_opts = 0;
    const char **task_opts = dtq_xcalloc((size_t)argc * 2 + 4, sizeof(char *));
    group g;
    cJSON *ids = cJSON_CreateArray();
    char *bid;
    redisReply *r;
    take_flags("batch create", argc, argv, 1,
               TASK_FLAGS " --delay-ms --id --on-success --on-success-payload --on-complete "
                          "--on-complete-payload --description --open",
               opts, &nopts);
    for (int i = 0; i < nopts; i += 2)
        if (!strcmp(opts[i], "open")) open = 1;
    read_group("batch create", &g);
    if (g.n > GROUP_CHUNK && !open) {
        opts[nopts++] = "open";
        opts[nopts++] = "1";
    }
    r = group_call(x, queue, "batch", head, 2, &g, 0, g.n < GROUP_CHUNK ? g.n : GROUP_CHUNK, opts,
                   nopts);
    bid = dtq_xstrdup(r->element[0]->str);
    add_ids(ids, r, 1);
    freeReplyObject(r);
    /* the adds take the members' options only: those of TASK_FLAGS and --delay-ms */
    for (int i = 0; i < nopts; i += 2) {
        static const char *const own[] = {"batch_id",
                                          "on_success",
                                          "on_success_payload",
                                          "on_complete",
                                          "on_complete_payload",
                                          "description",
                                          "open",
                                          NULL};
        int mine = 0;
        for (const char *const *o = own; *o; o++)
            if (!strcmp(opts[i], *o)) mine = 1;
        if (!mine) {
            task_opts[ntask_opts++] = opts[i];
            task_opts[ntask_opts++] = opts[i + 1];
        }
    }
    for (int first = GROUP_CHUNK; first < g.n; first += GROUP_CHUNK) {
        const char *add_head[3] = {"add", bid, queue};
        int n = g.n - first < GROUP_CHUNK ? g.n - first : GROUP_CHUNK;
        r = group_call(x, queue, "batch", add_head, 3, &g, first, n, task_opts, ntask_opts);
        add_ids(ids, r, 0);
        freeReplyObject(r);
    }
    if (g.n > GROUP_CHUNK && !open) {
        const char *a[2] = {"close", bid};
        freeReplyObject(ctl_fcall(x, 0, queue, "batch", 2, a));
    }
    ctl_queue_index_add(x, queue);
    print_ids(x, bid, ids);
    cJSON_Delete(ids);
    free(bid);
    free_group(&g);
    free(opts);
    free(task_opts);
    return 0;
}

/* batch add <batch_id> <queue> [options] < tasks */
static int batch_add(ctl *x, int argc, char **argv) {
    const char **opts = dtq_xcalloc((size_t)argc * 2 + 2, sizeof(char *));
    int nopts = 0;
    group g;
    cJSON *ids = cJSON_CreateArray();
    if (argc < 2) ctl_usage_error("batch add: want <batch_id> <queue>");
    take_flags("batch add", argc, argv, 2, TASK_FLAGS " --delay-ms", opts, &nopts);
    read_group("batch add", &g);
    for (int first = 0; first < g.n; first += GROUP_CHUNK) {
        const char *head[3] = {"add", argv[0], argv[1]};
        int n = g.n - first < GROUP_CHUNK ? g.n - first : GROUP_CHUNK;
        redisReply *r = group_call(x, argv[1], "batch", head, 3, &g, first, n, opts, nopts);
        add_ids(ids, r, 0);
        freeReplyObject(r);
    }
    ctl_queue_index_add(x, argv[1]);
    print_ids(x, NULL, ids);
    cJSON_Delete(ids);
    free_group(&g);
    free(opts);
    return 0;
}

/* The batch's view as `batch show` prints it. */
static void print_batch(const cJSON *b) {
    static const char *const counts[] = {"total",  "pending",       "succeeded",
                                         "failed", "dead_lettered", NULL};
    const cJSON *failed = cJSON_GetObjectItemCaseSensitive(b, "failed_ids");
    char when[64];
    printf("batch %s (queue %s, %s)\n",
           cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, "id")),
           cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, "queue")),
           cJSON_HasObjectItem(b, "completed_at")
               ? "complete"
               : cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, "state")));
    if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(b, "description")))
        printf("  %s\n", cJSON_GetObjectItemCaseSensitive(b, "description")->valuestring);
    for (const char *const *c = counts; *c; c++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(b, *c);
        printf("  %-14s %lld\n", *c, cJSON_IsNumber(v) ? (long long)v->valuedouble : 0LL);
    }
    {
        /* the ended members, and what the running ones last reported (<ns>_batch_show) */
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(b, "progress");
        printf("  %-14s %.1f%%\n", "done", cJSON_IsNumber(p) ? 100.0 * p->valuedouble : 0.0);
    }
    for (const char *const *f =
             (const char *const[]){"created_at", "closed_at", "completed_at", NULL};
         *f; f++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(b, *f);
        char num[32];
        if (!cJSON_IsNumber(v)) continue;
        snprintf(num, sizeof(num), "%.0f", v->valuedouble);
        printf("  %-14s %s\n", *f, ctl_iso_time(num, when, sizeof(when)));
    }
    for (const char *const *w = (const char *const[]){"on_success", "on_complete", NULL}; *w; w++) {
        const cJSON *cb = cJSON_GetObjectItemCaseSensitive(b, *w);
        const char *tid;
        if (!cb) continue;
        tid = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cb, "task_id"));
        printf("  %-14s %s -> %s\n", *w,
               cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cb, "task_type")),
               tid ? tid : "(not yet)");
    }
    if (cJSON_GetArraySize(failed) > 0) {
        const cJSON *id;
        printf("  failed members%s:\n",
               cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "failed_ids_truncated"))
                   ? " (some of them)"
                   : "");
        cJSON_ArrayForEach(id, failed) {
            printf("    %s\n", id->valuestring);
        }
    }
}

/* batch close | show <batch_id> [--queue Q] */
static int batch_by_id(ctl *x, const char *sub, int argc, char **argv) {
    char verb[32];
    const char *queue;
    snprintf(verb, sizeof(verb), "batch %s", sub);
    queue = ctl_take_queue(verb, &argc, argv);
    if (argc != 1) ctl_usage_error("%s: want <batch_id> [--queue Q]", verb);
    queue = ctl_id_queue(x, queue);
    if (!strcmp(sub, "close")) {
        const char *a[2] = {"close", argv[0]};
        redisReply *r = ctl_fcall(x, 0, queue, "batch", 2, a);
        if (x->json)
            printf("{\"batch_id\":\"%s\",\"state\":\"%s\"}\n", argv[0], r->str);
        else
            printf("%s\n", r->str);
        freeReplyObject(r);
        return 0;
    }
    {
        const char *a[1] = {argv[0]};
        cJSON *b = ctl_read_model(x, queue, "batch_show", 1, a);
        if (x->json)
            ctl_print_json(b);
        else
            print_batch(b);
        cJSON_Delete(b);
    }
    return 0;
}

static cJSON *merge_batches(cJSON *const *parts, int n) {
    return dtq_view_merge_batches(parts, n, DTQ_BATCH_LIST_MAX);
}

/* batch list [--queue Q] [--json]: the newest batches (<ns>_batch_list), a line each; the
 * cluster layout: of every queue's slot, merged (view_merge.c), or of Q's alone. */
static int batch_list(ctl *x, int argc, char **argv) {
    const char *queue = ctl_take_queue("batch list", &argc, argv);
    char max[16];
    const char *a[1] = {max};
    cJSON *r, *b;
    if (argc != 0) ctl_usage_error("batch list: want [--queue Q]");
    snprintf(max, sizeof(max), "%d", DTQ_BATCH_LIST_MAX);
    if (queue)
        r = ctl_read_model(x, ctl_id_queue(x, queue), "batch_list", 1, a);
    else
        r = ctl_read_merged(x, "batch_list", 1, a, 0, NULL, merge_batches);
    if (x->json) {
        ctl_print_json(r);
        cJSON_Delete(r);
        return 0;
    }
    printf("%-24s %-16s %-9s %6s %8s %8s %9s %7s %5s\n", "BATCH", "QUEUE", "STATE", "DONE", "TOTAL",
           "PENDING", "SUCCEEDED", "FAILED", "DEAD");
    cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(r, "batches")) {
        double total = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(b, "total"));
        double pending = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(b, "pending"));
        const char *state =
            cJSON_HasObjectItem(b, "completed_at")
                ? "complete"
                : cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, "state"));
        if (total != total) total = 0; /* NaN: absent */
        if (pending != pending) pending = 0;
        printf("%-24s %-16s %-9s %5.1f%% %8.0f %8.0f %9.0f %7.0f %5.0f\n",
               cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, "id")),
               cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, "queue")),
               state ? state : "?", total > 0 ? 100.0 * (total - pending) / total : 100.0, total,
               pending, cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(b, "succeeded")),
               cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(b, "failed")),
               cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(b, "dead_lettered")));
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "more")))
        fprintf(stderr, "dtqctl: only the newest %d batches are listed\n", DTQ_BATCH_LIST_MAX);
    cJSON_Delete(r);
    return 0;
}

int ctl_batch(ctl *x, const ctl_verb *v, int argc, char **argv) {
    if (!strcmp(v->sub, "create")) return batch_create(x, argc, argv);
    if (!strcmp(v->sub, "list")) return batch_list(x, argc, argv);
    if (!strcmp(v->sub, "add")) return batch_add(x, argc, argv);
    return batch_by_id(x, v->sub, argc, argv);
}

/* chain <queue> [options] < tasks: each task after the one before. */
int ctl_chain(ctl *x, const ctl_verb *v, int argc, char **argv) {
    const char **opts = dtq_xcalloc((size_t)argc * 2 + 2, sizeof(char *));
    const char *head[1] = {argv[0]};
    int nopts = 0;
    group g;
    cJSON *ids = cJSON_CreateArray();
    redisReply *r;
    DTQ_UNUSED(v);
    take_flags("chain", argc, argv, 1, TASK_FLAGS " --after --on-failure", opts, &nopts);
    read_group("chain", &g);
    if (g.n > GROUP_CHUNK) ctl_usage_error("chain: at most %d tasks", GROUP_CHUNK);
    r = group_call(x, argv[0], "chain", head, 1, &g, 0, g.n, opts, nopts);
    add_ids(ids, r, 0);
    freeReplyObject(r);
    ctl_queue_index_add(x, argv[0]);
    print_ids(x, NULL, ids);
    cJSON_Delete(ids);
    free_group(&g);
    free(opts);
    return 0;
}
