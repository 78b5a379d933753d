/* config.c: the key table, the INI reader (inih), environment overrides and validation.
 * Checklist: a key added here must also be documented in config.example.ini (a test
 * compares the two) and in SPEC 12. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <cjson/cJSON.h>
#include <ini.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cron.h"
#include "keys.h"
#include "log.h"
#include "redis_url.h"
#include "streams.h"
#include "util.h"
#include "web_auth.h"

enum key_type { KEY_STR, KEY_INT, KEY_DOUBLE, KEY_BOOL };

typedef struct config_key {
    const char *section;
    const char *key;
    enum key_type type;
    size_t offset;
    const char *def;
    double min, max; /* bounds for numbers */
    const char *doc;
} config_key;

#define OFF(f) offsetof(dtq_config, f)
#define BIG 9.0e15

static const config_key config_keys[] = {
    {"redis", "url", KEY_STR, OFF(redis_url), "redis://127.0.0.1:6379/0", 0, 0,
     "redis://[user:password@]host[:port][/db], rediss://... (TLS), unix:///path.sock[?db=N], "
     "or redis-sentinel://[user:password@]host:port[,host:port...]/master_name[/db] "
     "(rediss-sentinel:// for TLS)"},
    {"redis", "namespace", KEY_STR, OFF(ns), "dtq", 0, 0,
     "prefix of every key and of the Function names"},
    {"redis", "cluster_hash_tag", KEY_BOOL, OFF(cluster_hash_tag), "false", 0, 0,
     "wrap the prefix as {ns} so every key hashes to one cluster slot"},
    {"redis", "connect_timeout_ms", KEY_INT, OFF(connect_timeout_ms), "2000", 1, 600000,
     "give up on one connection attempt after this long"},
    {"redis", "liveness_timeout_ms", KEY_INT, OFF(liveness_timeout_ms), "6000", 1500, 3600000,
     "a connection whose PING goes unanswered this long is dropped and made again"},
    {"redis", "wait_replicas", KEY_INT, OFF(wait_replicas), "0", 0, 64,
     "after each finish batch, WAIT for this many replicas; 0 = do not wait"},
    {"redis", "wait_timeout_ms", KEY_INT, OFF(wait_timeout_ms), "1000", 1, 600000,
     "how long that WAIT may take before the daemon goes on with a warning"},
    {"redis", "tls_ca_file", KEY_STR, OFF(tls_ca_file), "", 0, 0,
     "rediss://: PEM CA bundle that verifies the server; empty = the system store"},
    {"redis", "tls_cert_file", KEY_STR, OFF(tls_cert_file), "", 0, 0,
     "rediss://: PEM client certificate (chain), with tls_key_file; empty = none"},
    {"redis", "tls_key_file", KEY_STR, OFF(tls_key_file), "", 0, 0,
     "rediss://: PEM private key of tls_cert_file"},
    {"redis", "tls_server_name", KEY_STR, OFF(tls_server_name), "", 0, 0,
     "rediss://: name (or IP address) the certificate must carry, also sent as SNI; "
     "empty = the URL's host"},
    {"redis", "tls_verify", KEY_BOOL, OFF(tls_verify), "true", 0, 0,
     "rediss://: false = do not verify the server's certificate (insecure, warned)"},
    {"redis", "sentinel_user", KEY_STR, OFF(sentinel_user), "", 0, 0,
     "redis-sentinel://: ACL user the sentinels are asked as; empty = the default user"},
    {"redis", "sentinel_password", KEY_STR, OFF(sentinel_password), "", 0, 0,
     "redis-sentinel://: password for the sentinels; empty = no AUTH"},
    {"worker", "queues", KEY_STR, OFF(queues_raw), "default", 0, 0,
     "comma-separated queues, served in this order"},
    {"worker", "concurrency", KEY_INT, OFF(concurrency), "16", 1, 100000, "tasks executed at once"},
    {"worker", "worker_id", KEY_STR, OFF(worker_id), "", 0, 0,
     "consumer name; empty = worker-<8 random hex>"},
    {"worker", "heartbeat_interval_s", KEY_INT, OFF(heartbeat_interval_s), "5", 1, 86400,
     "seconds between heartbeats"},
    {"worker", "visibility_timeout_s", KEY_INT, OFF(visibility_timeout_s), "30", 2, 864000,
     "an entry idle this long is taken from a worker presumed dead"},
    {"worker", "drain_timeout_s", KEY_INT, OFF(drain_timeout_s), "30", 0, 86400,
     "on SIGTERM, how long running tasks may finish"},
    {"worker", "unknown_task_type", KEY_STR, OFF(unknown_task_type_raw), "dead_letter", 0, 0,
     "a task whose type has no handler here: dead_letter (at once) | hand_back (given back "
     "without using an attempt, for a worker that knows the type)"},
    {"worker", "unknown_task_type_grace_s", KEY_INT, OFF(unknown_task_type_grace_s), "600", 1,
     31536000,
     "hand_back: for this long after a task's enqueue; then it is dead-lettered as with "
     "dead_letter"},
    {"retry", "base_delay", KEY_DOUBLE, OFF(retry.base_delay_s), "1.0", 0, 1e9,
     "seconds before the first retry"},
    {"retry", "max_delay", KEY_DOUBLE, OFF(retry.max_delay_s), "60.0", 0, 1e9,
     "cap on the backoff, seconds"},
    {"retry", "jitter", KEY_DOUBLE, OFF(retry.jitter), "0.2", 0, 1, "spread fraction"},
    {"retry", "jitter_mode", KEY_STR, OFF(jitter_mode_raw), "spread", 0, 0, "spread | full | none"},
    {"retry", "default_max_attempts", KEY_INT, OFF(default_max_attempts), "5", 1, DTQ_MAX_ATTEMPTS,
     "attempts when neither the task nor its handler says"},
    {"scheduler", "enabled", KEY_BOOL, OFF(scheduler_enabled), "true", 0, 0,
     "false = never take the leader lock"},
    {"scheduler", "interval_ms", KEY_INT, OFF(scheduler_interval_ms), "1000", 10, 3600000,
     "pause between passes that did not fill their batch"},
    {"scheduler", "batch", KEY_INT, OFF(scheduler_batch), "500", 1, 100000,
     "due tasks moved per pass"},
    {"scheduler", "claim_timeout_ms", KEY_INT, OFF(claim_timeout_ms), "60000", 100, BIG,
     "claims older than this go back to the schedule"},
    {"scheduler", "leader_lock_ms", KEY_INT, OFF(leader_lock_ms), "10000", 100, BIG,
     "leader lock lifetime; refreshed every pass"},
    {"limits", "max_payload_bytes", KEY_INT, OFF(max_payload_bytes), "262144", 1, 536870912,
     "largest payload accepted at enqueue"},
    {"limits", "max_queue_depth", KEY_INT, OFF(max_queue_depth), "1000000", 1, BIG,
     "enqueue refuses when a queue holds this many entries"},
    {"limits", "result_max_bytes", KEY_INT, OFF(result_max_bytes), "65536", 0, 536870912,
     "results are truncated to this size"},
    {"limits", "error_max_bytes", KEY_INT, OFF(error_max_bytes), "4096", 16, 1048576,
     "last_error keeps at most this many bytes"},
    {"limits", "task_retention_s", KEY_INT, OFF(task_retention_s), "604800", 1, BIG,
     "task hashes expire this long after they end"},
    {"limits", "result_retention_s", KEY_INT, OFF(result_retention_s), "3600", 1, BIG,
     "result keys expire after this long"},
    {"limits", "idem_ttl_s", KEY_INT, OFF(idem_ttl_s), "86400", 1, BIG,
     "idempotency records live this long"},
    {"limits", "dlq_enabled", KEY_BOOL, OFF(dlq_enabled), "true", 0, 0,
     "false = permanent failures end 'failed', without a dead-letter entry"},
    {"limits", "dlq_maxlen", KEY_INT, OFF(dlq_maxlen), "10000", 1, BIG,
     "approximate cap on the dead-letter stream"},
    {"limits", "events", KEY_STR, OFF(events_raw), "all", 0, 0, "all | terminal | off"},
    {"limits", "events_stream_maxlen", KEY_INT, OFF(events_stream_maxlen), "0", 0, BIG,
     "also append events to a stream capped at this length; 0 = no stream"},
    {"http", "listen", KEY_STR, OFF(http_listen), "", 0, 0,
     "host:port, :port (all IPv4 addresses) or [IPv6]:port for /metrics /healthz /readyz; "
     "empty = off"},
    {"http", "allowed_hosts", KEY_STR, OFF(http_allowed_hosts), "", 0, 0,
     "names /metrics answers for besides the listen address and localhost (as [web] "
     "allowed_hosts)"},
    {"web", "listen", KEY_STR, OFF(web_listen), "127.0.0.1:8080", 0, 0,
     "dtq-web: host:port, :port or [IPv6]:port of the dashboard"},
    {"web", "token_file", KEY_STR, OFF(web_token_file), "", 0, 0,
     "dtq-web: file of bearer tokens that allow writes; empty = read-only"},
    {"web", "read_token_file", KEY_STR, OFF(web_read_token_file), "", 0, 0,
     "dtq-web: file of bearer tokens that allow reads (a write token does too); empty = "
     "reads need no token"},
    {"web", "allowed_hosts", KEY_STR, OFF(web_allowed_hosts), "", 0, 0,
     "dtq-web: names (or addresses) a request's Host may carry besides the listen address "
     "and localhost, separated by blanks or commas; * = any (the check is off)"},
    {"web", "sample_interval_s", KEY_INT, OFF(web_sample_interval_s), "5", 1, 3600,
     "dtq-web: seconds between the samples behind rates and plots"},
    {"log", "level", KEY_STR, OFF(log_level), "info", 0, 0, "debug | info | warn | error"},
    {"log", "format", KEY_STR, OFF(log_format), "text", 0, 0, "text | json"},
    {"log", "task_lines_per_s", KEY_INT, OFF(log_task_lines_per_s), "5", 0, 1000000,
     "task outcome lines per second per (queue, task_type, class), then a summary; 0 = all"},
};
#define NKEYS (sizeof(config_keys) / sizeof(config_keys[0]))

