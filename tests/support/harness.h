/* harness.h: integration-test plumbing. Starts a private redis-server on a unix socket
 * in a fresh temp dir, and dtq-worker daemons as child processes with generated configs.
 * A local Redis Cluster too (th_cluster_start). Children get PR_SET_PDEATHSIG, and an atexit hook
 * stops them and removes the temp dir, so a failing test (its forked Check process exits) leaves
 * nothing behind. */
#ifndef DTQ_TEST_HARNESS_H
#define DTQ_TEST_HARNESS_H

#include <check.h>
#include <cjson/cJSON.h>
#include <hiredis/hiredis.h>
#include <stdint.h>
#include <sys/types.h>

#include "cluster.h"
#include "finisher.h"
#include "util.h"

typedef struct th_redis {
    char dir[256];
    char sock[320];
    char url[400];
    pid_t pid;
    int persist;     /* appendonly yes: data survives a restart */
    int port;        /* > 0: also listen on 127.0.0.1:port */
    char extra[512]; /* extra redis-server arguments, space separated (no quoting) */
    const char *bin; /* the redis-server to run; NULL: the one found at build time */
} th_redis;

typedef struct th_daemon {
    pid_t pid;
    char cfg[400];
    char log[400];
} th_daemon;

/* Starts redis-server; fails the test with one clear line if it cannot. */
void th_redis_start(th_redis *r, int persist);
/* Like th_redis_start, also on a free TCP port of 127.0.0.1, with extra server arguments
 * (e.g. "--requirepass x"); the harness's own connections authenticate with `password`. */
void th_redis_start_tcp(th_redis *r, const char *extra, const char *password);
/* Like th_redis_start_tcp, on the given port of 127.0.0.1 and without a password (tests
 * that run several servers pick their ports). */
void th_redis_start_port(th_redis *r, int port, const char *extra);
/* Runs argv (argv[0] found on PATH or a path) as a tracked child (stopped at exit, like
 * the servers and daemons), its stdout and stderr appended to log_path. */
pid_t th_spawn(char *const argv[], const char *log_path);
/* Sends sig to a child from th_spawn, waits for it (up to 10 s, then SIGKILL) and stops
 * tracking it. */
void th_stop_child(pid_t pid, int sig);
/* Restarts on the same socket and data dir (stop, then start). */
void th_redis_stop(th_redis *r);
void th_redis_restart(th_redis *r);
redisContext *th_connect(const th_redis *r);
/* redisCommand that fails the test on a NULL reply. */
redisReply *th_cmd(redisContext *c, const char *fmt, ...);
/* Reads from fd, appending to buf (NUL-terminated, cap bytes), until buf holds needle; 1
 * when it came within timeout_ms, 0 on timeout or a closed connection. */
int th_read_until(int fd, const char *needle, int timeout_ms, char *buf, size_t cap);
/* The argv of FCALL dtq_fetch for `queue` as `worker` (namespace dtq), its KEYS laid out by
 * the daemon's own dtq_streams_fetch_keys(); and the call itself, which fails the test
 * unless the reply has the fetch reply's shape. The lean-claims (element 3) and full-claims
 * (element 4) are decoded by the daemon's decoders and appended to the claimed list (element
 * 0) as the claim arrays reap answers (10 elements for a lean task, 9 for a full one), in
 * serving order (p9 first, then entry ids), so a test reads every claim alike (elements 3
 * and 4 stay as sent). */
void th_fetch_argv(dtq_argv *a, const char *worker, int count, const char *queue,
                   const char *policy);
/* What th_fetch does to its reply, for a fetch reply read another way (pipelined). */
void th_fetch_claims(redisReply *r);
redisReply *th_fetch(redisContext *c, const char *worker, int count, const char *queue,
                     const char *policy);
/* FCALL dtq_sched_claim 2 dtq:retry:schedule dtq:retry:claimed <batch> <claim_timeout_ms>,
 * failing the test unless the reply has its shape (the ids, then the two sizes, the soonest
 * due time and the time) and its four last elements equal what the two ZCARDs before the
 * call, ZRANGE <schedule> 0 0 WITHSCORES after it (nil when empty) and TIME around it read
 * (on c, nothing else writing the two sets). *nids: the number of ids, the reply's first
 * elements. */
redisReply *th_sched_claim(redisContext *c, int batch, long long claim_timeout_ms, size_t *nids);
/* The consumer group (workers) of each of queue's band streams, as the daemon's setup makes
 * them (XGROUP CREATE ... MKSTREAM; an existing group is left as it is). */
void th_queue_groups(redisContext *c, const char *queue);
/* The finish record of one claimed task (an element of a fetch reply's claimed list),
 * outcome succeeded with no result; the caller sets the rest. Its strings are the
 * reply's. */
