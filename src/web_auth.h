/* web_auth.h: dtq-web's access checks: bearer tokens, and the names a request's Host may
 * carry (against DNS rebinding).
 *
 * Tokens. A token file holds one token per line, or
 * "<name> <token>" to record the actor "dtq-web:<name>" in the audit stream; blank lines and
 * lines starting with '#' are skipped. A write request must carry
 * "Authorization: Bearer <token>" naming one of them; the check compares SHA-256 digests
 * with CRYPTO_memcmp against every token, so its time does not depend on how much of a
 * guess matched, nor on which token matched. Pure: no event loop, no Redis. */
#ifndef DTQ_WEB_AUTH_H
#define DTQ_WEB_AUTH_H

#include <stddef.h>

/* A token must carry at least 32 random bytes (256 bits), so it cannot be guessed through
 * the port: a token of hex digits only needs 64 of them (`openssl rand -hex 32`), any other
 * token 43 characters (`openssl rand -base64 32` makes 44). Shorter ones are refused at
 * load with the file and the line. */
#define DTQ_WEB_TOKEN_MIN 43     /* characters of a token that is not all hex digits */
#define DTQ_WEB_TOKEN_MIN_HEX 64 /* hex digits of an all-hex token */
#define DTQ_WEB_TOKENS_MAX 64

typedef struct dtq_web_tokens dtq_web_tokens;

/* Parses the text of a token file. NULL with the reason in err (a line number and what
 * is wrong: no token at all, a token shorter than the minimum above, a bad name, more than
 * DTQ_WEB_TOKENS_MAX tokens). Caller-owned: dtq_web_tokens_free. */
dtq_web_tokens *dtq_web_tokens_parse(const char *text, char *err, size_t errlen);
/* Reads and parses the file at path (at most 64 KiB); the same errors, plus unreadable. */
dtq_web_tokens *dtq_web_tokens_load(const char *path, char *err, size_t errlen);
void dtq_web_tokens_free(dtq_web_tokens *t); /* NULL-safe */
int dtq_web_tokens_count(const dtq_web_tokens *t);

/* The actor for the value of an Authorization header: "dtq-web" or "dtq-web:<name>"
 * (borrowed from t), or NULL when the header is absent (NULL), not a Bearer credential, or
 * names no token of t. */
const char *dtq_web_tokens_check(const dtq_web_tokens *t, const char *authorization);

/* Hosts. A page of another site can reach dtq-web through a name of its own that resolves
 * to dtq-web's address (DNS rebinding); the browser then sends that name as Host. dtq-web
 * answers only a Host that is
 *   - the listen address, with the listen port or none: an IP address compared as an
 *     address ("[::1]" and "[0::1]" are one), or the name as written in [web] listen; when
 *     listen is every address (":port", "0.0.0.0", "[::]") any IP address;
 *   - localhost, with the listen port or none;
 *   - an entry of [web] allowed_hosts, with any port or none (a reverse proxy or a port
 *     forward may present its own).
 * A name compares without regard to case. An entry "*" turns the check off. */
#define DTQ_WEB_HOSTS_MAX 64 /* entries of allowed_hosts */

typedef struct dtq_web_hosts dtq_web_hosts;

/* Parses allowed_hosts: entries separated by blanks or commas, each a DNS name (letters,
 * digits, '-', '_', dot-separated labels), an IPv4 address, an IPv6 address (bare or in
 * brackets), or "*"; no port. listen is [web] listen (host:port, :port, [v6]:port). NULL
 * with the reason in err: the entry and what is wrong with it, or listen not host:port.
 * Caller-owned: dtq_web_hosts_free. */
dtq_web_hosts *dtq_web_hosts_new(const char *listen, const char *allowed, char *err, size_t errlen);
void dtq_web_hosts_free(dtq_web_hosts *h); /* NULL-safe */
/* 1 when allowed_hosts holds "*": every Host is answered. */
int dtq_web_hosts_any(const dtq_web_hosts *h);
/* 1 when the value of a Host header (host[:port]; an IPv6 address in brackets) names
 * dtq-web as above; 0 for any other value, an empty or malformed one included. */
int dtq_web_hosts_check(const dtq_web_hosts *h, const char *host);

/* The Host check of one request, dtq-web's and the daemon's [http] endpoint's. host: the
 * first Host header's value (NULL: none); nhost: how many Host headers came; target_host:
 * host[:port] of a request target in absolute form (NULL: origin form); http10: an HTTP/1.0
 * request. Returns 0 to answer it; 400 for Host given twice or an HTTP/1.1 request without
 * one (an HTTP/1.0 request without Host passes: no browser sends one, so no page of another
 * site can make it); 421 for a name that is not the server's (dtq_web_hosts_check), with
 * *refused the name. *why says what is wrong either way. */
int dtq_web_hosts_request(const dtq_web_hosts *h, const char *host, int nhost,
                          const char *target_host, int http10, const char **refused,
                          const char **why);

#endif