/* The fields of <prefix>:config (and of the Functions' DEFAULTS): the published ones are
 * written by worker.c in this order. A field with a section is that config key, with the
 * key table's default and bounds; the others carry their own. */
#define STR_(x) #x
#define STR(x) STR_(x)
#define PUB_READ (DTQ_FIELD_PUBLISHED | DTQ_FIELD_READ | DTQ_FIELD_DEFAULT)
static const dtq_config_field config_fields[] = {
    {"max_payload_bytes", "limits", NULL, 0, 0, 0, PUB_READ},
    {"max_queue_depth", "limits", NULL, 0, 0, 0, PUB_READ},
    {"default_max_attempts", "retry", NULL, 0, 0, 0, PUB_READ},
    {"default_priority", NULL, STR(DTQ_DEFAULT_PRIORITY), 0, 0, DTQ_BANDS - 1, PUB_READ},
    {"task_retention_s", "limits", NULL, 0, 0, 0, PUB_READ},
    {"result_retention_s", "limits", NULL, 0, 0, 0, PUB_READ},
    {"idem_ttl_s", "limits", NULL, 0, 0, 0, PUB_READ},
    {"dlq_maxlen", "limits", NULL, 0, 0, 0, PUB_READ},
    {"dlq_enabled", "limits", NULL, 0, 0, 0, PUB_READ},
    {"events", "limits", NULL, 0, 0, 0, PUB_READ},
    {"events_stream_maxlen", "limits", NULL, 0, 0, 0, PUB_READ},
    /* for observers (dtqctl, dashboards): the Functions never truncate a result */
    {"result_max_bytes", "limits", NULL, 0, 0, 0, DTQ_FIELD_PUBLISHED},
    /* the Functions' timeout_ms when the daemon's policy table is not there */
    {"default_timeout_ms", NULL, STR(DTQ_DEFAULT_TIMEOUT_MS), 0, 1, BIG, DTQ_FIELD_DEFAULT},
};
#undef PUB_READ

#define DTQ_OVR_BASE 1u
#define DTQ_OVR_MAX 2u
#define DTQ_OVR_JITTER 4u
#define DTQ_OVR_MODE 8u
#define DTQ_OVR_EXIT_CODES 16u /* exec-only keys, refused in other sections */
#define DTQ_OVR_RESULT 32u

typedef struct load_state {
    dtq_config *cfg;
    const char *file;
    char *err;
    size_t errlen;
    int failed;
} load_state;

