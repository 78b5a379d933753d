/* config.h: the daemon configuration. Every key of SPEC 12 is defined once, in the table
 * in config.c (section, key, type, default, bounds, doc); loading applies defaults, the
 * INI file, then DTQ_<SECTION>_<KEY> environment overrides, then cross-key checks.
 * A loaded config is read-only; a reload builds a new one and swaps it whole. */
#ifndef DTQ_CONFIG_H
#define DTQ_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "retry.h"
#include "util.h"

#define DTQ_EX_CONFIG 78

/* Values that are not config keys. The Functions get them, like the defaults and bounds of
 * the <prefix>:config fields (dtq_config_each_field), from scripts.c, which writes them into
 * the library's generated CONST table at load: change them here only. */
#define DTQ_DEFAULT_PRIORITY 5       /* enqueue without `priority` */
#define DTQ_DEFAULT_TIMEOUT_MS 30000 /* attempts of a task type without timeout_ms */
#define DTQ_MAX_ATTEMPTS 1000 /* the cap on max_attempts: a task's, a handler's, the default */

enum dtq_handler_kind { DTQ_HANDLER_KIND_BUILTIN, DTQ_HANDLER_KIND_EXEC, DTQ_HANDLER_KIND_PLUGIN };

/* [handler:*] result: what an exec program's stdout becomes. */
enum dtq_result_mode {
    DTQ_RESULT_MODE_JSON,  /* a JSON text, the result as it is (the default) */
    DTQ_RESULT_MODE_TEXT,  /* UTF-8 text, recorded as a JSON string */
    DTQ_RESULT_MODE_IGNORE /* read and dropped: no result */
};

/* [handler:*] retry_exit_codes: its default (EX_TEMPFAIL), and at most this many codes in a
 * list. */
#define DTQ_EXEC_TEMPFAIL 75
#define DTQ_RETRY_EXIT_CODES_MAX 32

/* One [handler:<task_type>] section. Retry keys that are absent inherit [retry]. */
typedef struct dtq_handler_conf {
    char *task_type;
    enum dtq_handler_kind kind;
    char *target;           /* builtin name, exec command line, or plugin path */
    char *symbol;           /* plugin entry point */
    char *env;              /* exec: extra NAME=VALUE pairs, space separated */
    char *workdir;          /* exec: working directory */
    int64_t timeout_ms;     /* per-attempt limit, ms */
    int64_t kill_grace_ms;  /* exec: SIGTERM -> SIGKILL, ms */
    int64_t max_attempts;   /* 0 = inherit [retry] default_max_attempts */
    dtq_retry_policy retry; /* effective policy: [retry] overlaid with this section */
    int seen_kind;          /* how many of builtin/exec/plugin were given */
    unsigned overrides;     /* which retry keys this section set (bits of DTQ_OVR_*) */
    /* exec: bit N set = exit code N is a retryable failure (default: 75 alone) */
    unsigned char retry_exit_codes[32];
    /* exec: what stdout becomes */
    enum dtq_result_mode result_mode;
} dtq_handler_conf;

/* [pool:NAME]: long-lived handler processes (pool.c, reference 12). Integers as parsed;
 * the defaults are set when the section first appears. */
typedef struct dtq_pool_conf {
    char *name;
    char *command;            /* split like exec: absolute program path, then its arguments */
    char *env;                /* extra NAME=VALUE pairs, space separated */
    char *workdir;            /* NULL = the daemon's */
    char *types;              /* task types served besides those announced; NULL = none */
    int64_t processes;        /* kept running */
    int64_t inflight;         /* tasks one process may hold (the hello may ask for fewer) */
    int64_t max_tasks;        /* replace a process after this many tasks; 0 = never */
    int64_t max_rss_mb;       /* replace a process whose RSS grew past this; 0 = never */
    int64_t start_timeout_ms; /* the hello must come within this */
    int64_t kill_grace_ms;    /* a cancelled task's answer may take this long */
} dtq_pool_conf;