dtq_finish_record th_finish_record(const redisReply *claimed);
/* FCALL dtq_finish for `worker` with n records, through the daemon's own encoder, so the
 * tests pin the record both sides read and write; fails the test unless the reply is an
 * array, and returns it. */
redisReply *th_finish(redisContext *c, const char *worker, const dtq_finish_record *recs, size_t n);
/* The reply of the command (formatted as by redisCommand) must be the status or string
 * `want`; frees it. */
void th_expect_str(redisReply *r, const char *want);
/* The reply must be an error starting with `prefix`; frees it. */
void th_expect_refused(redisReply *r, const char *prefix);
/* The Redis clock (TIME) in ms since the epoch, as the Functions read it. */
int64_t th_redis_ms(redisContext *c);
/* The JSON reply of FCALL_RO <fmt...> (formatted as by redisCommand), parsed (caller
 * frees); fails the test unless the reply is a string of JSON. With text not NULL, the
 * reply's text too (caller frees). */
cJSON *th_read_json(redisContext *c, char **text, const char *fmt, ...);
/* The value at a dotted path ("queues.0.name": array items by index) of o; fails the test
 * when it is missing. */
const cJSON *th_json_at(const cJSON *o, const char *path);
/* The queue object named `name` in an overview (<ns>_overview's "queues"); fails the test
 * when there is none. */
const cJSON *th_overview_queue(const cJSON *ov, const char *name);
/* The value of `name` in a stream entry's flat field/value list (NULL when absent). */
const char *th_entry_field(const redisReply *entry, const char *name);
/* A th_wait_until predicate (arg: the redisContext): true once a client (dtqctl events) is
 * subscribed to the events channel dtq:events. */
int th_events_subscribed(void *arg);
/* The number, integer, string and array size at a path; each fails the test when the value
 * is missing or of another type. */
double th_json_num(const cJSON *o, const char *path);
long long th_json_int(const cJSON *o, const char *path);
const char *th_json_str(const cJSON *o, const char *path);
int th_json_size(const cJSON *o, const char *path);
/* Loads the embedded Functions library into Redis (script tests run without a daemon). */
void th_load_library(redisContext *c);

/* The fixture the integration suites run around each test. th_fixture_start: a fresh
 * redis-server in a temp dir of its own (th_redis_start; with tcp_extra not NULL,
 * th_redis_start_tcp with those arguments), *c connected to it, and the flags' extras.
 * th_fixture_stop closes *c (when set; NULL after) and stops the server. */
enum {
    TH_PERSIST = 1, /* appendonly: the data survives th_redis_restart (not with tcp_extra) */
    TH_LIBRARY = 2  /* the Functions library loaded (suites that run no daemon) */
};
void th_fixture_start(th_redis *r, redisContext **c, int flags, const char *tcp_extra);
void th_fixture_stop(th_redis *r, redisContext **c);
/* `TH_LIBRARY_FIXTURE();` at file scope: the fixture of a suite that runs no daemon, its
 * static th_redis R and redisContext *C, and setup and teardown for
 * tcase_add_checked_fixture (th_fixture_start with TH_LIBRARY, th_fixture_stop). */
#define TH_LIBRARY_FIXTURE()                                                                       \
    static th_redis R;                                                                             \
    static redisContext *C;                                                                        \
    static void setup(void) {                                                                      \
        th_fixture_start(&R, &C, TH_LIBRARY, NULL);                                                \
    }                                                                                              \
    static void teardown(void) {                                                                   \
        th_fixture_stop(&R, &C);                                                                   \
    }                                                                                              \
    static void teardown(void)

/* ---- A local Redis Cluster: primaries * (1 + replicas_per) redis-server processes on free
 * ports of 127.0.0.1 (each port and its bus port, +10000, free when picked), each in its own
 * directory (node-<port>, with its unix socket and redis.log) under one temp dir, started
 * with --cluster-enabled yes, --cluster-node-timeout 2000, --cluster-require-full-coverage
 * no, no persistence, --repl-diskless-sync-delay 0 and --repl-ping-replica-period 1 (a
 * replica is listed by CLUSTER SLOTS once its offset moves: seconds, not 10); joined by `redis-cli
 * --cluster create ... --cluster-replicas R
 * --cluster-yes` (its output in <dir>/create.log); ready when every node says
 * cluster_state:ok, every node's CLUSTER SLOTS names the same primaries for the same
 * ranges, and every replica's link to its primary is up. Stopped at exit like the other
 * children. */