static void fail(load_state *st, const char *section, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void fail(load_state *st, const char *section, const char *key, const char *fmt, ...) {
    char reason[512];
    va_list ap;
    if (st->failed) return; /* the first error is the one worth reading */
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    st->failed = 1;
    if (key)
        snprintf(st->err, st->errlen, "%s: [%s] %s: %s", st->file, section, key, reason);
    else if (section)
        snprintf(st->err, st->errlen, "%s: [%s]: %s", st->file, section, reason);
    else
        snprintf(st->err, st->errlen, "%s: %s", st->file, reason);
}

/* [section] allowed_hosts against [section] listen (web_auth.h): 1 when they parse, else 0
 * after fail(). */
static int allowed_hosts_valid(load_state *st, const char *section, const char *listen,
                               const char *allowed) {
    char herr[256];
    dtq_web_hosts *hosts = dtq_web_hosts_new(listen, allowed, herr, sizeof(herr));
    if (!hosts) {
        fail(st, section, "allowed_hosts", "%s", herr);
        return 0;
    }
    dtq_web_hosts_free(hosts);
    return 1;
}

static int set_key(load_state *st, const config_key *k, const char *value) {
    void *field = (char *)st->cfg + k->offset;
    int64_t iv;
    double dv;
    int bv;
    switch (k->type) {
    case KEY_STR:
        free(*(char **)field);
        *(char **)field = dtq_xstrdup(value);
        return DTQ_OK;
    case KEY_INT:
        if (dtq_parse_int64(value, (int64_t)k->min, (int64_t)k->max, &iv) != DTQ_OK) {
            fail(st, k->section, k->key, "'%s' is not an integer in [%.0f, %.0f]", value, k->min,
                 k->max);
            return DTQ_ERR;
        }
        *(int64_t *)field = iv;
        return DTQ_OK;
    case KEY_DOUBLE:
        if (dtq_parse_double(value, k->min, k->max, &dv) != DTQ_OK) {
            fail(st, k->section, k->key, "'%s' is not a number in [%g, %g]", value, k->min, k->max);
            return DTQ_ERR;
        }
        *(double *)field = dv;
        return DTQ_OK;
    case KEY_BOOL:
        if (dtq_parse_bool(value, &bv) != DTQ_OK) {
            fail(st, k->section, k->key, "'%s' is not a boolean (true/false)", value);
            return DTQ_ERR;
        }
        *(int *)field = bv;
        return DTQ_OK;
    }
    return DTQ_ERR;
}

static const config_key *find_key(const char *section, const char *key) {
    for (size_t i = 0; i < NKEYS; i++)
        if (!strcmp(config_keys[i].section, section) && !strcmp(config_keys[i].key, key))
            return &config_keys[i];
    return NULL;
}

static int known_section(const char *section) {
    for (size_t i = 0; i < NKEYS; i++)
        if (!strcmp(config_keys[i].section, section)) return 1;
    return 0;
}

static dtq_handler_conf *handler_for(dtq_config *cfg, const char *task_type) {
    for (int i = 0; i < cfg->nhandlers; i++)
        if (!strcmp(cfg->handlers[i].task_type, task_type)) return &cfg->handlers[i];
    cfg->handlers =
        dtq_xrealloc(cfg->handlers, sizeof(dtq_handler_conf) * (size_t)(cfg->nhandlers + 1));
    dtq_handler_conf *h = &cfg->handlers[cfg->nhandlers++];
    memset(h, 0, sizeof(*h));
    h->task_type = dtq_xstrdup(task_type);
    h->timeout_ms = DTQ_DEFAULT_TIMEOUT_MS;
    h->kill_grace_ms = 5000;
    h->retry_exit_codes[DTQ_EXEC_TEMPFAIL / 8] |= (unsigned char)(1u << (DTQ_EXEC_TEMPFAIL % 8));
    return h;
}

int dtq_handler_retries_exit(const dtq_handler_conf *h, int code) {
    return code > 0 && code < 256 && (h->retry_exit_codes[code / 8] >> (code % 8)) & 1u;
}

/* retry_exit_codes = any | <code> [<code>...]: codes 1-255, separated by blanks or commas,
 * each once; the list replaces the default (75) rather than adding to it. */
static int parse_exit_codes(load_state *st, const char *section, dtq_handler_conf *h,
                            const char *value) {
    static const char *const key = "retry_exit_codes";
    unsigned char codes[32] = {0};
    char *copy = dtq_xstrdup(value), *save = NULL, *tok;
    int n = 0, rc = DTQ_ERR;
    for (tok = strtok_r(copy, " \t,", &save); tok; tok = strtok_r(NULL, " \t,", &save)) {
        int64_t code;
        if (!strcmp(tok, "any")) {
            if (n || strtok_r(NULL, " \t,", &save)) {
                fail(st, section, key, "'any' stands alone, without exit codes");
                goto out;
            }
            memset(codes, 0xff, sizeof(codes));
            codes[0] &= (unsigned char)~1u; /* exit 0 is a success, never a failure */
            n = 255;
            break;
        }
        if (dtq_parse_int64(tok, 1, 255, &code) != DTQ_OK) {
            fail(st, section, key, "'%s' is not an exit code in [1, 255] (or any)", tok);
            goto out;
        }
        if ((codes[code / 8] >> (code % 8)) & 1u) {
            fail(st, section, key, "exit code %lld is listed twice", (long long)code);
            goto out;
        }
        if (++n > DTQ_RETRY_EXIT_CODES_MAX) {
            fail(st, section, key, "more than %d exit codes; write any to retry every one",
                 DTQ_RETRY_EXIT_CODES_MAX);
            goto out;
        }
        codes[code / 8] |= (unsigned char)(1u << (code % 8));
    }
    if (!n) {
        fail(st, section, key, "empty value: give exit codes in [1, 255], or any");
        goto out;
    }
    memcpy(h->retry_exit_codes, codes, sizeof(codes));
    h->overrides |= DTQ_OVR_EXIT_CODES;
    rc = DTQ_OK;
out:
    free(copy);
    return rc;
}

static int set_handler_key(load_state *st, const char *section, const char *task_type,
                           const char *key, const char *value) {
    dtq_handler_conf *h = handler_for(st->cfg, task_type);
    int64_t iv;
    double dv;
    if (!strcmp(key, "builtin") || !strcmp(key, "exec") || !strcmp(key, "plugin")) {
        h->kind = !strcmp(key, "builtin") ? DTQ_HANDLER_KIND_BUILTIN
                  : !strcmp(key, "exec")  ? DTQ_HANDLER_KIND_EXEC
                                          : DTQ_HANDLER_KIND_PLUGIN;
        if (++h->seen_kind > 1) {
            fail(st, section, key, "a handler takes exactly one of builtin, exec, plugin");
            return DTQ_ERR;
        }
        if (!*value) {
            fail(st, section, key, "empty value");
            return DTQ_ERR;
        }
        h->target = dtq_xstrdup(value);
    } else if (!strcmp(key, "symbol")) {
        free(h->symbol);
        h->symbol = dtq_xstrdup(value);
    } else if (!strcmp(key, "env")) {
        free(h->env);
        h->env = dtq_xstrdup(value);
    } else if (!strcmp(key, "workdir")) {
        free(h->workdir);
        h->workdir = dtq_xstrdup(value);
    } else if (!strcmp(key, "timeout_ms") || !strcmp(key, "kill_grace_ms") ||
               !strcmp(key, "max_attempts")) {
        int64_t max = !strcmp(key, "max_attempts") ? DTQ_MAX_ATTEMPTS : (int64_t)BIG;
        if (dtq_parse_int64(value, 1, max, &iv) != DTQ_OK) {
            fail(st, section, key, "'%s' is not an integer in [1, %lld]", value, (long long)max);
            return DTQ_ERR;
        }
        if (!strcmp(key, "timeout_ms"))
            h->timeout_ms = iv;
        else if (!strcmp(key, "kill_grace_ms"))
            h->kill_grace_ms = iv;
        else
            h->max_attempts = iv;
    } else if (!strcmp(key, "base_delay") || !strcmp(key, "max_delay") || !strcmp(key, "jitter")) {
        double max = !strcmp(key, "jitter") ? 1.0 : 1e9;
        if (dtq_parse_double(value, 0, max, &dv) != DTQ_OK) {
            fail(st, section, key, "'%s' is not a number in [0, %g]", value, max);
            return DTQ_ERR;
        }
        if (!strcmp(key, "base_delay")) {
            h->retry.base_delay_s = dv;
            h->overrides |= DTQ_OVR_BASE;
        } else if (!strcmp(key, "max_delay")) {
            h->retry.max_delay_s = dv;
            h->overrides |= DTQ_OVR_MAX;
        } else {
            h->retry.jitter = dv;
            h->overrides |= DTQ_OVR_JITTER;
        }
    } else if (!strcmp(key, "jitter_mode")) {
        if (dtq_retry_jitter_mode_from_string(value, &h->retry.jitter_mode) != DTQ_OK) {
            fail(st, section, key, "'%s' is not one of spread, full, none", value);
            return DTQ_ERR;
        }
        h->overrides |= DTQ_OVR_MODE;
    } else if (!strcmp(key, "retry_exit_codes")) {
        return parse_exit_codes(st, section, h, value);
    } else if (!strcmp(key, "result")) {
        if (!strcmp(value, "json"))
            h->result_mode = DTQ_RESULT_MODE_JSON;
        else if (!strcmp(value, "text"))
            h->result_mode = DTQ_RESULT_MODE_TEXT;
        else if (!strcmp(value, "ignore"))
            h->result_mode = DTQ_RESULT_MODE_IGNORE;
        else {
            fail(st, section, key, "'%s' is not one of json, text, ignore", value);
            return DTQ_ERR;
        }
        h->overrides |= DTQ_OVR_RESULT;
    } else {
        fail(st, section, key, "unknown key");
        return DTQ_ERR;
    }
    return DTQ_OK;
}

/* [cron:NAME] sections: one periodic schedule each. */
static dtq_cron_conf *cron_for(dtq_config *cfg, const char *name) {
    for (int i = 0; i < cfg->ncrons; i++)
        if (!strcmp(cfg->crons[i].name, name)) return &cfg->crons[i];
    cfg->crons = dtq_xrealloc(cfg->crons, sizeof(dtq_cron_conf) * (size_t)(cfg->ncrons + 1));
    dtq_cron_conf *c = &cfg->crons[cfg->ncrons++];
    memset(c, 0, sizeof(*c));
    c->name = dtq_xstrdup(name);
    c->priority = c->max_attempts = c->timeout_ms = c->ttl_seconds = -1;
    return c;
}

static void set_cron_key(load_state *st, const char *section, const char *name, const char *key,
                         const char *value) {
    dtq_cron_conf *c = cron_for(st->cfg, name);
    const struct {
        const char *key;
        char **str;
        int64_t *num;
        int64_t min, max;
    } keys[] = {
        {"spec", &c->spec, NULL, 0, 0},
        {"tz", &c->tz, NULL, 0, 0},
        {"queue", &c->queue, NULL, 0, 0},
        {"task_type", &c->task_type, NULL, 0, 0},
        {"payload", &c->payload, NULL, 0, 0},
        {"catch_up", &c->catch_up, NULL, 0, 0},
        {"priority", NULL, &c->priority, 0, DTQ_BANDS - 1},
        {"max_attempts", NULL, &c->max_attempts, 1, DTQ_MAX_ATTEMPTS},
        {"timeout_ms", NULL, &c->timeout_ms, 1, (int64_t)BIG},
        {"ttl_seconds", NULL, &c->ttl_seconds, 1, (int64_t)BIG},
    };
    if (!strcmp(key, "paused")) {
        if (dtq_parse_bool(value, &c->paused) != DTQ_OK)
            fail(st, section, key, "'%s' is not a boolean (true/false)", value);
        return;
    }
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        if (strcmp(keys[i].key, key)) continue;
        if (keys[i].str) {
            free(*keys[i].str);
            *keys[i].str = dtq_xstrdup(value);
        } else if (dtq_parse_int64(value, keys[i].min, keys[i].max, keys[i].num) != DTQ_OK) {
            fail(st, section, key, "'%s' is not an integer in [%lld, %lld]", value,
                 (long long)keys[i].min, (long long)keys[i].max);
        }
        return;
    }
    fail(st, section, key, "unknown key");
}

