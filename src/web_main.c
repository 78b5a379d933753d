/* web_main.c: dtq-web's entry point: arguments, the [redis]/[web] settings through the
 * daemon's loader (exit 78 on any error), the token file, signals, the loop. */
#include <event2/event.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "redis_url.h"
#include "sdnotify.h"
#include "util.h"
#include "web.h"
#include "web_auth.h"

static void usage(FILE *f) {
    fprintf(f, "usage: dtq-web [-c FILE] [-u REDIS_URL] [-n NAMESPACE] [--listen HOST:PORT]\n"
               "               [--token-file FILE] [--read-token-file FILE] [--version] [--help]\n"
               "  -c, --config FILE      INI file: [redis] (url, namespace, cluster_hash_tag,\n"
               "                         tls_*) and [web] (listen, token_file,\n"
               "                         read_token_file, allowed_hosts); the daemon's\n"
               "                         worker.ini works as it is\n"
               "  -u, --url URL          Redis URL (overrides [redis] url)\n"
               "  -n, --namespace NS     namespace (overrides [redis] namespace)\n"
               "  -l, --listen HOST:PORT address of the dashboard (default 127.0.0.1:8080)\n"
               "  -t, --token-file FILE  bearer tokens that allow writes; without one the\n"
               "                         dashboard is read-only\n"
               "  -r, --read-token-file FILE\n"
               "                         bearer tokens that allow reads (a write token does\n"
               "                         too); without one reads need no token\n");
}

typedef struct app {
    struct event_base *base;
    dtq_web *web;
    char *token_file;      /* NULL: read-only */
    char *read_token_file; /* NULL: reads need no token */
} app;

static void stop_cb(evutil_socket_t sig, short what, void *arg) {
    app *a = arg;
    DTQ_UNUSED(what);
    dtq_info("web: signal %d, stopping", (int)sig);
    dtq_sdnotify("STOPPING=1");
    event_base_loopexit(a->base, NULL);
}

/* SIGHUP: the token files are read again; a file that does not load keeps the old tokens. */
static void hup_cb(evutil_socket_t sig, short what, void *arg) {
    app *a = arg;
    char err[512];
    dtq_web_tokens *t;
    DTQ_UNUSED(sig);
    DTQ_UNUSED(what);
    if (a->read_token_file) {
        t = dtq_web_tokens_load(a->read_token_file, err, sizeof(err));
        if (!t) {
            dtq_error("web: SIGHUP: the read token file does not load, the old read tokens "
                      "stay: %s",
                      err);
        } else {
            dtq_info("web: SIGHUP: %d read token(s) loaded from %s", dtq_web_tokens_count(t),
                     a->read_token_file);
            dtq_web_set_read_tokens(a->web, t);
        }
    }
    if (!a->token_file) {
        dtq_info("web: SIGHUP: no token file configured; still read-only");
        return;
    }
    t = dtq_web_tokens_load(a->token_file, err, sizeof(err));
    if (!t) {
        dtq_error("web: SIGHUP: the token file does not load, the old tokens stay: %s", err);
        return;
    }
    dtq_info("web: SIGHUP: %d token(s) loaded from %s", dtq_web_tokens_count(t), a->token_file);
    dtq_web_set_tokens(a->web, t);
}

static int config_error(const char *msg) {
    fprintf(stderr, "dtq-web: config error: %s\n", msg);
    return DTQ_EX_CONFIG;
}