#define TH_CLUSTER_MAX 12
typedef struct th_cluster {
    char dir[256];
    int n;                              /* the nodes started */
    th_redis node[TH_CLUSTER_MAX];      /* node[i].port, .pid (0 once stopped), .sock, .dir */
    char url[TH_CLUSTER_MAX * 24 + 32]; /* redis-cluster://127.0.0.1:p1,127.0.0.1:p2,... */
} th_cluster;
/* Starts and joins the cluster; fails the test with one clear line if it cannot. */
void th_cluster_start(th_cluster *cl, int primaries, int replicas_per);
/* Stops every node still running (SIGKILL: no data is kept). */
void th_cluster_stop(th_cluster *cl);
/* Names q1, q2, ... of namespace ns whose tags {ns:qN} land `per` on each of the first
 * `shards` primaries, in shard order (per * shards names of at most 15 bytes into out;
 * each name's slot and node printed). Exits the test program when none are found. */
void th_cluster_pick_queues(const th_cluster *cl, const char *ns, int shards, int per,
                            char (*out)[16]);
/* A connection to node i (its unix socket, no timeouts). */
redisContext *th_cluster_connect(const th_cluster *cl, int i);
/* The index of the node on port, or -1. */
int th_cluster_node_index(const th_cluster *cl, int port);
/* The slot map from node i's CLUSTER SLOTS (caller frees); fails the test when it does not
 * parse. */
dtq_cluster_map *th_cluster_map(const th_cluster *cl, int i);
/* The port of the primary that serves key's slot, as the first live node says. */
int th_cluster_owner_port(const th_cluster *cl, const char *key);
/* CLUSTER MYID of the node on port (caller frees). */
char *th_cluster_node_id(const th_cluster *cl, int port);
/* A command on the node on port that fails the test unless it answers a non-error. */
void th_cluster_node_ok(const th_cluster *cl, int port, const char *fmt, ...);
/* A primary other than the one on port. */
int th_cluster_other_primary(const th_cluster *cl, int port);
/* The first half of moving key's slot from the primary on src to the one on dst:
 * IMPORTING, MIGRATING, the key moved. */
void th_cluster_migrate_start(const th_cluster *cl, const char *key, int src, int dst);
/* The second half: the slot given to dst on every primary (dst first, then src). */
void th_cluster_migrate_finish(const th_cluster *cl, const char *key, int src, int dst);

/* Writes a config ([redis] url + `ini`) and starts dtq-worker -c on it. */
void th_daemon_start(th_daemon *d, const th_redis *r, const char *ini);
/* Starts argv[0] (a path) with its arguments as a tracked child (killed with the test),
 * its stdout and stderr appended to `log`; fills d->pid and d->log. th_daemon_stop stops
 * it and fails the test on a sanitizer report in the log. */
void th_process_start(th_daemon *d, char *const argv[], const char *log);
/* Waits until the worker `worker_id` has heartbeated with status running. */
void th_daemon_wait_ready(redisContext *c, const char *worker_id, int timeout_ms);
/* Sends sig and waits up to timeout_ms; returns the exit status (or 128+signal). */
int th_daemon_stop(th_daemon *d, int sig, int timeout_ms);
/* Runs dtq-worker with the NULL-terminated arguments after stderr_out and waits; returns
 * its exit code, and its stderr+stdout in *stderr_out (caller frees). */
int th_run_worker(char **stderr_out, ...);
/* Runs dtqctl with `args` (shell words, test-controlled) in an environment of no
 * DTQ_REDIS_* variables but the assignments in `env`; returns the exit code and the output
 * (stdout, then stderr) in *out (caller frees). The output goes through a file in r's
 * directory. */
int th_run_dtqctl(const th_redis *r, char **out, const char *env, const char *args);
/* th_run_dtqctl told r's URL (DTQ_REDIS_URL) and nothing else. */
int th_ctl(const th_redis *r, char **out, const char *args);
/* A TCP port of 127.0.0.1 that was free a moment ago (bound, then closed). */
int th_free_port(void);
/* The families of a /metrics body as tests/support/prom_parse.py (Prometheus' own parser, Debian's
 * python3-prometheus-client) reports them (caller deletes), through files in r's directory;
 * fails the test when the text does not parse. */
cJSON *th_metrics_parse(const th_redis *r, const char *body);
/* The value of the sample `name` whose labels are exactly `labels` ("k=v,k=v", "" for
 * none) in th_metrics_parse's families; INFINITY for a value that is not finite, NAN when
 * there is no such sample. */
double th_metrics_value(cJSON *fams, const char *name, const char *labels);
/* A datagram socket bound at `path` (filled in, in r's directory) for a child's systemd
 * notifications (NOTIFY_SOCKET), whose receives time out after timeout_s; returns it. */
int th_notify_socket(const th_redis *r, char *path, size_t pathlen, int timeout_s);

