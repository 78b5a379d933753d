/* web_events.h: GET /api/events, the live events of <p>:events as Server-Sent Events. A
 * subscriber connection of its own (rconn.c, so TLS and reconnects are the daemon's)
 * holds SUBSCRIBE <p>:events while at least one stream is open and is closed with the last
 * one: the Functions build no events while nobody listens, and an idle dashboard must not
 * change that. ?backlog=N first replays the last N events of <p>:stream:events when that
 * stream is kept ([limits] events_stream_maxlen > 0); in the cluster layout the newest N of
 * every queue's stream and {ns}'s, by stream id. */
#ifndef DTQ_WEB_EVENTS_H
#define DTQ_WEB_EVENTS_H

#include "web_core.h"

struct evhttp_request;
struct evkeyvalq;

#define DTQ_WEB_EVENTS_CLIENTS_MAX 64         /* open streams; one more ends the oldest */
#define DTQ_WEB_EVENTS_BACKLOG_MAX 500        /* backlog=; more is 400 */
#define DTQ_WEB_EVENTS_KEEPALIVE_MS 15000     /* a comment line this often on every stream */
#define DTQ_WEB_EVENTS_BUFFERED_MAX (1 << 20) /* bytes a client has not read: it is dropped */

typedef struct dtq_web_events dtq_web_events;

dtq_web_events *dtq_web_events_new(dtq_web *w);
/* Answers the request with a stream (or 400/503). */
void dtq_web_events_serve(dtq_web_events *ev, struct evhttp_request *req,
                          const struct evkeyvalq *query);
/* Number of open streams. */
int dtq_web_events_clients(const dtq_web_events *ev);
/* Ends every stream and closes the subscriber connection. NULL-safe. */
void dtq_web_events_free(dtq_web_events *ev);

#endif
