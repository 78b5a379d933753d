/* harness.h: integration-test plumbing. Starts a private redis-server on a unix socket
 * in a fresh temp dir, and dtq-worker daemons as child processes with generated configs.
 * A local Redis Cluster too (th_cluster_start). Children get PR_SET_PDEATHSIG, and an atexit hook
 * stops them and removes the temp dir, so a failing test (its forked Check process exits) leaves
 * nothing behind. */
#ifndef DTQ_TEST_HARNESS_H
#define DTQ_TEST_HARNESS_H

#include <check.h>
#include <hiredis/hiredis.h>
#include <stdint.h>
#include <sys/types.h>

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
/* The argv of FCALL dtq_fetch for `queue` as `worker` (namespace dtq), its KEYS laid out by
 * the daemon's own dtq_streams_fetch_keys(); and the call itself, which fails the test
 * unless the reply is an array. */
void th_fetch_argv(dtq_argv *a, const char *worker, int count, const char *queue,
                   const char *policy);
redisReply *th_fetch(redisContext *c, const char *worker, int count, const char *queue,
                     const char *policy);
/* The finish record of one claimed task (an element of a fetch reply's claimed list),
 * outcome succeeded with no result; the caller sets the rest. Its strings are the
 * reply's. */
dtq_finish_record th_finish_record(const redisReply *claimed);
/* FCALL dtq_finish for `worker` with n records, through the daemon's own encoder, so the
 * tests pin the record both sides read and write; fails the test unless the reply is an
 * array, and returns it. */
redisReply *th_finish(redisContext *c, const char *worker, const dtq_finish_record *recs, size_t n);
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
/* A connection to node i (its unix socket, no timeouts). */
redisContext *th_cluster_connect(const th_cluster *cl, int i);
/* The index of the node on port, or -1. */
int th_cluster_node_index(const th_cluster *cl, int port);

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
/* HGET dtq:task:<id> <field> as a caller-owned string (NULL when absent). */
char *th_task_field(redisContext *c, const char *task_id, const char *field);
/* The whole file as a caller-owned string; fails the test when it cannot be read. */
char *th_read_file(const char *path);
/* The integer of a reply (fails the test otherwise); frees the reply. */
long long th_int(redisReply *r);
/* Fails unless HGET dtq:task:<id> <field> equals want. */
void th_assert_field(redisContext *c, const char *task_id, const char *field, const char *want);
/* One item of a Lua table constructor: `name = value` (name "" for a bare value). The
 * value is the source text, quotes (or an inner table's braces) included; a ['x'] or
 * ["x"] key is given as x. */
typedef struct th_lua_item {
    char name[64];
    char value[128];
} th_lua_item;
/* Parses the table `local <table> = {...}` of the library as loaded (dtq_scripts_library:
 * lua/dtq.lua with the constants scripts.c writes in) into at most max items and returns
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

/* ---- Without Check, for programs that are not Check suites (tests/chaos.c) too: these
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