/* A schedule's section as a whole, once the file is read: what <ns>_cron_set would refuse,
 * and what only C can check (the spec and the zone), said with the section's name. */
static void validate_cron(load_state *st, dtq_cron_conf *c) {
    char section[96], why[256];
    dtq_cron spec;
    cJSON *payload;
    snprintf(section, sizeof(section), "cron:%s", c->name);
    if (!c->spec) return fail(st, section, "spec", "required");
    if (dtq_cron_parse(c->spec, &spec, why, sizeof(why)) != 0)
        return fail(st, section, "spec", "%s", why);
    if (!c->tz) c->tz = dtq_xstrdup("UTC");
    if (dtq_cron_zone_valid(c->tz, why, sizeof(why)) != 0)
        return fail(st, section, "tz", "%s", why);
    if (dtq_cron_fires(&spec, c->tz, dtq_now_ms(), why, sizeof(why)) != 0)
        return fail(st, section, "spec", "%s", why);
    if (!c->queue || !dtq_valid_queue_name(c->queue))
        return fail(st, section, "queue", "required, matching [A-Za-z0-9._:-]{1,128}");
    if (!c->task_type || !dtq_valid_queue_name(c->task_type))
        return fail(st, section, "task_type", "required, matching [A-Za-z0-9._:-]{1,128}");
    if (!c->payload) c->payload = dtq_xstrdup("{}");
    /* require_null_terminated: "{} x" is not JSON (<ns>_cron_set would refuse it) */
    if (!(payload = cJSON_ParseWithOpts(c->payload, NULL, 1)))
        return fail(st, section, "payload", "not valid JSON");
    cJSON_Delete(payload);
    if (!c->catch_up) c->catch_up = dtq_xstrdup("skip");
    if (strcmp(c->catch_up, "skip") && strcmp(c->catch_up, "none") && strcmp(c->catch_up, "all"))
        return fail(st, section, "catch_up", "'%s' is not one of skip, none, all", c->catch_up);
}

