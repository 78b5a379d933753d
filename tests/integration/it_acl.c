/* it_acl.c: the ACL roles of `dtqctl acl` applied to a real Redis with ACL SETUSER (the
 * tokens exactly as printed), one test per role: every allowed action works, with no
 * denial in ACL LOG (a Function's redis.pcall would swallow one silently), and every
 * forbidden one is refused and changes nothing (DEBUG DIGEST of the data, FUNCTION DUMP
 * of the library). Also: forged raw entries cannot run an attempt twice or alter a task; a
 * daemon running as the worker role serves end to end (retries, scheduler, dead letters,
 * drain hand-back) on the library an admin installed with `dtqctl functions install`; a
 * worker whose user may not FUNCTION LOAD says once what is missing and serves once the
 * library is installed. */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "finisher.h"
#include "harness.h"
#include "scripts.h"
#include "streams.h"
#include "util.h"

static th_redis R;
static redisContext *C; /* the default user: sets up fixtures, inspects */

#define PW "s3cret-pw"
/* dtq-web refuses tokens shorter than 32 random bytes (64 hex digits) */
#define WEB_TOKEN "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define HANDLERS                                                                                   \
    "[handler:echo]\nbuiltin = echo\n[handler:sleep]\nbuiltin = sleep\n"                           \
    "[handler:fail]\nbuiltin = fail\n[handler:flaky]\nbuiltin = flaky\n"

static void setup(void) {
    th_fixture_start(&R, &C, 0, "--enable-debug-command yes");
}

static void teardown(void) {
    th_fixture_stop(&R, &C);
}

/* ----------------------------------------------------------------- helpers */

static void user_url(char *out, size_t len, const char *user) {
    snprintf(out, len, "redis://%s:" PW "@127.0.0.1:%d", user, R.port);
}

/* dtqctl as `user` (NULL: the default user). */
static int ctl_as(char **out, const char *user, const char *args) {
    char env[600], url[400];
    if (user)
        user_url(url, sizeof(url), user);
    else
        snprintf(url, sizeof(url), "%s", R.url);
    snprintf(env, sizeof(env), "DTQ_REDIS_URL='%s'", url);
    return th_run_dtqctl(&R, out, env, args);
}

/* Runs ctl_as and fails unless it exits `want`; returns the output (caller frees). */
static char *ctl_expect(int want, const char *user, const char *args) {
    char *out;
    int rc = ctl_as(&out, user, args);
    ck_assert_msg(rc == want, "dtqctl %s as %s: exit %d, want %d: %s", args, user ? user : "-", rc,
                  want, out);
    return out;
}

/* ACL SETUSER <user> reset on >PW <tokens of `dtqctl <pre> acl <roles>`>, the tokens sent as
 * they were printed (one line, split on blanks), without a shell. */
static void apply_roles(const char *env, const char *pre, const char *user, const char *roles) {
    char args[256], *out, *save = NULL;
    const char *argv[128];
    int argc = 0;
    redisReply *r;
    snprintf(args, sizeof(args), "%s acl %s", pre, roles);
    ck_assert_int_eq(th_run_dtqctl(&R, &out, env, args), 0);
    ck_assert_msg(strchr(out, '\n') == out + strlen(out) - 1, "not one line: %s", out);
    argv[argc++] = "ACL";
    argv[argc++] = "SETUSER";
    argv[argc++] = user;
    argv[argc++] = "reset";
    argv[argc++] = "on";
    argv[argc++] = ">" PW;
    for (char *t = strtok_r(out, " \n", &save); t && argc < 128; t = strtok_r(NULL, " \n", &save))
        argv[argc++] = t;
    r = redisCommandArgv(C, argc, argv, NULL);
    ck_assert_msg(r && r->type == REDIS_REPLY_STATUS, "ACL SETUSER %s: %s", user,
                  r ? r->str : C->errstr);
    freeReplyObject(r);
    free(out);
}

static void apply_role(const char *user, const char *roles) {
    apply_roles("", "", user, roles);
}

/* A connection authenticated as `user`. */
static redisContext *connect_as(const char *user) {
    redisContext *c = redisConnect("127.0.0.1", R.port);
    redisReply *r;
    ck_assert_msg(c && !c->err, "cannot connect to 127.0.0.1:%d", R.port);
    r = redisCommand(c, "AUTH %s %s", user, PW);
    ck_assert_msg(r && r->type == REDIS_REPLY_STATUS, "AUTH %s: %s", user, r ? r->str : "");
    freeReplyObject(r);
    return c;
}

/* Fails when ACL LOG holds a denial of `user`: whatever a role is meant to do must pass
 * every check, also inside Functions, where a redis.pcall would hide the refusal. */
static void assert_no_denials(const char *user) {
    redisReply *r = th_cmd(C, "ACL LOG");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        const char *who = "", *object = "", *reason = "", *context = "";
        for (size_t j = 0; j + 1 < e->elements; j += 2) {
            const char *k = e->element[j]->str, *v = e->element[j + 1]->str;
            if (!v) continue;
            if (!strcmp(k, "username")) who = v;
            if (!strcmp(k, "object")) object = v;
            if (!strcmp(k, "reason")) reason = v;
            if (!strcmp(k, "context")) context = v;
        }
        ck_assert_msg(strcmp(who, user), "ACL LOG: %s was refused %s '%s' (context %s)", user,
                      reason, object, context);
    }
    freeReplyObject(r);
}

/* What a refused action must leave as it was: the data, the library, the config. */
typedef struct snapshot {
    char digest[64];
    char *functions;
    size_t functions_len;
    char policy[64];
} snapshot;

static void take(snapshot *s) {
    redisReply *r = th_cmd(C, "DEBUG DIGEST");
    ck_assert_msg(r->type == REDIS_REPLY_STATUS, "DEBUG DIGEST: %s", r->str);
    snprintf(s->digest, sizeof(s->digest), "%s", r->str);
    freeReplyObject(r);
    r = th_cmd(C, "FUNCTION DUMP");
    ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
    s->functions = malloc(r->len);
    memcpy(s->functions, r->str, r->len);
    s->functions_len = r->len;
    freeReplyObject(r);
    r = th_cmd(C, "CONFIG GET maxmemory-policy");
    snprintf(s->policy, sizeof(s->policy), "%s", r->element[1]->str);
    freeReplyObject(r);
}

static void assert_unchanged(const snapshot *before, const char *after_what) {
    snapshot now;
    take(&now);
    ck_assert_msg(!strcmp(before->digest, now.digest), "the data changed after %s", after_what);
    ck_assert_msg(before->functions_len == now.functions_len &&
                      !memcmp(before->functions, now.functions, now.functions_len),
                  "the library changed after %s", after_what);
    ck_assert_msg(!strcmp(before->policy, now.policy), "the config changed after %s", after_what);
    free(now.functions);
}

/* The command (formatted as by redisCommand) must be refused: NOPERM for a command, key or
 * channel the role does not hold. Nothing may change. */
static void refused(redisContext *c, const char *fmt, ...) {
    va_list ap;
    redisReply *r;
    snapshot before;
    char what[200];
    take(&before);
    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
    snprintf(what, sizeof(what), "%.100s (refused)", fmt);
    ck_assert_msg(r != NULL, "%s: %s", fmt, c->errstr);
    ck_assert_msg(r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "NOPERM", 6),
                  "'%s' was not refused: type %d %s", fmt, r->type, r->str ? r->str : "");
    freeReplyObject(r);
    assert_unchanged(&before, what);
    free(before.functions);
}

/* As refused(), for a command given as an argument vector (binary-safe). */
static void refused_argv(redisContext *c, int argc, const char **argv, const size_t *lens) {
    redisReply *r;
    snapshot before;
    take(&before);
    r = redisCommandArgv(c, argc, argv, lens);
    ck_assert_ptr_nonnull(r);
    ck_assert_msg(r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "NOPERM", 6),
                  "'%s %s' was not refused: %s", argv[0], argc > 1 ? argv[1] : "",
                  r->str ? r->str : "");
    freeReplyObject(r);
    assert_unchanged(&before, argv[0]);
    free(before.functions);
}

/* FUNCTION LOAD REPLACE of this build's library, as `c`'s user: must be refused. */
static void function_load_refused(redisContext *c) {
    size_t len;
    char *lib = dtq_scripts_library("dtq", "dtq", &len);
    const char *argv[4] = {"FUNCTION", "LOAD", "REPLACE", lib};
    size_t lens[4] = {8, 4, 7, len};
    refused_argv(c, 4, argv, lens);
    free(lib);
}

