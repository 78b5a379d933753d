/* tls.h: the client side of rediss://, shared by the daemon (rconn.c) and dtqctl: one
 * SSL_CTX built from the [redis] tls_* keys, and per connection an SSL that checks the
 * server's name (or IP address) and sends SNI. OpenSSL only; no event loop here. */
#ifndef DTQ_TLS_H
#define DTQ_TLS_H

#include <stddef.h>

#include <openssl/ssl.h>

#include "config.h"

typedef struct dtq_tls_conf {
    const char *ca_file;   /* "" or NULL: the system store */
    const char *cert_file; /* client certificate; with key_file, or neither */
    const char *key_file;
    const char *server_name; /* "" or NULL: the host the connection is made to */
    int verify;              /* 0: no chain and no name check */
} dtq_tls_conf;

typedef struct dtq_tls dtq_tls;

/* Loads the CA, client certificate and key. NULL with the reason in err (the key named,
 * then OpenSSL's words). Reference-counted: dtq_tls_ref / dtq_tls_unref (NULL-safe). */
dtq_tls *dtq_tls_new(const dtq_tls_conf *conf, char *err, size_t errlen);
/* The same from the [redis] tls_* keys (daemon, --check-config and dtqctl). */
dtq_tls *dtq_tls_from_config(const dtq_config *cfg, char *err, size_t errlen);
dtq_tls *dtq_tls_ref(dtq_tls *t);
void dtq_tls_unref(dtq_tls *t);
int dtq_tls_verifies(const dtq_tls *t);
int dtq_tls_has_client_cert(const dtq_tls *t);

/* A client SSL for a connection to `host`: SNI (for a name, not an address) and, when
 * verifying, the name or IP address the certificate must match. NULL on failure. */
SSL *dtq_tls_ssl_new(const dtq_tls *t, const char *host, char *err, size_t errlen);

/* After a completed handshake: DTQ_OK when the peer may be used (verification off, or a
 * certificate was presented and verified); otherwise the reason. */
int dtq_tls_peer_ok(const dtq_tls *t, SSL *ssl, char *why, size_t whylen);

/* Why a handshake or a TLS read/write failed, in words: the certificate verification
 * error when there is one (X509_verify_cert_error_string), else the OpenSSL error `err`
 * (0: the thread's error queue), else `fallback`. */
void dtq_tls_describe(SSL *ssl, unsigned long err, const char *fallback, char *out, size_t outlen);

#endif
