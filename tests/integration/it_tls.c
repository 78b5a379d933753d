/* it_tls.c: rediss:// against a real redis-server with TLS. Certificates are made at test
 * time with the openssl CLI: a CA, a server certificate for 127.0.0.1 and localhost
 * (subjectAltName) signed by it, a client certificate signed by it, and an unrelated CA.
 * Each test's Redis listens on a TLS port, and also on a plain port and the harness's
 * unix socket, through which the tests look at the data. */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* X509_verify_cert_error_string of a chain no configured CA vouches for */
#define UNTRUSTED_1 "certificate verify failed: self-signed certificate in certificate chain"
#define UNTRUSTED_2 "certificate verify failed: unable to get local issuer certificate"

static char certs[64]; /* made once by main(), before the suite forks its tests */
static th_redis R;
static redisContext *C;
static int tls_port;

/* ----------------------------------------------------------------- certificates */

static void run_sh(const char *cmd) {
    int status = system(cmd);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "it_tls: failed: %s\n", cmd);
        exit(EXIT_FAILURE);
    }
}

/* EC keys: quick to make. `ca`: a self-signed CA; `leaf` signed by `ca` with `ext`. */
static void make_ca(const char *name) {
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "cd %s && openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
             "-nodes -keyout %s.key -out %s.crt -days 2 -subj /CN=%s "
             "-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign "
             ">/dev/null 2>&1",
             certs, name, name, name);
    run_sh(cmd);
}

static void make_leaf(const char *name, const char *ca, const char *cn, const char *ext) {
    char cmd[1400];
    snprintf(cmd, sizeof(cmd),
             "cd %s && printf '%s\\n' > %s.ext && "
             "openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
             "-keyout %s.key -out %s.csr -subj /CN=%s >/dev/null 2>&1 && "
             "openssl x509 -req -in %s.csr -CA %s.crt -CAkey %s.key -CAcreateserial "
             "-out %s.crt -days 2 -extfile %s.ext >/dev/null 2>&1",
             certs, ext, name, name, name, cn, name, ca, ca, name, name);
    run_sh(cmd);
}

static void make_certs(void) {
    snprintf(certs, sizeof(certs), "/tmp/dtq-tls-XXXXXX");
    if (!mkdtemp(certs)) {
        perror("mkdtemp");
        exit(EXIT_FAILURE);
    }
    make_ca("ca");
    make_ca("other-ca");
    make_leaf("server", "ca", "localhost",
              "subjectAltName=IP:127.0.0.1,DNS:localhost\\nextendedKeyUsage=serverAuth");
    make_leaf("client", "ca", "dtq-worker", "extendedKeyUsage=clientAuth");
}

static const char *cert(const char *file) {
    static char paths[8][128];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, sizeof(paths[0]), "%s/%s", certs, file);
    return p;
}

/* ----------------------------------------------------------------- fixtures */

/* Redis with TLS on tls_port (clients must present a certificate when auth_clients). */
static void start_redis(int auth_clients) {
    char extra[512];
    tls_port = th_free_port();
    snprintf(extra, sizeof(extra),
             "--tls-port %d --tls-cert-file %s --tls-key-file %s --tls-ca-cert-file %s "
             "--tls-auth-clients %s",
             tls_port, cert("server.crt"), cert("server.key"), cert("ca.crt"),
             auth_clients ? "yes" : "no");
    th_fixture_start(&R, &C, 0, extra);
}

static void stop_redis(void) {
    th_fixture_stop(&R, &C);
}

static void teardown(void) {
    stop_redis();
}

/* A daemon on rediss://127.0.0.1:<tls_port> (or `host`) with the [redis] lines `tls`. */
static void start_daemon(th_daemon *d, const char *worker_id, const char *host, const char *tls) {
    char ini[1024];
    snprintf(ini, sizeof(ini),
             "url = rediss://%s:%d\nconnect_timeout_ms = 1000\n%s\n"
             "[worker]\nworker_id = %s\n[handler:echo]\nbuiltin = echo\n",
             host ? host : "127.0.0.1", tls_port, tls, worker_id);
    th_daemon_start(d, &R, ini);
}