/* [pool:NAME] sections (pool.c). */
static void set_pool_key(load_state *st, const char *section, const char *name, const char *key,
                         const char *value) {
    static const struct {
        const char *key;
        size_t offset;
        int64_t min, max;
    } ints[] = {
        {"processes", offsetof(dtq_pool_conf, processes), 1, 256},
        {"inflight", offsetof(dtq_pool_conf, inflight), 1, 1024},
        {"max_tasks", offsetof(dtq_pool_conf, max_tasks), 0, 1000000000},
        {"max_rss_mb", offsetof(dtq_pool_conf, max_rss_mb), 0, 1048576},
        {"start_timeout_ms", offsetof(dtq_pool_conf, start_timeout_ms), 100, 600000},
        {"kill_grace_ms", offsetof(dtq_pool_conf, kill_grace_ms), 0, 600000},
    };
    dtq_config *cfg = st->cfg;
    dtq_pool_conf *p = NULL;
    char **str = NULL;
    for (int i = 0; i < cfg->npools; i++)
        if (!strcmp(cfg->pools[i].name, name)) p = &cfg->pools[i];
    if (!p) {
        cfg->pools = dtq_xrealloc(cfg->pools, sizeof(dtq_pool_conf) * (size_t)(cfg->npools + 1));
        p = &cfg->pools[cfg->npools++];
        memset(p, 0, sizeof(*p));
        p->name = dtq_xstrdup(name);
        p->processes = 2;
        p->inflight = 1;
        p->start_timeout_ms = 10000;
        p->kill_grace_ms = 5000;
    }
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
        if (strcmp(key, ints[i].key)) continue;
        if (dtq_parse_int64(value, ints[i].min, ints[i].max,
                            (int64_t *)(void *)((char *)p + ints[i].offset)) != DTQ_OK)
            fail(st, section, key, "'%s' is not an integer in [%lld, %lld]", value,
                 (long long)ints[i].min, (long long)ints[i].max);
        return;
    }
    if (!strcmp(key, "command"))
        str = &p->command;
    else if (!strcmp(key, "env"))
        str = &p->env;
    else if (!strcmp(key, "workdir"))
        str = &p->workdir;
    else if (!strcmp(key, "types"))
        str = &p->types;
    else
        return fail(st, section, key, "unknown key");
    free(*str);
    *str = dtq_xstrdup(value);
}

/* A pool section as a whole: its command can be split and names a program by its absolute
 * path; its types are task names. (Whether the program is executable is checked where it
 * is started, as for exec: pool.c.) */
static void validate_pool(load_state *st, const dtq_pool_conf *p) {
    char section[160], why[128], **words;
    snprintf(section, sizeof(section), "pool:%s", p->name);
    if (!p->command || !*p->command)
        return fail(st, section, "command", "a pool needs command = /path/to/program [arg...]");
    if (!(words = dtq_split_words(p->command, why, sizeof(why))))
        return fail(st, section, "command", "%s", why);
    if (!words[0] || words[0][0] != '/')
        fail(st, section, "command", "needs an absolute program path");
    for (char **w = words; *w; w++) free(*w);
    free(words);
    if (st->failed) return;
    if (p->types) {
        char *copy = dtq_xstrdup(p->types), *save = NULL;
        for (char *t = strtok_r(copy, " \t,", &save); t && !st->failed;
             t = strtok_r(NULL, " \t,", &save))
            if (!dtq_valid_queue_name(t))
                fail(st, section, "types", "'%s' is not a task type ([A-Za-z0-9._:-]{1,128})", t);
        free(copy);
    }
}

/* [queue:NAME] sections: a queue's mode. */
static void set_queue_key(load_state *st, const char *section, const char *name, const char *key,
                          const char *value) {
    dtq_config *cfg = st->cfg;
    dtq_queue_conf *q = NULL;
    for (int i = 0; i < cfg->nqueue_confs; i++)
        if (!strcmp(cfg->queue_confs[i].name, name)) q = &cfg->queue_confs[i];
    if (!q) {
        cfg->queue_confs = dtq_xrealloc(cfg->queue_confs,
                                        sizeof(dtq_queue_conf) * (size_t)(cfg->nqueue_confs + 1));
        q = &cfg->queue_confs[cfg->nqueue_confs++];
        q->name = dtq_xstrdup(name);
        q->mode = NULL;
    }
    if (strcmp(key, "mode")) return fail(st, section, key, "unknown key");
    if (strcmp(value, "lean") && strcmp(value, "full"))
        return fail(st, section, key, "'%s' is not one of lean, full", value);
    free(q->mode);
    q->mode = dtq_xstrdup(value);
}