/* The forbidden actions every role but the ones that need them shares. */
static void server_admin_refused(redisContext *c) {
    function_load_refused(c);
    refused(c, "FUNCTION DELETE dtq");
    refused(c, "FUNCTION FLUSH");
    refused(c, "FLUSHALL");
    refused(c, "FLUSHDB");
    refused(c, "CONFIG SET maxmemory-policy allkeys-lru");
    refused(c, "KEYS *");
    refused(c, "SET other:key 1");
}

/* The internal Functions: the worker role's alone. */
static void internal_functions_refused(redisContext *c) {
    refused(c, "FCALL dtq_fetch 11 dtq:queue:default:paused dtq:stream:default:p9 "
               "dtq:stream:default:p8 dtq:stream:default:p7 dtq:stream:default:p6 "
               "dtq:stream:default:p5 dtq:stream:default:p4 dtq:stream:default:p3 "
               "dtq:stream:default:p2 dtq:stream:default:p1 dtq:stream:default:p0 x 1 {} default");
    refused(c, "FCALL dtq_reap 0 x 1000 1 16 {}");
    refused(c, "FCALL dtq_recover 0 x lost {} 0");
    refused(c, "FCALL dtq_finish 0 x 0");
    refused(c, "FCALL dtq_handback 0 x 0");
    refused(c, "FCALL dtq_worker_event 0 x WORKER_STARTED");
    refused(c, "FCALL dtq_sched_claim 2 dtq:retry:schedule dtq:retry:claimed 10 0");
    refused(c, "FCALL dtq_sched_promote 1 dtq:retry:claimed x t-1");
    refused(c, "FCALL dtq_lock_refresh 1 dtq:lock:scheduler x 1000");
    refused(c, "FCALL dtq_lock_release 1 dtq:lock:scheduler x");
}

/* The admin Functions. */
static void admin_functions_refused(redisContext *c) {
    refused(c, "FCALL dtq_requeue 0 t-1");
    refused(c, "FCALL dtq_requeue_dlq 0");
    refused(c, "FCALL dtq_discard 0 t-1");
    refused(c, "FCALL dtq_purge_dlq 0");
    refused(c, "FCALL dtq_cancel 0 t-1");
    refused(c, "FCALL dtq_pause 0 default");
    refused(c, "FCALL dtq_resume 0 default");
    refused(c, "FCALL dtq_sched_run_now 0 x t-1");
    refused(c, "FCALL dtq_sched_delete 0 x t-1");
    refused(c, "FCALL dtq_queue_clear 0 x default");
    refused(c, "FCALL dtq_queue_remove 0 x default");
}

/* FCALL dtq_enqueue 0 <args> (blank-separated words without '%'). */
static char *enqueue_as(redisContext *c, const char *args) {
    char cmd[512];
    redisReply *r;
    char *id;
    snprintf(cmd, sizeof(cmd), "FCALL dtq_enqueue 0 %s", args);
    r = redisCommand(c, cmd);
    ck_assert_ptr_nonnull(r);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "enqueue %s: %s", args, r->str);
    ck_assert_str_eq(r->element[1]->str, "created");
    id = strdup(r->element[0]->str);
    freeReplyObject(r);
    return id;
}

/* Every field of a task hash, as one comparable string. */
static char *hash_text(const char *id) {
    redisReply *r = th_cmd(C, "HGETALL dtq:task:%s", id);
    size_t len = 1;
    char *s;
    for (size_t i = 0; i < r->elements; i++) len += r->element[i]->len + 1;
    s = calloc(1, len);
    for (size_t i = 0; i < r->elements; i++) {
        strcat(s, r->element[i]->str);
        strcat(s, i % 2 ? "\n" : "=");
    }
    freeReplyObject(r);
    return s;
}

/* ----------------------------------------------------------------- dtqctl acl */

/* One line, nothing asked of Redis, the namespace and cluster_hash_tag in the patterns; the
 * documented copy-paste (`| xargs redis-cli ACL SETUSER ...`) applies it, and a producer so
 * made enqueues into the hash-tagged namespace without a single denial. */
START_TEST(test_acl_output_and_hash_tag) {
    char *out, cli[512], cmd[2048], env[600];
    char *slash;
    ck_assert_int_eq(th_run_dtqctl(&R, &out, "DTQ_REDIS_URL=redis://127.0.0.1:1", "acl producer"),
                     0);
    ck_assert_str_eq(
        out, "resetkeys resetchannels clearselectors -@all +fcall|dtq_enqueue "
             "+fcall|dtq_enqueue_bulk +fcall|dtq_layout +fcall_ro|dtq_served +fcall|dtq_batch "
             "+fcall|dtq_chain +fcall_ro|dtq_batch_show +time +hmget "
             "+get +mget +exists +xlen +incr +incrby +hset +sadd +set +zadd +xadd +publish "
             "+pubsub|numsub +pubsub|numpat +smembers %R~dtq:config %R~dtq:queue:*:mode "
             "%W~dtq:task:* %W~dtq:stream:*:p[0-9] %W~dtq:stream:events %R~dtq:workers "
             "%R~dtq:worker:* ~dtq:idempotency:* ~dtq:unique:* %W~dtq:queues ~dtq:seq "
             "%W~dtq:retry:schedule %R~dtq:layout ~dtq:queue:*:length &dtq:events "
             "~dtq:waiters:* ~dtq:batch:* ~dtq:batches +scard +hincrby +hgetall +hexists "
             "+srandmember +expire +hvals +zrange +zrem\n");
    free(out);
    ck_assert_int_eq(th_run_dtqctl(&R, &out, "", "-n jobs acl producer-raw"), 0);
    ck_assert_str_eq(
        out, "resetkeys resetchannels clearselectors -@all +xadd %W~jobs:stream:*:p[0-9]\n");
    free(out);
    ck_assert_int_eq(
        th_run_dtqctl(&R, &out, "DTQ_REDIS_CLUSTER_HASH_TAG=true", "-n jobs acl worker"), 0);
    ck_assert_ptr_nonnull(strstr(out, " ~{jobs}:* &{jobs}:events\n"));
    ck_assert_ptr_nonnull(strstr(out, " +fcall|jobs_fetch "));
    free(out);
    ck_assert_int_eq(th_run_dtqctl(&R, &out, "", "acl root"), 2);
    ck_assert_ptr_nonnull(strstr(out, "unknown role 'root'"));
    free(out);
    ck_assert_int_eq(th_run_dtqctl(&R, &out, "", "acl"), 2);
    free(out);

    /* cluster_hash_tag end to end: install, apply through the shell as documented, enqueue */
    snprintf(env, sizeof(env), "DTQ_REDIS_URL='%s' DTQ_REDIS_CLUSTER_HASH_TAG=true", R.url);
    ck_assert_int_eq(th_run_dtqctl(&R, &out, env, "-n jobs functions install"), 0);
    ck_assert_ptr_nonnull(strstr(out, dtq_scripts_version()));
    free(out);
    snprintf(cli, sizeof(cli), "%s", REDIS_SERVER_BIN);
    slash = strrchr(cli, '/');
    snprintf(slash + 1, sizeof(cli) - (size_t)(slash + 1 - cli), "redis-cli");
    if (access(cli, X_OK) == 0) {
        snprintf(cmd, sizeof(cmd),
                 "cd '%s' && touch '~{jobs}:idempotency:trap' && DTQ_REDIS_CLUSTER_HASH_TAG=true "
                 "%s -n jobs acl "
                 "producer | xargs %s -p %d ACL SETUSER tagp reset on '>" PW "' >/dev/null",
                 R.dir, DTQCTL_BIN, cli, R.port);
        ck_assert_int_eq(system(cmd), 0);
    } else {
        apply_roles("DTQ_REDIS_CLUSTER_HASH_TAG=true", "-n jobs", "tagp", "producer");
    }
    {
        char url[400], args[400];
        user_url(url, sizeof(url), "tagp");
        snprintf(env, sizeof(env), "DTQ_REDIS_URL='%s' DTQ_REDIS_CLUSTER_HASH_TAG=true", url);
        snprintf(args, sizeof(args), "-n jobs enqueue emails echo '{\"a\":1}' --id tag-1");
        ck_assert_int_eq(th_run_dtqctl(&R, &out, env, args), 0);
        ck_assert_str_eq(out,
                         "tag-1 created\ndtqctl: warning: no live worker serves queue 'emails' "
                         "(0 workers live): the task waits until one does\n");
        free(out);
    }
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS {jobs}:task:tag-1")), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN {jobs}:stream:emails:p5")), 1);
    assert_no_denials("tagp");
}
END_TEST