/* Polls pred(arg) every 20 ms until it returns nonzero: returns 1 then, or 0 once timeout_ms
 * has passed. Tests wait on conditions with this, not with sleeps. */
int th_wait_until(int (*pred)(void *arg), void *arg, int timeout_ms);
/* Polls the command (no arguments to format) until its reply is the string or integer
 * `want`, or, with want NULL, a non-empty array. 1 on success. */
int th_wait_until_cmd_str(redisContext *c, const char *cmd, const char *want, int timeout_ms);
/* How many times needle occurs in the file (0 when the file cannot be read). */
int th_count_in_file(const char *path, const char *needle);
/* Polls the file (a daemon's log) until needle occurs at least `count` times; 1 on success. */
int th_wait_log(const char *path, const char *needle, int count, int timeout_ms);
/* Polls the task hash until its status equals `status`; returns 1 on success. */
int th_wait_status(redisContext *c, const char *task_id, const char *status, int timeout_ms);
/* th_wait_status that fails the test (naming the status and last_error the task has) when
 * the status does not come within timeout_ms. */
void th_expect_status(redisContext *c, const char *task_id, const char *status, int timeout_ms);
/* FCALL dtq_enqueue of a task of `type` on `queue` with id `id`: the payload as one
 * argument, opts (NULL: none) as space-separated words; fails the test unless the reply
 * is an array. */
void th_enqueue(redisContext *c, const char *queue, const char *id, const char *type,
                const char *payload, const char *opts);
/* HGET dtq:task:<id> <field> as a caller-owned string (NULL when absent). */
char *th_task_field(redisContext *c, const char *task_id, const char *field);
/* The whole file as a caller-owned string; fails the test when it cannot be read. */
char *th_read_file(const char *path);
/* The integer of a reply (fails the test otherwise); frees the reply. */
long long th_int(redisReply *r);
/* Fails unless HGET dtq:task:<id> <field> equals want. */
void th_assert_field(redisContext *c, const char *task_id, const char *field, const char *want);
/* Fails unless dtq:task:<id> has no field `field`. */
void th_assert_no_field(redisContext *c, const char *task_id, const char *field);
/* The integer reply of a command (fails the test otherwise). */
long long th_intf(redisContext *c, const char *fmt, ...);
/* FCALL dtq_enqueue 0 <queue> <type> {} task_id <id> [opts: "name value ..."]; fails the
 * test unless it is accepted. */
void th_enqueue_with_id(redisContext *c, const char *queue, const char *type, const char *id,
                        const char *opts);
/* <ns>_limit_list's JSON array (caller deletes). */
cJSON *th_limit_list(redisContext *c);
/* The fire times of the tasks of periodic schedule `name` (their hashes' fire_time),
 * sorted, into out (at most max; more fails the test); how many. */
int th_cron_fire_times(redisContext *c, const char *name, int64_t *out, int max);
/* One item of a Lua table constructor: `name = value` (name "" for a bare value). The
 * value is the source text, quotes (or an inner table's braces) included; a ['x'] or
 * ["x"] key is given as x. */
typedef struct th_lua_item {
    char name[64];
    char value[128];
} th_lua_item;
/* Parses the table `local <table> = {...}` of the library as loaded (dtq_scripts_library:
 * the assembled library with the constants scripts.c writes in) into at most max items and returns
 * their number; fails the test when the table is missing or nests deeper than one level. */
int th_lua_table(const char *table, th_lua_item *items, int max);
/* Runs a suite (fork mode) and returns the process exit code. */
int th_run_suite(Suite *s);
/* Only for letting time pass on purpose ("nothing happens for N ms"), never to wait for
 * something to happen: use th_wait_until for that. */
void th_sleep_ms(int ms);
int64_t th_now_ms(void);
/* A unique temp file path in the harness dir. */
void th_path(const th_redis *r, const char *name, char *out, size_t outlen);

/* ---- Without Check, for programs that are not Check suites (tests/integration/chaos.c) too: these
 * fail no test and track nothing; the caller waits for and stops what they start. */
/* Runs argv like th_spawn (stdin from /dev/null, stdout and stderr appended to log_path
 * when not NULL, an empty signal mask, SIGKILL when this process dies); -1 when fork
 * fails. */
pid_t th_spawn_child(char *const argv[], const char *log_path);
/* Starts r's redis-server (r->bin, on r->sock in r->dir, 127.0.0.1:r->port when > 0,
 * appendonly per r->persist, then r->extra, whose settings override the defaults) with
 * th_spawn_child, logging to <dir>/redis.log; returns its pid, also set in r->pid, without
 * waiting for it to answer. */
pid_t th_redis_launch(th_redis *r);

#endif