/* [cron:NAME]: a periodic schedule this config file defines (reference 12; the Functions
 * keep it, worker.c syncs these at start and on SIGHUP). Integers are -1 when not given. */
typedef struct dtq_cron_conf {
    char *name, *spec, *tz, *queue, *task_type, *payload, *catch_up;
    int64_t priority, max_attempts, timeout_ms, ttl_seconds;
    int paused;
} dtq_cron_conf;

/* [queue:NAME]: a queue's settings (reference 12). mode: the lane its tasks take, kept in
 * Redis by <ns>_queue_mode, which the daemon calls at setup and on SIGHUP. */
typedef struct dtq_queue_conf {
    char *name;
    char *mode; /* "lean" or "full" */
} dtq_queue_conf;

typedef struct dtq_config {
    char *path;
    /* [redis] */
    char *redis_url;
    char *ns;
    int cluster_hash_tag;
    int64_t connect_timeout_ms;
    int64_t liveness_timeout_ms; /* PING unanswered this long: drop and reconnect */
    int64_t wait_replicas;       /* WAIT after each finish batch; 0 = off */
    int64_t wait_timeout_ms;     /* ... at most this long */
    char *tls_ca_file;           /* rediss://: CA bundle; empty = the system store */
    char *tls_cert_file;         /* client certificate (with tls_key_file), empty = none */
    char *tls_key_file;
    char *tls_server_name;   /* name checked in the certificate and sent as SNI; empty = host */
    int tls_verify;          /* false: the server's certificate is not checked (warned) */
    char *sentinel_user;     /* redis-sentinel://: ACL user for the sentinels; empty = none */
    char *sentinel_password; /* ... and its password (or requirepass); empty = no AUTH */
    /* [worker] */
    char *queues_raw;
    char **queues;
    int nqueues;
    int64_t concurrency;
    char *worker_id;
    int64_t heartbeat_interval_s;
    int64_t visibility_timeout_s;
    int64_t drain_timeout_s;
    char *unknown_task_type_raw;       /* dead_letter | hand_back */
    int unknown_hand_back;             /* ... parsed: 1 = hand_back */
    int64_t unknown_task_type_grace_s; /* hand_back only this long after created_at */
    /* [retry] */
    dtq_retry_policy retry;
    char *jitter_mode_raw;
    int64_t default_max_attempts;
    /* [scheduler] */
    int scheduler_enabled;
    int64_t scheduler_interval_ms;
    int64_t scheduler_batch;
    int64_t claim_timeout_ms;
    int64_t leader_lock_ms;
    /* [limits] */
    int64_t max_payload_bytes;
    int64_t max_queue_depth;
    int64_t result_max_bytes;
    int64_t error_max_bytes;
    int64_t task_retention_s;
    int64_t result_retention_s;
    int64_t idem_ttl_s;
    int dlq_enabled;
    int64_t dlq_maxlen;
    char *events_raw; /* all | terminal | off, applied by the Functions */
    int64_t events_stream_maxlen;
    /* [http] */
    char *http_listen;
    char *http_allowed_hosts; /* names besides the listen address and localhost */
    /* [web]: dtq-web, the dashboard (the daemon ignores this section) */
    char *web_listen;              /* host:port of the dashboard */
    char *web_token_file;          /* bearer tokens for writes; empty = read-only */
    char *web_read_token_file;     /* bearer tokens for reads; empty = reads need none */
    char *web_allowed_hosts;       /* more names a request's Host may carry; "*" = any */
    int64_t web_sample_interval_s; /* seconds between the rate and history samples */
    /* [log] */
    char *log_level;
    char *log_format;
    int64_t log_task_lines_per_s; /* task outcome lines per (queue, type, class); 0 = all */
    /* [handler:*] */
    dtq_handler_conf *handlers;
    int nhandlers;
    /* [pool:*], in the file's order (the first pool serving a type gets it) */
    dtq_pool_conf *pools;
    int npools;
    /* [cron:*] */
    dtq_cron_conf *crons;
    int ncrons;
    /* [queue:*] */
    dtq_queue_conf *queue_confs;
    int nqueue_confs;
} dtq_config;