/* ----------------------------------------------------------------- producer */

START_TEST(test_producer) {
    redisContext *p;
    redisReply *r;
    char *out, *id;
    free(ctl_expect(0, NULL, "functions install"));
    freeReplyObject(th_cmd(C, "HSET dtq:config events_stream_maxlen 100"));
    apply_role("prod", "producer");
    p = connect_as("prod");

    /* allowed: <ns>_enqueue with every option, through FCALL and dtqctl */
    free(enqueue_as(p, "default echo {}"));
    free(enqueue_as(p, "default echo {} priority 9 max_attempts 3 timeout_ms 500 ttl_seconds 60"));
    free(enqueue_as(p, "default echo {} idempotency_key k1 task_id p-idem"));
    r = redisCommand(p, "FCALL dtq_enqueue 0 default echo {} idempotency_key k1");
    ck_assert_str_eq(r->str, "IDEMPOTENCY_IN_PROGRESS p-idem");
    freeReplyObject(r);
    r = redisCommand(p, "FCALL dtq_enqueue 0 default echo {} task_id p-idem");
    ck_assert_str_eq(r->str, "ID_EXISTS task p-idem exists");
    freeReplyObject(r);
    id = enqueue_as(p, "default echo {} delay_ms 60000");
    th_assert_field(C, id, "status", "pending");
    free(id);
    out = ctl_expect(0, "prod", "enqueue default echo '{\"x\":1}' --id p-ctl --priority 2");
    /* the producer may ask whether a live worker serves the queue (none runs here) */
    ck_assert_str_eq(out,
                     "p-ctl created\ndtqctl: warning: no live worker serves queue 'default' (0 "
                     "workers live): the task waits until one does\n");
    free(out);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:events")), 4); /* TASK_QUEUED x4 */
    /* unique keys: the lock, the task key's existence and the schedule, never the hash */
    free(enqueue_as(p, "default echo {} unique_for 60 task_id p-u1"));
    r = redisCommand(p, "FCALL dtq_enqueue 0 default echo {} unique_for 60");
    ck_assert_str_eq(r->element[0]->str, "p-u1");
    ck_assert_str_eq(r->element[1]->str, "duplicate");
    freeReplyObject(r);
    free(enqueue_as(p, "default echo {} unique_for 60 unique_mode debounce unique_key d "
                       "task_id p-d1"));
    r = redisCommand(p, "FCALL dtq_enqueue 0 default echo {\"v\":2} unique_for 60 unique_mode "
                        "debounce unique_key d");
    ck_assert_str_eq(r->element[1]->str, "debounced");
    freeReplyObject(r);
    th_assert_field(C, "p-d1", "payload", "{\"v\":2}");
    assert_no_denials("prod");

    /* batches and chains (a batch complete at its close enqueues its callback at once) */
    r = redisCommand(p, "FCALL dtq_batch 0 create default 2 echo {} echo {} batch_id pb open 1 "
                        "on_complete done");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    r = redisCommand(p, "FCALL dtq_enqueue 0 default echo {} batch pb");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    th_expect_str(redisCommand(p, "FCALL dtq_batch 0 close pb"), "closed");
    r = redisCommand(p, "FCALL_RO dtq_batch_show 0 pb");
    ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
    freeReplyObject(r);
    r = redisCommand(p, "FCALL dtq_chain 0 default 3 echo {} echo {} echo {}");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    th_assert_field(C, r->element[2]->str, "status", "waiting");
    freeReplyObject(r);
    assert_no_denials("prod");
    /* after naming an existing task reads its status: refused, precisely, nothing written */
    r = redisCommand(p, "FCALL dtq_enqueue 0 default echo {} after p-ctl");
    ck_assert_int_eq(r->type, REDIS_REPLY_ERROR);
    ck_assert_ptr_nonnull(strstr(r->str, "NOPERM after needs to read the status of task p-ctl"));
    freeReplyObject(r);
    freeReplyObject(th_cmd(C, "ACL LOG RESET"));

    /* refused, changing nothing */
    internal_functions_refused(p);
    admin_functions_refused(p);
    refused(p, "FCALL_RO dtq_stats 0");
    server_admin_refused(p);
    refused(p, "DEL dtq:task:p-ctl");
    refused(p, "HGETALL dtq:task:p-ctl");
    refused(p, "HMGET dtq:task:p-ctl payload"); /* task hashes are write-only for it */
    refused(p, "XRANGE dtq:stream:default:p5 - +");
    refused(p, "XADD dtq:stream:dead-letter * task_id p-ctl");
    refused(p, "ZRANGE dtq:retry:schedule 0 -1");
    refused(p, "SUBSCRIBE dtq:events");
    refused(p, "PUBLISH other:events x");
    out = ctl_expect(1, "prod", "cancel p-ctl");
    ck_assert_ptr_nonnull(strstr(out, "NOPERM"));
    free(out);

    /* What it can still do, and why: a Function's redis.call runs with the caller's
     * permissions, so the writes <ns>_enqueue makes are the producer's own (documented in
     * README "ACL roles" and reference.md 16). */
    ck_assert_int_eq(th_int(redisCommand(p, "HSET dtq:task:p-ctl payload {\"x\":2}")), 0);
    th_assert_field(C, "p-ctl", "payload", "{\"x\":2}");
    redisFree(p);
}
END_TEST

/* The layout marker is the daemon's and the admin's: a producer that could SET it would
 * make every dtqctl verb answer WRONG_LAYOUT and stop every daemon at its next start or
 * reconnect. `dtqctl functions install` writes it, so the producer's layout check finds it
 * and only reads. */
START_TEST(test_producer_cannot_set_the_layout_marker) {
    redisContext *p;
    redisReply *r;
    free(ctl_expect(0, NULL, "functions install"));
    r = th_cmd(C, "GET dtq:layout");
    ck_assert_msg(r->type == REDIS_REPLY_STRING && !strcmp(r->str, "single"),
                  "functions install left no layout marker");
    freeReplyObject(r);
    apply_role("prod", "producer");
    free(ctl_expect(0, "prod", "enqueue default echo 1 --id lm-1"));
    assert_no_denials("prod");
    p = connect_as("prod");
    refused(p, "SET dtq:layout bogus");
    refused(p, "DEL dtq:layout");
    redisFree(p);
    free(ctl_expect(0, "prod", "enqueue default echo 2 --id lm-2"));
}
END_TEST

/* A producer holds SET and INCRBY on <p>:seq (its enqueues need them). Neither can make an
 * enqueue overwrite a task or stop the others' enqueues: a rewound counter that mints an id
 * already taken skips it, and a counter left as text (or as a key of another type) is
 * replaced. The taken ids are laid for every millisecond of the next seconds, so the
 * enqueue's own clock reading lands on one of them. */
START_TEST(test_producer_cannot_rewind_ids) {
    redisContext *p;
    redisReply *r;
    long long now_ms;
    char *id, taken[64];
    free(ctl_expect(0, NULL, "functions install"));
    apply_role("prod", "producer");
    p = connect_as("prod");
    r = th_cmd(C, "TIME");
    now_ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);
    for (long long ms = now_ms; ms < now_ms + 3000; ms++)
        redisAppendCommand(C, "HSET dtq:task:%lld-77 id %lld-77 payload mine", ms, ms);
    for (long long ms = now_ms; ms < now_ms + 3000; ms++) {
        ck_assert_int_eq(redisGetReply(C, (void **)&r), REDIS_OK);
        freeReplyObject(r);
    }
    freeReplyObject(redisCommand(p, "SET dtq:seq 76")); /* the next id minted is <ms>-77 */
    id = enqueue_as(p, "default echo {\"new\":1}");
    ck_assert_msg(strstr(id, "-77") == NULL, "minted a taken id: %s", id);
    th_assert_field(C, id, "payload", "{\"new\":1}");
    snprintf(taken, sizeof(taken), "%.*s-77", (int)(strchr(id, '-') - id), id);
    th_assert_field(C, taken, "payload", "mine"); /* the task at the taken id is untouched */
    free(id);
    /* the same through enqueue_bulk, and a counter rewound by INCRBY */
    freeReplyObject(redisCommand(p, "INCRBY dtq:seq -2")); /* 78 - 2: the next is <ms>-77 */
    r = redisCommand(p, "FCALL dtq_enqueue_bulk 0 default echo 2 {\"b\":1} {\"b\":2}");
    ck_assert_msg(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2, "enqueue_bulk: %s",
                  r && r->str ? r->str : "?");
    for (size_t i = 0; i < 2; i++) {
        ck_assert_int_eq(r->element[i]->type, REDIS_REPLY_STRING);
        ck_assert_msg(strstr(r->element[i]->str, "-77") == NULL, "bulk minted %s",
                      r->element[i]->str);
    }
    freeReplyObject(r);
    /* a counter that is not a number does not stop enqueues */
    freeReplyObject(redisCommand(p, "SET dtq:seq not-a-number"));
    id = enqueue_as(p, "default echo {}");
    th_assert_field(C, id, "status", "queued");
    free(id);
    assert_no_denials("prod");
    redisFree(p);
}
END_TEST

