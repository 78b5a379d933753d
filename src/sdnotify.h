/* sdnotify.h: the systemd notify protocol in its documented datagram form: one datagram
 * of NAME=VALUE lines to $NOTIFY_SOCKET. No-ops when not run by systemd. */
#ifndef DTQ_SDNOTIFY_H
#define DTQ_SDNOTIFY_H

#include <stdint.h>

/* Sends `msg` (e.g. "READY=1\nSTATUS=..."). Returns 1 when sent, 0 when no socket is set,
 * -1 on error. */
int dtq_sdnotify(const char *msg);
/* STOPPING=1 and STATUS=draining, with EXTEND_TIMEOUT_USEC so that systemd waits for a
 * drain longer than the unit's TimeoutStopSec: the daemon exits at the latest `within_s`
 * seconds from now; a few seconds more are asked for the exit itself. */
int dtq_sdnotify_stopping(int64_t within_s);
/* The watchdog period from $WATCHDOG_USEC (for this pid), in ms; 0 when not enabled. */
int64_t dtq_sdnotify_watchdog_ms(void);

#endif