static int ini_cb(void *user, const char *section, const char *key, const char *value) {
    load_state *st = user;
    const config_key *k;
    /* Always 1: errors are recorded in st, so inih's return value means syntax only. */
    if (st->failed) return 1;
    if (!strncmp(section, "handler:", 8)) {
        const char *tt = section + 8;
        if (!dtq_valid_queue_name(tt)) {
            fail(st, section, NULL, "task type must match [A-Za-z0-9._:-]{1,128}");
            return 1;
        }
        set_handler_key(st, section, tt, key, value);
        return 1;
    }
    if (!strncmp(section, "cron:", 5)) {
        const char *name = section + 5;
        /* the rule of <ns>_cron_set's names, which is the namespace's */
        if (!dtq_namespace_valid(name)) {
            fail(st, section, NULL, "schedule name must match " DTQ_NAMESPACE_RULE);
            return 1;
        }
        set_cron_key(st, section, name, key, value);
        return 1;
    }
    if (!strncmp(section, "pool:", 5)) {
        if (!dtq_namespace_valid(section + 5)) {
            fail(st, section, NULL, "pool name must match " DTQ_NAMESPACE_RULE);
            return 1;
        }
        set_pool_key(st, section, section + 5, key, value);
        return 1;
    }
    if (!strncmp(section, "queue:", 6)) {
        if (!dtq_valid_queue_name(section + 6)) {
            fail(st, section, NULL, "queue name must match [A-Za-z0-9._:-]{1,128}");
            return 1;
        }
        set_queue_key(st, section, section + 6, key, value);
        return 1;
    }
    if (!*section) {
        fail(st, NULL, NULL, "key '%s' appears before any [section]", key);
        return 1;
    }
    if (!known_section(section)) {
        fail(st, section, NULL, "unknown section");
        return 1;
    }
    k = find_key(section, key);
    if (!k) {
        fail(st, section, key, "unknown key");
        return 1;
    }
    set_key(st, k, value);
    return 1;
}

static void apply_env(load_state *st) {
    char name[128];
    for (size_t i = 0; i < NKEYS && !st->failed; i++) {
        const config_key *k = &config_keys[i];
        const char *v;
        char *p;
        snprintf(name, sizeof(name), "DTQ_%s_%s", k->section, k->key);
        for (p = name; *p; p++) *p = (char)toupper((unsigned char)*p);
        v = getenv(name);
        if (!v) continue;
        {
            const char *saved = st->file;
            char where[160];
            snprintf(where, sizeof(where), "environment %s", name);
            st->file = where;
            set_key(st, k, v);
            st->file = saved;
        }
    }
}

static int split_queues(load_state *st) {
    dtq_config *cfg = st->cfg;
    char *copy = dtq_xstrdup(cfg->queues_raw), *save = NULL, *tok;
    for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*tok)) tok++;
        char *end = tok + strlen(tok);
        while (end > tok && isspace((unsigned char)end[-1])) *--end = '\0';
        if (!dtq_valid_queue_name(tok)) {
            fail(st, "worker", "queues", "'%s' is not a valid queue name ([A-Za-z0-9._:-]{1,128})",
                 tok);
            break;
        }
        for (int i = 0; i < cfg->nqueues; i++) {
            if (!strcmp(cfg->queues[i], tok)) {
                fail(st, "worker", "queues", "queue '%s' is listed twice", tok);
                break;
            }
        }
        if (st->failed) break;
        cfg->queues = dtq_xrealloc(cfg->queues, sizeof(char *) * (size_t)(cfg->nqueues + 1));
        cfg->queues[cfg->nqueues++] = dtq_xstrdup(tok);
    }
    free(copy);
    if (!st->failed && cfg->nqueues == 0) fail(st, "worker", "queues", "no queue given");
    return st->failed ? DTQ_ERR : DTQ_OK;
}

/* A file the daemon will open later (TLS material): it must be a readable regular file
 * now, so that --check-config and the start-up say so rather than a failing handshake. */
static int check_readable(const char *path, char *err, size_t errlen) {
    struct stat sb;
    FILE *f;
    if (stat(path, &sb) != 0) {
        snprintf(err, errlen, "cannot read '%s': %s", path, strerror(errno));
        return DTQ_ERR;
    }
    if (!S_ISREG(sb.st_mode)) {
        snprintf(err, errlen, "'%s' is not a regular file", path);
        return DTQ_ERR;
    }
    f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot read '%s': %s", path, strerror(errno));
        return DTQ_ERR;
    }
    fclose(f);
    return DTQ_OK;
}

static const char *builtin_names[] = {"noop", "echo", "sleep", "fail", "flaky", NULL};