/* A Function refused a command midway: the error text the docs quote. */
START_TEST(test_denial_inside_a_function) {
    redisContext *p;
    redisReply *r;
    th_load_library(C);
    freeReplyObject(th_cmd(C, "ACL SETUSER half reset on >" PW " +fcall|dtq_enqueue ~dtq:*"));
    p = connect_as("half");
    r = redisCommand(p, "FCALL dtq_enqueue 0 default echo {}");
    ck_assert_int_eq(r->type, REDIS_REPLY_ERROR);
    ck_assert_msg(!strncmp(r->str,
                           "ERR The user executing the script can't run this command or "
                           "subcommand script: dtq_enqueue",
                           strlen("ERR The user executing the script can't run this command or "
                                  "subcommand script: dtq_enqueue")),
                  "%s", r->str);
    freeReplyObject(r);
    redisFree(p);
}
END_TEST

/* ----------------------------------------------------------------- producer-raw */

#define POLICY "{\"d\":[5,30000],\"t\":{}}"
#define COUNT_TASKS "return #redis.call('KEYS', 'dtq:task:*')"

static redisReply *fetch_as(redisContext *c, const char *worker, const char *q) {
    return th_fetch(c, worker, 100, q, POLICY);
}

static void finish_as(redisContext *c, const char *worker, const redisReply *t,
                      enum dtq_outcome_kind outcome, const char *want) {
    dtq_finish_record rec = th_finish_record(t);
    redisReply *r;
    rec.outcome = outcome;
    rec.error = (char *)"boom";
    rec.error_class = "retryable";
    r = th_finish(c, worker, &rec, 1);
    ck_assert_str_eq(r->element[0]->str, want);
    freeReplyObject(r);
}

/* XADD <stream> * <fields> (blank-separated words without '%'). */
static char *xadd_as(redisContext *c, const char *stream, const char *fields) {
    char cmd[512];
    redisReply *r;
    char *id;
    snprintf(cmd, sizeof(cmd), "XADD %s * %s", stream, fields);
    r = redisCommand(c, cmd);
    ck_assert_msg(r && r->type == REDIS_REPLY_STRING, "XADD %s: %s", stream, r ? r->str : "");
    id = strdup(r->str);
    freeReplyObject(r);
    return id;
}

/* Which (task, attempt) pairs were claimed, each at most once. */
typedef struct claims {
    char task[16][64];
    long long attempt[16];
    char entry[16][64];
    int n;
} claims;

static void collect(claims *cl, const redisReply *fetched) {
    const redisReply *tasks = fetched->element[0];
    for (size_t i = 0; i < tasks->elements; i++) {
        const redisReply *t = tasks->element[i];
        for (int j = 0; j < cl->n; j++)
            ck_assert_msg(
                strcmp(cl->task[j], t->element[2]->str) || cl->attempt[j] != t->element[6]->integer,
                "task %s attempt %lld claimed twice", t->element[2]->str, t->element[6]->integer);
        ck_assert_int_lt(cl->n, 16);
        snprintf(cl->task[cl->n], 64, "%s", t->element[2]->str);
        cl->attempt[cl->n] = t->element[6]->integer;
        snprintf(cl->entry[cl->n], 64, "%s/%s", t->element[0]->str, t->element[1]->str);
        cl->n++;
    }
}

/* producer-raw: XADD into the priority streams and nothing else. Forged entries of dtq's
 * own shape ({task_id, attempt}, no task_type) against tasks in every status: no attempt
 * is claimed twice, no field of any task is changed by them, no task is created; the one
 * residual: a forged entry in a task's own stream, read before the task's real entry
 * (here: written while the task was retrying, read after its promotion), carries that
 * attempt instead of the real entry, which is absorbed. */
