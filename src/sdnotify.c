/* sdnotify.c: see sdnotify.h. */
#include "sdnotify.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "util.h"

int dtq_sdnotify(const char *msg) {
    const char *path = getenv("NOTIFY_SOCKET");
    struct sockaddr_un sa;
    socklen_t len;
    int fd, rc;
    if (!path || !*path) return 0;
    if (strlen(path) >= sizeof(sa.sun_path) || (path[0] != '/' && path[0] != '@')) return -1;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path));
    if (path[0] == '@') sa.sun_path[0] = '\0'; /* abstract namespace */
    len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path));
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    rc = (int)sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&sa, len);
    close(fd);
    return rc < 0 ? -1 : 1;
}

/* Room for the exit after the last deadline: the hard stop fires exactly at within_s, and
 * systemd's extension must not run out in the same instant. */
#define STOP_EXIT_MARGIN_S 5

int dtq_sdnotify_stopping(int64_t within_s) {
    char msg[128];
    snprintf(msg, sizeof(msg), "STOPPING=1\nSTATUS=draining\nEXTEND_TIMEOUT_USEC=%lld",
             (long long)(within_s + STOP_EXIT_MARGIN_S) * 1000000LL);
    return dtq_sdnotify(msg);
}

int64_t dtq_sdnotify_watchdog_ms(void) {
    const char *usec = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
    int64_t v, p;
    if (!usec || dtq_parse_int64(usec, 1, INT64_MAX, &v) != DTQ_OK) return 0;
    if (pid && (dtq_parse_int64(pid, 1, INT64_MAX, &p) != DTQ_OK || p != getpid())) return 0;
    return v / 1000;
}
