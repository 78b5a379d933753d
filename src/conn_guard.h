/* conn_guard.h: what one HTTP client may cost, kept in one place for the daemon's endpoint
 * (http.c) and dtq-web (web.c): a cap on open connections, at the cap the oldest connection
 * that is not being answered gives way to the new one, a deadline per connection, a pause
 * of the listener after accept errors, and log lines about all of it that cannot flood the
 * log. The owner of the connections (its own bufferevents, or evhttp's) tells the guard
 * what happens to them; the guard asks the owner to close one through close_fn. */
#ifndef DTQ_CONN_GUARD_H
#define DTQ_CONN_GUARD_H

#include <stdint.h>

struct event_base;
struct event;
struct evconnlistener;

/* ----------------------------------------------------------------- rate-limited lines */

/* At most burst lines per window; past that, one summary line when the window ends
 * ("<what>: N more in the last S s, not logged one by one"). */
typedef struct dtq_ratelog {
    struct event *flush;
    const char *what; /* static: "web: wrong tokens" */
    int burst, window_ms;
    int64_t window_start;
    int logged;      /* lines in this window */
    long suppressed; /* since the last summary */
} dtq_ratelog;

void dtq_ratelog_init(dtq_ratelog *r, struct event_base *base, const char *what, int burst,
                      int window_ms);
void dtq_ratelog_deinit(dtq_ratelog *r);
/* 1: log this one; 0: counted for the summary. */
int dtq_ratelog_allow(dtq_ratelog *r);

/* ----------------------------------------------------------------- connections */

typedef struct dtq_guard dtq_guard;
typedef struct dtq_guard_conn dtq_guard_conn;

/* Asked of the owner: close this connection now or soon (it calls dtq_guard_remove when it
 * is gone, possibly from inside this call). */
typedef void dtq_guard_close_fn(void *arg);

/* name is for the log lines ("http", "web"); max_conns > 0; deadline_ms > 0. */
dtq_guard *dtq_guard_new(struct event_base *base, const char *name, int max_conns, int deadline_ms);
/* Asks the owner to close every connection (the daemon's endpoint, at its end). */
void dtq_guard_close_all(dtq_guard *g);
/* Closes nothing: what is still open is forgotten (its owner is freeing it too). */
void dtq_guard_free(dtq_guard *g);
/* At most this many descriptors at once, connections asked to close and not gone yet
 * included (default 2 * max_conns): past it the watched listener stops accepting until
 * they are gone, so a burst of accepts cannot run out of descriptors. */
void dtq_guard_set_max_open(dtq_guard *g, int max_open);
int dtq_guard_count(const dtq_guard *g);
int dtq_guard_max(const dtq_guard *g);

/* A connection was accepted. At the cap, the oldest one not being answered is asked to
 * close; when every one is being answered, NULL: the caller closes the new one. The
 * deadline starts now. */
dtq_guard_conn *dtq_guard_add(dtq_guard *g, dtq_guard_close_fn *close_fn, void *arg);
/* The connection is gone (closed by anyone): forgets it. */
void dtq_guard_remove(dtq_guard_conn *c);
/* A whole request came: the connection is no longer evicted at the cap. hold: its deadline
 * stops too (dtq-web: an answer may wait on Redis, an event stream lasts); else it goes on
 * (the daemon: from accept to close, whatever the client does). */
void dtq_guard_answering(dtq_guard_conn *c, int hold);
/* The answer is out and the connection stays open for another request (keep-alive): it is
 * idle again, and the next request must come whole within a new deadline. */
void dtq_guard_idle(dtq_guard_conn *c);
/* Milliseconds since accept. */
int64_t dtq_guard_age_ms(const dtq_guard_conn *c);

/* Watches a listener's accept errors (EMFILE, ENFILE, ENOBUFS...): the listener is paused
 * for a second, so it does not spin on a connection it cannot take, and the error is
 * logged rate-limited; and stops it while max_open descriptors are held (set_max_open).
 * Replaces the listener's error callback. NULL: stop watching (before the listener is
 * freed). */
void dtq_guard_watch_listener(dtq_guard *g, struct evconnlistener *l);

#endif