static void validate(load_state *st) {
    dtq_config *cfg = st->cfg;
    enum dtq_log_level lvl;
    enum dtq_log_format fmt;
    dtq_redis_url url;
    char uerr[256];

    if (dtq_redis_url_parse(cfg->redis_url, &url, uerr, sizeof(uerr)) != DTQ_OK)
        return fail(st, "redis", "url", "%s", uerr);
    dtq_redis_url_deinit(&url);
    if (!*cfg->tls_cert_file != !*cfg->tls_key_file)
        return fail(st, "redis", *cfg->tls_cert_file ? "tls_key_file" : "tls_cert_file",
                    "a client certificate needs both tls_cert_file and tls_key_file");
    {
        static const struct {
            const char *key;
            size_t off;
        } files[] = {{"tls_ca_file", OFF(tls_ca_file)},
                     {"tls_cert_file", OFF(tls_cert_file)},
                     {"tls_key_file", OFF(tls_key_file)}};
        for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
            const char *file = *(char **)((char *)cfg + files[i].off);
            char ferr[512];
            if (*file && check_readable(file, ferr, sizeof(ferr)) != DTQ_OK)
                return fail(st, "redis", files[i].key, "%s", ferr);
        }
    }
    if (!dtq_namespace_valid(cfg->ns))
        return fail(st, "redis", "namespace", "must match " DTQ_NAMESPACE_RULE);
    if (split_queues(st) != DTQ_OK) return;
    if (!*cfg->worker_id) {
        char uuid[37];
        dtq_uuid4(uuid);
        free(cfg->worker_id);
        cfg->worker_id = dtq_xasprintf("worker-%.8s", uuid);
    } else if (!dtq_valid_task_id(cfg->worker_id)) {
        return fail(st, "worker", "worker_id", "must match [A-Za-z0-9._:-]{1,64}");
    }
    if (cfg->heartbeat_interval_s >= cfg->visibility_timeout_s)
        return fail(st, "worker", "heartbeat_interval_s",
                    "must be less than visibility_timeout_s (%lld >= %lld)",
                    (long long)cfg->heartbeat_interval_s, (long long)cfg->visibility_timeout_s);
    if (dtq_retry_jitter_mode_from_string(cfg->jitter_mode_raw, &cfg->retry.jitter_mode))
        return fail(st, "retry", "jitter_mode", "'%s' is not one of spread, full, none",
                    cfg->jitter_mode_raw);
    if (!strcmp(cfg->unknown_task_type_raw, "hand_back"))
        cfg->unknown_hand_back = 1;
    else if (strcmp(cfg->unknown_task_type_raw, "dead_letter"))
        return fail(st, "worker", "unknown_task_type", "'%s' is not one of dead_letter, hand_back",
                    cfg->unknown_task_type_raw);
    if (cfg->retry.base_delay_s > cfg->retry.max_delay_s)
        return fail(st, "retry", "base_delay", "must not exceed max_delay");
    if (cfg->scheduler_interval_ms >= cfg->leader_lock_ms)
        return fail(st, "scheduler", "interval_ms",
                    "must be less than leader_lock_ms, or the lock lapses between passes");
    /* Checked here, applied by the Functions (lua/lib/events.lua emit) from <prefix>:config. */
    if (strcmp(cfg->events_raw, "all") && strcmp(cfg->events_raw, "terminal") &&
        strcmp(cfg->events_raw, "off"))
        return fail(st, "limits", "events", "'%s' is not one of all, terminal, off",
                    cfg->events_raw);
    if (*cfg->http_listen) {
        char *host;
        int port;
        if (dtq_split_hostport(cfg->http_listen, &host, &port) != DTQ_OK)
            return fail(st, "http", "listen", "'%s' is not host:port, :port or [IPv6]:port",
                        cfg->http_listen);
        free(host);
        if (!allowed_hosts_valid(st, "http", cfg->http_listen, cfg->http_allowed_hosts)) return;
    }
    {
        char *host;
        int port;
        if (dtq_split_hostport(cfg->web_listen, &host, &port) != DTQ_OK)
            return fail(st, "web", "listen", "'%s' is not host:port, :port or [IPv6]:port",
                        cfg->web_listen);
        free(host);
    }
    if (!allowed_hosts_valid(st, "web", cfg->web_listen, cfg->web_allowed_hosts)) return;
    if (dtq_log_level_from_string(cfg->log_level, &lvl) != DTQ_OK)
        return fail(st, "log", "level", "'%s' is not one of debug, info, warn, error",
                    cfg->log_level);
    if (dtq_log_format_from_string(cfg->log_format, &fmt) != DTQ_OK)
        return fail(st, "log", "format", "'%s' is not one of text, json", cfg->log_format);

    for (int i = 0; i < cfg->nhandlers; i++) {
        dtq_handler_conf *h = &cfg->handlers[i];
        char section[160];
        dtq_retry_policy own = h->retry;
        snprintf(section, sizeof(section), "handler:%s", h->task_type);
        if (h->seen_kind == 0) return fail(st, section, NULL, "needs one of builtin, exec, plugin");
        if (h->kind == DTQ_HANDLER_KIND_BUILTIN) {
            int ok = 0;
            for (const char **b = builtin_names; *b; b++) ok |= !strcmp(*b, h->target);
            if (!ok)
                return fail(st, section, "builtin",
                            "'%s' is not one of noop, echo, sleep, fail, flaky", h->target);
        }
        if (h->kind == DTQ_HANDLER_KIND_EXEC) {
            char why[128];
            char **words = dtq_split_words(h->target, why, sizeof(why));
            if (!words) return fail(st, section, "exec", "%s", why);
            for (char **w = words; *w; w++) free(*w);
            free(words);
        }
        if (h->kind == DTQ_HANDLER_KIND_PLUGIN && !h->symbol)
            return fail(st, section, "symbol", "a plugin handler needs symbol = <function>");
        if (h->kind != DTQ_HANDLER_KIND_PLUGIN && h->symbol)
            return fail(st, section, "symbol", "only a plugin handler takes symbol");
        if (h->kind != DTQ_HANDLER_KIND_EXEC && (h->env || h->workdir))
            return fail(st, section, h->env ? "env" : "workdir",
                        "only an exec handler takes this key");
        if (h->kind != DTQ_HANDLER_KIND_EXEC &&
            (h->overrides & (DTQ_OVR_EXIT_CODES | DTQ_OVR_RESULT)))
            return fail(st, section,
                        h->overrides & DTQ_OVR_EXIT_CODES ? "retry_exit_codes" : "result",
                        "only an exec handler takes this key (a builtin or plugin says "
                        "DTQ_HANDLER_RETRY and returns JSON)");
        h->retry = cfg->retry;
        if (h->overrides & DTQ_OVR_BASE) h->retry.base_delay_s = own.base_delay_s;
        if (h->overrides & DTQ_OVR_MAX) h->retry.max_delay_s = own.max_delay_s;
        if (h->overrides & DTQ_OVR_JITTER) h->retry.jitter = own.jitter;
        if (h->overrides & DTQ_OVR_MODE) h->retry.jitter_mode = own.jitter_mode;
        if (h->retry.base_delay_s > h->retry.max_delay_s)
            return fail(st, section, "base_delay", "must not exceed max_delay");
    }
    for (int i = 0; i < cfg->ncrons && !st->failed; i++) validate_cron(st, &cfg->crons[i]);
    for (int i = 0; i < cfg->npools && !st->failed; i++) validate_pool(st, &cfg->pools[i]);
}

int dtq_namespace_valid(const char *ns) {
    /* dtq_valid_name allows ':', which would blur the key prefix <ns>:... */
    return dtq_valid_name(ns, strlen(ns), 64) && !strchr(ns, ':');
}

dtq_config *dtq_config_load(const char *path, char *err, size_t errlen) {
    dtq_config *cfg = dtq_xcalloc(1, sizeof(*cfg));
    load_state st = {cfg, path ? path : "(defaults)", err, errlen, 0};
    for (size_t i = 0; i < NKEYS; i++) set_key(&st, &config_keys[i], config_keys[i].def);
    cfg->path = path ? dtq_xstrdup(path) : NULL;
    if (path) {
        struct stat sb;
        FILE *f = NULL;
        int rc;
        /* stat first: fopen "succeeds" on a directory (reads then fail, so the file would
         * look empty) and blocks on a FIFO */
        if (stat(path, &sb) != 0)
            fail(&st, NULL, NULL, "cannot open: %s", strerror(errno));
        else if (!S_ISREG(sb.st_mode))
            fail(&st, NULL, NULL, "not a regular file");
        else if (!(f = fopen(path, "r")))
            fail(&st, NULL, NULL, "cannot open: %s", strerror(errno));
        if (f) {
            rc = ini_parse_file(f, ini_cb, &st);
            fclose(f);
            if (rc > 0) { /* a syntax error explains whatever the callbacks saw after it */
                st.failed = 0;
                fail(&st, NULL, NULL, "syntax error on line %d", rc);
            }
        }
    }
    if (!st.failed) apply_env(&st);
    if (!st.failed) validate(&st);
    if (st.failed) {
        dtq_config_free(cfg);
        return NULL;
    }
    return cfg;
}