/* How many clients are connected through the TLS port. */
static int tls_clients(void) {
    redisReply *r = th_cmd(C, "CLIENT LIST");
    char needle[64];
    int n = 0;
    snprintf(needle, sizeof(needle), "laddr=127.0.0.1:%d ", tls_port);
    for (const char *p = strstr(r->str, needle); p; p = strstr(p + 1, needle)) n++;
    freeReplyObject(r);
    return n;
}

/* A daemon that cannot connect: it keeps running and retrying, never heartbeats, and
 * claims nothing (the task enqueued through the unix socket stays queued, unclaimed). */
static void assert_never_ready(th_daemon *d, const char *worker_id, const char *why) {
    char *log;
    int status;
    ck_assert_msg(th_wait_log(d->log, why, 4, 15000), "'%s' not logged (and retried)", why);
    ck_assert_int_eq(waitpid(d->pid, &status, WNOHANG), 0);
    {
        redisReply *r = th_cmd(C, "EXISTS dtq:worker:%s", worker_id);
        ck_assert_int_eq(th_int(r), 0);
    }
    th_assert_field(C, "waiting", "status", "queued");
    {
        char *w = th_task_field(C, "waiting", "worker_id");
        ck_assert_msg(w == NULL || !*w, "claimed by %s", w);
        free(w);
    }
    ck_assert_int_eq(th_daemon_stop(d, SIGTERM, 10000), 0);
    log = th_read_file(d->log);
    ck_assert_ptr_null(strstr(log, "ready: serving"));
    free(log);
}

/* The Functions, loaded through the unix socket, and one task for a daemon to claim. */
static void prepare_waiting_task(void) {
    th_load_library(C);
    th_enqueue(C, "default", "waiting", "echo", "{\"n\":1}", NULL);
}

/* ----------------------------------------------------------------- tests */

