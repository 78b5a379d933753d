/* web_auth.h: dtq-web's bearer tokens. A token file holds one token per line, or
 * "<name> <token>" to record the actor "dtq-web:<name>" in the audit stream; blank lines and
 * lines starting with '#' are skipped. A write request must carry
 * "Authorization: Bearer <token>" naming one of them; the check compares SHA-256 digests
 * with CRYPTO_memcmp against every token, so its time does not depend on how much of a
 * guess matched, nor on which token matched. Pure: no event loop, no Redis. */
#ifndef DTQ_WEB_AUTH_H
#define DTQ_WEB_AUTH_H

#include <stddef.h>

#define DTQ_WEB_TOKEN_MIN 16 /* bytes: shorter tokens are refused at load */
#define DTQ_WEB_TOKENS_MAX 64

typedef struct dtq_web_tokens dtq_web_tokens;

/* Parses the text of a token file. NULL with the reason in err (a line number and what
 * is wrong: no token at all, a token shorter than DTQ_WEB_TOKEN_MIN, a bad name, more than
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

#endif
