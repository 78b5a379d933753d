/* tls.c: see tls.h. */
#include "tls.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

struct dtq_tls {
    SSL_CTX *ctx;
    char *server_name; /* NULL: the connection's host */
    int verify;
    int client_cert;
    int refs;
};

/* The first error of the thread's OpenSSL queue in words; the queue is emptied. */
static void openssl_reason(char *out, size_t outlen, const char *fallback) {
    unsigned long e = ERR_get_error();
    if (!e) {
        snprintf(out, outlen, "%s", fallback);
    } else {
        const char *r = ERR_reason_error_string(e);
        if (r)
            snprintf(out, outlen, "%s", r);
        else
            ERR_error_string_n(e, out, outlen);
    }
    ERR_clear_error();
}

static dtq_tls *tls_fail(dtq_tls *t, char *err, size_t errlen, const char *key, const char *file) {
    char why[256];
    openssl_reason(why, sizeof(why), "unknown OpenSSL error");
    if (file)
        snprintf(err, errlen, "[redis] %s '%s': %s", key, file, why);
    else
        snprintf(err, errlen, "[redis] %s: %s", key, why);
    dtq_tls_unref(t);
    return NULL;
}

dtq_tls *dtq_tls_new(const dtq_tls_conf *conf, char *err, size_t errlen) {
    dtq_tls *t = dtq_xcalloc(1, sizeof(*t));
    int has_cert = conf->cert_file && *conf->cert_file, has_key = conf->key_file && *conf->key_file;
    t->refs = 1;
    t->verify = conf->verify;
    if (conf->server_name && *conf->server_name) t->server_name = dtq_xstrdup(conf->server_name);
    ERR_clear_error();
    t->ctx = SSL_CTX_new(TLS_client_method());
    if (!t->ctx) return tls_fail(t, err, errlen, "url", NULL);
    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    /* the bufferevent may hand SSL_write a moved buffer on a retry */
    SSL_CTX_set_mode(t->ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_ENABLE_PARTIAL_WRITE);
    if (conf->ca_file && *conf->ca_file) {
        if (SSL_CTX_load_verify_locations(t->ctx, conf->ca_file, NULL) != 1)
            return tls_fail(t, err, errlen, "tls_ca_file", conf->ca_file);
    } else if (SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
        return tls_fail(t, err, errlen, "tls_ca_file", NULL);
    }
    if (has_cert != has_key) {
        snprintf(err, errlen,
                 "[redis] %s: a client certificate needs both tls_cert_file and "
                 "tls_key_file",
                 has_cert ? "tls_key_file" : "tls_cert_file");
        dtq_tls_unref(t);
        return NULL;
    }
    t->client_cert = has_cert;
    if (has_cert) {
        if (SSL_CTX_use_certificate_chain_file(t->ctx, conf->cert_file) != 1)
            return tls_fail(t, err, errlen, "tls_cert_file", conf->cert_file);
        if (SSL_CTX_use_PrivateKey_file(t->ctx, conf->key_file, SSL_FILETYPE_PEM) != 1)
            return tls_fail(t, err, errlen, "tls_key_file", conf->key_file);
        if (SSL_CTX_check_private_key(t->ctx) != 1)
            return tls_fail(t, err, errlen, "tls_key_file", conf->key_file);
    }
    /* SSL_VERIFY_PEER: a chain or name that does not verify aborts the handshake itself,
     * so no byte of a command ever goes to an unverified server. */
    SSL_CTX_set_verify(t->ctx, t->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    return t;
}

dtq_tls *dtq_tls_from_config(const dtq_config *cfg, char *err, size_t errlen) {
    dtq_tls_conf conf = {cfg->tls_ca_file, cfg->tls_cert_file, cfg->tls_key_file,
                         cfg->tls_server_name, cfg->tls_verify};
    return dtq_tls_new(&conf, err, errlen);
}

dtq_tls *dtq_tls_ref(dtq_tls *t) {
    if (t) t->refs++;
    return t;
}

void dtq_tls_unref(dtq_tls *t) {
    if (!t || --t->refs > 0) return;
    SSL_CTX_free(t->ctx);
    free(t->server_name);
    free(t);
}

int dtq_tls_verifies(const dtq_tls *t) {
    return t->verify;
}

int dtq_tls_has_client_cert(const dtq_tls *t) {
    return t->client_cert;
}

static int is_ip_address(const char *s) {
    unsigned char buf[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

SSL *dtq_tls_ssl_new(const dtq_tls *t, const char *host, char *err, size_t errlen) {
    const char *name = t->server_name ? t->server_name : host;
    int ip = is_ip_address(name);
    SSL *ssl;
    ERR_clear_error();
    ssl = SSL_new(t->ctx);
    if (!ssl) {
        openssl_reason(err, errlen, "SSL_new failed");
        return NULL;
    }
    /* SNI carries host names only (RFC 6066); an address is checked, not sent */
    if (!ip && SSL_set_tlsext_host_name(ssl, name) != 1) {
        openssl_reason(err, errlen, "cannot set the server name");
        SSL_free(ssl);
        return NULL;
    }
    if (t->verify) {
        X509_VERIFY_PARAM *param = SSL_get0_param(ssl);
        int ok;
        if (ip) {
            ok = X509_VERIFY_PARAM_set1_ip_asc(param, name);
        } else {
            X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
            ok = X509_VERIFY_PARAM_set1_host(param, name, 0);
        }
        if (ok != 1) {
            openssl_reason(err, errlen, "cannot set the name to verify");
            SSL_free(ssl);
            return NULL;
        }
    }
    return ssl;
}

int dtq_tls_peer_ok(const dtq_tls *t, SSL *ssl, char *why, size_t whylen) {
    X509 *peer;
    long vr;
    if (!t->verify) return DTQ_OK;
    peer = SSL_get1_peer_certificate(ssl);
    vr = SSL_get_verify_result(ssl);
    if (!peer) {
        snprintf(why, whylen, "the server presented no certificate");
        return DTQ_ERR;
    }
    X509_free(peer);
    if (vr != X509_V_OK) {
        snprintf(why, whylen, "certificate verify failed: %s", X509_verify_cert_error_string(vr));
        return DTQ_ERR;
    }
    return DTQ_OK;
}

void dtq_tls_describe(SSL *ssl, unsigned long err, const char *fallback, char *out, size_t outlen) {
    /* without SSL_VERIFY_PEER the result is recorded but did not fail anything */
    long vr = ssl && (SSL_get_verify_mode(ssl) & SSL_VERIFY_PEER) ? SSL_get_verify_result(ssl)
                                                                  : X509_V_OK;
    if (vr != X509_V_OK) {
        snprintf(out, outlen, "certificate verify failed: %s", X509_verify_cert_error_string(vr));
        ERR_clear_error();
        return;
    }
    if (!err) {
        openssl_reason(out, outlen, fallback);
        return;
    }
    {
        const char *r = ERR_reason_error_string(err);
        if (r)
            snprintf(out, outlen, "%s", r);
        else
            ERR_error_string_n(err, out, outlen);
    }
    ERR_clear_error();
}