START_TEST(test_producer_raw_and_forged_entries) {
    redisContext *raw, *wk;
    redisReply *f, *b, *cc, *dd;
    claims cl = {0};
    char *a_real, *forged_d, *bt, *ct, *dt, *at, *before_b, *before_c, *before_a, *before_d;
    char *raw_entry, raw_id[128];
    int tasks_before;
    th_load_library(C);
    apply_role("raw", "producer-raw");
    apply_role("wk", "worker");
    raw = connect_as("raw");
    wk = connect_as("wk");
    for (int band = 0; band < 10; band++) {
        freeReplyObject(th_cmd(C, "XGROUP CREATE dtq:stream:default:p%d workers 0 MKSTREAM", band));
        freeReplyObject(th_cmd(C, "XGROUP CREATE dtq:stream:other:p%d workers 0 MKSTREAM", band));
    }

    /* allowed: a raw entry, which a worker materializes and claims */
    raw_entry = xadd_as(raw, "dtq:stream:default:p5", "task_type echo payload {}");
    snprintf(raw_id, sizeof(raw_id), "default:p5:%s", raw_entry);
    f = fetch_as(wk, "w1", "default");
    collect(&cl, f);
    ck_assert_int_eq(cl.n, 1);
    ck_assert_str_eq(cl.task[0], raw_id);
    finish_as(wk, "w1", f->element[0]->element[0], DTQ_OUTCOME_SUCCEEDED, "succeeded");
    freeReplyObject(f);
    free(raw_entry);
    assert_no_denials("raw");

    /* refused, changing nothing */
    refused(raw, "XADD dtq:stream:dead-letter * task_id x");
    refused(raw, "XADD dtq:stream:events * event x");
    refused(raw, "XADD dtq:task:x * a b");
    refused(raw, "HSET dtq:task:%s status queued", raw_id);
    refused(raw, "DEL dtq:stream:default:p5");
    refused(raw, "XDEL dtq:stream:default:p5 0-1");
    refused(raw, "XTRIM dtq:stream:default:p5 MAXLEN 0");
    refused(raw, "XRANGE dtq:stream:default:p5 - +");
    refused(raw, "XLEN dtq:stream:default:p5");
    refused(raw, "FCALL dtq_enqueue 0 default echo {}");
    refused(raw, "FCALL_RO dtq_stats 0");
    internal_functions_refused(raw);
    admin_functions_refused(raw);
    server_admin_refused(raw);

    /* tasks in every status: B running, C succeeded, D retrying (attempt 1), A queued */
    bt = enqueue_as(C, "default echo {\"b\":1} max_attempts 3");
    ct = enqueue_as(C, "default echo {\"c\":1} max_attempts 3");
    dt = enqueue_as(C, "default echo {\"d\":1} max_attempts 3");
    f = fetch_as(wk, "w1", "default");
    ck_assert_int_eq(f->element[0]->elements, 3);
    b = f->element[0]->element[0];
    cc = f->element[0]->element[1];
    dd = f->element[0]->element[2];
    collect(&cl, f);
    finish_as(wk, "w1", cc, DTQ_OUTCOME_SUCCEEDED, "succeeded");
    finish_as(wk, "w1", dd, DTQ_OUTCOME_RETRY, "retrying");
    (void)b;
    freeReplyObject(f);
    at = enqueue_as(C, "default echo {\"a\":1} max_attempts 3");
    {
        redisReply *x = th_cmd(C, "XREVRANGE dtq:stream:default:p5 + - COUNT 1");
        a_real = dtq_xasprintf("dtq:stream:default:p5/%s", x->element[0]->element[0]->str);
        freeReplyObject(x);
    }
    before_a = hash_text(at);
    before_b = hash_text(bt);
    before_c = hash_text(ct);
    before_d = hash_text(dt);
    tasks_before = (int)th_int(th_cmd(C, "EVAL %s 0", COUNT_TASKS));

    /* the forgeries */
    {
        char fa[128], fb1[128], fb2[128], fc[128], fd[128], fa99[128], raw_a[160];
        snprintf(fa, sizeof(fa), "task_id %s attempt 1", at);
        snprintf(fa99, sizeof(fa99), "task_id %s attempt 99", at);
        snprintf(fb1, sizeof(fb1), "task_id %s attempt 1", bt);
        snprintf(fb2, sizeof(fb2), "task_id %s attempt 2", bt);
        snprintf(fc, sizeof(fc), "task_id %s attempt 1", ct);
        snprintf(fd, sizeof(fd), "task_id %s attempt 2", dt);
        snprintf(raw_a, sizeof(raw_a), "task_id %s task_type echo payload {\"forged\":1}", at);
        free(xadd_as(raw, "dtq:stream:default:p9", fa));    /* A, a higher band */
        free(xadd_as(raw, "dtq:stream:other:p5", fa));      /* A, another queue */
        free(xadd_as(raw, "dtq:stream:default:p5", fa));    /* A, after its real entry */
        free(xadd_as(raw, "dtq:stream:default:p5", fa99));  /* A, another attempt */
        free(xadd_as(raw, "dtq:stream:default:p5", raw_a)); /* A's id, raw shape */
        free(xadd_as(raw, "dtq:stream:default:p5", fb1));   /* B running, its attempt */
        free(xadd_as(raw, "dtq:stream:default:p5", fb2));   /* B running, the next one */
        free(xadd_as(raw, "dtq:stream:default:p9", fb2));
        free(xadd_as(raw, "dtq:stream:default:p5", fc));                        /* C succeeded */
        free(xadd_as(raw, "dtq:stream:default:p5", "task_id ghost attempt 1")); /* no task */
        forged_d = xadd_as(raw, "dtq:stream:default:p5", fd); /* D's next attempt, early */
    }
    /* D is promoted: attempt 2, its real entry after every forgery */
    {
        size_t n;
        redisReply *x = th_sched_claim(wk, 100, 60000, &n); /* its read model too, as worker */
        ck_assert_int_eq(n, 1);
        freeReplyObject(x);
        ck_assert_int_eq(
            th_int(th_cmd(wk, "FCALL dtq_sched_promote 1 dtq:retry:claimed w1 %s", dt)), 1);
    }

    /* a worker of the other queue claims nothing; the default queue's reads drain it all */
    f = fetch_as(wk, "w2", "other");
    ck_assert_int_eq(f->element[0]->elements, 0);
    ck_assert_int_eq(f->element[2]->integer, 1);
    freeReplyObject(f);
    for (int i = 0; i < 5; i++) {
        f = fetch_as(wk, "w3", "default");
        collect(&cl, f);
        freeReplyObject(f);
    }
    /* claimed: the raw task, B C D at attempt 1, then A from its real entry and D at 2 */
    ck_assert_int_eq(cl.n, 6);
    ck_assert_str_eq(cl.task[4], at);
    ck_assert_int_eq(cl.attempt[4], 1);
    ck_assert_str_eq(cl.entry[4], a_real);
    ck_assert_str_eq(cl.task[5], dt);
    ck_assert_int_eq(cl.attempt[5], 2);
    {
        char want[160];
        snprintf(want, sizeof(want), "dtq:stream:default:p5/%s", forged_d);
        ck_assert_str_eq(cl.entry[5], want); /* the residual: the forged entry carries it */
    }

    /* no field changed by a forgery: B and C as they were; A and D only by their claims */
    {
        char *now_b = hash_text(bt), *now_c = hash_text(ct);
        ck_assert_str_eq(now_b, before_b);
        ck_assert_str_eq(now_c, before_c);
        free(now_b);
        free(now_c);
    }
    th_assert_field(C, at, "payload", "{\"a\":1}");
    th_assert_field(C, at, "attempt", "1");
    th_assert_field(C, at, "carrier", a_real);
    th_assert_field(C, dt, "payload", "{\"d\":1}");
    th_assert_field(C, dt, "attempt", "2");
    ck_assert_ptr_nonnull(strstr(before_a, "payload={\"a\":1}\n"));
    ck_assert_ptr_nonnull(strstr(before_d, "status=retrying\n"));
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:task:ghost")), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "EVAL %s 0", COUNT_TASKS)), tasks_before);
    /* every forgery acknowledged and deleted */
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p9")), 0);
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:other:p5")), 0);
    /* B's, A's and D's carriers remain (running) */
    ck_assert_int_eq(th_int(th_cmd(C, "XLEN dtq:stream:default:p5")), 3);
    assert_no_denials("wk");
    free(a_real);
    free(forged_d);
    free(at);
    free(bt);
    free(ct);
    free(dt);
    free(before_a);
    free(before_b);
    free(before_c);
    free(before_d);
    redisFree(raw);
    redisFree(wk);
}
END_TEST

/* ----------------------------------------------------------------- worker, admin, monitor */

static th_daemon D;

static void start_worker(const char *worker_id, const char *extra) {
    th_redis as = R;
    char ini[4096];
    user_url(as.url, sizeof(as.url), "wk");
    snprintf(ini, sizeof(ini),
             "[worker]\nworker_id = %s\nheartbeat_interval_s = 1\nvisibility_timeout_s = 3\n"
             "drain_timeout_s = 0\n[retry]\nbase_delay = 0.2\nmax_delay = 0.5\njitter = 0\n"
             "[scheduler]\ninterval_ms = 100\nleader_lock_ms = 2000\n"
             "[limits]\nevents_stream_maxlen = 1000\n%s\n" HANDLERS,
             worker_id, extra ? extra : "");
    th_daemon_start(&D, &as, ini);
}

/* Every read Function as `user`, each answering JSON that holds `want` (a task, a queue or
 * a worker it must show); ACL LOG must then hold no denial of the user (a redis.pcall in
 * a Function would hide one). */
static void read_model_as(const char *user, const char *const *calls, const char *const *want) {
    redisContext *c = connect_as(user);
    for (int i = 0; calls[i]; i++) {
        char cmd[200];
        redisReply *r;
        snprintf(cmd, sizeof(cmd), "FCALL_RO %s", calls[i]);
        r = redisCommand(c, cmd);
        ck_assert_ptr_nonnull(r);
        ck_assert_msg(r->type == REDIS_REPLY_STRING, "%s as %s: %s", calls[i], user,
                      r->str ? r->str : "");
        ck_assert_msg(strstr(r->str, want[i]), "%s as %s: no %s in %s", calls[i], user, want[i],
                      r->str);
        freeReplyObject(r);
    }
    redisFree(c);
    assert_no_denials(user);
}

static const char *const READS[] = {"dtq_overview 0",
                                    "dtq_workers 0",
                                    "dtq_queue_view 0 default 5",
                                    "dtq_task_view 0 e-ok",
                                    "dtq_task_view 0 e-dead",
                                    "dtq_dead_letters 0 - 5",
                                    "dtq_dead_letters 0 - 5 oldest worker_lost",
                                    "dtq_audit_page 0 - 5",
                                    "dtq_scheduled 0 - 5",
                                    "dtq_scheduled 0 - 5 kind delayed queue default id_prefix e-",
                                    "dtq_metrics 0",
                                    NULL};

/* A daemon running as the worker role (no FUNCTION LOAD) on the library an admin
 * installed: success, a retry through the scheduler, a delayed task, a dead letter, a
 * cancel, a requeue and a discard, the admin's and the monitor's dtqctl verbs, and a drain
 * that hands a running task back; no role is refused anything on the way. */