/* (1) A daemon on rediss:// runs tasks to succeeded; its connections are on the TLS port. */
START_TEST(test_tasks_run_over_tls) {
    th_daemon d;
    char line[256];
    start_redis(0);
    snprintf(line, sizeof(line), "tls_ca_file = %s", cert("ca.crt"));
    start_daemon(&d, "w-tls", NULL, line);
    th_daemon_wait_ready(C, "w-tls", 10000);
    ck_assert_int_ge(tls_clients(), 2); /* cmd and blk */
    for (int i = 0; i < 20; i++) {
        char id[32];
        snprintf(id, sizeof(id), "t%d", i);
        th_enqueue(C, "default", id, "echo", "{\"n\":1}", NULL);
    }
    for (int i = 0; i < 20; i++) {
        char id[32];
        snprintf(id, sizeof(id), "t%d", i);
        th_expect_status(C, id, "succeeded", 10000);
        th_assert_field(C, id, "worker_id", "w-tls");
    }
    {
        redisReply *r = th_cmd(C, "GET dtq:result:t7");
        ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
        ck_assert_str_eq(r->str, "{\"n\":1}");
        freeReplyObject(r);
    }
    /* a Redis restart: the daemon reconnects over TLS and serves again */
    th_redis_restart(&R);
    redisFree(C);
    C = th_connect(&R);
    th_daemon_wait_ready(C, "w-tls", 15000);
    th_enqueue(C, "default", "after-restart", "echo", "{\"n\":1}", NULL);
    th_expect_status(C, "after-restart", "succeeded", 15000);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* (2) A CA that did not sign the server's certificate: never ready, the log says why. */
START_TEST(test_wrong_ca_never_ready) {
    th_daemon d;
    char line[256], *log;
    start_redis(0);
    prepare_waiting_task();
    snprintf(line, sizeof(line), "tls_ca_file = %s", cert("other-ca.crt"));
    start_daemon(&d, "w-wrong-ca", NULL, line);
    assert_never_ready(&d, "w-wrong-ca", "TLS handshake failed: certificate verify failed");
    /* which words depend on whether the server sends its CA along (Redis does: OpenSSL
     * completes the chain from --tls-ca-cert-file) */
    log = th_read_file(d.log);
    ck_assert_msg(strstr(log, UNTRUSTED_1) || strstr(log, UNTRUSTED_2), "log: %s", log);
    free(log);
}
END_TEST

/* (3) --tls-auth-clients yes: with tls_cert_file/tls_key_file it works, without them the
 * server refuses the handshake (and the daemon says so). */
START_TEST(test_client_certificate) {
    th_daemon good, bad;
    char line[512];
    start_redis(1);
    prepare_waiting_task();
    snprintf(line, sizeof(line), "tls_ca_file = %s", cert("ca.crt"));
    start_daemon(&bad, "w-no-cert", NULL, line);
    assert_never_ready(&bad, "w-no-cert", "TLS handshake failed");
    snprintf(line, sizeof(line), "tls_ca_file = %s\ntls_cert_file = %s\ntls_key_file = %s",
             cert("ca.crt"), cert("client.crt"), cert("client.key"));
    start_daemon(&good, "w-cert", NULL, line);
    th_daemon_wait_ready(C, "w-cert", 10000);
    th_expect_status(C, "waiting", "succeeded", 10000);
    th_enqueue(C, "default", "with-cert", "echo", "{\"n\":1}", NULL);
    th_expect_status(C, "with-cert", "succeeded", 10000);
    ck_assert_int_eq(th_daemon_stop(&good, SIGTERM, 10000), 0);
}
END_TEST

/* (4) tls_server_name is the name checked (a mismatch fails verification; "localhost",
 * in the certificate, works over 127.0.0.1), and tls_verify = false connects to a server
 * no configured CA vouches for, with a warning. */
START_TEST(test_server_name_and_verify_off) {
    th_daemon bad, named, insecure;
    char line[512], *log;
    start_redis(0);
    prepare_waiting_task();
    snprintf(line, sizeof(line), "tls_ca_file = %s\ntls_server_name = redis.example.com",
             cert("ca.crt"));
    start_daemon(&bad, "w-mismatch", NULL, line);
    assert_never_ready(&bad, "w-mismatch", "certificate verify failed: hostname mismatch");
    /* a name that is an IP address is checked as one */
    snprintf(line, sizeof(line), "tls_ca_file = %s\ntls_server_name = 10.1.2.3", cert("ca.crt"));
    start_daemon(&bad, "w-ip", NULL, line);
    assert_never_ready(&bad, "w-ip", "certificate verify failed: IP address mismatch");
    snprintf(line, sizeof(line), "tls_ca_file = %s\ntls_server_name = localhost", cert("ca.crt"));
    start_daemon(&named, "w-named", NULL, line);
    th_daemon_wait_ready(C, "w-named", 10000);
    th_expect_status(C, "waiting", "succeeded", 10000);
    ck_assert_int_eq(th_daemon_stop(&named, SIGTERM, 10000), 0);
    snprintf(line, sizeof(line), "tls_ca_file = %s\ntls_verify = false", cert("other-ca.crt"));
    start_daemon(&insecure, "w-insecure", NULL, line);
    th_daemon_wait_ready(C, "w-insecure", 10000);
    th_enqueue(C, "default", "insecure", "echo", "{\"n\":1}", NULL);
    th_expect_status(C, "insecure", "succeeded", 10000);
    ck_assert_int_eq(th_daemon_stop(&insecure, SIGTERM, 10000), 0);
    log = th_read_file(insecure.log);
    ck_assert_msg(strstr(log, "warn  [redis] tls_verify = false: the Redis server's certificate "
                              "is NOT verified") != NULL,
                  "log: %s", log);
    ck_assert_ptr_null(strstr(log, "TLS handshake failed"));
    free(log);
}
END_TEST

/* Runs dtqctl on rediss://127.0.0.1:<tls_port> with `env` (shell assignments); returns the
 * exit code and stdout+stderr in *out. */
static int ctl(char **out, const char *env, const char *args) {
    char no_ca[1280], with_url[2048];
    snprintf(no_ca, sizeof(no_ca), "-u DTQ_REDIS_TLS_CA_FILE %s", env);
    snprintf(with_url, sizeof(with_url), "-u rediss://127.0.0.1:%d %s", tls_port, args);
    return th_run_dtqctl(&R, out, no_ca, with_url);
}

/* (5) dtqctl over TLS: enqueue, show, stats, events; and a wrong CA is refused. With
 * --tls-auth-clients yes, so the client certificate keys reach dtqctl too. */
START_TEST(test_dtqctl_over_tls) {
    th_daemon d;
    char env[1024], line[512], cmd[2048], path[400], *out;
    start_redis(1);
    snprintf(line, sizeof(line), "tls_ca_file = %s\ntls_cert_file = %s\ntls_key_file = %s",
             cert("ca.crt"), cert("client.crt"), cert("client.key"));
    start_daemon(&d, "w-ctl", NULL, line);
    th_daemon_wait_ready(C, "w-ctl", 10000);
    snprintf(env, sizeof(env),
             "DTQ_REDIS_TLS_CA_FILE=%s DTQ_REDIS_TLS_CERT_FILE=%s DTQ_REDIS_TLS_KEY_FILE=%s",
             cert("ca.crt"), cert("client.crt"), cert("client.key"));

    ck_assert_int_eq(ctl(&out, env, "enqueue default echo '{\"x\":2}' --id c1 --wait"), 0);
    ck_assert_msg(strstr(out, "c1 created\n") != NULL, "%s", out);
    free(out);
    ck_assert_int_eq(ctl(&out, env, "show c1"), 0);
    ck_assert_msg(strstr(out, "status             succeeded\n") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "result             {\"x\":2}\n") != NULL, "%s", out);
    free(out);
    ck_assert_int_eq(ctl(&out, env, "--json stats"), 0);
    ck_assert_msg(strstr(out, "\"queues\":{\"default\":{\"depth\":") != NULL, "%s", out);
    free(out);

    /* events: follow the channel over TLS until one event line arrives */
    th_path(&R, "events.out", path, sizeof(path));
    snprintf(cmd, sizeof(cmd), "%s timeout 10 %s -u rediss://127.0.0.1:%d events >%s 2>&1 &", env,
             DTQCTL_BIN, tls_port, path);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_msg(th_wait_until(th_events_subscribed, C, 5000), "dtqctl events did not subscribe");
    th_enqueue(C, "default", "ev1", "echo", "{\"n\":1}", NULL);
    ck_assert_msg(th_wait_log(path, "\"task_id\":\"ev1\"", 1, 5000), "no event line over TLS");
    out = th_read_file(path);
    ck_assert_msg(strstr(out, "\"type\":\"TASK_") != NULL, "events: %s", out);
    free(out);

    /* without the client certificate the server refuses; with the wrong CA dtqctl does */
    snprintf(env, sizeof(env), "DTQ_REDIS_TLS_CA_FILE=%s", cert("ca.crt"));
    ck_assert_int_eq(ctl(&out, env, "stats"), 1);
    ck_assert_msg(!strncmp(out, "dtqctl: ", 8), "%s", out);
    free(out);
    snprintf(env, sizeof(env),
             "DTQ_REDIS_TLS_CA_FILE=%s DTQ_REDIS_TLS_CERT_FILE=%s DTQ_REDIS_TLS_KEY_FILE=%s",
             cert("other-ca.crt"), cert("client.crt"), cert("client.key"));
    ck_assert_int_eq(ctl(&out, env, "stats"), 1);
    ck_assert_msg(strstr(out, "TLS handshake with Redis at 127.0.0.1:") &&
                      (strstr(out, UNTRUSTED_1) || strstr(out, UNTRUSTED_2)),
                  "%s", out);
    free(out);
    ck_assert_int_eq(th_daemon_stop(&d, SIGTERM, 10000), 0);
}
END_TEST

