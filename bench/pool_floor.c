/* The floor of a pool process (bench/pool.sh): speaks protocol 1 (sdk/PROTOCOL.md) with the
 * least work possible. It writes its hello on descriptor 4, then for every `task` line read
 * from descriptor 3 answers {"t":"ok","id":...,"result":null}: the id is taken from the
 * line's first "id":"..." (dtq's ids need no escapes), nothing else is parsed. The answers
 * to the lines of one read go out in one write. Exits 0 at the end of descriptor 3. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void put(int fd, const char *s, size_t n) {
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) exit(70);
        s += w;
        n -= (size_t)w;
    }
}

int main(int argc, char **argv) {
    static char in[1 << 20], out[1 << 20];
    const char *type = argc > 1 ? argv[1] : "noop";
    const char *inflight = getenv("DTQ_INFLIGHT");
    size_t have = 0;
    int n = snprintf(out, sizeof(out),
                     "{\"t\":\"hello\",\"protocol\":1,\"types\":[\"%s\"],\"inflight\":%s,"
                     "\"sdk\":\"pool_floor\"}\n",
                     type, inflight && *inflight ? inflight : "1");
    put(4, out, (size_t)n);
    for (;;) {
        ssize_t r = read(3, in + have, sizeof(in) - have);
        size_t o = 0, start = 0;
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return 0;
        have += (size_t)r;
        for (;;) {
            char *nl = memchr(in + start, '\n', have - start), *id, *end;
            if (!nl) break;
            *nl = '\0';
            if (!strncmp(in + start, "{\"t\":\"task\"", 11) &&
                (id = strstr(in + start, "\"id\":\"")) && (end = strchr(id + 6, '"'))) {
                size_t len = (size_t)(end - (id + 6));
                if (o + len + 64 > sizeof(out)) {
                    put(4, out, o);
                    o = 0;
                }
                memcpy(out + o, "{\"t\":\"ok\",\"id\":\"", 16);
                memcpy(out + o + 16, id + 6, len);
                memcpy(out + o + 16 + len, "\",\"result\":null}\n", 17);
                o += 16 + len + 17;
            }
            start = (size_t)(nl - in) + 1;
        }
        if (o) put(4, out, o);
        memmove(in, in + start, have - start);
        have -= start;
        if (have == sizeof(in)) return 70; /* a line longer than the buffer */
    }
}