START_TEST(test_worker_role_end_to_end) {
    char *out;
    redisContext *mon;
    redisReply *r;
    apply_role("adm", "admin");
    apply_role("wk", "worker");
    apply_role("prod", "producer");
    apply_role("mon", "monitor");
    out = ctl_expect(0, "adm", "functions install");
    ck_assert_ptr_nonnull(strstr(out, dtq_scripts_version()));
    free(out);
    start_worker("w-acl", NULL);
    th_daemon_wait_ready(C, "w-acl", 15000);

    free(ctl_expect(0, "prod", "enqueue default echo '{\"ok\":1}' --id e-ok"));
    free(ctl_expect(0, "prod", "enqueue default flaky '{\"succeed_on\":2}' --id e-flaky"));
    free(ctl_expect(0, "prod", "enqueue default echo 1 --id e-later --delay-ms 300"));
    free(ctl_expect(0, "prod", "enqueue default fail '{\"message\":\"no\"}' --id e-dead"));
    free(ctl_expect(0, "prod", "enqueue default echo 2 --id e-cancel --delay-ms 600000"));
    th_expect_status(C, "e-ok", "succeeded", 15000);
    th_expect_status(C, "e-flaky", "succeeded", 15000);
    th_assert_field(C, "e-flaky", "attempt", "2");
    th_expect_status(C, "e-later", "succeeded", 15000);
    th_expect_status(C, "e-dead", "dead_lettered", 15000);
    /* a batch made by the producer, counted and called back by the worker's finishes, shown
     * to the monitor */
    {
        redisContext *p = connect_as("prod");
        r = redisCommand(p, "FCALL dtq_batch 0 create default 2 echo {} echo {} batch_id e-b "
                            "on_complete echo on_success echo");
        ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
        freeReplyObject(r);
        redisFree(p);
        for (int i = 0; i < 150; i++) {
            r = th_cmd(C, "HGET dtq:batch:e-b complete_task");
            int done = r->type == REDIS_REPLY_STRING;
            freeReplyObject(r);
            if (done) break;
            usleep(100000);
        }
        out = ctl_expect(0, "mon", "batch show e-b");
        ck_assert_ptr_nonnull(strstr(out, "succeeded      2"));
        free(out);
    }

    /* the monitor reads */
    out = ctl_expect(0, "mon", "show e-ok");
    ck_assert_ptr_nonnull(strstr(out, "succeeded"));
    free(out);
    out = ctl_expect(0, "mon", "dlq list");
    ck_assert_ptr_nonnull(strstr(out, "e-dead"));
    free(out);
    free(ctl_expect(0, "mon", "stats"));
    out = ctl_expect(0, "mon", "queues");
    ck_assert_ptr_nonnull(strstr(out, "default"));
    free(out);
    out = ctl_expect(0, "mon", "workers");
    ck_assert_ptr_nonnull(strstr(out, "w-acl"));
    free(out);
    {
        const char *want[] = {"w-acl",
                              "w-acl",
                              "\"name\":\"default\"",
                              "TASK_SUCCEEDED",
                              "dead_letter\":{",
                              "e-dead",
                              "entries",
                              "entries",
                              "e-cancel",
                              "e-cancel",
                              "\"class\":\"permanent\""};
        read_model_as("mon", READS, want);
        read_model_as("adm", READS, want);
    }
    mon = connect_as("mon");
    r = redisCommand(mon, "SUBSCRIBE dtq:events");
    ck_assert_msg(r && r->type == REDIS_REPLY_ARRAY, "SUBSCRIBE: %s", r ? r->str : "");
    freeReplyObject(r);
    free(ctl_expect(0, "prod", "enqueue default echo 3 --id e-seen"));
    ck_assert_int_eq(redisGetReply(mon, (void **)&r), REDIS_OK);
    ck_assert_ptr_nonnull(strstr(r->element[2]->str, "e-seen"));
    freeReplyObject(r);
    redisFree(mon);

    /* the admin's verbs */
    ck_assert_str_eq((out = ctl_expect(0, "adm", "cancel e-cancel")), "cancelled\n");
    free(out);
    free(ctl_expect(0, "adm", "pause default"));
    free(ctl_expect(0, "adm", "resume default"));
    ck_assert_str_eq((out = ctl_expect(0, "adm", "dlq requeue e-dead")), "queued\n");
    free(out);
    ck_assert(th_wait_until_cmd_str(C, "XLEN dtq:stream:dead-letter", "1", 10000));
    ck_assert_str_eq((out = ctl_expect(0, "adm", "dlq requeue-all")), "requeued 1 dead letter\n");
    free(out);
    ck_assert(th_wait_until_cmd_str(C, "XLEN dtq:stream:dead-letter", "1", 10000));
    th_expect_status(C, "e-dead", "dead_lettered", 15000);
    ck_assert_str_eq((out = ctl_expect(0, "adm", "dlq discard e-dead")), "discarded\n");
    free(out);
    free(ctl_expect(0, "adm", "dlq purge"));
    /* the schedule and queue Functions (dtqctl scheduled, queue clear/remove) */
    free(ctl_expect(0, "prod", "enqueue default echo 4 --id e-s1 --delay-ms 600000"));
    free(ctl_expect(0, "prod", "enqueue default echo 5 --id e-s2 --delay-ms 600000"));
    free(ctl_expect(0, "prod", "enqueue spare echo 6 --id e-sp1"));
    free(ctl_expect(0, "prod", "enqueue spare echo 7 --id e-sp2 --priority 9"));
    freeReplyObject(th_cmd(C, "XADD dtq:stream:spare:p2 * task_type echo payload 8 task_id e-sp3"));
    {
        redisContext *a = connect_as("adm");
        r = redisCommand(a, "FCALL dtq_sched_run_now 0 tester e-s1");
        ck_assert_msg(r && r->type == REDIS_REPLY_ARRAY && !strcmp(r->element[0]->str, "done"),
                      "sched_run_now: %s", r ? r->str : a->errstr);
        freeReplyObject(r);
        r = redisCommand(a, "FCALL dtq_sched_delete 0 tester e-s2");
        ck_assert_msg(r && r->type == REDIS_REPLY_ARRAY && !strcmp(r->element[0]->str, "done"),
                      "sched_delete: %s", r ? r->str : a->errstr);
        freeReplyObject(r);
        r = redisCommand(a, "FCALL dtq_queue_clear 0 tester spare");
        ck_assert_msg(r && r->type == REDIS_REPLY_ARRAY && r->element[0]->integer == 3,
                      "queue_clear: %s", r ? r->str : a->errstr);
        freeReplyObject(r);
        r = redisCommand(a, "FCALL dtq_queue_remove 0 tester spare");
        ck_assert_msg(r && r->type == REDIS_REPLY_STRING && !strcmp(r->str, "removed"),
                      "queue_remove: %s", r ? r->str : a->errstr);
        freeReplyObject(r);
        redisFree(a);
    }
    th_expect_status(C, "e-s1", "succeeded", 15000);
    th_assert_field(C, "e-s2", "status", "cancelled");
    th_assert_field(C, "e-sp1", "last_error_class", "cleared");
    th_assert_field(C, "e-sp3", "last_error_class", "cleared");
    /* periodic tasks: the admin's verbs, the worker's leader fires, the monitor lists */
    free(ctl_expect(0, "adm", "cron add tick '@every 1s' default echo '{\"c\":1}'"));
    {
        char *tid = NULL;
        for (int i = 0; i < 200 && !tid; i++) {
            r = th_cmd(C, "HGET dtq:cron:default:tick last_task_id");
            if (r->type == REDIS_REPLY_STRING && *r->str) tid = strdup(r->str);
            freeReplyObject(r);
            if (!tid) th_sleep_ms(50);
        }
        ck_assert_msg(tid != NULL, "the leader fired nothing");
        th_expect_status(C, tid, "succeeded", 15000);
        th_assert_field(C, tid, "cron", "tick");
        free(tid);
    }
    out = ctl_expect(0, "mon", "cron list");
    ck_assert_ptr_nonnull(strstr(out, "tick  '@every 1s'"));
    free(out);
    ck_assert_str_eq((out = ctl_expect(0, "adm", "cron pause tick")), "paused tick\n");
    free(out);
    ck_assert_str_eq((out = ctl_expect(0, "adm", "cron resume tick")), "resumed tick\n");
    free(out);
    free(ctl_expect(0, "adm", "cron run tick"));
    ck_assert_str_eq((out = ctl_expect(0, "adm", "cron remove tick")), "removed tick\n");
    free(out);
    free(ctl_expect(0, "adm", "stats"));
    free(ctl_expect(0, "adm", "queues"));
    free(ctl_expect(0, "adm", "workers"));
    free(ctl_expect(0, "adm", "show e-flaky"));
    free(ctl_expect(0, "adm", "dlq list"));

    /* limits: set and removed by the admin, obeyed by the worker role (one task deferred,
     * then run after the other), listed by both readers */
    free(ctl_expect(0, "adm", "limit set default:sleep --concurrency 1 --per-key"));
    free(ctl_expect(0, "adm", "limit set default --rate 1000/s --burst 10"));
    free(ctl_expect(0, "prod", "enqueue default sleep '{\"ms\":300}' --id e-l1 --limit-key k"));
    free(ctl_expect(0, "prod", "enqueue default sleep '{\"ms\":300}' --id e-l2 --limit-key k"));
    th_expect_status(C, "e-l1", "succeeded", 15000);
    th_expect_status(C, "e-l2", "succeeded", 15000);
    {
        char *s1 = th_task_field(C, "e-l1", "started_at"),
             *f1 = th_task_field(C, "e-l1", "finished_at");
        char *s2 = th_task_field(C, "e-l2", "started_at"),
             *f2 = th_task_field(C, "e-l2", "finished_at");
        ck_assert_msg(atoll(s2) >= atoll(f1) || atoll(s1) >= atoll(f2), "e-l1 and e-l2 overlapped");
        free(s1);
        free(f1);
        free(s2);
        free(f2);
    }
    {
        const char *const limits[] = {"dtq_limit_list 0", NULL};
        const char *want[] = {"\"target\":\"default:sleep\""};
        read_model_as("mon", limits, want);
        read_model_as("adm", limits, want);
    }
    out = ctl_expect(0, "mon", "limit list");
    ck_assert_ptr_nonnull(strstr(out, "default:sleep"));
    free(out);
    free(ctl_expect(0, "adm", "limit remove default:sleep"));
    free(ctl_expect(0, "adm", "limit remove default"));

    /* drain: a running task is handed back (attempt 2, queued), the lock released */
    free(ctl_expect(0, "prod", "enqueue default sleep '{\"ms\":60000}' --id e-long"));
    th_expect_status(C, "e-long", "running", 15000);
    /* running in the daemon, not only claimed in Redis: a task whose fetch reply arrives
     * after the drain timer expired would run on until the hard stop */
    ck_assert(th_wait_until_cmd_str(C, "HGET dtq:worker:w-acl active_tasks", "1", 10000));
    {
        const char *const running[] = {"dtq_queue_view 0 default 5", NULL};
        const char *want[] = {"\"worker_id\":\"w-acl\""};
        read_model_as("mon", running, want);
        read_model_as("adm", running, want);
    }
    {
        int rc = th_daemon_stop(&D, SIGTERM, 20000);
        char *log = th_read_file(D.log);
        size_t n = strlen(log);
        ck_assert_msg(rc == 0, "drain: exit %d; log: %s", rc, log + (n > 6000 ? n - 6000 : 0));
        free(log);
    }
    th_assert_field(C, "e-long", "status", "queued");
    th_assert_field(C, "e-long", "attempt", "2");
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:lock:scheduler")), 0);
    ck_assert_int_eq(th_count_in_file(D.log, "NOPERM"), 0);
    ck_assert_int_eq(th_count_in_file(D.log, "FUNCTION LOAD"), 0);

    assert_no_denials("wk");
    assert_no_denials("adm");
    assert_no_denials("prod");
    assert_no_denials("mon");
}
END_TEST

