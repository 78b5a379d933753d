/* http.h: the optional HTTP endpoint ([http] listen): /healthz (the process answers),
 * /readyz (Redis connected and set up, and in the cluster layout every served queue's slot
 * reachable, else 503 saying which) and /metrics (Prometheus text); GET and
 * HEAD only, one request per connection. */
#ifndef DTQ_HTTP_H
#define DTQ_HTTP_H

#include <stddef.h>

#include "ctx.h"

/* Limits of the endpoint, which is open to whatever reaches the port (http.c says why). */
#define DTQ_HTTP_MAX_CONNECTIONS 64 /* open at once; one more evicts the oldest idle one */
#define DTQ_HTTP_TIMEOUT_MS 5000    /* per connection, from accept to close */
#define DTQ_HTTP_MAX_HEAD 8192      /* request line and headers, in bytes */

typedef struct dtq_http dtq_http;

/* NULL with err filled when the address cannot be parsed, resolved or bound. */
dtq_http *dtq_http_new(dtq_ctx *ctx, const char *listen, char *err, size_t errlen);
void dtq_http_free(dtq_http *h);

/* Renders the metrics text into a caller-owned string (also used by tests). */
char *dtq_http_render_metrics(const dtq_ctx *ctx);
/* The request head's parts (read_cb reads the head line by line, the headers only
 * counted): the request line "METHOD SP request-target SP HTTP/1.x" into *method and
 * *target (caller-owned), DTQ_ERR when malformed; and the path of a target, origin form
 * "/p?q" or absolute form "http://host/p?q", which a server must accept too (cut in place;
 * the result points into target or is a constant). */
int dtq_http_parse_request_line(const char *line, char **method, char **target);
const char *dtq_http_target_path(char *target);

/* The lifecycle says whether the daemon is serving (/readyz also needs Redis up). NULL-safe. */
void dtq_http_set_serving(dtq_http *h, int serving);

#endif
