/* web.h: dtq-web's server lifecycle (web.c): listening, routing to the handlers of
 * web_api.c and web_events.c, the write gate, static files, the sampling timer. What the
 * handlers share with it is in web_core.h, below both. */
#ifndef DTQ_WEB_H
#define DTQ_WEB_H

#include "web_core.h"

/* Takes ownership of cfg and tokens (NULL: read-only); connects to Redis and binds
 * [web] listen. NULL with the reason in err when the address cannot be bound or the TLS
 * settings do not load (dtq-web exits 78). */
dtq_web *dtq_web_new(struct event_base *base, dtq_config *cfg, dtq_web_tokens *tokens, char *err,
                     size_t errlen);
/* Swaps the tokens (SIGHUP: the token file read again); takes ownership (NULL: read-only). */
void dtq_web_set_tokens(dtq_web *w, dtq_web_tokens *tokens);
/* Closes the listener, the event streams and the connections. NULL-safe. */
void dtq_web_free(dtq_web *w);

#endif