/* An unknown layout marker met at a reconnect does not stop a daemon that has served: its
 * keys are where it put them. It logs the marker to restore and serves on. */
START_TEST(test_running_daemon_serves_on_when_the_marker_changes) {
    redisReply *r;
    apply_role("adm", "admin");
    apply_role("wk", "worker");
    free(ctl_expect(0, "adm", "functions install"));
    start_worker("w-layout", NULL);
    th_daemon_wait_ready(C, "w-layout", 15000);
    freeReplyObject(th_cmd(C, "SET dtq:layout bogus"));
    freeReplyObject(th_cmd(C, "CLIENT KILL USER wk"));
    ck_assert_msg(th_wait_log(D.log, "serving on with the single layout", 1, 15000),
                  "no serving-on error after the reconnect");
    ck_assert_int_eq(kill(D.pid, 0), 0);
    r = th_cmd(C, "FCALL dtq_enqueue 0 default echo {} task_id after-marker");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    th_expect_status(C, "after-marker", "succeeded", 15000);
    ck_assert_int_eq(th_daemon_stop(&D, SIGTERM, 10000), 0);
}
END_TEST

/* Without FUNCTION LOAD and without an installed library (then with one of another
 * version), the worker does not serve and says once, clearly, what is missing; after
 * `dtqctl functions install` by an admin it serves without a restart. */
START_TEST(test_worker_waits_for_the_library) {
    size_t len;
    char *lib = dtq_scripts_library("dtq", "dtq", &len), *out, *lua;
    const char *v = strstr(lib, "local VERSION = '"), *end;
    redisReply *r;
    /* another version: this build's library, marked as unversioned */
    ck_assert_ptr_nonnull(v);
    v += strlen("local VERSION = '");
    end = strchr(v, '\'');
    ck_assert_ptr_nonnull(end);
    lua = dtq_xasprintf("%.*sunversioned%s", (int)(v - lib), lib, end);
    ck_assert_uint_eq(strlen(lua), len - (size_t)(end - v) + strlen("unversioned"));
    free(lib);
    apply_role("adm", "admin");
    apply_role("wk", "worker");
    start_worker("w-wait", NULL);
    ck_assert_msg(
        th_wait_log(D.log, "the Functions library (namespace dtq) is not installed", 1, 10000),
        "no clear message in %s", D.log);
    ck_assert_int_eq(th_count_in_file(D.log, "dtqctl -n dtq functions install"), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:worker:w-wait")), 0); /* not serving */

    r = th_cmd(C, "FUNCTION LOAD REPLACE %s", lua);
    ck_assert_msg(r->type == REDIS_REPLY_STRING, "FUNCTION LOAD: %s", r->str);
    freeReplyObject(r);
    ck_assert(
        th_wait_log(D.log, "the installed Functions library is version unversioned", 1, 10000));
    th_sleep_ms(5500); /* at least one more check: still said only once */
    ck_assert_int_eq(th_count_in_file(D.log, "is version unversioned"), 1);
    ck_assert_int_eq(th_count_in_file(D.log, "is not installed"), 1);
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:worker:w-wait")), 0);

    out = ctl_expect(0, "adm", "functions install");
    free(out);
    th_daemon_wait_ready(C, "w-wait", 15000);
    ck_assert_int_eq(th_count_in_file(D.log, "is installed; serving"), 1);
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo 1 task_id after-install"));
    th_expect_status(C, "after-install", "succeeded", 15000);
    ck_assert_int_eq(th_daemon_stop(&D, SIGTERM, 15000), 0);
    assert_no_denials("adm");
    free(lua);
}
END_TEST

/* A user that may not even ask the version is told to take the worker role. */
START_TEST(test_worker_without_the_version_function) {
    th_load_library(C);
    apply_role("wk", "worker");
    freeReplyObject(th_cmd(C, "ACL SETUSER wk -fcall_ro"));
    start_worker("w-nover", NULL);
    ck_assert_msg(th_wait_log(D.log,
                              "may not FUNCTION LOAD, and it may not call dtq_version either "
                              "(give it the worker role: dtqctl acl worker)",
                              1, 10000),
                  "no clear message in %s", D.log);
    ck_assert_int_eq(th_int(th_cmd(C, "EXISTS dtq:worker:w-nover")), 0);
    ck_assert_int_eq(th_daemon_stop(&D, SIGTERM, 15000), 0);
}
END_TEST

/* The worker may not load the library, call the public Functions, nor administer the
 * server. */
START_TEST(test_worker_refusals) {
    redisContext *w;
    th_load_library(C);
    apply_role("wk", "worker");
    w = connect_as("wk");
    refused(w, "FCALL dtq_enqueue 0 default echo {}");
    admin_functions_refused(w);
    server_admin_refused(w);
    refused(w, "FLUSHDB");
    refused(w, "INFO");
    refused(w, "SUBSCRIBE other:events");
    refused(w, "PUBLISH other:events x");
    redisFree(w);
}
END_TEST

/* The admin may not do the worker's or the producer's part, nor administer the server. */
START_TEST(test_admin_refusals) {
    redisContext *a;
    th_load_library(C);
    apply_role("adm", "admin");
    a = connect_as("adm");
    internal_functions_refused(a);
    refused(a, "FCALL dtq_enqueue 0 default echo {}");
    refused(a, "FUNCTION DELETE dtq");
    refused(a, "FUNCTION FLUSH");
    refused(a, "FLUSHALL");
    refused(a, "CONFIG SET maxmemory-policy allkeys-lru");
    refused(a, "SET other:key 1");
    refused(a, "SUBSCRIBE other:events");
    redisFree(a);
}
END_TEST

/* The monitor: reads only. */
START_TEST(test_monitor_refusals) {
    redisContext *m;
    char *out;
    th_load_library(C);
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo {} task_id m-1"));
    apply_role("mon", "monitor");
    m = connect_as("mon");
    freeReplyObject(th_cmd(m, "FCALL_RO dtq_stats 0"));
    free(ctl_expect(0, "mon", "show m-1"));
    assert_no_denials("mon");
    refused(m, "FCALL dtq_enqueue 0 default echo {}");
    internal_functions_refused(m);
    admin_functions_refused(m);
    server_admin_refused(m);
    refused(m, "HSET dtq:task:m-1 status succeeded");
    refused(m, "DEL dtq:task:m-1");
    refused(m, "XADD dtq:stream:default:p5 * task_type echo payload {}");
    refused(m, "PUBLISH dtq:events forged");
    refused(m, "SET dtq:queue:default:paused 1");
    out = ctl_expect(1, "mon", "pause default");
    ck_assert_ptr_nonnull(strstr(out, "NOPERM"));
    free(out);
    out = ctl_expect(1, "mon", "enqueue default echo {}");
    ck_assert_ptr_nonnull(strstr(out, "NOPERM"));
    free(out);
    redisFree(m);
}
END_TEST

/* ----------------------------------------------------------------- dtq-web as monitor */

static int web_port;

/* One HTTP request to dtq-web (Connection: close); the status, and the start of the answer
 * in out (headers and body). With stop_at_headers the connection is closed once the
 * headers are in (an event stream never ends). */
static int web_request(const char *method, const char *path, char *out, size_t outlen,
                       int stop_at_headers) {
    struct sockaddr_in sa = {0};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), status = 0;
    char req[512];
    size_t len = 0;
    int64_t end = th_now_ms() + 10000;
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)web_port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    out[0] = '\0';
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    snprintf(req, sizeof(req),
             "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
             "Authorization: Bearer " WEB_TOKEN "\r\nContent-Length: 0\r\n\r\n",
             method, path);
    ck_assert_int_eq(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
    while (len + 1 < outlen) {
        struct pollfd p = {fd, POLLIN, 0};
        int64_t left = end - th_now_ms();
        ssize_t n;
        ck_assert_msg(left > 0 && poll(&p, 1, (int)left) > 0, "%s %s: no answer", method, path);
        n = recv(fd, out + len, outlen - len - 1, 0);
        if (n <= 0) break;
        len += (size_t)n;
        out[len] = '\0';
        if (stop_at_headers && strstr(out, "\r\n\r\n")) break;
    }
    close(fd);
    ck_assert_int_eq(sscanf(out, "HTTP/1.%*d %d", &status), 1);
    return status;
}