/* Loads path (NULL = defaults and environment only). On error returns NULL and writes
 * "file: [section] key: reason" into err. The result is caller-owned (dtq_config_free). */
dtq_config *dtq_config_load(const char *path, char *err, size_t errlen);
void dtq_config_free(dtq_config *cfg);
/* Warns (dtq_warn, `who`: "dtq-worker", "web") about a secret every user of the host may
 * read: tls_key_file, and the config file when it holds a Redis or sentinel password (one
 * not given by the environment, nor by a command-line URL: url_option). Called at start. */
void dtq_config_warn_exposed_secrets(const dtq_config *cfg, const char *who, int url_option);
/* Warns when `path` is readable by every user: "<who>: the <what> <path> is readable by
 * every user of this host (mode 0644); chmod o-r it". */
void dtq_warn_world_readable(const char *who, const char *what, const char *path);
/* [redis] namespace (and dtqctl's and dtq-web's -n): 1 when ns matches
 * DTQ_NAMESPACE_RULE. */
#define DTQ_NAMESPACE_RULE "[A-Za-z0-9._-]{1,64}"
int dtq_namespace_valid(const char *ns);

/* Whether exit `code` of an exec handler of section h is a retryable failure. */
int dtq_handler_retries_exit(const dtq_handler_conf *h, int code);

/* Borrowed lookup; NULL when there is no [pool:name]. */
const dtq_pool_conf *dtq_config_pool(const dtq_config *cfg, const char *name);
/* Whether two pool sections would start the same processes and treat them alike. */
int dtq_pool_conf_equal(const dtq_pool_conf *a, const dtq_pool_conf *b);

/* Borrowed lookup; NULL when the task type has no section. */
const dtq_handler_conf *dtq_config_handler(const dtq_config *cfg, const char *task_type);

/* The key prefix: "ns" or "{ns}" with cluster_hash_tag. Caller-owned. */
char *dtq_config_prefix(const dtq_config *cfg);

/* A field of <prefix>:config, the limits the Functions enforce as the daemon's config says.
 * The list in config.c owns their names; a field that is a config key (`section` set) takes
 * the key table's default and bounds. scripts.c writes the library's CONST.CONFIG_NAMES,
 * CONFIG_BOUNDS and DEFAULTS from this list at load. */
enum {
    DTQ_FIELD_PUBLISHED = 1u, /* the daemon writes it into <prefix>:config (worker.c) */
    DTQ_FIELD_READ = 2u,      /* the Functions read it from there: CONFIG_NAMES, CONFIG_BOUNDS */
    DTQ_FIELD_DEFAULT = 4u    /* in DEFAULTS, what the Functions assume when it is not there */
};
typedef struct dtq_config_field {
    const char *name;
    const char *section; /* the config key [section] name it publishes; NULL: not a key */
    const char *def;     /* an integer (a boolean as 0 or 1), or a word when `word` */
    int word;            /* a word, checked by the Functions themselves (events) */
    double min, max;     /* an integer's bounds */
    unsigned flags;      /* DTQ_FIELD_* */
} dtq_config_field;

/* Calls fn for every field of <prefix>:config and DEFAULTS, in a fixed order. */
void dtq_config_each_field(void (*fn)(const dtq_config_field *f, void *arg), void *arg);
/* Appends the field/value pairs of <prefix>:config that cfg publishes (after HSET <key>). */
void dtq_config_publish_args(const dtq_config *cfg, dtq_argv *a);

/* Iterates over the key table: calls fn for every (section, key, default, doc). */
void dtq_config_each_key(void (*fn)(const char *section, const char *key, const char *def,
                                    const char *doc, void *arg),
                         void *arg);

#endif