void dtq_config_free(dtq_config *cfg) {
    if (!cfg) return;
    for (size_t i = 0; i < NKEYS; i++)
        if (config_keys[i].type == KEY_STR) free(*(char **)((char *)cfg + config_keys[i].offset));
    for (int i = 0; i < cfg->nqueues; i++) free(cfg->queues[i]);
    free(cfg->queues);
    for (int i = 0; i < cfg->nhandlers; i++) {
        dtq_handler_conf *h = &cfg->handlers[i];
        free(h->task_type);
        free(h->target);
        free(h->symbol);
        free(h->env);
        free(h->workdir);
    }
    free(cfg->handlers);
    for (int i = 0; i < cfg->ncrons; i++) {
        dtq_cron_conf *c = &cfg->crons[i];
        char **strs[] = {&c->name,      &c->spec,    &c->tz,      &c->queue,
                         &c->task_type, &c->payload, &c->catch_up};
        for (size_t j = 0; j < sizeof(strs) / sizeof(strs[0]); j++) free(*strs[j]);
    }
    free(cfg->crons);
    for (int i = 0; i < cfg->nqueue_confs; i++) {
        free(cfg->queue_confs[i].name);
        free(cfg->queue_confs[i].mode);
    }
    free(cfg->queue_confs);
    for (int i = 0; i < cfg->npools; i++) {
        dtq_pool_conf *p = &cfg->pools[i];
        free(p->name);
        free(p->command);
        free(p->env);
        free(p->workdir);
        free(p->types);
    }
    free(cfg->pools);
    free(cfg->path);
    free(cfg);
}

const dtq_pool_conf *dtq_config_pool(const dtq_config *cfg, const char *name) {
    for (int i = 0; i < cfg->npools; i++)
        if (!strcmp(cfg->pools[i].name, name)) return &cfg->pools[i];
    return NULL;
}

static int same_str(const char *a, const char *b) {
    return !strcmp(a ? a : "", b ? b : "");
}

int dtq_pool_conf_equal(const dtq_pool_conf *a, const dtq_pool_conf *b) {
    return same_str(a->command, b->command) && same_str(a->env, b->env) &&
           same_str(a->workdir, b->workdir) && same_str(a->types, b->types) &&
           a->processes == b->processes && a->inflight == b->inflight &&
           a->max_tasks == b->max_tasks && a->max_rss_mb == b->max_rss_mb &&
           a->start_timeout_ms == b->start_timeout_ms && a->kill_grace_ms == b->kill_grace_ms;
}

const dtq_handler_conf *dtq_config_handler(const dtq_config *cfg, const char *task_type) {
    for (int i = 0; i < cfg->nhandlers; i++)
        if (!strcmp(cfg->handlers[i].task_type, task_type)) return &cfg->handlers[i];
    return NULL;
}

char *dtq_config_prefix(const dtq_config *cfg) {
    return dtq_keys_prefix(cfg->ns, cfg->cluster_hash_tag);
}

void dtq_config_each_key(void (*fn)(const char *, const char *, const char *, const char *, void *),
                         void *arg) {
    for (size_t i = 0; i < NKEYS; i++)
        fn(config_keys[i].section, config_keys[i].key, config_keys[i].def, config_keys[i].doc, arg);
}

/* The key a field publishes, or NULL. A field naming no key of the table is a bug of the
 * list above: every use (and the tests) stops on it. */
static const config_key *field_key(const dtq_config_field *f) {
    const config_key *k;
    if (!f->section) return NULL;
    k = find_key(f->section, f->name);
    if (!k || k->type == KEY_DOUBLE) abort();
    return k;
}

void dtq_config_each_field(void (*fn)(const dtq_config_field *f, void *arg), void *arg) {
    for (size_t i = 0; i < sizeof(config_fields) / sizeof(config_fields[0]); i++) {
        dtq_config_field f = config_fields[i];
        const config_key *k = field_key(&f);
        if (k) {
            f.word = k->type == KEY_STR;
            f.def = k->type != KEY_BOOL ? k->def : !strcmp(k->def, "true") ? "1" : "0";
            f.min = k->type == KEY_BOOL ? 0 : k->min;
            f.max = k->type == KEY_BOOL ? 1 : k->max;
        }
        fn(&f, arg);
    }
}

void dtq_config_publish_args(const dtq_config *cfg, dtq_argv *a) {
    for (size_t i = 0; i < sizeof(config_fields) / sizeof(config_fields[0]); i++) {
        const dtq_config_field *f = &config_fields[i];
        const config_key *k = field_key(f);
        const void *v;
        if (!(f->flags & DTQ_FIELD_PUBLISHED)) continue;
        dtq_argv_adds(a, f->name);
        if (!k) {
            dtq_argv_adds(a, f->def);
            continue;
        }
        v = (const char *)cfg + k->offset;
        if (k->type == KEY_STR)
            dtq_argv_adds(a, *(char *const *)v);
        else if (k->type == KEY_BOOL)
            dtq_argv_addll(a, *(const int *)v);
        else
            dtq_argv_addll(a, (long long)*(const int64_t *)v);
    }
}

void dtq_warn_world_readable(const char *who, const char *what, const char *path) {
    struct stat sb;
    if (!path || !*path || stat(path, &sb) != 0 || !(sb.st_mode & S_IROTH)) return;
    dtq_warn("%s: the %s %s is readable by every user of this host (mode %04o); chmod o-r it", who,
             what, path, (unsigned)(sb.st_mode & 07777));
}

void dtq_config_warn_exposed_secrets(const dtq_config *cfg, const char *who, int url_option) {
    dtq_redis_url u;
    char err[256];
    int password = 0;
    dtq_warn_world_readable(who, "TLS key file", cfg->tls_key_file);
    if (!cfg->path) return;
    /* a password the environment gave is not in the file */
    if (!url_option && !getenv("DTQ_REDIS_URL") &&
        dtq_redis_url_parse(cfg->redis_url, &u, err, sizeof(err)) == 0) {
        password = u.password && *u.password;
        dtq_redis_url_deinit(&u);
    }
    if (!getenv("DTQ_REDIS_SENTINEL_PASSWORD") && *cfg->sentinel_password) password = 1;
    if (password)
        dtq_warn_world_readable(who, "config file (it holds a Redis password)", cfg->path);
}