/* --check-config: the TLS files must exist and be readable, and hold what they claim;
 * a certificate needs its key. dtqctl reads the same keys (exit 2 on a bad one). */
START_TEST(test_check_config) {
    char ini[600], path[400], *out;
    FILE *f;
    start_redis(0);
    th_path(&R, "tls.ini", path, sizeof(path));
#define WRITE_INI(...)                                                                             \
    do {                                                                                           \
        snprintf(ini, sizeof(ini), __VA_ARGS__);                                                   \
        f = fopen(path, "w");                                                                      \
        ck_assert_ptr_nonnull(f);                                                                  \
        fputs(ini, f);                                                                             \
        fclose(f);                                                                                 \
    } while (0)
    WRITE_INI("[redis]\nurl = rediss://127.0.0.1:%d\ntls_ca_file = %s\ntls_cert_file = %s\n"
              "tls_key_file = %s\n",
              tls_port, cert("ca.crt"), cert("client.crt"), cert("client.key"));
    ck_assert_int_eq(th_run_worker(&out, "--check-config", "-c", path, NULL), 0);
    free(out);
    WRITE_INI("[redis]\nurl = rediss://127.0.0.1:%d\ntls_ca_file = %s/missing.crt\n", tls_port,
              certs);
    ck_assert_int_eq(th_run_worker(&out, "--check-config", "-c", path, NULL), 78);
    ck_assert_msg(strstr(out, "[redis] tls_ca_file: cannot read") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "No such file or directory") != NULL, "%s", out);
    free(out);
    WRITE_INI("[redis]\nurl = rediss://127.0.0.1:%d\ntls_cert_file = %s\n", tls_port,
              cert("client.crt"));
    ck_assert_int_eq(th_run_worker(&out, "--check-config", "-c", path, NULL), 78);
    ck_assert_msg(strstr(out, "needs both tls_cert_file and tls_key_file") != NULL, "%s", out);
    free(out);
    /* a key that is not the certificate's */
    WRITE_INI("[redis]\nurl = rediss://127.0.0.1:%d\ntls_cert_file = %s\ntls_key_file = %s\n",
              tls_port, cert("client.crt"), cert("server.key"));
    ck_assert_int_eq(th_run_worker(&out, "--check-config", "-c", path, NULL), 78);
    ck_assert_msg(strstr(out, "[redis] tls_key_file") != NULL, "%s", out);
    free(out);
    /* a CA file that is not PEM */
    WRITE_INI("[redis]\nurl = rediss://127.0.0.1:%d\ntls_ca_file = %s\n", tls_port, path);
    ck_assert_int_eq(th_run_worker(&out, "--check-config", "-c", path, NULL), 78);
    ck_assert_msg(strstr(out, "[redis] tls_ca_file") != NULL, "%s", out);
    free(out);
    {
        char env[600];
        snprintf(env, sizeof(env), "DTQ_REDIS_TLS_KEY_FILE=%s", cert("client.key"));
        ck_assert_int_eq(ctl(&out, env, "stats"), 2);
        ck_assert_msg(strstr(out, "dtqctl: config error:") != NULL, "%s", out);
        free(out);
    }
#undef WRITE_INI
}
END_TEST

int main(void) {
    Suite *s = suite_create("tls");
    TCase *tc = tcase_create("core");
    int rc;
    make_certs();
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, test_tasks_run_over_tls);
    tcase_add_test(tc, test_wrong_ca_never_ready);
    tcase_add_test(tc, test_client_certificate);
    tcase_add_test(tc, test_server_name_and_verify_off);
    tcase_add_test(tc, test_dtqctl_over_tls);
    tcase_add_test(tc, test_check_config);
    suite_add_tcase(s, tc);
    rc = th_run_suite(s);
    {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", certs);
        if (system(cmd) != 0) { /* best effort */
        }
    }
    return rc;
}
