/* web.h: dtq-web's server lifecycle (web.c): listening, routing to the handlers of
 * web_api.c and web_events.c, the write gate, static files, the sampling timer. What the
 * handlers share with it is in web_core.h, below both. */
#ifndef DTQ_WEB_H
#define DTQ_WEB_H

#include "web_core.h"

/* Takes ownership of cfg, tokens (NULL: read-only) and read_tokens (NULL: reads need no
 * token); connects to Redis and binds [web] listen. Logs a warning when the listener is not
 * on a loopback address while reads need no token, and when allowed_hosts is "*". NULL
 * with the reason in err when the address cannot be bound, allowed_hosts does not parse or
 * the TLS settings do not load (dtq-web exits 78); the caller keeps what it gave then. */
dtq_web *dtq_web_new(struct event_base *base, dtq_config *cfg, dtq_web_tokens *tokens,
                     dtq_web_tokens *read_tokens, char *err, size_t errlen);
/* Swaps the tokens (SIGHUP: the token file read again); takes ownership (NULL: read-only). */
void dtq_web_set_tokens(dtq_web *w, dtq_web_tokens *tokens);
/* Swaps the read tokens (SIGHUP: the read token file read again); takes ownership. */
void dtq_web_set_read_tokens(dtq_web *w, dtq_web_tokens *read_tokens);
/* Closes the listener, the event streams and the connections. NULL-safe. */
void dtq_web_free(dtq_web *w);

#endif