static int web_connected(void *arg) {
    char out[4096];
    (void)arg;
    return web_request("GET", "/api/info", out, sizeof(out), 0) == 200 &&
           strstr(out, "\"redis_connected\":true") != NULL;
}

/* dtq-web run by a user with the monitor role alone (docs: "ACL roles") is a working
 * read-only dashboard: its handshake, sampler and event subscriber pass, the overview, a
 * queue, a task view and the limits answer 200 with the data (not 404 "no queue"), with no
 * denial in ACL LOG; its writes (given a token that may write) are refused by Redis and
 * answered 403 redis_permission, never 404, and change nothing. */
START_TEST(test_web_as_monitor) {
    th_daemon web;
    char ini[400], tok[400], log[400], listen[64], out[65536];
    char *argv[] = {(char *)DTQ_WEB_BIN, (char *)"-c", ini, (char *)"--listen", listen, NULL};
    static const char *const writes[] = {"/api/queues/default/pause", "/api/tasks/w-1/cancel",
                                         "/api/tasks/w-1/discard", "/api/dlq/purge",
                                         "/api/limits/default/remove"};
    snapshot before;
    FILE *f;
    th_load_library(C);
    freeReplyObject(th_cmd(C, "FCALL dtq_enqueue 0 default echo {} task_id w-1"));
    freeReplyObject(th_cmd(C, "FCALL dtq_limit_set 0 ops default %s concurrency 2", ""));
    apply_role("webmon", "monitor");
    web_port = th_free_port();
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", web_port);
    th_path(&R, "webmon.ini", ini, sizeof(ini));
    th_path(&R, "webmon.token", tok, sizeof(tok));
    th_path(&R, "webmon.log", log, sizeof(log));
    f = fopen(tok, "w");
    ck_assert_ptr_nonnull(f);
    fputs(WEB_TOKEN "\n", f);
    fclose(f);
    ck_assert_int_eq(chmod(tok, 0600), 0);
    f = fopen(ini, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "[redis]\nurl = redis://webmon:" PW "@127.0.0.1:%d\n[web]\ntoken_file = %s\n",
            R.port, tok);
    fclose(f);
    th_process_start(&web, argv, log);
    ck_assert_msg(th_wait_until(web_connected, NULL, 10000), "dtq-web never connected; see %s",
                  log);
    ck_assert_int_eq(web_request("GET", "/api/overview", out, sizeof(out), 0), 200);
    ck_assert_msg(strstr(out, "\"default\"") != NULL, "no queue default: %s", out);
    ck_assert_int_eq(web_request("GET", "/api/queues/default", out, sizeof(out), 0), 200);
    ck_assert_int_eq(web_request("GET", "/api/tasks/w-1", out, sizeof(out), 0), 200);
    ck_assert_msg(strstr(out, "\"w-1\"") && strstr(out, "\"queued\""), "task view: %s", out);
    ck_assert_int_eq(web_request("GET", "/api/dlq", out, sizeof(out), 0), 200);
    ck_assert_int_eq(web_request("GET", "/api/audit?task=w-1", out, sizeof(out), 0), 200);
    ck_assert_int_eq(web_request("GET", "/api/history", out, sizeof(out), 0), 200);
    ck_assert_int_eq(web_request("GET", "/api/limits", out, sizeof(out), 0), 200);
    ck_assert_msg(strstr(out, "\"target\":\"default\"") && strstr(out, "\"concurrency\":2"),
                  "limits: %s", out);
    ck_assert_int_eq(web_request("GET", "/api/events", out, sizeof(out), 1), 200);
    /* the subscriber's SUBSCRIBE and the liveness PINGs have had time to run */
    th_sleep_ms(1500);
    ck_assert_int_eq(web_request("GET", "/api/overview", out, sizeof(out), 0), 200);
    assert_no_denials("webmon");
    take(&before);
    for (size_t i = 0; i < sizeof(writes) / sizeof(writes[0]); i++) {
        ck_assert_msg(web_request("POST", writes[i], out, sizeof(out), 0) == 403, "%s: %s",
                      writes[i], out);
        ck_assert_msg(strstr(out, "redis_permission") != NULL, "%s: %s", writes[i], out);
    }
    assert_unchanged(&before, "dtq-web's writes as monitor");
    free(before.functions);
    th_assert_field(C, "w-1", "status", "queued");
    ck_assert_int_eq(th_daemon_stop(&web, SIGTERM, 10000), 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("acl");
    TCase *tc = tcase_create("roles");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, test_acl_output_and_hash_tag);
    tcase_add_test(tc, test_producer);
    tcase_add_test(tc, test_producer_cannot_rewind_ids);
    tcase_add_test(tc, test_producer_cannot_set_the_layout_marker);
    tcase_add_test(tc, test_denial_inside_a_function);
    tcase_add_test(tc, test_producer_raw_and_forged_entries);
    tcase_add_test(tc, test_worker_role_end_to_end);
    tcase_add_test(tc, test_running_daemon_serves_on_when_the_marker_changes);
    tcase_add_test(tc, test_worker_waits_for_the_library);
    tcase_add_test(tc, test_worker_without_the_version_function);
    tcase_add_test(tc, test_worker_refusals);
    tcase_add_test(tc, test_admin_refusals);
    tcase_add_test(tc, test_monitor_refusals);
    suite_add_tcase(s, tc);
    tc = tcase_create("web");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_web_as_monitor);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
