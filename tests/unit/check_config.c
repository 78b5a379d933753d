/* check_config.c: defaults, the INI file, environment overrides, every class of error, the
 * example file agreeing with the key table, and exit code 78 from the binary. */
#include <check.h>
#include <fcntl.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "harness.h"
#include "streams.h"

static char path[64];
static char dir[64]; /* a directory where a config file is expected */

static void write_ini(const char *text) {
    FILE *f;
    snprintf(path, sizeof(path), "/tmp/dtq-cfg-%d.ini", (int)getpid());
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* A fresh directory (a failed test skips the teardown, so a fixed name could be taken). */
static void make_dir(void) {
    snprintf(dir, sizeof(dir), "/tmp/dtq-cfg-dir-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void) {
    unlink(path);
    if (*dir) rmdir(dir);
}

/* Loads `text` expecting failure; the message must name every fragment given. */
static void expect_error(const char *text, const char *frag1, const char *frag2) {
    char err[512] = "";
    dtq_config *cfg;
    write_ini(text);
    cfg = dtq_config_load(path, err, sizeof(err));
    ck_assert_msg(cfg == NULL, "accepted: %s", text);
    ck_assert_msg(strstr(err, path) != NULL, "no file name in: %s", err);
    ck_assert_msg(strstr(err, frag1) != NULL, "'%s' not in: %s", frag1, err);
    if (frag2) ck_assert_msg(strstr(err, frag2) != NULL, "'%s' not in: %s", frag2, err);
}

/* [queue:NAME] mode: lean or full, checked; the sections are kept in file order. */
START_TEST(test_queue_sections) {
    char err[512] = "";
    dtq_config *cfg;
    write_ini("[queue:mail]\nmode = lean\n[queue:bulk.q]\nmode = full\n");
    cfg = dtq_config_load(path, err, sizeof(err));
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_int_eq(cfg->nqueue_confs, 2);
    ck_assert_str_eq(cfg->queue_confs[0].name, "mail");
    ck_assert_str_eq(cfg->queue_confs[0].mode, "lean");
    ck_assert_str_eq(cfg->queue_confs[1].mode, "full");
    dtq_config_free(cfg);
    expect_error("[queue:mail]\nmode = fast\n", "[queue:mail]", "not one of lean, full");
    expect_error("[queue:mail]\ncolour = red\n", "colour", "unknown key");
    expect_error("[queue:bad/name]\nmode = lean\n", "queue name must match", NULL);
}
END_TEST

/* [pool:NAME]: defaults, every key, the command's checks, and each bound. */
START_TEST(test_pool_sections) {
    char err[512] = "";
    dtq_config *cfg;
    dtq_pool_conf changed;
    write_ini("[pool:py]\ncommand = /usr/bin/python3 -m dtq serve app.tasks\n"
              "[pool:js]\ncommand = /usr/bin/node serve.js\nprocesses = 4\ninflight = 16\n"
              "max_tasks = 1000\nmax_rss_mb = 512\nstart_timeout_ms = 2000\n"
              "kill_grace_ms = 0\ntypes = a b,c\nenv = A=1 B=2\nworkdir = /srv\n");
    cfg = dtq_config_load(path, err, sizeof(err));
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_int_eq(cfg->npools, 2);
    ck_assert_str_eq(cfg->pools[0].name, "py"); /* the file's order: routing follows it */
    ck_assert_int_eq(cfg->pools[0].processes, 2);
    ck_assert_int_eq(cfg->pools[0].inflight, 1);
    ck_assert_int_eq(cfg->pools[0].max_tasks, 0);
    ck_assert_int_eq(cfg->pools[0].max_rss_mb, 0);
    ck_assert_int_eq(cfg->pools[0].start_timeout_ms, 10000);
    ck_assert_int_eq(cfg->pools[0].kill_grace_ms, 5000);
    ck_assert_ptr_null(cfg->pools[0].types);
    ck_assert_int_eq(cfg->pools[1].processes, 4);
    ck_assert_int_eq(cfg->pools[1].inflight, 16);
    ck_assert_int_eq(cfg->pools[1].max_tasks, 1000);
    ck_assert_int_eq(cfg->pools[1].max_rss_mb, 512);
    ck_assert_int_eq(cfg->pools[1].start_timeout_ms, 2000);
    ck_assert_int_eq(cfg->pools[1].kill_grace_ms, 0);
    ck_assert_str_eq(cfg->pools[1].types, "a b,c");
    ck_assert_str_eq(cfg->pools[1].env, "A=1 B=2");
    ck_assert_str_eq(cfg->pools[1].workdir, "/srv");
    ck_assert_ptr_eq(dtq_config_pool(cfg, "js"), &cfg->pools[1]);
    ck_assert_ptr_null(dtq_config_pool(cfg, "rb"));
    ck_assert(dtq_pool_conf_equal(&cfg->pools[1], &cfg->pools[1]));
    changed = cfg->pools[1];
    changed.processes = 3;
    ck_assert(!dtq_pool_conf_equal(&cfg->pools[1], &changed));
    changed = cfg->pools[1];
    changed.env = (char *)"A=1"; /* only compared */
    ck_assert(!dtq_pool_conf_equal(&cfg->pools[1], &changed));
    dtq_config_free(cfg);
    expect_error("[pool:py]\nprocesses = 2\n", "[pool:py] command", "needs command");
    expect_error("[pool:py]\ncommand = python3 x.py\n", "[pool:py] command", "absolute");
    expect_error("[pool:py]\ncommand = /bin/x \"open\n", "[pool:py] command", NULL);
    expect_error("[pool:py]\ncommand = /bin/true\nprocesses = 0\n", "[pool:py] processes",
                 "[1, 256]");
    expect_error("[pool:py]\ncommand = /bin/true\ninflight = 2000\n", "[pool:py] inflight",
                 "[1, 1024]");
    expect_error("[pool:py]\ncommand = /bin/true\nstart_timeout_ms = 10\n",
                 "[pool:py] start_timeout_ms", "[100, 600000]");
    expect_error("[pool:py]\ncommand = /bin/true\nmax_rss_mb = -1\n", "[pool:py] max_rss_mb", NULL);
    expect_error("[pool:py]\ncommand = /bin/true\ntypes = ok bad/type\n", "[pool:py] types",
                 "'bad/type'");
    expect_error("[pool:py]\ncommand = /bin/true\nexec = /bin/true\n", "[pool:py] exec",
                 "unknown key");
    expect_error("[pool:a:b]\ncommand = /bin/true\n", "pool name must match", NULL);
}
END_TEST

START_TEST(test_defaults) {
    char err[256];
    dtq_config *cfg = dtq_config_load(NULL, err, sizeof(err));
    ck_assert_ptr_nonnull(cfg);
    ck_assert_str_eq(cfg->redis_url, "redis://127.0.0.1:6379/0");
    ck_assert_str_eq(cfg->ns, "dtq");
    ck_assert_int_eq(cfg->nqueues, 1);
    ck_assert_str_eq(cfg->queues[0], "default");
    ck_assert_int_eq(cfg->concurrency, 16);
    ck_assert_int_eq(strncmp(cfg->worker_id, "worker-", 7), 0);
    ck_assert_int_eq(strlen(cfg->worker_id), 15);
    ck_assert_double_eq(cfg->retry.base_delay_s, 1.0);
    ck_assert_double_eq(cfg->retry.max_delay_s, 60.0);
    ck_assert_double_eq(cfg->retry.jitter, 0.2);
    ck_assert_int_eq(cfg->retry.jitter_mode, DTQ_JITTER_SPREAD);
    ck_assert_int_eq(cfg->default_max_attempts, 5);
    ck_assert_int_eq(cfg->scheduler_batch, 500);
    ck_assert_int_eq(cfg->max_payload_bytes, 262144);
    ck_assert_int_eq(cfg->dlq_enabled, 1);
    ck_assert_str_eq(cfg->events_raw, "all");
    ck_assert_int_eq(cfg->heartbeat_interval_s, 5);
    ck_assert_int_eq(cfg->visibility_timeout_s, 30);
    ck_assert_str_eq(cfg->web_listen, "127.0.0.1:8080");
    ck_assert_str_eq(cfg->web_token_file, "");
    ck_assert_int_eq(cfg->web_sample_interval_s, 5);
    dtq_config_free(cfg);
}
END_TEST

START_TEST(test_file_and_handlers) {
    char err[256];
    dtq_config *cfg;
    const dtq_handler_conf *h;
    write_ini("[redis]\nurl = unix:///tmp/r.sock?db=2\nnamespace = jobs\ncluster_hash_tag = true\n"
              "[worker]\nqueues = high, default ,low\nconcurrency = 4\nworker_id = w-1\n"
              "[retry]\nbase_delay = 2\njitter_mode = full\n"
              "[handler:resize]\nbuiltin = sleep\ntimeout_ms = 500\nmax_attempts = 9\n"
              "max_delay = 5\n"
              "[handler:mail]\nbuiltin = echo\n[http]\nlisten = [::1]:9100\n"
              "[web]\nlisten = :8081\ntoken_file = /etc/dtq/web.token\nsample_interval_s = 2\n");
    cfg = dtq_config_load(path, err, sizeof(err));
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_str_eq(cfg->http_listen, "[::1]:9100");
    ck_assert_str_eq(cfg->web_listen, ":8081");
    ck_assert_str_eq(cfg->web_token_file, "/etc/dtq/web.token");
    ck_assert_int_eq(cfg->web_sample_interval_s, 2);
    ck_assert_int_eq(cfg->nqueues, 3);
    ck_assert_str_eq(cfg->queues[1], "default");
    ck_assert_str_eq(cfg->queues[2], "low");
    ck_assert_str_eq(cfg->worker_id, "w-1");
    {
        char *p = dtq_config_prefix(cfg);
        ck_assert_str_eq(p, "{jobs}");
        free(p);
    }
    h = dtq_config_handler(cfg, "resize");
    ck_assert_ptr_nonnull(h);
    ck_assert_int_eq(h->timeout_ms, 500);
    ck_assert_int_eq(h->max_attempts, 9);
    ck_assert_double_eq(h->retry.max_delay_s, 5.0);
    ck_assert_double_eq(h->retry.base_delay_s, 2.0); /* inherited from [retry] */
    ck_assert_int_eq(h->retry.jitter_mode, DTQ_JITTER_FULL);
    h = dtq_config_handler(cfg, "mail");
    ck_assert_int_eq(h->timeout_ms, 30000);
    ck_assert_int_eq(h->max_attempts, 0);
    ck_assert_ptr_null(dtq_config_handler(cfg, "nope"));
    dtq_config_free(cfg);
}
END_TEST

START_TEST(test_env_overrides) {
    char err[256];
    dtq_config *cfg;
    write_ini("[retry]\nbase_delay = 2\n[worker]\nconcurrency = 3\n");
    setenv("DTQ_RETRY_BASE_DELAY", "0.5", 1);
    setenv("DTQ_REDIS_URL", "redis://example:6400/1", 1);
    setenv("DTQ_LIMITS_DLQ_ENABLED", "false", 1);
    cfg = dtq_config_load(path, err, sizeof(err));
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_double_eq(cfg->retry.base_delay_s, 0.5);
    ck_assert_str_eq(cfg->redis_url, "redis://example:6400/1");
    ck_assert_int_eq(cfg->dlq_enabled, 0);
    ck_assert_int_eq(cfg->concurrency, 3);
    dtq_config_free(cfg);
    setenv("DTQ_WORKER_CONCURRENCY", "zero", 1);
    cfg = dtq_config_load(path, err, sizeof(err));
    ck_assert_ptr_null(cfg);
    ck_assert_ptr_nonnull(strstr(err, "DTQ_WORKER_CONCURRENCY"));
    ck_assert_ptr_nonnull(strstr(err, "[worker] concurrency"));
    unsetenv("DTQ_WORKER_CONCURRENCY");
    unsetenv("DTQ_RETRY_BASE_DELAY");
    unsetenv("DTQ_REDIS_URL");
    unsetenv("DTQ_LIMITS_DLQ_ENABLED");
}
END_TEST

START_TEST(test_errors) {
    char err[256];
    ck_assert_ptr_null(dtq_config_load("/nonexistent/dtq.ini", err, sizeof(err)));
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/dtq.ini: cannot open"));
    expect_error("[nope]\nx = 1\n", "[nope]", "unknown section");
    expect_error("[worker]\nthreads = 4\n", "[worker] threads", "unknown key");
    expect_error("[worker]\nconcurrency = many\n", "[worker] concurrency", "not an integer");
    expect_error("[worker]\nconcurrency = 0\n", "[worker] concurrency", NULL);
    expect_error("[worker]\nheartbeat_interval_s = 30\nvisibility_timeout_s = 30\n",
                 "[worker] heartbeat_interval_s", "visibility_timeout_s");
    expect_error("[worker]\nqueues = a,b c\n", "[worker] queues", "b c");
    expect_error("[worker]\nqueues = a,a\n", "[worker] queues", "twice");
    expect_error("[worker]\nworker_id = has space\n", "[worker] worker_id", NULL);
    expect_error("[redis]\nurl = http://x\n", "[redis] url", "redis://");
    expect_error("[redis]\nnamespace = a:b\n", "[redis] namespace", DTQ_NAMESPACE_RULE);
    expect_error("[redis]\ncluster_hash_tag = perhaps\n", "[redis] cluster_hash_tag", "boolean");
    expect_error("[redis]\ntls_ca_file = /nonexistent/ca.pem\n", "[redis] tls_ca_file",
                 "cannot read '/nonexistent/ca.pem': No such file or directory");
    expect_error("[redis]\ntls_ca_file = /tmp\n", "[redis] tls_ca_file", "not a regular file");
    expect_error("[redis]\ntls_cert_file = /etc/hostname\n", "[redis] tls_key_file",
                 "both tls_cert_file and tls_key_file");
    expect_error("[redis]\ntls_key_file = /etc/hostname\n", "[redis] tls_cert_file",
                 "both tls_cert_file and tls_key_file");
    expect_error("[redis]\ntls_verify = maybe\n", "[redis] tls_verify", "boolean");
    expect_error("[retry]\njitter = 1.5\n", "[retry] jitter", NULL);
    expect_error("[retry]\njitter_mode = equal\n", "[retry] jitter_mode", "spread");
    expect_error("[retry]\nbase_delay = 100\nmax_delay = 10\n", "[retry] base_delay", "max_delay");
    expect_error("[scheduler]\ninterval_ms = 20000\n", "[scheduler] interval_ms", "leader_lock_ms");
    expect_error("[limits]\nevents = some\n", "[limits] events", NULL);
    expect_error("[log]\nlevel = loud\n", "[log] level", NULL);
    expect_error("[log]\nformat = xml\n", "[log] format", NULL);
    expect_error("[http]\nlisten = nowhere\n", "[http] listen", NULL);
    expect_error("[http]\nlisten = ::1:9100\n", "[http] listen", "[IPv6]:port");
    expect_error("[http]\nlisten = 127.0.0.1:0\n", "[http] listen", NULL);
    expect_error("[web]\nlisten =\n", "[web] listen", "host:port");
    expect_error("[web]\nlisten = ::1:8080\n", "[web] listen", "[IPv6]:port");
    expect_error("[web]\nsample_interval_s = 0\n", "[web] sample_interval_s", NULL);
    expect_error("[web]\ncolour = red\n", "[web] colour", "unknown key");
    expect_error("[handler:x]\ntimeout_ms = 5\n", "[handler:x]", "builtin, exec, plugin");
    expect_error("[handler:x]\nbuiltin = teleport\n", "[handler:x] builtin", "teleport");
    expect_error("[handler:x]\nbuiltin = echo\nexec = /bin/true\n", "[handler:x] exec",
                 "exactly one");
    expect_error("[handler:x]\nplugin = /x.so\n", "[handler:x] symbol", NULL);
    expect_error("[handler:x]\nbuiltin = echo\ncolour = red\n", "[handler:x] colour",
                 "unknown key");
    expect_error("[handler:x]\nbuiltin = echo\nmax_attempts = 0\n", "[handler:x] max_attempts",
                 NULL);
    expect_error("[handler:bad name]\nbuiltin = echo\n", "[handler:bad name]", NULL);
    expect_error("[worker\nconcurrency = 1\n", "syntax error on line 1", NULL);
}
END_TEST

/* A path that is not a regular file, or cannot be opened, is refused with its name; it is
 * not silently read as an empty file (which would start the daemon on defaults). */
START_TEST(test_path_not_a_readable_file) {
    char err[512], fifo[80];
    make_dir();
    ck_assert_ptr_null(dtq_config_load(dir, err, sizeof(err)));
    ck_assert_msg(strstr(err, dir) != NULL, "no path in: %s", err);
    ck_assert_msg(strstr(err, "not a regular file") != NULL, "%s", err);

    /* a FIFO would block a plain fopen until a writer comes */
    snprintf(fifo, sizeof(fifo), "/tmp/dtq-cfg-fifo-%d", (int)getpid());
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    ck_assert_ptr_null(dtq_config_load(fifo, err, sizeof(err)));
    unlink(fifo);
    ck_assert_msg(strstr(err, "not a regular file") != NULL, "%s", err);

    /* a path through a regular file: ENOTDIR */
    write_ini("[worker]\nconcurrency = 1\n");
    {
        char sub[96];
        snprintf(sub, sizeof(sub), "%s/x.ini", path);
        ck_assert_ptr_null(dtq_config_load(sub, err, sizeof(err)));
        ck_assert_msg(strstr(err, sub) != NULL && strstr(err, ": cannot open: ") != NULL, "%s",
                      err);
    }

    /* mode 000: only meaningful when not root (root reads it anyway) */
    if (geteuid() != 0) {
        ck_assert_int_eq(chmod(path, 0), 0);
        ck_assert_ptr_null(dtq_config_load(path, err, sizeof(err)));
        ck_assert_msg(strstr(err, path) != NULL && strstr(err, "cannot open") != NULL, "%s", err);
    }
}
END_TEST

/* The binary: -c DIR must not start on defaults, --check-config -c DIR must not say ok. */
START_TEST(test_binary_refuses_directory) {
    char want[128], *out = NULL;
    make_dir();
    snprintf(want, sizeof(want), "%s: not a regular file", dir);
    ck_assert_int_eq(th_run_worker(&out, "--check-config", "-c", dir, NULL), 78);
    ck_assert_msg(strstr(out, want) != NULL, "output: %s", out);
    ck_assert_ptr_null(strstr(out, "configuration ok"));
    free(out);
    ck_assert_int_eq(th_run_worker(&out, "-c", dir, NULL), 78);
    ck_assert_msg(strstr(out, want) != NULL, "output: %s", out);
    free(out);
    ck_assert_int_eq(th_run_worker(&out, "--check-config", "-c", "/nonexistent/dtq.ini", NULL), 78);
    ck_assert_msg(strstr(out, "/nonexistent/dtq.ini: cannot open") != NULL, "output: %s", out);
    free(out);
}
END_TEST

/* config.example.ini as inih reads it: one (section, key, value) per assignment. */
typedef struct example_entry {
    char section[64], key[64], value[256];
} example_entry;

typedef struct example {
    example_entry e[256];
    int n;
} example;

static int collect_example(void *user, const char *section, const char *key, const char *value) {
    example *ex = user;
    ck_assert_msg(ex->n < (int)(sizeof(ex->e) / sizeof(ex->e[0])), "example too long");
    snprintf(ex->e[ex->n].section, sizeof(ex->e[0].section), "%s", section);
    snprintf(ex->e[ex->n].key, sizeof(ex->e[0].key), "%s", key);
    snprintf(ex->e[ex->n].value, sizeof(ex->e[0].value), "%s", value);
    ex->n++;
    return 1;
}

/* Each key of the table appears exactly once under its own [section], with its default. */
static void check_key_documented(const char *section, const char *key, const char *def,
                                 const char *doc, void *arg) {
    const example *ex = arg;
    const example_entry *found = NULL;
    (void)doc;
    for (int i = 0; i < ex->n; i++) {
        if (strcmp(ex->e[i].section, section) || strcmp(ex->e[i].key, key)) continue;
        ck_assert_msg(found == NULL, "config.example.ini sets [%s] %s twice", section, key);
        found = &ex->e[i];
    }
    ck_assert_msg(found != NULL, "config.example.ini lacks '%s = %s' under [%s]", key, def,
                  section);
    ck_assert_msg(!strcmp(found->value, def), "config.example.ini: [%s] %s = '%s', default is '%s'",
                  section, key, found->value, def);
}

START_TEST(test_example_matches_table) {
    char err[256];
    example *ex = calloc(1, sizeof(*ex));
    dtq_config *cfg;
    ck_assert_int_eq(ini_parse(DTQ_SOURCE_DIR "/config.example.ini", collect_example, ex), 0);
    dtq_config_each_key(check_key_documented, ex);
    free(ex);
    /* and nothing else: the example loads, so it holds no unknown section or key */
    cfg = dtq_config_load(DTQ_SOURCE_DIR "/config.example.ini", err, sizeof(err));
    ck_assert_msg(cfg != NULL, "example does not load: %s", err);
    dtq_config_free(cfg);
}
END_TEST

/* The config key of a DEFAULTS name: how many keys have that name, and the last one. */
typedef struct key_match {
    const char *name, *section, *def;
    int found;
} key_match;

static void match_key(const char *section, const char *key, const char *def, const char *doc,
                      void *arg) {
    key_match *m = arg;
    (void)doc;
    if (strcmp(key, m->name)) return;
    m->found++;
    m->section = section;
    m->def = def;
}

/* A Lua number literal equal to the C number text `want`. */
static void assert_same_number(const char *name, const char *lua, const char *want) {
    char *end;
    double a, b;
    a = strtod(lua, &end);
    ck_assert_msg(*lua && !*end, "DEFAULTS.%s = %s is not a number (C default: %s)", name, lua,
                  want);
    b = strtod(want, &end);
    ck_assert_msg(*want && !*end, "DEFAULTS.%s = %s, but the C default '%s' is not a number", name,
                  lua, want);
    ck_assert_msg(a == b, "DEFAULTS.%s = %s, C default %s", name, lua, want);
}

/* The library's DEFAULTS (what the Functions assume before a daemon has published its
 * config), as scripts.c generates it, agrees with the C key table, and with the two
 * defaults that are not keys. */
START_TEST(test_lua_defaults_match_table) {
    th_lua_item d[64];
    int n = th_lua_table("DEFAULTS", d, 64);
    char num[32];
    ck_assert_int_ge(n, 1);
    for (int i = 0; i < n; i++) {
        const char *name = d[i].name, *v = d[i].value;
        key_match m = {name, NULL, NULL, 0};
        ck_assert_msg(*name, "DEFAULTS item '%s' has no name", v);
        if (!strcmp(name, "default_priority")) {
            snprintf(num, sizeof(num), "%d", DTQ_DEFAULT_PRIORITY);
            assert_same_number(name, v, num);
            continue;
        }
        if (!strcmp(name, "default_timeout_ms")) {
            snprintf(num, sizeof(num), "%d", DTQ_DEFAULT_TIMEOUT_MS);
            assert_same_number(name, v, num);
            continue;
        }
        dtq_config_each_key(match_key, &m);
        ck_assert_msg(m.found > 0,
                      "DEFAULTS.%s is neither a config key nor default_priority/default_timeout_ms",
                      name);
        ck_assert_msg(m.found == 1, "DEFAULTS.%s matches %d config keys", name, m.found);
        if (!strcmp(m.def, "true") || !strcmp(m.def, "false")) {
            ck_assert_msg(!strcmp(v, !strcmp(m.def, "true") ? "1" : "0"),
                          "DEFAULTS.%s = %s, [%s] %s = %s", name, v, m.section, name, m.def);
        } else if (v[0] == '\'' || v[0] == '"') {
            size_t len = strlen(v);
            ck_assert_msg(len >= 2 && v[len - 1] == v[0], "DEFAULTS.%s = %s: bad string", name, v);
            ck_assert_msg(len - 2 == strlen(m.def) && !strncmp(v + 1, m.def, len - 2),
                          "DEFAULTS.%s = %s, [%s] %s = %s", name, v, m.section, name, m.def);
        } else {
            assert_same_number(name, v, m.def);
        }
    }
}
END_TEST

/* The value of `name` among HSET's field/value pairs, or NULL. */
static const char *published(const dtq_argv *a, const char *name) {
    for (int i = 0; i + 1 < a->argc; i += 2)
        if (!strcmp(a->argv[i], name)) return a->argv[i + 1];
    return NULL;
}

/* The library's CONFIG_NAMES and CONFIG_BOUNDS, as scripts.c generates them: every field
 * the Functions read is one the daemon publishes, and its bounds are exactly what the
 * config accepts (the bound loads, one past it does not). */
START_TEST(test_lua_config_fields_match_table) {
    th_lua_item names[32], bounds[32];
    int nn = th_lua_table("CONFIG_NAMES", names, 32),
        nb = th_lua_table("CONFIG_BOUNDS", bounds, 32);
    char err[512], ini[256];
    dtq_config *cfg;
    dtq_argv a;
    write_ini("[limits]\ndlq_enabled = false\nevents = off\nmax_queue_depth = 7\n"
              "[retry]\ndefault_max_attempts = 9\n");
    cfg = dtq_config_load(path, err, sizeof(err));
    ck_assert_msg(cfg != NULL, "%s", err);
    dtq_argv_init(&a);
    dtq_config_publish_args(cfg, &a);
    ck_assert_int_eq(a.argc % 2, 0);
    ck_assert_str_eq(published(&a, "dlq_enabled"), "0");
    ck_assert_str_eq(published(&a, "events"), "off");
    ck_assert_str_eq(published(&a, "max_queue_depth"), "7");
    ck_assert_str_eq(published(&a, "default_max_attempts"), "9");
    ck_assert_str_eq(published(&a, "default_priority"), "5");
    ck_assert_str_eq(published(&a, "result_max_bytes"), "65536");
    ck_assert_int_ge(nn, 1);
    for (int i = 0; i < nn; i++) {
        size_t len = strlen(names[i].value);
        ck_assert_msg(!names[i].name[0] && len > 2 && names[i].value[0] == '\'',
                      "CONFIG_NAMES item %s", names[i].value);
        names[i].value[len - 1] = '\0';
        ck_assert_msg(published(&a, names[i].value + 1), "%s is read, never published",
                      names[i].value + 1);
    }
    ck_assert_int_eq(nb, nn - 1); /* every field but events, a word */
    for (int i = 0; i < nb; i++) {
        const char *name = bounds[i].name;
        key_match m = {name, NULL, NULL, 0};
        long long lo, hi;
        int in_names = 0;
        for (int j = 0; j < nn; j++) in_names |= !strcmp(names[j].value + 1, name);
        ck_assert_msg(in_names, "CONFIG_BOUNDS.%s is not in CONFIG_NAMES", name);
        ck_assert_msg(sscanf(bounds[i].value, "{%lld, %lld}", &lo, &hi) == 2,
                      "CONFIG_BOUNDS.%s = %s", name, bounds[i].value);
        if (!strcmp(name, "default_priority")) {
            ck_assert_int_eq(lo, 0);
            ck_assert_int_eq(hi, DTQ_BANDS - 1);
            continue;
        }
        dtq_config_each_key(match_key, &m);
        ck_assert_msg(m.found == 1, "CONFIG_BOUNDS.%s is not one config key", name);
        if (!strcmp(m.def, "true") || !strcmp(m.def, "false")) {
            ck_assert_msg(lo == 0 && hi == 1, "CONFIG_BOUNDS.%s = %s", name, bounds[i].value);
            continue;
        }
        for (int k = 0; k < 4; k++) {
            long long v = k == 0 ? lo : k == 1 ? hi : k == 2 ? lo - 1 : hi + 1;
            dtq_config *c;
            snprintf(ini, sizeof(ini), "[%.32s]\n%.64s = %lld\n", m.section, name, v);
            write_ini(ini);
            c = dtq_config_load(path, err, sizeof(err));
            ck_assert_msg((c != NULL) == (k < 2), "[%s] %s = %lld: %s", m.section, name, v,
                          c ? "accepted" : err);
            dtq_config_free(c);
        }
    }
    dtq_argv_deinit(&a);
    dtq_config_free(cfg);
}
END_TEST

START_TEST(test_binary_exit_78) {
    char *out = NULL;
    write_ini("[worker]\nheartbeat_interval_s = 40\n");
    ck_assert_int_eq(th_run_worker(&out, "-c", path, NULL), 78);
    ck_assert_ptr_nonnull(strstr(out, "[worker] heartbeat_interval_s"));
    ck_assert_ptr_nonnull(strstr(out, path));
    free(out);
    ck_assert_int_eq(th_run_worker(&out, "--check-config", "-c", path, NULL), 78);
    free(out);
    write_ini("[handler:e]\nbuiltin = echo\n");
    ck_assert_int_eq(th_run_worker(&out, "--check-config", "-c", path, NULL), 0);
    ck_assert_ptr_nonnull(strstr(out, "configuration ok"));
    free(out);
    write_ini("[handler:p]\nplugin = /nonexistent/lib.so\nsymbol = run\n");
    ck_assert_int_eq(th_run_worker(&out, "--check-config", "-c", path, NULL), 78);
    ck_assert_ptr_nonnull(strstr(out, "cannot load /nonexistent/lib.so"));
    free(out);
    {
        ck_assert_int_eq(th_run_worker(&out, "-c", "/nonexistent.ini", NULL), 78);
        ck_assert_ptr_nonnull(strstr(out, "/nonexistent.ini: cannot open"));
        free(out);
    }
}
END_TEST

/* [web] allowed_hosts and read_token_file: empty by default; the list takes names,
 * addresses and "*" separated by blanks or commas; a bad entry is named in the error. */
START_TEST(test_web_access_keys) {
    char err[512];
    dtq_config *cfg;
    write_ini("[web]\n");
    cfg = dtq_config_load(path, err, sizeof(err));
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_str_eq(cfg->web_allowed_hosts, "");
    ck_assert_str_eq(cfg->web_read_token_file, "");
    dtq_config_free(cfg);
    write_ini("[web]\nallowed_hosts = dash.example.com, 10.0.0.5 [fd00::1],::1\tqueue-box\n"
              "read_token_file = /etc/dtq/web-read.token\n");
    cfg = dtq_config_load(path, err, sizeof(err));
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_str_eq(cfg->web_allowed_hosts, "dash.example.com, 10.0.0.5 [fd00::1],::1\tqueue-box");
    ck_assert_str_eq(cfg->web_read_token_file, "/etc/dtq/web-read.token");
    dtq_config_free(cfg);
    write_ini("[web]\nallowed_hosts = *\n");
    cfg = dtq_config_load(path, err, sizeof(err));
    ck_assert_msg(cfg != NULL, "%s", err);
    dtq_config_free(cfg);
    setenv("DTQ_WEB_ALLOWED_HOSTS", "bad_name!", 1);
    write_ini("[web]\nallowed_hosts = ok.example\n");
    ck_assert_ptr_null(dtq_config_load(path, err, sizeof(err)));
    unsetenv("DTQ_WEB_ALLOWED_HOSTS");
    ck_assert_msg(strstr(err, "[web] allowed_hosts: 'bad_name!' is not a host name") != NULL, "%s",
                  err);
    expect_error("[web]\nallowed_hosts = ok.example dash.example:8080\n", "[web] allowed_hosts",
                 "'dash.example:8080' is not an IPv6 address; give a name without a port");
    expect_error("[web]\nallowed_hosts = *.example.com\n", "[web] allowed_hosts",
                 "'*.example.com': a wildcard is '*' alone");
    expect_error("[web]\nallowed_hosts = http://dash.example\n", "[web] allowed_hosts",
                 "'http://dash.example'");
    expect_error("[web]\nallowed_hosts = a..example\n", "[web] allowed_hosts",
                 "'a..example' is not a host name, an IP address or *");
    expect_error("[web]\nallowed_hosts = [10.0.0.1]\n", "[web] allowed_hosts", "'[10.0.0.1]'");
    expect_error("[web]\nallowed_hosts = [::1\n", "[web] allowed_hosts", "'[::1'");
    expect_error("[web]\nallowed_hosts = a b c d e f g h i j k l m n o p q r s t u v w x y z "
                 "a b c d e f g h i j k l m n o p q r s t u v w x y z a b c d e f g h i j k l m "
                 "n o\n",
                 "[web] allowed_hosts", "more than 64 entries");
}
END_TEST

/* The one namespace rule the loader, dtqctl -n and dtq-web -n apply. */
START_TEST(test_namespace_rule) {
    const char *good[] = {"dtq", "a", "Jobs_2.prod-eu", NULL};
    const char *bad[] = {"", "a:b", ":", "has space", "a/b", "{dtq}", "é", NULL};
    char max[66];
    for (const char **g = good; *g; g++) ck_assert_msg(dtq_namespace_valid(*g), "refused %s", *g);
    for (const char **b = bad; *b; b++) ck_assert_msg(!dtq_namespace_valid(*b), "accepted %s", *b);
    memset(max, 'n', 64);
    max[64] = '\0';
    ck_assert(dtq_namespace_valid(max));
    max[64] = 'n';
    max[65] = '\0';
    ck_assert(!dtq_namespace_valid(max));
}
END_TEST

/* [handler:*] retry_exit_codes and result (exec only), and [worker] unknown_task_type. */
START_TEST(test_exec_retry_and_result_keys) {
    char err[256];
    dtq_config *cfg;
    const dtq_handler_conf *h;
    write_ini("[handler:plain]\nexec = /bin/true\n"
              "[handler:curl]\nexec = /bin/true\nretry_exit_codes = 75 7,28\nresult = text\n"
              "[handler:all]\nexec = /bin/true\nretry_exit_codes = any\nresult = ignore\n"
              "[handler:json]\nexec = /bin/true\nretry_exit_codes = 255\nresult = json\n");
    cfg = dtq_config_load(path, err, sizeof(err));
    ck_assert_msg(cfg != NULL, "%s", err);
    h = dtq_config_handler(cfg, "plain"); /* the default: 75 alone, JSON */
    ck_assert(dtq_handler_retries_exit(h, 75));
    ck_assert(!dtq_handler_retries_exit(h, 7));
    ck_assert(!dtq_handler_retries_exit(h, 1));
    ck_assert(!dtq_handler_retries_exit(h, 0));
    ck_assert_int_eq(h->result_mode, DTQ_RESULT_MODE_JSON);
    h = dtq_config_handler(cfg, "curl");
    ck_assert(dtq_handler_retries_exit(h, 75));
    ck_assert(dtq_handler_retries_exit(h, 7));
    ck_assert(dtq_handler_retries_exit(h, 28));
    ck_assert(!dtq_handler_retries_exit(h, 1));
    ck_assert_int_eq(h->result_mode, DTQ_RESULT_MODE_TEXT);
    h = dtq_config_handler(cfg, "all");
    for (int code = 1; code < 256; code++) ck_assert(dtq_handler_retries_exit(h, code));
    ck_assert(!dtq_handler_retries_exit(h, 0));
    ck_assert_int_eq(h->result_mode, DTQ_RESULT_MODE_IGNORE);
    h = dtq_config_handler(cfg, "json"); /* a list replaces the default */
    ck_assert(dtq_handler_retries_exit(h, 255));
    ck_assert(!dtq_handler_retries_exit(h, 75));
    ck_assert_int_eq(h->result_mode, DTQ_RESULT_MODE_JSON);
    ck_assert_int_eq(cfg->unknown_hand_back, 0); /* [worker] unknown_task_type default */
    ck_assert_str_eq(cfg->unknown_task_type_raw, "dead_letter");
    ck_assert_int_eq(cfg->unknown_task_type_grace_s, 600);
    dtq_config_free(cfg);

    write_ini("[worker]\nunknown_task_type = hand_back\nunknown_task_type_grace_s = 2\n");
    cfg = dtq_config_load(path, err, sizeof(err));
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_int_eq(cfg->unknown_hand_back, 1);
    ck_assert_int_eq(cfg->unknown_task_type_grace_s, 2);
    dtq_config_free(cfg);

    expect_error("[handler:x]\nexec = /bin/true\nretry_exit_codes = 0\n",
                 "[handler:x] retry_exit_codes", "'0' is not an exit code in [1, 255] (or any)");
    expect_error("[handler:x]\nexec = /bin/true\nretry_exit_codes = 256\n",
                 "[handler:x] retry_exit_codes", "'256' is not an exit code");
    expect_error("[handler:x]\nexec = /bin/true\nretry_exit_codes = 7 seven\n",
                 "[handler:x] retry_exit_codes", "'seven' is not an exit code");
    expect_error("[handler:x]\nexec = /bin/true\nretry_exit_codes = 7 7\n",
                 "[handler:x] retry_exit_codes", "exit code 7 is listed twice");
    expect_error("[handler:x]\nexec = /bin/true\nretry_exit_codes = 75 any\n",
                 "[handler:x] retry_exit_codes", "'any' stands alone");
    expect_error("[handler:x]\nexec = /bin/true\nretry_exit_codes = any 75\n",
                 "[handler:x] retry_exit_codes", "'any' stands alone");
    expect_error("[handler:x]\nexec = /bin/true\nretry_exit_codes =\n",
                 "[handler:x] retry_exit_codes", "empty value");
    expect_error("[handler:x]\nexec = /bin/true\nretry_exit_codes = ,\n",
                 "[handler:x] retry_exit_codes", "empty value");
    {
        char text[512] = "[handler:x]\nexec = /bin/true\nretry_exit_codes =";
        for (int code = 1; code <= DTQ_RETRY_EXIT_CODES_MAX + 1; code++)
            snprintf(text + strlen(text), sizeof(text) - strlen(text), " %d", code);
        strcat(text, "\n");
        expect_error(text, "[handler:x] retry_exit_codes", "more than 32 exit codes; write any");
    }
    expect_error("[handler:x]\nexec = /bin/true\nresult = yaml\n", "[handler:x] result",
                 "'yaml' is not one of json, text, ignore");
    expect_error("[handler:x]\nbuiltin = echo\nresult = text\n", "[handler:x] result",
                 "only an exec handler takes this key");
    expect_error("[handler:x]\nplugin = /x.so\nsymbol = f\nretry_exit_codes = 7\n",
                 "[handler:x] retry_exit_codes", "only an exec handler takes this key");
    /* exec command lines are split like a shell's words; an open quote is refused */
    expect_error("[handler:x]\nexec = /bin/sh -c 'echo \"hi\"\n", "[handler:x] exec",
                 "unterminated single quote (opened at column 12)");
    expect_error("[handler:x]\nexec = /bin/echo \"a b\n", "[handler:x] exec",
                 "unterminated double quote (opened at column 11)");
    write_ini("[handler:x]\nexec = /bin/sh -c 'echo \"a b\"'\n");
    cfg = dtq_config_load(path, err, sizeof(err));
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_str_eq(cfg->handlers[0].target, "/bin/sh -c 'echo \"a b\"'");
    dtq_config_free(cfg);
    expect_error("[worker]\nunknown_task_type = retry\n", "[worker] unknown_task_type",
                 "'retry' is not one of dead_letter, hand_back");
    expect_error("[worker]\nunknown_task_type_grace_s = 0\n", "[worker] unknown_task_type_grace_s",
                 "not an integer");
}
END_TEST

/* What dtq_config_warn_exposed_secrets writes to stderr for the config file in `path` with
 * mode `mode`; caller-owned. */
static char *exposed_secrets_warning(mode_t mode) {
    char err[512], log[80], *out;
    dtq_config *cfg;
    int saved = dup(2), fd;
    FILE *f;
    long n;
    ck_assert_int_eq(chmod(path, mode), 0);
    cfg = dtq_config_load(path, err, sizeof(err));
    ck_assert_msg(cfg != NULL, "%s", err);
    snprintf(log, sizeof(log), "/tmp/dtq-cfg-warn-%d.log", (int)getpid());
    fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    fflush(stderr);
    dup2(fd, 2);
    dtq_config_warn_exposed_secrets(cfg, "dtq-worker", 0);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    dtq_config_free(cfg);
    f = fopen(log, "r");
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    rewind(f);
    out = calloc(1, (size_t)n + 1);
    ck_assert_int_eq(fread(out, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    unlink(log);
    return out;
}

/* A config file every user may read warns at start when it holds a Redis password. */
START_TEST(test_world_readable_password_warned) {
    char *out;
    unsetenv("DTQ_REDIS_URL");
    write_ini("[redis]\nurl = redis://app:s3cret@127.0.0.1:6379\n");
    out = exposed_secrets_warning(0644);
    ck_assert_msg(strstr(out, "readable by every user of this host (mode 0644)") &&
                      strstr(out, "Redis password"),
                  "no warning: '%s'", out);
    free(out);
    out = exposed_secrets_warning(0600);
    ck_assert_str_eq(out, "");
    free(out);
    write_ini("[redis]\nurl = redis://127.0.0.1:6379\n");
    out = exposed_secrets_warning(0644);
    ck_assert_str_eq(out, "");
    free(out);
    unlink(path);
}
END_TEST

int main(void) {
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("load");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_queue_sections);
    tcase_add_test(tc, test_pool_sections);
    tcase_add_test(tc, test_file_and_handlers);
    tcase_add_test(tc, test_env_overrides);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_example_matches_table);
    tcase_add_test(tc, test_lua_defaults_match_table);
    tcase_add_test(tc, test_lua_config_fields_match_table);
    tcase_add_test(tc, test_binary_exit_78);
    tcase_add_test(tc, test_path_not_a_readable_file);
    tcase_add_test(tc, test_binary_refuses_directory);
    tcase_add_test(tc, test_web_access_keys);
    tcase_add_test(tc, test_namespace_rule);
    tcase_add_test(tc, test_exec_retry_and_result_keys);
    tcase_add_test(tc, test_world_readable_password_warned);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