int main(int argc, char **argv) {
    static const struct option opts[] = {{"config", required_argument, NULL, 'c'},
                                         {"url", required_argument, NULL, 'u'},
                                         {"namespace", required_argument, NULL, 'n'},
                                         {"listen", required_argument, NULL, 'l'},
                                         {"token-file", required_argument, NULL, 't'},
                                         {"read-token-file", required_argument, NULL, 'r'},
                                         {"version", no_argument, NULL, 'v'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *path = NULL, *url = NULL, *ns = NULL, *listen = NULL, *token_file = NULL,
               *read_token_file = NULL;
    char err[1024], msg[1200];
    dtq_config *cfg;
    dtq_web_tokens *tokens = NULL, *read_tokens = NULL;
    enum dtq_log_level lvl;
    enum dtq_log_format fmt;
    struct event *sigs[4];
    app a = {NULL, NULL, NULL, NULL};
    int opt;

    dtq_hide_credentials();
    while ((opt = getopt_long(argc, argv, "c:u:n:l:t:r:hv", opts, NULL)) != -1) {
        switch (opt) {
        case 'c': path = optarg; break;
        case 'u': url = optarg; break;
        case 'n': ns = optarg; break;
        case 'l': listen = optarg; break;
        case 't': token_file = optarg; break;
        case 'r': read_token_file = optarg; break;
        case 'v': printf("dtq-web %s\n", DTQ_VERSION); return 0;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "dtq-web: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    cfg = dtq_config_load(path, err, sizeof(err));
    if (!cfg) return config_error(err);
    /* the options override the file and the environment, checked like the file's keys */
    if (url) {
        dtq_redis_url u;
        if (dtq_redis_url_parse(url, &u, err, sizeof(err)) != DTQ_OK) {
            snprintf(msg, sizeof(msg), "-u: %s", err);
            dtq_config_free(cfg);
            return config_error(msg);
        }
        dtq_redis_url_deinit(&u);
        free(cfg->redis_url);
        cfg->redis_url = dtq_xstrdup(url);
    }
    if (ns) {
        if (!dtq_namespace_valid(ns)) {
            dtq_config_free(cfg);
            return config_error("-n: a namespace matches " DTQ_NAMESPACE_RULE);
        }
        free(cfg->ns);
        cfg->ns = dtq_xstrdup(ns);
    }
    if (listen) {
        char *host;
        int port;
        if (dtq_split_hostport(listen, &host, &port) != DTQ_OK) {
            snprintf(msg, sizeof(msg), "--listen: '%s' is not host:port, :port or [IPv6]:port",
                     listen);
            dtq_config_free(cfg);
            return config_error(msg);
        }
        free(host);
        free(cfg->web_listen);
        cfg->web_listen = dtq_xstrdup(listen);
    }
    if (token_file) {
        free(cfg->web_token_file);
        cfg->web_token_file = dtq_xstrdup(token_file);
    }
    if (read_token_file) {
        free(cfg->web_read_token_file);
        cfg->web_read_token_file = dtq_xstrdup(read_token_file);
    }
    dtq_log_level_from_string(cfg->log_level, &lvl);
    dtq_log_format_from_string(cfg->log_format, &fmt);
    dtq_log_setup(lvl, fmt);
    dtq_config_warn_exposed_secrets(cfg, "web", url != NULL);
    if (*cfg->web_token_file) {
        tokens = dtq_web_tokens_load(cfg->web_token_file, err, sizeof(err));
        if (!tokens) {
            snprintf(msg, sizeof(msg), "[web] token_file: %s", err);
            dtq_config_free(cfg);
            return config_error(msg);
        }
        dtq_warn_world_readable("web", "token file", cfg->web_token_file);
        a.token_file = dtq_xstrdup(cfg->web_token_file);
    }
    if (*cfg->web_read_token_file) {
        read_tokens = dtq_web_tokens_load(cfg->web_read_token_file, err, sizeof(err));
        if (!read_tokens) {
            snprintf(msg, sizeof(msg), "[web] read_token_file: %s", err);
            dtq_web_tokens_free(tokens);
            free(a.token_file);
            dtq_config_free(cfg);
            return config_error(msg);
        }
        dtq_warn_world_readable("web", "read token file", cfg->web_read_token_file);
        a.read_token_file = dtq_xstrdup(cfg->web_read_token_file);
    }
    signal(SIGPIPE, SIG_IGN); /* a browser that goes away mid-answer */
    a.base = event_base_new();
    if (!a.base) abort();
    a.web = dtq_web_new(a.base, cfg, tokens, read_tokens, err, sizeof(err));
    if (!a.web) {
        dtq_web_tokens_free(tokens);
        dtq_web_tokens_free(read_tokens);
        free(a.read_token_file);
        dtq_config_free(cfg);
        free(a.token_file);
        event_base_free(a.base);
        return config_error(err);
    }
    sigs[0] = evsignal_new(a.base, SIGTERM, stop_cb, &a);
    sigs[1] = evsignal_new(a.base, SIGINT, stop_cb, &a);
    sigs[2] = evsignal_new(a.base, SIGHUP, hup_cb, &a);
    sigs[3] = NULL;
    for (int i = 0; sigs[i]; i++) evsignal_add(sigs[i], NULL);
    dtq_info("dtq-web %s: http://%s/ for namespace %s (%s; %s)", DTQ_VERSION, a.web->listen,
             a.web->cfg->ns, tokens ? "writes need a bearer token" : "read-only: no token file",
             read_tokens ? "reads need a bearer token" : "reads need no token");
    dtq_sdnotify("READY=1\nSTATUS=serving");
    event_base_dispatch(a.base);
    for (int i = 0; sigs[i]; i++) event_free(sigs[i]);
    dtq_web_free(a.web);
    free(a.token_file);
    free(a.read_token_file);
    event_base_loop(a.base, EVLOOP_NONBLOCK); /* deferred bufferevent frees (see worker.c) */
    event_base_free(a.base);
    return 0;
}
